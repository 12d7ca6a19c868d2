"""A vCenter whose clock is off (tests/faults/hostile_vcenter.py in front of the real simulator), through the
agent's own pipeline: the vSphere collector, the runtime, the store writer and the check engine.

Before: a QueryPerf answer dated 6 h ahead (within the default `max_clock_skew` of a day) became each
entity's high-water mark, so that vCenter gave no sample for 6 h while every cycle said "ok" and nothing was
logged; a vCenter clock that NTP stepped back did the same; only a restart recovered, and nothing said the
clock was off. Now a sample dated past vCenter's own clock is set aside and counted, a mark past that clock
is reset to its realtime window (and the cycle says so), and a clock a minute off is a finding, shown.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import pytest
from textual.widgets import Static

from db2vtop.agent.config import load_config
from db2vtop.agent.core.model import SELF_MEASUREMENT, THREAD_MEASUREMENT
from db2vtop.agent.core.source import Row
from db2vtop.agent.core.store import Store
from db2vtop.agent.pipeline import Pipeline
from db2vtop.agent.runtime import Runtime
from db2vtop.tui.app import Db2vtopApp
from tests.conftest import run_cli
from tests.faults.hostile_vcenter import HostileVCenter
from tests.faults.test_vcenter import ENV, SCENARIO
from tests.infra.vsphere_sim import Simulator

S = 10**9
SIX_HOURS = 6 * 3600


@pytest.fixture(scope="module")
def vcenter(tmp_path_factory):
    with Simulator.of(SCENARIO, tmp_path_factory.mktemp("sim")) as sim, HostileVCenter(sim.url) as proxy:
        yield proxy


@pytest.fixture(autouse=True)
def clean(vcenter, monkeypatch):
    """Each test starts with a vCenter whose clock is right, and leaves it so."""
    for k, v in ENV.items():
        monkeypatch.setenv(k, v)
    yield
    vcenter.faults, vcenter.clock_s = {}, 0.0


def config(tmp_path: Path, proxy: HostileVCenter) -> Path:
    cfg = tmp_path / "config.toml"
    cfg.write_text(f'[store]\npath = "{tmp_path / "m.db"}"\n[guest]\nenabled = false\n[[vcenter]]\nname = "vc1"\n'
                   f'url = "{proxy.url}"\nuser = "monitor"\npassword_env = "VC_TEST_PASSWORD"\n'
                   'allow_plaintext = true\n')  # the hostile vCenter speaks plain http
    return cfg


Cycle = Callable[[], Awaitable[None]]


@contextlib.contextmanager
def agent(tmp_path: Path, proxy: HostileVCenter) -> Iterator[Callable[[Callable[[Cycle], Awaitable[None]]], None]]:
    """The agent's pipeline on a store in tmp_path; yields `run(script)`, which runs `await script(cycle)` where
    each `await cycle()` is one cycle of the vCenter's collector and then of the self collector (its thread's
    health: what was set aside), handed on as the agent hands them and committed. The check engine's findings are
    in the store once this ends."""
    p = Pipeline(load_config(config(tmp_path, proxy)), tmp_path / "m.db")
    runtime: Runtime = p.runtime
    (vc,) = [c for c in runtime.collectors if c.name == "vsphere:vc1"]
    (me,) = [c for c in runtime.collectors if c.name == "self"]

    def run(script: Callable[[Cycle], Awaitable[None]]) -> None:
        async def cycle() -> None:
            for c in (vc, me):
                await runtime._cycle(c)
            await asyncio.to_thread(p.writer.flush)  # committed: the script may read the store

        async def whole() -> None:
            try:
                await script(cycle)
            finally:
                await vc.close()
        asyncio.run(whole())
    try:
        yield run
    finally:
        p.close()


def next_sample() -> float:
    """Seconds until the simulator has a new 20 s sample (a second past its boundary)."""
    return (time.time() // 20 + 1) * 20 + 1 - time.time()


def vm_samples(store: Path, since_ns: int = 0) -> list[Row]:
    """db01's realtime samples (CPU ready comes only from QueryPerf)."""
    with Store(store) as s:
        return [r for r in s.rows("vsphere_vm", since_ns) if r.tags.get("vm") == "db01" and "cpu_ready_pct" in r.fields]


