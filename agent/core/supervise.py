"""Crash-only threads: every long-lived thread of the agent runs under one Supervisor.

A record or batch a thread cannot handle is logged with its context, set aside and counted; the
thread goes on. A transient failure (disk full, I/O error) is retried by the thread itself, which
says so here (state `retrying`) and again when it recovers. A thread that cannot go on (an error
outside any one record, or data it could not keep at exit) is marked `failed` and the supervisor's
failure callbacks run: the agent stops with a non-zero exit status (systemd restarts it) rather
than running blind. Each thread's health is data, the `db2vtop_thread` self-metric (collectors/
selfmon.py), which the TUI and triage show.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from db2vtop.agent.core.clock import CLOCK
from db2vtop.agent.core.text import printable

log = logging.getLogger(__name__)

OK, RETRYING, FAILED = "ok", "retrying", "failed"
#: what a set-aside record's description may take in a log line, and an error's text
_CONTEXT_CHARS = 300
_ERROR_CHARS = 1000


@dataclass
class Health:
    """One thread's health, as the `db2vtop_thread` sample shows it."""

    name: str
    state: str = OK
    set_aside: int = 0  # records, batches or files it could not handle, since the start
    retries: int = 0  # transient failures it retried
    last_error: str = ""
    since_ns: int = 0  # when the state last changed


class Supervisor:
    """Thread names go into the log templates: the log's repeat filter (agent/logs.py) keys on the
    template, and one thread's trouble must never hide another's."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._health: dict[str, Health] = {}
        self._callbacks: list[Callable[[str, str], None]] = []
        self.failures: list[str] = []  # "thread: why", in order

    # --- registering and running threads -----------------------------------------------

    def register(self, name: str) -> Health:
        """The health of `name`, made fresh (state ok, counts zero) if it is new or had stopped."""
        with self._lock:
            h = self._health.get(name)
            if h is None:
                h = self._health[name] = Health(name, since_ns=CLOCK.now_ns())
            return h

    def release(self, name: str) -> None:
        """A thread that ended as asked (a sink closed on reload) is no longer reported; a failed one
        stays, so its failure is still seen."""
        with self._lock:
            h = self._health.get(name)
            if h is not None and h.state != FAILED:
                del self._health[name]

    def start(self, name: str, target: Callable[..., Any], *args: Any) -> threading.Thread:
        """Run target(*args) on a daemon thread; an exception that escapes it fails the thread."""
        self.register(name)

        def run() -> None:
            try:
                target(*args)
            except BaseException as e:  # the thread is over: say so, never silently
                self.fail(name, e)

        t = threading.Thread(target=run, name=name, daemon=True)
        t.start()
        return t

    def on_failure(self, callback: Callable[[str, str], None]) -> None:
        """callback(thread, why) when a thread cannot go on (called on that thread)."""
        self._callbacks.append(callback)

    # --- what threads report ---------------------------------------------------------

    def set_aside(self, name: str, what: str, error: BaseException | str, count: int = 1) -> None:
        """A record (batch, file) `name` could not handle, or `count` records of one kind: logged with its
        context and counted."""
        why = _why(error)
        with self._lock:
            h = self._health.setdefault(name, Health(name, since_ns=CLOCK.now_ns()))
            h.set_aside += count
            h.last_error = f"set aside {printable(what, _CONTEXT_CHARS)}: {why}"
            total = h.set_aside
        log.error(f"{name}: set aside %s: %s (%d set aside so far)", printable(what, _CONTEXT_CHARS), why, total)

    def retrying(self, name: str, error: BaseException | str) -> None:
        """A transient failure the thread retries (the first of a run is logged, the others counted)."""
        why = _why(error)
        with self._lock:
            h = self._health.setdefault(name, Health(name, since_ns=CLOCK.now_ns()))
            h.retries += 1
            h.last_error = why
            first = h.state != RETRYING
            if first:
                h.state, h.since_ns = RETRYING, CLOCK.now_ns()
        if first:
            log.error(f"{name}: %s; retrying", why)

    def recovered(self, name: str) -> None:
        """The thread's work succeeds again after `retrying`."""
        with self._lock:
            h = self._health.get(name)
            if h is None or h.state != RETRYING:
                return
            h.state, h.since_ns = OK, CLOCK.now_ns()
            last = h.last_error
        log.warning(f"{name}: working again (after: %s)", last)

    def fail(self, name: str, error: BaseException | str) -> None:
        """`name` cannot go on: logged (with the traceback of an exception), and the agent told."""
        why = _why(error)
        with self._lock:
            h = self._health.setdefault(name, Health(name))
            h.state, h.last_error, h.since_ns = FAILED, why, CLOCK.now_ns()
            self.failures.append(f"{name}: {why}")
            callbacks = list(self._callbacks)
        exc_info = error if isinstance(error, BaseException) and not isinstance(error, SystemExit) else None
        log.critical(f"{name} cannot go on: %s", why, exc_info=exc_info)
        for cb in callbacks:
            try:
                cb(name, why)
            except Exception:
                log.exception("supervisor: failure callback for %s", name)

    # --- reading -------------------------------------------------------------------

    def snapshot(self) -> list[Health]:
        with self._lock:
            return [replace(h) for h in self._health.values()]

    @property
    def failed(self) -> bool:
        return bool(self.failures)


def _why(error: BaseException | str) -> str:
    """One line of bounded length: an error text can quote a source (a fault string of megabytes)."""
    if isinstance(error, str):
        return printable(error, _ERROR_CHARS)
    text = str(error)
    return printable(f"{type(error).__name__}: {text}" if text else type(error).__name__, _ERROR_CHARS)
