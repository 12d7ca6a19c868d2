"""Records handed to an output's thread and not yet taken: what back-pressure holds a large cycle to.

A collector of a 10,000-VM vCenter makes its first cycle's records faster than the store writer commits
them and the check engine judges them; without a bound they would queue in memory whatever its size.
The store writer and the check runner each count theirs here; the runtime has a cycle wait while one
is past its bound (agent/runtime.py), unless that output's thread has stopped, which no wait would cure.
"""

from __future__ import annotations

import threading


class Backlog:
    """A count shared by the thread that queues records (add) and the one that takes them (done)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.thread: threading.Thread | None = None  # the output's worker: its records are taken while it runs
        self._lock = threading.Lock()
        self._queued = 0
        self.peak = 0  # the most ever queued at once

    @property
    def queued(self) -> int:
        return self._queued

    def add(self, n: int) -> None:
        if n:
            with self._lock:
                self._queued += n
                self.peak = max(self.peak, self._queued)

    def done(self, n: int) -> None:
        if n:
            with self._lock:
                self._queued -= n

    def working(self) -> bool:
        """Its thread runs: the records queued will be taken."""
        return self.thread is not None and self.thread.is_alive()
