"""The exit statuses of `db2vtop` commands (README, docs/agent-service.md): 0 success; 1 the command
ran but failed (a collector error in `agent --once`, a part of the agent that could not go on, an
unknown measurement, an unreadable store); 2 bad usage or configuration (also a store or spool
directory that cannot be written); 3 triage could not run (the monitoring-plugin convention); 130
interrupted (Ctrl-C), as a shell reports a job SIGINT ended.

A one-shot command ends promptly on Ctrl-C whatever a source is doing (`interrupt_promptly`): a worker
thread stuck in a call to a vCenter that never answers cannot be stopped, and the interpreter would wait
for it at exit (until the call's timeout), so past a short grace the process ends without it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Iterator
from types import FrameType

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
EXIT_TRIAGE_UNKNOWN = 3
EXIT_INTERRUPTED = 128 + signal.SIGINT
#: how long a command interrupted may take to unwind (close its files) before it is ended as it is
INTERRUPT_GRACE_S = 0.5


@contextlib.contextmanager
def interrupt_promptly(grace: float = INTERRUPT_GRACE_S) -> Iterator[None]:
    """While it is entered, Ctrl-C in a one-shot command: the first raises KeyboardInterrupt in the main
    thread, so the command unwinds (files closed, nothing half-written), then the process ends with
    EXIT_INTERRUPTED, not waiting for threads stuck in a source's call; if unwinding takes longer than
    `grace` seconds, it is ended where it is. A second Ctrl-C ends it at once. Never a traceback."""
    pressed = threading.Event()

    def handler(_signum: int, _frame: FrameType | None) -> None:
        if pressed.is_set():
            os._exit(EXIT_INTERRUPTED)
        pressed.set()
        with contextlib.suppress(OSError):  # not through sys.stderr: another thread may hold its lock
            os.write(2, b"db2vtop: interrupted\n")
        timer = threading.Timer(grace, os._exit, (EXIT_INTERRUPTED,))
        timer.daemon = True
        timer.start()
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGINT, handler)
    try:
        yield
    finally:
        if pressed.is_set():  # unwound: what is left is threads the interpreter would wait for
            for stream in (sys.stdout, sys.stderr):
                with contextlib.suppress(Exception):
                    stream.flush()
            os._exit(EXIT_INTERRUPTED)
        signal.signal(signal.SIGINT, previous)
