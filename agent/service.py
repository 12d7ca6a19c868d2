"""The headless agent's lifecycle: one process collecting until it is told to stop.

`db2vtop agent` parses its arguments (agent/cli.py) and hands them to `AgentService`, which owns
everything from there: glibc's malloc tuned before any worker thread, logging, the pipeline, the
signals (SIGTERM/SIGINT stop it gracefully, SIGHUP re-reads the config file), the watchdog that
ends a stop which does not finish in time, and the exit status. A thread of the pipeline that
cannot go on (agent/core/supervise.py) stops the agent as SIGTERM would, and the exit status is
then 1: a service manager restarts it rather than leave it running blind.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

from db2vtop.agent import __version__
from db2vtop.agent.config import resolve_config
from db2vtop.agent.core.config import ConfigError, CoreConfig, plaintext_warnings
from db2vtop.agent.core.text import plural
from db2vtop.agent.core.units import format_duration
from db2vtop.agent.exits import EXIT_FAILED, EXIT_OK
from db2vtop.agent.logs import setup_logging

if TYPE_CHECKING:
    from db2vtop.agent.pipeline import Pipeline
    from db2vtop.agent.runtime import Runtime
    from db2vtop.checks.engine import Engine

log = logging.getLogger("db2vtop")


class AgentService:
    """One run of `db2vtop agent`: `run()` returns its exit status. `store` is --store (None: the
    config's [store] path); `once` runs one cycle of every collector; `duration` stops it after that
    many seconds."""

    def __init__(self, config: Path | None, store: Path | None = None, *, once: bool = False,
                 duration: float | None = None, log_level: str = "info", log_format: str = "text"):
        self.config, self.store = config, store
        self.once, self.duration = once, duration
        self.log_level, self.log_format = log_level, log_format

    def run(self) -> int:
        from db2vtop.agent.pipeline import Pipeline

        tame_malloc()
        setup_logging(self.log_level, self.log_format)
        started = time.monotonic()
        cfg = resolve_config(self.config)
        pipeline = Pipeline(cfg, self.store or cfg.store.path)
        deadline = None if self.duration is None else time.monotonic() + self.duration
        signals = Signals(pipeline, deadline, interactive=self.once)
        pipeline.supervisor.on_failure(signals.failed)
        try:
            while True:
                runtime = pipeline.runtime
                log.info("db2vtop %s agent (pid %d): store %s, influxdb %s, collectors %s", __version__, os.getpid(),
                         pipeline.writer.path, pipeline.cfg.influxdb.url if pipeline.cfg.influxdb else "off",
                         ", ".join(c.name for c in runtime.collectors))
                for warning in plaintext_warnings(pipeline.cfg):
                    log.warning(warning)
                if not signals.run(runtime, self.once, deadline):
                    break
                signals.reload = False
                reread = reread_config(self.config)
                if reread is None:
                    continue
                pipeline.reload(*reread)
                log.info("reload: configuration read again from %s", pipeline.cfg.source or "defaults")
        except KeyboardInterrupt:  # Ctrl-C on --once (agent/exits.py): the store flushed, the sink's backlog spooled
            pipeline.close(deliver=False)
            raise
        finally:
            pipeline.close()
        if pipeline.supervisor.failed:  # also what could not be written at exit
            print("db2vtop: stopped because a part of the agent failed: " + "; ".join(pipeline.supervisor.failures),
                  file=sys.stderr)
            status = EXIT_FAILED
        else:
            failed = [f"{name}: {st.last_error}" for name, st in runtime.stats.items() if st.errors]
            if self.once and failed:
                print("db2vtop: collectors failed: " + "; ".join(failed), file=sys.stderr)
            status = EXIT_FAILED if self.once and failed else EXIT_OK
        log.info("%s", stopped_line(runtime, pipeline.writer.path, time.monotonic() - started, status))
        return status


def stopped_line(runtime: Runtime, store: Path, seconds: float, status: int) -> str:
    """The agent's last line, the counterpart of its first: how long it ran, what it collected, the exit
    status (a service manager's log and an interactive run end with the same words)."""
    stats = runtime.stats.values()
    cycles, samples, errors = (sum(getattr(st, k) for st in stats) for k in ("cycles", "samples", "errors"))
    return (f"db2vtop agent (pid {os.getpid()}) stopped after {format_duration(round(seconds))}: "
            f"{plural(cycles, 'cycle')}, {plural(samples, 'sample')} into {store}, "
            f"{plural(errors, 'collector error')}; exit status {status}")


def tame_malloc(arenas: int = 2, mmap_threshold: int = 128 * 1024) -> None:
    """glibc gives each thread that allocates its own malloc arena (up to 8 per core) and keeps their
    freed memory: collector worker threads parsing vCenter answers held ~10 MB of RSS more at 2,000
    VMs. Its mmap threshold also rises after each large block freed, so later answers (megabytes of
    XML) come from the heap and stay there; a fixed threshold gives them back when freed (~2 MB less
    at 2,000 VMs). The same as MALLOC_ARENA_MAX / MALLOC_MMAP_THRESHOLD_ / MALLOC_TRIM_THRESHOLD_
    (which win when set), applied before any worker starts; a no-op off glibc."""
    try:
        import ctypes
        libc = ctypes.CDLL(None)
        if not os.environ.get("MALLOC_ARENA_MAX"):
            libc.mallopt(-8, arenas)  # M_ARENA_MAX
        if not os.environ.get("MALLOC_MMAP_THRESHOLD_"):
            libc.mallopt(-3, mmap_threshold)  # M_MMAP_THRESHOLD
        if not os.environ.get("MALLOC_TRIM_THRESHOLD_"):
            libc.mallopt(-1, mmap_threshold)  # M_TRIM_THRESHOLD
    except (OSError, AttributeError):
        pass


class Signals:
    """SIGTERM/SIGINT stop the agent, SIGHUP asks for a reload; `--duration` stops it too.

    The handlers are plain Python ones, not the event loop's: they run in the main thread even
    while a collector keeps the loop from turning, and ask the loop to stop from outside. A stop
    arms a watchdog, and so does the end of `--once`: if the process has not ended `grace` seconds
    later (a collector thread stuck in a call, a coroutine that never yields), the watchdog flushes
    the pipeline from its own thread and ends the process, so nothing committed is lost and nothing
    keeps it alive.
    """

    NAMES = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)

    def __init__(self, pipeline: Pipeline, deadline: float | None, interactive: bool = False) -> None:
        """`interactive` (`--once`): SIGINT is left to the command line's Ctrl-C (agent/exits.py), which ends
        the run at once rather than letting in-flight cycles time out."""
        self.pipeline = pipeline
        self.stop = self.reload = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runtime: Runtime | None = None
        self._watchdog: threading.Timer | None = None
        self._forced_status = EXIT_OK  # what the watchdog exits with when nothing failed (--once: its cycles' errors)
        for sig in self.NAMES:
            if not (interactive and sig == signal.SIGINT):
                signal.signal(sig, lambda signum, _frame: self._note(signum))
        if deadline is not None:
            timer = threading.Timer(max(0.0, deadline - time.monotonic()), self._note, (signal.SIGTERM,))
            timer.daemon = True
            timer.start()

    @property
    def grace(self) -> float:
        """Long enough for in-flight cycles to time out, collectors to close and the sink to drain."""
        timeouts = [c.timeout for c in self.pipeline.runtime.collectors] or [0.0]
        flush = self.pipeline.cfg.influxdb.flush_timeout if self.pipeline.cfg.influxdb else 0.0
        return max(timeouts) + flush + 5.0

    def failed(self, thread: str, why: str) -> None:
        """A thread cannot go on (the supervisor says so, from that thread): stop as SIGTERM would;
        run() then exits non-zero."""
        self._note(signal.SIGTERM)

    def _note(self, signum: int) -> None:
        if signum == signal.SIGHUP:
            self.reload = True
            log.info("SIGHUP: reloading the configuration")
        else:
            self.stop = True
            self._arm()
        loop, runtime = self._loop, self._runtime
        if loop is not None and runtime is not None:
            with contextlib.suppress(RuntimeError):  # the loop has just closed
                loop.call_soon_threadsafe(runtime.stop)

    def _arm(self) -> None:
        if self._watchdog is None:
            self._watchdog = threading.Timer(self.grace, self._force_exit)
            self._watchdog.daemon = True
            self._watchdog.start()

    def _force_exit(self) -> None:
        stuck = [t.name for t in threading.enumerate() if t is not threading.current_thread() and not t.daemon
                 and t is not threading.main_thread()]
        log.error("shutdown: still running %.0fs after the stop (busy or stuck: %s); flushing the store and "
                  "exiting", self.grace, ", ".join(stuck) or "the event loop")
        try:
            self.pipeline.close()
        finally:
            logging.shutdown()
            os._exit(EXIT_FAILED if self.pipeline.supervisor.failed else self._forced_status)

    def run(self, runtime: Runtime, once: bool, deadline: float | None) -> bool:
        """Run until stopped; True when a reload was asked for."""
        if self.stop:
            return False

        async def main() -> None:
            self._loop, self._runtime = asyncio.get_running_loop(), runtime
            if self.reload:  # a SIGHUP came before the loop ran (a reload under way, or the start): once the
                asyncio.get_running_loop().call_soon(runtime.stop)  # run has begun, or stop() finds nothing to stop
            if once:
                await runtime.run_once()
            else:
                await runtime.run(None if deadline is None else max(0.0, deadline - time.monotonic()))

        try:
            asyncio.run(main())
        finally:
            self._loop = self._runtime = None
            if once:  # done, as after a stop: a worker still in a call must not keep the process from exiting
                self._forced_status = EXIT_FAILED if any(st.errors for st in runtime.stats.values()) else EXIT_OK
                self._arm()
        return self.reload and not self.stop and not once


def reread_config(path: Path | None) -> tuple[CoreConfig, Engine] | None:
    """The config file and its check engine again, or None (logged) if the file is now invalid."""
    from db2vtop.checks.runner import build_engine

    try:
        new = resolve_config(path)
        return new, build_engine(new)
    except ConfigError as e:
        log.error("reload: %s; keeping the running configuration", e)
        return None