def cycles_of(store: Path, collector: str) -> list[dict]:
    with Store(store) as s:
        return [r.fields for r in s.rows(SELF_MEASUREMENT, 0) if r.tags["collector"] == collector]


def test_a_queryperf_answer_dated_6h_ahead_is_set_aside_and_counted_and_the_next_cycle_stores_its_samples(
        tmp_path, vcenter):
    """One answer dated 6 h ahead (a day is the default skew: the runtime would take it) is set aside: the
    vCenter's own clock bounds it. The next cycle asks again after the same mark and stores the sample that
    answer carried, with its true time; the set-aside answer is counted in the collector's thread health."""
    store = tmp_path / "m.db"
    marks: dict[str, int] = {}

    async def script(cycle: Cycle) -> None:
        await cycle()  # the first: an hour's reach back, the marks at its newest sample
        marks["before"] = max(r.ts for r in vm_samples(store))
        await asyncio.sleep(next_sample())
        vcenter.faults = {"QueryPerf": "ahead6h"}
        await cycle()  # the new sample, dated 6 h ahead
        vcenter.faults = {}
        marks["faulted"] = len(vm_samples(store, marks["before"] + 1))
        await cycle()

    with agent(tmp_path, vcenter) as run:
        run(script)
    assert vcenter.hits.pop("QueryPerf", 0) >= 1
    assert marks["faulted"] == 0  # nothing of the faulted answer stored
    after = vm_samples(store, marks["before"] + 1)
    assert after, "no sample stored after the answer dated 6 h ahead: the mark moved into the future"
    assert all(r.ts <= time.time_ns() + 60 * S for r in after)
    with Store(store) as s:
        assert not [r for r in s.rows("vsphere_vm", time.time_ns() + 3600 * S)]  # nothing dated ahead stored
        health = [r.fields for r in s.rows(THREAD_MEASUREMENT, 0) if r.tags["thread"] == "collector:vsphere:vc1"]
    assert health[-1]["set_aside"] >= 1
    assert "QueryPerf samples of vcenter vc1" in health[-1]["last_error"]
    assert "past vCenter's own clock" in health[-1]["last_error"]
    assert [c["status"] for c in cycles_of(store, "vsphere:vc1")] == ["ok", "ok", "ok"]


def test_a_vcenter_clock_stepped_back_resumes_its_samples_and_says_so(tmp_path, vcenter, caplog):
    """A vCenter (and its hosts) 6 h ahead, then NTP steps its clock back: the marks taken in its old time are
    past its new clock. The next cycle resets them to its realtime window, stores the samples of its last hour
    in its new time, and says so (the cycle's status and a log line); the cycle after is clean again."""
    store = tmp_path / "m.db"
    ahead: list[Row] = []

    async def script(cycle: Cycle) -> None:
        vcenter.clock_s = SIX_HOURS
        await cycle()
        ahead.extend(vm_samples(store))
        vcenter.clock_s = 0.0  # NTP steps it back
        await cycle()
        await cycle()

    with caplog.at_level(logging.WARNING), agent(tmp_path, vcenter) as run:
        run(script)
    assert ahead and min(r.ts for r in ahead) > time.time_ns() + 5 * 3600 * S  # its samples, in its time
    now = time.time_ns()
    resumed = [r for r in vm_samples(store) if r.ts <= now + 60 * S]
    assert len(resumed) >= 10, "no sample since the clock went back: the marks stayed in its old time"
    cycles = cycles_of(store, "vsphere:vc1")
    assert [c["status"] for c in cycles] == ["ok", "error", "ok"]
    said = cycles[1]["last_error"]
    assert "vcenter vc1: its clock went back" in said and "reset to its realtime window" in said
    assert [r for r in caplog.records if "its clock went back" in r.getMessage()]


