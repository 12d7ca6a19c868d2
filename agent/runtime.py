"""The scheduler: runs every collector on its own cadence and hands results on.

Each collector has its own loop: due times on a fixed grid (interval plus a little
jitter, no drift), a timeout per cycle, and never two cycles of one collector at once
(a cycle whose predecessor, or its thread, is still running is skipped and counted).
One failing or hanging collector never delays another. After every cycle the runtime
emits a `db2vtop_collector` self-metric sample beside the collector's own samples.

The runtime is the boundary where records from outside come in (agent/core/admit.py, the checks
triage's look now takes records by too): a record whose time is not within the allowed clock skew
of now (a source's clock years off, a date past 2262) is set aside and counted in the collector's
health, never handed to the store or a sink; values no store can hold are dropped one by one.
Each collector's loop runs under the supervisor: a loop that ends by an error fails it, and the
agent stops rather than lose a source silently.

Facts are checked against their declarations (each source's schema.toml) on their way out: one
that departs (an undeclared kind or key, a key of another type) is still handed on whole, so
nothing is lost, and the departure is logged once and counted in the collector's self-metric.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass

from db2vtop.agent.core.admit import admit
from db2vtop.agent.core.backlog import Backlog
from db2vtop.agent.core.clock import CLOCK
from db2vtop.agent.core.logkey import COLLECTOR
from db2vtop.agent.core.model import (
    CLOCK_SKEW_S,
    SELF_MEASUREMENT,
    Annotation,
    Fact,
    Output,
    Record,
    Sample,
    describe_record,
)
from db2vtop.agent.core.schema import FactCheck, Measurement, fields
from db2vtop.agent.core.supervise import Supervisor
from db2vtop.agent.core.text import printable
from db2vtop.collectors.base import BaseCollector, CollectorError
from db2vtop.collectors.capabilities import Streams

log = logging.getLogger(__name__)

#: the least a collector loop sleeps between two turns, and the least interval or timeout it
#: runs with (config check holds each source to its own, higher floor): a loop can never spin
FLOOR_S = 0.05
#: records an output (the store writer, the check runner) may have queued before a cycle that hands its
#: records on in parts waits for it: two parts of a 10,000-VM vCenter's first cycle (collectors/vsphere HANDOFF)
MAX_BACKLOG = 40_000
#: how often a waiting cycle looks at the backlog again
PACE_S = 0.02
#: how long before its cycle's timeout a call to the source made during the cycle is ended at the latest
CALL_MARGIN_S = 1.0
#: the most of one error text from outside a cycle keeps (before escaping): a source's message (a SOAP
#: fault, a host's stderr) can be megabytes, and the cycle's self-metric is stored and sent every cycle
ERROR_CHARS = 1000

MEASUREMENTS = (
    Measurement(
        SELF_MEASUREMENT, "One collector cycle: how it went and what it cost, beside the collector's own samples.",
        {"collector": "the collector (named for its config section)"},
        fields("duration_ms", "samples",
               status="`ok`, `error`, `timeout` or `skipped` (`timeout` too when a cycle is skipped because a call of "
                      "one that timed out has not returned)",
               errors="failed cycles since the start",
               skipped="cycles skipped since the start (the previous one still running)",
               undeclared_facts="facts since the start that depart from their declaration (kept whole; the log "
                                "says how)",
               last_error="this cycle's error, cut to a few KB (empty when it went well)",
               text=("status", "last_error")),
    ),
)

@dataclass
class CollectorStats:
    cycles: int = 0
    errors: int = 0
    skipped: int = 0
    undeclared_facts: int = 0
    samples: int = 0
    status: str = "pending"
    last_error: str = ""
    last_timeout: str = ""  # the error of the last cycle that timed out
    last_duration_ms: float = 0.0
    last_success_ns: int = 0


class Runtime:
    def __init__(self, collectors: Sequence[BaseCollector], outputs: Sequence[Output],
                 declared: FactCheck | None = None, supervisor: Supervisor | None = None,
                 clock_skew_s: float = CLOCK_SKEW_S, max_backlog: int = MAX_BACKLOG):
        self.supervisor = supervisor or Supervisor()
        self.max_backlog = max_backlog
        self.skew_ns = int(clock_skew_s * 1e9)
        for c in collectors:
            _sane_schedule(c)
            c.supervisor = self.supervisor
            c.clock_skew_s = clock_skew_s
            self.supervisor.register(c.thread)
        self.collectors = list(collectors)
        self.outputs = list(outputs)
        self.stats = {c.name: CollectorStats() for c in self.collectors}
        self.declared = declared
        self._told: set[tuple[str, str]] = set()  # (collector, departure) already logged
        self._stop: asyncio.Event | None = None
        self._cycles: set[asyncio.Task] = set()

    def stop(self) -> None:
        if self._stop is not None:
            self._stop.set()

    async def run(self, duration: float | None = None) -> None:
        """Collect until stop() or for `duration` seconds."""
        self._stop = asyncio.Event()
        loops = [asyncio.create_task(self._supervised(c), name=f"loop-{c.name}") for c in self.collectors]
        try:
            if duration is None:
                await self._stop.wait()
            else:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stop.wait(), duration)
        finally:
            self._stop.set()
            await asyncio.gather(*loops, return_exceptions=True)
            await self._finish()

    async def run_once(self) -> None:
        """One cycle of every collector (after its baseline), then return."""
        self._stop = asyncio.Event()

        async def once(c: BaseCollector) -> None:
            COLLECTOR.set(c.name)
            await self._start(c)
            await asyncio.sleep(c.first_delay)
            await self._guarded_cycle(c)

        await asyncio.gather(*(once(c) for c in self.collectors))
        await self._finish()

    async def _finish(self) -> None:
        if self._cycles:  # let in-flight cycles end within their timeouts, then cancel
            _, late = await asyncio.wait(self._cycles, timeout=max(c.timeout for c in self.collectors))
            for t in late:
                t.cancel()
        for c in self.collectors:
            await c.close()

    async def _start(self, c: BaseCollector) -> None:
        try:
            await asyncio.wait_for(c.start(), c.timeout)
        except Exception as e:  # the cycles retry; record and go on
            self._record(c, "error", _describe_error(e, c.timeout, "start"), 0.0, 0, CLOCK.now_ns())

    async def _supervised(self, c: BaseCollector) -> None:
        COLLECTOR.set(c.name)  # this loop's task: its cycles and their log records are this collector's
        try:
            await self._loop(c)
        except Exception as e:  # the loop itself broke: this source would go quiet for good
            self.supervisor.fail(c.thread, e)

    async def _loop(self, c: BaseCollector) -> None:
        assert self._stop is not None
        await self._start(c)
        loop = asyncio.get_running_loop()
        due = loop.time() + c.first_delay
        task: asyncio.Task | None = None
        jitter = min(c.interval * 0.05, 1.0)
        while not self._stop.is_set():
            delay = due + random.uniform(0, jitter) - loop.time()
            try:  # always a pause, even when behind: a loop that never yields is a loop that spins
                await asyncio.wait_for(self._stop.wait(), delay if delay > FLOOR_S else FLOOR_S)
                break
            except TimeoutError:
                pass
            if (task is not None and not task.done()) or c.busy:
                self._skip(c, 1, stuck=task is not None and task.done())
            else:
                task = asyncio.create_task(self._guarded_cycle(c), name=f"cycle-{c.name}")
                self._cycles.add(task)
                task.add_done_callback(self._cycles.discard)
            due += c.interval
            behind = loop.time() - due
            if behind > c.interval:  # the process was stopped or starved: skip the lost slots
                missed = int(behind // c.interval)
                due += missed * c.interval
                self._skip(c, missed)

    async def _guarded_cycle(self, c: BaseCollector) -> None:
        """A cycle whose results could not be handed on (a bug past the collector) is set aside and
        counted; the next cycle runs as usual."""
        try:
            await self._cycle(c)
        except Exception as e:
            self.supervisor.set_aside(c.thread, f"the results of a {c.name} cycle", e)

    async def _cycle(self, c: BaseCollector) -> None:
        t0 = time.perf_counter()
        facts: list[Fact] = []
        records: list[Record | Fact] = []
        errors: list[str] = []
        handed = 0  # samples the cycle handed on before its end

        def hand_on(part: list[Record | Fact]) -> None:
            nonlocal facts, handed
            if facts:  # the describe pass's facts go before any sample
                part, facts = [*facts, *part], []
            samples, more, annotations = self._split(c, part, CLOCK.now_ns())
            handed += len(samples)
            if self.declared is not None:
                self._check_facts(c, more, self.declared)
            for out in self.outputs:
                out.submit(samples, more, annotations)

        async def work() -> None:
            nonlocal facts, records
            if c.facts_due():
                try:
                    facts = await c.describe()
                    c.facts_done()
                    if c.complete_facts:
                        facts = c.removals(facts) + facts
                except (CollectorError, OSError, ValueError) as e:
                    errors.append(_describe_error(e, timeout, "describe"))
            records = await c.collect()

        unpaced: set[str] = set()  # outputs this cycle stopped waiting for
        streams = isinstance(c, Streams)
        timeout = c.cycle_timeout() if streams else c.timeout
        patience = asyncio.get_running_loop().time() + timeout / 2

        async def pace() -> None:
            await self._pace(c, unpaced, patience)

        if streams:
            c.handoff, c.pace = hand_on, pace
        # no call to the source outlives the cycle: they end a little before it, so the call's own error (what
        # timed out, where) is the cycle's, and its worker is free again when the next cycle starts
        c.cycle_ends = time.monotonic() + timeout - min(CALL_MARGIN_S, timeout * 0.05)
        try:
            await asyncio.wait_for(work(), timeout)
        except Exception as e:  # any collector failure is data, never a crash
            errors.append(_describe_error(e, timeout, "collect"))
            if not isinstance(e, CollectorError | TimeoutError):
                log.debug("collector %s failed", c.name, exc_info=True)
        finally:
            c.cycle_ends = None
            if streams:
                c.handoff, c.pace = None, None
        # partial faults first: a timeout stays the last word
        errors[:0] = (printable(p, ERROR_CHARS) for p in c.take_problems())
        ts = CLOCK.now_ns()
        samples, more, annotations = self._split(c, [*facts, *records], ts)
        facts = more
        if self.declared is not None:
            self._check_facts(c, facts, self.declared)
        status = "ok" if not errors else ("timeout" if "timed out" in errors[-1] else "error")
        me = self._record(c, status, _cycle_error(errors), (time.perf_counter() - t0) * 1000, handed + len(samples), ts)
        for out in self.outputs:
            out.submit([*samples, me], facts, annotations)

    async def _pace(self, c: BaseCollector, unpaced: set[str], patience: float) -> None:
        """Back-pressure: while an output has more than max_backlog records queued, the cycle waits before it
        asks its source for more, so memory is bounded whatever the source's size and nothing is dropped.
        An output whose thread has stopped, or still behind when half the cycle's timeout is gone (`patience`,
        loop time), is waited for no more this cycle: that is the cycle's error (shown in its self-metric), and
        it hands on regardless, so the cycle still ends within its timeout."""
        loop = asyncio.get_running_loop()
        for out in self.outputs:
            b = getattr(out, "backlog", None)
            if not isinstance(b, Backlog) or b.name in unpaced:
                continue
            while b.queued > self.max_backlog:
                if not b.working():
                    problem = f"{b.name} has stopped with {b.queued} records queued"
                elif loop.time() > patience:
                    problem = f"{b.name} still has {b.queued} records queued half the cycle's timeout on"
                else:
                    await asyncio.sleep(PACE_S)
                    continue
                unpaced.add(b.name)
                c.problem(f"{problem}: the cycle no longer waits for it")
                break

    def _split(self, c: BaseCollector, records: list[Record | Fact], now_ns: int,
               ) -> tuple[list[Sample], list[Fact], list[Annotation]]:
        """A collector's records by kind, as admit() takes them; one it refuses (its time not within the clock
        skew of now) is set aside and counted in the collector's health."""
        taken = admit(records, now_ns - self.skew_ns, now_ns + self.skew_ns)
        for r, problem in taken.refused:
            self.supervisor.set_aside(c.thread, describe_record(r), problem)
        return taken.samples, taken.facts, taken.annotations

    def _check_facts(self, c: BaseCollector, facts: list[Fact], declared: FactCheck) -> None:
        for f in facts:
            problems = [] if f.removed else declared.problems(f.kind, f.tags, f.data)
            if problems:
                self.stats[c.name].undeclared_facts += 1
            for p in problems:
                if (c.name, p) not in self._told:
                    self._told.add((c.name, p))
                    log.warning("collector %s: %s; kept as it is (its declaration in schema.toml is behind)", c.name, p)

    def _skip(self, c: BaseCollector, n: int, stuck: bool = False) -> None:
        """Cycles that could not start. `stuck`: the last cycle has ended (timed out) but its worker is still in
        a call to the source, which no deadline ended: that is the source timing out again (status `timeout`,
        an error), not a late cycle, so a collector stuck for good never reads as merely skipping."""
        st = self.stats[c.name]
        st.skipped += n
        error = ""
        if stuck:
            st.errors += n
            error = st.last_error = (f"a call to the source made by a cycle that timed out is still running "
                                     f"({st.last_timeout}); {n} cycle(s) skipped")
            log.warning("collector %s: %s", c.name, error)
        else:
            log.warning("collector %s: %d cycle(s) skipped, the previous one is still running", c.name, n)
        me = self._self_sample(c.name, st, "timeout" if stuck else "skipped", 0.0, 0, CLOCK.now_ns(), error)
        for out in self.outputs:
            out.submit([me])

    def _record(self, c: BaseCollector, status: str, error: str, ms: float, n: int, ts: int) -> Sample:
        st = self.stats[c.name]
        st.cycles += 1
        st.samples += n
        st.last_duration_ms = ms
        if error:
            st.errors += 1
            st.last_error = error
            if status == "timeout":
                st.last_timeout = error[:300]
            log.warning("collector %s: %s", c.name, error)
        else:
            st.last_success_ns = ts
        return self._self_sample(c.name, st, status, ms, n, ts, error)

    @staticmethod
    def _self_sample(name: str, st: CollectorStats, status: str, ms: float, n: int, ts: int, error: str) -> Sample:
        """The cycle's self-metric: its own error only (an ok cycle's is empty), so one error text is stored
        once, not again with every cycle after it."""
        st.status = status
        return Sample(SELF_MEASUREMENT, {"collector": name},
                      {"duration_ms": round(ms, 3), "samples": n, "errors": st.errors, "skipped": st.skipped,
                       "undeclared_facts": st.undeclared_facts, "status": status, "last_error": error}, ts)


