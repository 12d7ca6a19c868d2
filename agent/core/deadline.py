"""One deadline for a whole call to the outside, enforced from outside the call.

A socket timeout bounds one operation: a peer that sends a byte a second, or that accepts an SSH
`exec` and never answers it, never trips one, and the thread in that call stays there for as long
as the peer likes (holding the collector's worker, a session slot, `--once`'s exit). A `Deadline`
is measured on the monotonic clock from the call's start over all of it (connect, TLS, request,
every byte of the answer); when it passes, one watchdog thread closes what the call registered
with `guard()`, which makes the blocked read or wait fail at once, and the `with` block raises
`DeadlineError` in place of whatever that failure looked like. The next call reconnects.

    with deadline(30.0, "vcenter vc1: QueryPerf") as d:
        d.guard(sock)              # a socket: shut down both ways, then closed
        d.guard(channel)           # anything with close() (a paramiko Channel, an HTTPConnection)
        d.guard(lambda: ...)       # or a callable
        sock.settimeout(d.left())  # per-operation timeouts may use what is left

Closing happens on a short-lived thread of its own, so a close that blocks (a channel whose
transport cannot send its CLOSE) holds up neither the watchdog nor another call's deadline.

A connection a library keeps out of the caller's sight (a SOAP client's pool) is guarded by the
caller, through whatever closes the library's connections (`d.guard(pool_closer)`).

A call made on a collector's worker during a cycle ends by that cycle's end at the latest
(`ending_by`, set by collectors/base.py around each blocking call), so no call outlives the cycle
that made it.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import logging
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, Protocol

log = logging.getLogger(__name__)


class Closable(Protocol):
    def close(self) -> Any: ...


Guarded = socket.socket | Closable | Callable[[], Any]


class DeadlineError(TimeoutError):
    """The call did not finish within its deadline; what it had open was closed."""


_local = threading.local()


@contextlib.contextmanager
def ending_by(at: float | None) -> Iterator[None]:
    """Every deadline made on this thread inside the block ends by `at` (monotonic) at the latest."""
    before = getattr(_local, "at", None)
    _local.at = at if before is None or at is None else min(at, before)
    try:
        yield
    finally:
        _local.at = before


class Deadline:
    """A call's deadline: `seconds` from now, or the thread's `ending_by` bound if that comes first."""

    def __init__(self, seconds: float, what: str):
        now = time.monotonic()
        seconds = max(0.0, seconds)
        bound = getattr(_local, "at", None)
        self.cut = bound is not None and bound < now + seconds  # the cycle ends first
        if self.cut:
            seconds = round(max(0.0, bound - now), 1)
        self.at, self.limit = now + seconds, seconds
        self.what = what
        self.expired = False
        self._guarded: list[Guarded] = []
        self._lock = threading.Lock()
        self._done = False

    def guard(self, thing: Guarded) -> None:
        """Close `thing` when the deadline passes (at once if it has passed already)."""
        with self._lock:
            if not self.expired:
                self._guarded.append(thing)
                return
        _close_soon([thing])

    def spent(self) -> str:
        """How long the call had, as an error text says it."""
        return f"{self.limit:g}s ({'what was left of its cycle' if self.cut else 'the whole call'})"

    def left(self) -> float:
        """Seconds left (never below a small floor: a socket timeout of 0 would mean non-blocking)."""
        return max(0.001, self.at - time.monotonic())

    def _expire(self) -> None:
        with self._lock:
            if self._done or self.expired:
                return
            self.expired = True
            things, self._guarded = self._guarded, []
        _close_soon(things)

    def __enter__(self) -> Deadline:
        _WATCHDOG.watch(self)
        return self

    def __exit__(self, kind: object, error: object, tb: object) -> None:
        with self._lock:
            self._done = True
            self._guarded = []
        if self.expired:  # whatever the closing made the call raise, or a call that ended as it passed
            raise DeadlineError(f"{self.what} timed out after {self.spent()}") from None


def deadline(seconds: float, what: str) -> Deadline:
    """A deadline to use as `with deadline(30, "what") as d:`; see the module's docstring."""
    return Deadline(seconds, what)


def close_now(thing: Guarded) -> None:
    """Close `thing` from another thread: a socket is shut down first (closing alone does not wake a
    thread blocked in recv on it); errors are ignored (it may be closed already)."""
    try:
        if isinstance(thing, socket.socket):
            with contextlib.suppress(OSError):
                socket.socket.shutdown(thing, socket.SHUT_RDWR)  # the fd's, also under an SSLSocket
            thing.close()
        elif hasattr(thing, "close"):
            thing.close()
        else:
            thing()
    except Exception as e:  # the call it ends reports the timeout; this is only a detail
        log.debug("deadline: closing %r: %s", thing, e)


def _close_soon(things: list[Guarded]) -> None:
    if things:
        threading.Thread(target=lambda: [close_now(t) for t in things], name="deadline-close", daemon=True).start()


class _Watchdog:
    """One daemon thread for every deadline of the process, woken for the earliest one."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._heap: list[tuple[float, int, Deadline]] = []
        self._seq = itertools.count()
        self._thread: threading.Thread | None = None

    def watch(self, d: Deadline) -> None:
        with self._cond:
            if self._heap and len(self._heap) > 1024:  # calls that ended leave their entries: drop them now
                self._heap = [e for e in self._heap if not e[2]._done]
                heapq.heapify(self._heap)
            heapq.heappush(self._heap, (d.at, next(self._seq), d))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="deadline-watchdog", daemon=True)
                self._thread.start()
            if self._heap[0][2] is d:
                self._cond.notify()

    def _run(self) -> None:
        while True:
            due: list[Deadline] = []
            with self._cond:
                while not self._heap:
                    self._cond.wait()
                now = time.monotonic()
                while self._heap and self._heap[0][0] <= now:
                    due.append(heapq.heappop(self._heap)[2])
                if not due:
                    self._cond.wait(self._heap[0][0] - now)
            for d in due:
                if not d._done:
                    d._expire()


_WATCHDOG = _Watchdog()