def test_a_vcenter_clock_off_by_more_than_a_minute_is_a_finding_while_it_lasts_shown_in_triage_and_the_tui(
        tmp_path, vcenter):
    """A vCenter 5 minutes ahead: each cycle's reading of its clock opens a timekeeping finding (one reading
    decides), which cites VMware's timekeeping guidance, shows beside the collector in the status line and in
    triage, and resolves once the clock is right for five readings; a clock 20 s off is no finding."""
    store = tmp_path / "m.db"
    times: dict[str, int] = {}

    async def script(cycle: Cycle) -> None:
        vcenter.clock_s = 20.0
        await cycle()
        times["off"] = time.time_ns()
        vcenter.clock_s = 300.0
        for _ in range(3):
            await cycle()
        times["fixed"] = time.time_ns()
        vcenter.clock_s = 0.0
        for _ in range(5):
            await cycle()

    with agent(tmp_path, vcenter) as run:
        run(script)
    with Store(store) as s:
        offsets = [(r.ts, r.fields["clock_offset_ms"]) for r in s.rows("vsphere_vcenter", 0)]
        (f,) = [f for f in s.findings(open_only=False) if f.rule == "timekeeping"]
    assert len(offsets) == 9 and abs(offsets[0][1] - 20_000) < 2_000 and abs(offsets[1][1] - 300_000) < 2_000
    assert f.subject == {"layer": "vcenter", "vcenter": "vc1"} and f.severity == "warning"
    assert f.summary == "vCenter vc1's clock is 5m ahead of the agent's"
    assert times["off"] < f.first_seen < times["fixed"] < f.resolved_at  # opened while off, resolved once right
    assert any("Timekeeping in VMware Virtual Machines" in r for r in f.references)

    vcenter.clock_s = 300.0  # triage reads the clock itself: one reading shows it
    out = run_cli("triage", "-c", str(config(tmp_path, vcenter)), "--lookback", "10m", env={**os.environ, **ENV})
    assert out.returncode == 1, out.stdout + out.stderr  # a warning
    assert "[WARNING] timekeeping (vcenter: vcenter=vc1): vCenter vc1's clock is 5m ahead of the agent's" in out.stdout
    assert "Synchronizing Clocks on the vSphere Network" in out.stdout
    one = run_cli("triage", "-c", str(config(tmp_path, vcenter)), "--vm", "db01", "--format", "json",
                  env={**os.environ, **ENV})  # a stack's own: its VM's samples are dated by that clock
    assert [f["subject"] for f in json.loads(one.stdout)["findings"] if f["rule"] == "timekeeping"
            and f["resolved_at"] is None] == [{"layer": "vcenter", "vcenter": "vc1"}], one.stdout + one.stderr


async def test_the_status_line_shows_a_vcenter_clock_beside_its_collector(tmp_path, vcenter):
    """While a vCenter's timekeeping finding is open, the status line says how far its clock is, beside its
    collector's cycle."""
    store = tmp_path / "m.db"

    async def script(cycle: Cycle) -> None:
        vcenter.clock_s = -300.0
        await cycle()

    with agent(tmp_path, vcenter) as run:
        await asyncio.to_thread(run, script)
    app = Db2vtopApp(store, None, refresh_s=0.2)

    def status() -> str:
        shown = app.screen.query_one("#status", Static).content
        return "\n".join(str(r) for r in getattr(shown, "renderables", [shown]))

    async with app.run_test(size=(200, 45)) as pilot:
        for _ in range(100):
            if "vsphere:vc1" in status():
                break
            await pilot.pause(0.1)
        line = status()
        await pilot.press("q")
    assert "vsphere:vc1 ok" in line and "clock 5m behind" in line.split("vsphere:vc1", 1)[1], line