def _sane_schedule(c: BaseCollector) -> None:
    """A non-finite, zero or negative interval or timeout (config check refuses them; a collector
    built otherwise might not) becomes the floor, loudly, rather than a loop that spins."""
    for name in ("interval", "timeout"):
        value = getattr(c, name)
        if not (isinstance(value, int | float) and math.isfinite(value) and value >= FLOOR_S):
            log.error("collector %s: %s %r is not a usable duration; running with %gs", c.name, name, value, FLOOR_S)
            setattr(c, name, FLOOR_S)


def _describe_error(e: BaseException, timeout: float, phase: str) -> str:
    """One line, safe to print and of bounded length: an error text often quotes the remote side (its
    stderr, a name, a SOAP fault's string of any length)."""
    if isinstance(e, TimeoutError):
        return f"{phase} timed out after {timeout:g}s"
    if isinstance(e, CollectorError):
        return printable(str(e), ERROR_CHARS)
    return printable(f"{phase}: {type(e).__name__}: {e}", ERROR_CHARS)


def _cycle_error(errors: list[str]) -> str:
    """A cycle's errors as one text of at most a few KB (each escaped already: at most 6 characters each)."""
    text = "; ".join(errors)
    return text if len(text) <= 2 * ERROR_CHARS else text[:2 * ERROR_CHARS] + "…"
