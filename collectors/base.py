"""What every collector shares: its own worker threads and a facts schedule.

Blocking calls (vCenter SOAP, paramiko, file reads) run on the collector's own small
thread pool. A call to the source made there during a cycle ends by the cycle's end at the
latest: each one runs under a whole-call deadline (agent/core/deadline.py), bounded by
`cycle_ends`. The runtime asks `busy` before starting a cycle: a thread still stuck in a
timed-out call (one no deadline covers) means the next cycle is skipped rather than run beside
it, and counted as the source timing out again.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from db2vtop.agent.core.deadline import ending_by
from db2vtop.agent.core.model import CLOCK_SKEW_S, Fact, Record, canonical_tags, now_ns
from db2vtop.agent.core.supervise import Supervisor

T = TypeVar("T")


class CollectorError(Exception):
    """A failure a collector understood: shown as-is, no traceback."""


class BaseCollector:
    """A source's collector: `collect()` each cycle, `describe()` when its facts are due, `close()` at the end.
    What only some sources do (hand a cycle on in parts, keep history of their own, resume after a restart)
    each is a capability its class opts into (collectors/capabilities.py)."""

    name: str
    interval: float
    timeout: float
    #: seconds after start before the first cycle (rate collectors need a baseline)
    first_delay: float = 0.0
    #: how often describe() is called; set facts_stale to ask for it sooner
    facts_interval: float = 900.0
    #: threads for blocking calls; more only where a collector fans out (vSphere chunks)
    workers: int = 1
    #: the measurements and fact kinds its source's package declares (the wiring sets them): what stays unrenewed,
    #: when no other source writes them, while it cannot be read
    declared: frozenset[str] = frozenset()
    #: set by the runtime while a cycle runs: when it times out (time.monotonic()); the deadline of every call
    #: to the source run_blocking makes meanwhile ends by then
    cycle_ends: float | None = None

    def __init__(self, name: str, interval: float, timeout: float | None = None):
        self.name = name
        self.interval = interval
        self.timeout = timeout if timeout is not None else interval
        self.facts_stale = True
        self._facts_at = 0.0
        self._inflight = 0
        self._inflight_lock = threading.Lock()
        self._executor: ThreadPoolExecutor | None = None
        #: kind -> the entities (canonical tags -> tags) the last whole read of that kind reported
        self._reported: dict[str, dict[str, dict[str, str]]] = {}
        self._problems: list[str] = []
        #: where records it cannot take are counted (the runtime hands in the agent's)
        self.supervisor = Supervisor()
        #: how far from now a time read from its source may be (the runtime hands in the configured one)
        self.clock_skew_s = CLOCK_SKEW_S

    @property
    def thread(self) -> str:
        """Its name in the supervisor's health (the `db2vtop_thread` self-metric)."""
        return f"collector:{self.name}"

    @property
    def busy(self) -> bool:
        return self._inflight > 0

    def facts_due(self) -> bool:
        return self.facts_stale or time.monotonic() - self._facts_at >= self.facts_interval

    def facts_done(self) -> None:
        self.facts_stale = False
        self._facts_at = time.monotonic()

    async def run_blocking(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        if self._executor is None:
            self._executor = ThreadPoolExecutor(self.workers, thread_name_prefix=f"collector-{self.name}")
        with self._inflight_lock:
            self._inflight += 1
        try:
            # in the cycle's context (what the call logs is this collector's: agent/core/logkey.py), its deadlines
            # ending by the cycle's end
            future = self._executor.submit(contextvars.copy_context().run, _ending_by, self.cycle_ends,
                                           functools.partial(fn, *args, **kwargs))
        except BaseException:
            self._release()
            raise
        future.add_done_callback(lambda _f: self._release())
        return await asyncio.wrap_future(future)

    def _release(self) -> None:
        with self._inflight_lock:
            self._inflight -= 1

    async def start(self) -> None:
        """Prepare before the first cycle (take a baseline, connect)."""

    async def collect(self) -> list[Record | Fact]:
        """This cycle's samples and annotations; a collector that follows changes (vSphere) adds the facts
        of what changed, so they need not wait for the next describe()."""
        raise NotImplementedError

    async def describe(self) -> list[Fact]:
        return []

    def problem(self, text: str) -> None:
        """A fault in part of this cycle's data (a counter the source left out): the runtime records it as the
        cycle's collector error and still keeps every sample the cycle produced."""
        self._problems.append(text)

    def take_problems(self) -> list[str]:
        problems, self._problems = self._problems, []
        return problems

    #: describe() reports every entity of each kind it returns: the runtime gives a removal for an entity
    #: it reported last time and not now (a disk detached, a LUN destroyed)
    complete_facts: bool = False

    def removals(self, facts: list[Fact], kinds: Iterable[str] | None = None) -> list[Fact]:
        """Removals of the entities reported last time and not in `facts`, a whole read. Without `kinds`,
        within the kinds `facts` reports (a kind missing altogether is taken for one not read this time,
        not for all gone); with them, those kinds only, each read whole even when it came back empty."""
        now: dict[str, dict[str, dict[str, str]]] = {k: {} for k in kinds or ()}
        for f in facts:
            if kinds is None or f.kind in now:
                now.setdefault(f.kind, {})[canonical_tags(f.tags)] = f.tags
        before, self._reported = self._reported, {**self._reported, **now}
        ts = now_ns()
        return [Fact.removal(kind, tags, ts) for kind, seen in now.items()
                for key, tags in before.get(kind, {}).items() if key not in seen]

    async def close(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)


def _ending_by(at: float | None, call: Callable[[], T]) -> T:
    with ending_by(at):
        return call()
