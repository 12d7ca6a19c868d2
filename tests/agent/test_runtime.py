"""The scheduler: timeouts, skipped late cycles, isolation between collectors, self-metrics."""

from __future__ import annotations

import asyncio
import threading
import time

from db2vtop.agent.assemble import fact_check
from db2vtop.agent.core.model import REMOVED, SELF_MEASUREMENT, Annotation, Fact, Sample
from db2vtop.agent.runtime import Runtime
from db2vtop.collectors.base import BaseCollector, CollectorError
from db2vtop.collectors.capabilities import Streams


class Capture:
    def __init__(self):
        self.samples: list[Sample] = []
        self.facts: list[Fact] = []
        self.annotations: list[Annotation] = []

    def submit(self, samples=(), facts=(), annotations=()):
        self.samples += samples
        self.facts += facts
        self.annotations += annotations

    def selfmetrics(self, name: str) -> list[dict]:
        return [s.fields for s in self.samples if s.measurement == SELF_MEASUREMENT and s.tags["collector"] == name]

    def of(self, measurement: str) -> list[Sample]:
        return [s for s in self.samples if s.measurement == measurement]


class Ticker(BaseCollector):
    def __init__(self, name="tick", interval=0.1):
        super().__init__(name, interval)
        self.describes = 0

    async def collect(self):
        return [Sample("tick", {"c": self.name}, {"v": 1.0, "nan": float("nan")}),
                Annotation("marker", "m")]

    async def describe(self):
        self.describes += 1
        return [Fact("thing", {"c": self.name}, {"n": self.describes})]


class AsyncHang(BaseCollector):
    async def collect(self):
        await asyncio.sleep(3600)
        return []


class ThreadHang(BaseCollector):
    """Blocks a worker thread far longer than its timeout; tracks overlapping calls."""

    def __init__(self, *a, block_s: float, **kw):
        super().__init__(*a, **kw)
        self.block_s = block_s
        self.active = 0
        self.max_active = 0
        self.lock = threading.Lock()

    def _block(self):
        with self.lock:
            self.active += 1
            self.max_active = max(self.max_active, self.active)
        time.sleep(self.block_s)
        with self.lock:
            self.active -= 1

    async def collect(self):
        await self.run_blocking(self._block)
        return []


class Failing(BaseCollector):
    def __init__(self, name, exc):
        super().__init__(name, 0.1)
        self.exc = exc

    async def collect(self):
        raise self.exc


async def test_a_hung_collector_is_timed_out_and_reported_while_others_keep_their_cadence():
    out = Capture()
    healthy = Ticker(interval=0.1)
    hung = AsyncHang("hung", interval=0.5, timeout=0.3)
    rt = Runtime([healthy, hung], [out])
    await rt.run(duration=2.0)
    hung_metrics = out.selfmetrics("hung")
    assert hung_metrics and all(m["status"] == "timeout" for m in hung_metrics)
    assert hung_metrics[-1]["last_error"] == "collect timed out after 0.3s"
    assert rt.stats["hung"].errors == len(hung_metrics) >= 2
    ticks = out.selfmetrics("tick")
    assert len(ticks) >= 12, "the healthy collector lost its cadence"  # 20 slots in 2 s
    assert all(m["status"] == "ok" and m["errors"] == 0 for m in ticks)


async def test_a_cycle_is_skipped_while_the_previous_ones_thread_is_still_busy():
    """A worker still in a call after its cycle timed out (one no deadline covers): the cycles that cannot start
    meanwhile are skipped, and counted as the source timing out again (an error on its status), never as
    merely late: a collector stuck for good must not read as "skipped" for good."""
    out = Capture()
    c = ThreadHang("blocked", interval=0.2, timeout=0.1, block_s=1.0)
    other = Ticker(interval=0.1)
    rt = Runtime([c, other], [out])
    await rt.run(duration=1.9)
    st = rt.stats["blocked"]
    assert c.max_active == 1, "two cycles of one collector ran at the same time"
    assert st.skipped >= 4 and st.errors >= st.skipped
    skipped = [m for m in out.selfmetrics("blocked") if m["duration_ms"] == 0.0]
    assert skipped and skipped[-1]["skipped"] == st.skipped
    assert {m["status"] for m in skipped} == {"timeout"}
    assert all(m["last_error"] == "a call to the source made by a cycle that timed out is still running (collect "
               "timed out after 0.1s); 1 cycle(s) skipped" for m in skipped), skipped
    assert len(out.selfmetrics("tick")) >= 12


async def test_errors_are_recorded_as_data_and_isolated():
    out = Capture()
    rt = Runtime([Failing("known", CollectorError("SQL1032N  No start database manager command was issued.")),
                  Failing("bug", ValueError("bad literal")), Ticker(interval=0.1)], [out])
    await rt.run(duration=0.55)
    assert out.selfmetrics("known")[-1]["last_error"] == "SQL1032N  No start database manager command was issued."
    assert out.selfmetrics("bug")[-1]["last_error"] == "collect: ValueError: bad literal"
    assert {m["status"] for m in out.selfmetrics("bug")} == {"error"}
    assert rt.stats["tick"].errors == 0 and rt.stats["tick"].cycles >= 3


class AmissFirst(BaseCollector):
    """A source whose first cycle goes wrong by `amiss(self)` (it raises, or tells a problem), then answers well:
    `answer()` every cycle it ends."""

    def __init__(self, name: str, interval: float, amiss, answer):
        super().__init__(name, interval)
        self.amiss, self.answer = amiss, answer
        self.cycles = 0

    async def collect(self):
        self.cycles += 1
        if self.cycles == 1:
            self.amiss(self)
        return self.answer()


def huge_fault(source) -> None:
    """A fault with a message of 8 MiB, escapes in it."""
    raise CollectorError("vcenter vc1: QueryPerf: SystemError: \x1b]0;t\x07\u202e" + "A" * 8 * 2**20)


async def test_an_error_text_from_outside_is_cut_and_not_carried_on_by_the_cycles_that_succeed():
    """One fault of 8 MiB was stored again with every later ok cycle (its self-metric's last_error): 34 GiB a day
    of store and InfluxDB. Now the text is cut to a few KB, escaped, and an ok cycle's last_error is empty."""
    out = Capture()
    rt = Runtime([AmissFirst("faulty", 0.1, huge_fault, lambda: [Sample("tick", {"c": "faulty"}, {"v": 1.0})])],
                 [out])
    await rt.run(duration=0.55)
    first, *later = out.selfmetrics("faulty")
    assert first["status"] == "error" and first["last_error"].startswith("vcenter vc1: QueryPerf: SystemError: "
                                                                         "\\x1b]0;t\\x07\\u202eAAA")
    assert 1000 <= len(first["last_error"]) <= 4 * 1024 and first["last_error"].endswith("A…")
    assert later and all(m["status"] == "ok" and m["last_error"] == "" for m in later), later
    assert len(rt.stats["faulty"].last_error) <= 4 * 1024  # what `agent --once` prints


async def test_a_problem_in_part_of_a_cycle_is_its_error_and_keeps_its_samples():
    out = Capture()
    # a source that left out part of its data on its first cycle: the samples it did read, and a problem
    c = AmissFirst("partial", 10.0,
                   lambda c: c.problem("counter cpu_elapsed_time is missing, so cpu_busy_pct cannot be computed"),
                   lambda: [Sample("node", {"n": "1"}, {"iops": 5.0})])
    rt = Runtime([c], [out])
    await rt.run_once()
    await rt.run_once()
    first, second = out.selfmetrics("partial")
    assert first["status"] == "error" and first["samples"] == 1
    assert first["last_error"] == "counter cpu_elapsed_time is missing, so cpu_busy_pct cannot be computed"
    assert second["status"] == "ok" and rt.stats["partial"].errors == 1
    assert [s.fields for s in out.of("node")] == [{"iops": 5.0}, {"iops": 5.0}]


async def test_samples_are_cleaned_and_facts_come_first_and_on_request():
    out = Capture()
    t = Ticker(interval=0.1)
    rt = Runtime([t], [out])
    task = asyncio.create_task(rt.run())
    await asyncio.sleep(0.35)
    t.facts_stale = True
    await asyncio.sleep(0.3)
    rt.stop()
    await task
    assert all("nan" not in s.fields for s in out.of("tick"))
    assert [f.data["n"] for f in out.facts] == [1, 2]  # first cycle, then the requested refresh only
    assert out.annotations and out.annotations[0].name == "m"


class Follower(BaseCollector):
    """A collector that notices changes itself and hands their facts in with its samples."""

    async def collect(self):
        return [Sample("tick", {"c": self.name}, {"v": 1.0}), Fact("thing", {"c": self.name}, {"changed": True})]


async def test_facts_a_collector_returns_from_collect_reach_the_outputs_as_facts():
    out = Capture()
    rt = Runtime([Follower("follow", 10.0)], [out])
    await rt.run_once()
    assert [f.data for f in out.facts] == [{"changed": True}]
    assert [s.fields for s in out.of("tick")] == [{"v": 1.0}]
    assert not out.annotations


class Describer(BaseCollector):
    """Describes the entities it is told, every cycle."""

    def __init__(self, name, complete: bool):
        super().__init__(name, 10.0)
        self.complete_facts, self.entities = complete, [("disk", "sda"), ("disk", "sdb"), ("mount", "/")]

    def facts_due(self):
        return True

    async def collect(self):
        return []

    async def describe(self):
        return [Fact(kind, {"guest": "g1", kind: name}, {"n": 1}) for kind, name in self.entities]


async def test_an_entity_a_complete_describe_no_longer_reports_gets_one_removal():
    complete, partial = Describer("complete", True), Describer("partial", False)
    out = Capture()
    rt = Runtime([complete, partial], [out])
    await rt._cycle(complete)
    await rt._cycle(partial)
    for c in (complete, partial):
        c.entities = [("disk", "sda")]       # sdb detached; no mount reported (not read this time)
    for _ in range(2):
        await rt._cycle(complete)
        await rt._cycle(partial)
    removed = [f for f in out.facts if f.removed]
    assert [(f.kind, f.tags) for f in removed] == [("disk", {"guest": "g1", "disk": "sdb"})]
    assert removed[0].ts > 0
    complete.entities = [("disk", "sda"), ("disk", "sdb")]    # back again: a fact, no removal
    await rt._cycle(complete)
    assert [f.removed for f in out.facts if f.tags.get("disk") == "sdb"][-1] is False


class Misdeclared(Describer):
    """Facts as a collector whose schema.toml is behind its code would make them."""

    async def describe(self):
        return [Fact("esxtop_host", {"host": "esx1"}, {"esxtop_hostname": "esx1"}),  # as declared
                Fact("esxtop_host", {"host": "esx2"}, {"esxtop_hostname": 7, "uptime_s": 9}),  # a key of neither
                Fact("esxtop_numa", {"host": "esx1"}, {"nodes": 2}),  # a kind never declared
                Fact.removal("esxtop_host", {"host": "esx0"})]  # a removal holds no keys: never judged


async def test_undeclared_facts_are_kept_whole_logged_once_and_counted(caplog):
    c, out = Misdeclared("esxtop:lab", complete=False), Capture()
    rt = Runtime([c], [out], fact_check())
    for _ in range(2):
        await rt._cycle(c)
    assert [(f.kind, f.data) for f in out.facts][:4] == [
        ("esxtop_host", {"esxtop_hostname": "esx1"}), ("esxtop_host", {"esxtop_hostname": 7, "uptime_s": 9}),
        ("esxtop_numa", {"nodes": 2}), ("esxtop_host", REMOVED)]
    assert [m["undeclared_facts"] for m in out.selfmetrics("esxtop:lab")] == [2, 4]
    assert [m["status"] for m in out.selfmetrics("esxtop:lab")] == ["ok", "ok"]
    told = [r.getMessage() for r in caplog.records if "schema.toml" in r.getMessage()]
    assert told == ["collector esxtop:lab: fact esxtop_host: keys not declared: uptime_s; kept as it is (its "
                    "declaration in schema.toml is behind)",
                    "collector esxtop:lab: fact esxtop_host: keys not of their declared type: esxtop_hostname "
                    "(string); kept as it is (its declaration in schema.toml is behind)",
                    "collector esxtop:lab: fact kind esxtop_numa is not declared; kept as it is (its declaration "
                    "in schema.toml is behind)"]


async def test_run_once_waits_for_the_baseline_then_runs_each_collector_once():
    class Baseline(Ticker):
        first_delay = 0.2

        async def start(self):
            self.started = time.monotonic()

        async def collect(self):
            self.collected = time.monotonic()
            return await super().collect()

    out = Capture()
    b = Baseline("b", interval=5.0)
    rt = Runtime([b, Failing("f", CollectorError("down"))], [out])
    await rt.run_once()
    assert b.collected - b.started >= 0.2
    assert len(out.of("tick")) == 1 and rt.stats["f"].errors == 1 and rt.stats["b"].cycles == 1


class Instant(BaseCollector):
    """Fails at once, every time: with a broken schedule it would be called as fast as the loop turns."""

    calls = 0

    async def collect(self):
        self.calls += 1
        raise CollectorError("refused")


async def test_no_schedule_makes_a_loop_spin(caplog):
    nan, zero, negative = Instant("nan", float("nan")), Instant("zero", 0.0), Instant("neg", -5.0, float("inf"))
    out = Capture()
    await Runtime([nan, zero, negative], [out]).run(2.0)
    for c in (nan, zero, negative):  # at most one call per floor pause (0.05 s): 40 in 2 s, not millions
        assert 1 <= c.calls <= 45, (c.name, c.calls)
        assert c.interval == c.timeout == 0.05
    assert "collector nan: interval nan is not a usable duration" in caplog.text
    assert "collector neg: timeout inf is not a usable duration" in caplog.text


def test_repeated_warnings_are_summarised_so_the_log_stays_small():
    import io
    import logging

    from db2vtop.agent.logs import setup_logging

    clock = [0.0]
    stream = io.StringIO()
    setup_logging("info", stream=stream)
    logging.getLogger().handlers[0].filters[0].clock = lambda: clock[0]
    log = logging.getLogger("db2vtop.agent.runtime")
    for i in range(10_000):
        clock[0] = i * 0.01  # 10,000 warnings in 100 s
        log.warning("collector %s: %d cycle(s) skipped, the previous one is still running", "guest", 1)
    log.warning("something else")
    lines = stream.getvalue().splitlines()
    assert len(lines) == 3, lines  # the first, one a minute later with the count, the other message
    assert "cycle(s) skipped" in lines[0] and "more like it" not in lines[0]
    assert lines[1].endswith("(and 5,999 more like it in the last 60 s)")
    assert lines[2].endswith("something else")


class LongFirst(BaseCollector, Streams):
    """Its first cycle (a whole inventory read) takes longer than its timeout, and it says so."""

    def __init__(self):
        super().__init__("long", interval=0.2, timeout=0.1)
        self.cycles = 0

    def cycle_timeout(self):
        return 1.0 if self.cycles == 0 else self.timeout

    async def collect(self):
        await asyncio.sleep(0.3 if self.cycles == 0 else 0.0)
        self.cycles += 1
        return [Sample("tick", {"c": self.name}, {"v": 1.0})]


async def test_a_cycle_the_collector_says_is_longer_gets_its_own_timeout():
    """A large vCenter's first cycle (every VM's device list) runs past the cycle timeout; cut short it would
    be begun again each cycle and never end."""
    out = Capture()
    long = LongFirst()
    await Runtime([long], [out])._cycle(long)
    assert [m["status"] for m in out.selfmetrics("long")] == ["ok"]
    hung = AsyncHang("hung", interval=0.5, timeout=0.1)
    await Runtime([hung], [out])._cycle(hung)
    assert out.selfmetrics("hung")[-1]["last_error"] == "collect timed out after 0.1s"


class Parts(BaseCollector, Streams):
    """A large source's cycle: `parts` parts of `size` samples, each handed on once the outputs allow."""

    def __init__(self, parts: int, size: int, timeout: float = 30.0):
        super().__init__("parts", 60.0, timeout)
        self.parts, self.size = parts, size

    async def collect(self):
        for p in range(self.parts):
            await self.paced()
            assert self.handoff is not None
            self.handoff([Sample("part", {"part": str(p), "i": str(i)}, {"v": float(i)}) for i in range(self.size)])
        return []


class Gated:
    """An output with its own thread that takes a batch only while more than `bound` records wait (or once
    told the producer is done): whatever the machine's speed, a producer that does not wait for it piles up
    every part, one that does stays within a part of the bound."""

    def __init__(self, bound: int, start: bool = True):
        from db2vtop.agent.core.backlog import Backlog

        self.bound = bound
        self.backlog = Backlog("gated")
        self.taken: list[Sample] = []
        self.finish = threading.Event()
        self._q: list[list[Sample]] = []
        self._lock = threading.Condition()
        if start:
            self.backlog.thread = threading.Thread(target=self._run, daemon=True)
            self.backlog.thread.start()

    def submit(self, samples=(), facts=(), annotations=(), findings=()):
        samples = list(samples)
        with self._lock:
            self.backlog.add(len(samples))
            self._q.append(samples)
            self._lock.notify()

    def _run(self):
        while True:
            with self._lock:
                self._lock.wait_for(lambda: (self._q and (self.backlog.queued > self.bound or self.finish.is_set()))
                                    or (self.finish.is_set() and not self._q), timeout=0.5)
                if not self._q:
                    if self.finish.is_set():
                        return
                    continue
                if not (self.backlog.queued > self.bound or self.finish.is_set()):
                    continue
                batch = self._q.pop(0)
            self.taken += batch
            self.backlog.done(len(batch))


async def test_a_large_cycle_waits_while_an_output_is_behind_and_loses_nothing():
    """Back-pressure: a cycle of 30 parts of 1,000 samples, against an output that takes records only while
    more than 3,000 wait, is held to the bound (a part over it at most), not 30,000 queued, and every sample
    is taken once."""
    out = Gated(bound=3_000)
    c = Parts(parts=30, size=1_000)
    rt = Runtime([c], [out], max_backlog=3_000)
    await rt._cycle(c)
    out.finish.set()
    await asyncio.to_thread(out.backlog.thread.join, 10)
    assert out.backlog.peak <= 3_000 + 1_000 + 1, f"{out.backlog.peak} records were queued at once"  # + its self-metric
    got = [s for s in out.taken if s.measurement == "part"]
    assert len(got) == 30_000 and len({(s.tags["part"], s.tags["i"]) for s in got}) == 30_000
    assert rt.stats["parts"].status == "ok"


async def test_without_back_pressure_the_same_cycle_piles_up():
    """The test above can fail: with a bound no backlog reaches, nothing else holds the cycle back (this
    output takes nothing until the producer is done), and every part queues at once."""
    out = Gated(bound=10**9)
    c = Parts(parts=30, size=1_000)
    await Runtime([c], [out], max_backlog=10**9)._cycle(c)
    out.finish.set()
    await asyncio.to_thread(out.backlog.thread.join, 10)
    assert out.backlog.peak == 30_001 and len(out.taken) == 30_001  # and its self-metric


async def test_an_output_whose_thread_has_stopped_is_not_waited_for_and_the_error_is_shown():
    """A dead output's backlog never shrinks: the cycle must not hang on it. It hands on every part (the
    other outputs keep them), says why in its self-metric, and the next cycle runs."""
    dead = Gated(bound=0, start=False)
    dead.backlog.thread = threading.Thread(target=lambda: None)
    dead.backlog.thread.start()
    dead.backlog.thread.join()
    kept = Capture()
    c = Parts(parts=5, size=100)
    rt = Runtime([c], [dead, kept], max_backlog=10)
    await rt._cycle(c)
    st = rt.stats["parts"]
    assert st.status == "error" and "gated has stopped with" in st.last_error
    assert len(kept.of("part")) == 500 and dead.backlog.queued == 501  # every part and the self-metric
    assert kept.selfmetrics("parts")[-1]["last_error"] == st.last_error
    await rt._cycle(c)  # the next cycle is not held either
    assert len(kept.of("part")) == 1000


async def test_an_output_that_stays_behind_is_waited_for_no_longer_than_half_the_cycles_timeout():
    """A writer alive but stuck (a disk that does not answer) holds a cycle half its timeout at most: the cycle
    then hands on the rest without waiting, ends within its timeout, and says why."""
    stuck = Gated(bound=10**9)  # alive, but takes nothing until told the producer is done
    kept = Capture()
    c = Parts(parts=4, size=100, timeout=0.3)
    rt = Runtime([c], [stuck, kept], max_backlog=150)
    await rt._cycle(c)
    stuck.finish.set()
    assert "gated still has 200 records queued half the cycle's timeout on" in rt.stats["parts"].last_error
    assert len(kept.of("part")) == 400
