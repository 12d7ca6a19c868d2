"""Whole-fleet triage keeps vCenter's hour as columns as its pages come and judges it a minute at a time:
the same findings, verdicts and counts as judging every sample at once, sorted by time.

One gathering from the real simulator is judged both ways. vCenter is asked two entities a call and three
metric ids a call, so a VM's hour comes in several pages (its counters cut across calls), its newest sample
comes once more with the look now, and its balloon with the quick stats (a second measurement for the
balloon rule's track). The incidents span pages and minutes: CPU ready 15 % per vCPU for 5 minutes half an
hour ago (opened and resolved) and again for the last 3 minutes (open), a balloon for the last 2 minutes.
"""

from __future__ import annotations

import json
import time

import pytest

from db2vtop.agent.config import load_config
from db2vtop.agent.core.columns import ColumnSource
from db2vtop.agent.core.source import CachedSource, MemorySource
from db2vtop.agent.gather import look_now
from db2vtop.checks.figures import TABLE
from db2vtop.checks.runner import build_engine
from db2vtop.checks.topology import infer_stacks, resolve
from db2vtop.checks.triage import finding_json, judge, kept_fields
from db2vtop.checks.verdict import stack_verdict
from tests.infra.vsphere_sim import Simulator

HOUR = 3600.0
OK, BAD = round(0.005 * 20_000 * 4), round(0.15 * 20_000 * 4)  # CPU ready ms per 20 s sample of 4 vCPUs


def _vm(name: str, ready: list[int] | None = None, balloon: list[int] | None = None) -> dict:
    perf: dict = {}
    if ready is not None:
        perf["cpu.ready.summation"] = {"": ready}
    if balloon is not None:
        perf["mem.vmmemctl.average"] = balloon
    return {"name": name, "num_cpu": 4, "cores_per_socket": 4, "memory_mb": 16384, "disks": [{"size_gb": 40}],
            "perf": perf, "quickstats": {"balloonedMemory": 1024 if balloon else 0}}


SCENARIO = {"datacenter": "DC1", "generate": {"hosts": 2, "vms_per_host": 4}, "hosts": [
    {"name": "esx-incident", "cluster": "prod", "vms": [
        _vm("ready01", [OK] + [BAD] * 15 + [OK] * 30 + [BAD] * 9),
        _vm("ready02", [OK] * 40 + [BAD] * 15 + [OK] * 10),
        _vm("balloon01", balloon=[0] * 50 + [1048576] * 6)]}]}


class Recorded(ColumnSource):
    """Kept as columns, and every sample remembered as it came: the all-at-once judgement's input."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.calls: list[int] = []
        self.every: list = []

    def add(self, samples, rank=0):
        samples = list(samples)
        self.calls.append(len(samples))
        self.every += samples
        return super().add(samples, rank)


def all_at_once(cfg, samples, facts, now, stacks) -> tuple[list[dict], list[dict], int]:
    """Every sample in one list sorted by time through the engine, the verdicts over all of them in memory."""
    engine = build_engine(cfg)
    engine.feed(facts=facts)
    engine.feed(sorted(samples, key=lambda s: s.ts))
    engine.mark_stale(now)
    found = {f.key: f for f in engine.changes()}
    found.update({f.key: f for f in engine.open_findings()})
    source = CachedSource(MemorySource(samples, facts))
    since = now - int(HOUR * 1e9)
    verdicts = []
    for stack in stacks:
        e = resolve(source, stack, since, now)
        v = stack_verdict(source, stack, since, now, cfg.checks, e)
        v.note_findings(f for f in found.values() if e.owns(f.subject))
        verdicts.append(v.to_json())
    judged = {f.measurement for f in TABLE} | engine.live_measurements()
    return (sorted(map(finding_json, found.values()), key=json.dumps), verdicts,
            sum(1 for s in samples if s.measurement in judged))


@pytest.fixture(scope="module")
def sim(tmp_path_factory):
    d = tmp_path_factory.mktemp("pages-sim")
    with Simulator.of(SCENARIO, d) as s:
        yield s


def test_judged_a_minute_at_a_time_from_pages_it_is_what_judged_at_once_is(sim, tmp_path, monkeypatch):
    monkeypatch.setenv("VC1_PASSWORD", "secret")
    cfg = load_config(sim.vcenter_only(tmp_path, "max_query_entities = 2\nmax_query_metrics = 3\n"))
    kept = Recorded(kept_fields(cfg))
    _, facts, sources, _ = look_now(cfg, HOUR, keep=kept)
    now = time.time_ns()
    assert sources["vsphere:vc1"].startswith("ok"), sources
    assert len(kept.calls) > 20  # page by page (and the look now's newest samples before them)
    vm_names = {s.tags.get("vm") for s in kept.every if s.measurement == "vsphere_vm"}
    assert {"ready01", "ready02", "balloon01"} <= vm_names
    kept.set_facts(facts)
    stacks = [i.stack for i in infer_stacks(cfg, CachedSource(kept)) if i.rule != "guest"]
    assert len(stacks) == 11

    findings, verdicts, count = all_at_once(cfg, kept.every, facts, now, stacks)
    got = judge(cfg, kept, facts, sources, HOUR, now, stacks, targeted=True)
    assert sorted(map(finding_json, got.findings), key=json.dumps) == findings
    assert sorted(got.verdicts, key=lambda v: v["stack"]) == sorted(verdicts, key=lambda v: v["stack"])
    assert got.samples == count
    # what is judged is there: an incident ended, one going on, a balloon open
    ready = sorted((f["subject"]["vm"], f["resolved_at"] is None) for f in findings if f["rule"] == "cpu-ready")
    assert ready == [("ready01", True), ("ready02", False)], ready
    assert any(f["rule"] == "balloon-zero" and f["subject"]["vm"] == "balloon01" for f in findings)
    blamed = {v["stack"] for v in verdicts if v["layer"]}
    assert "ready01" in blamed

    # the whole fleet's view: blamed now or earlier in the lookback (ready02's ended incident), the rest counted
    shown = judge(cfg, kept, facts, sources, HOUR, now, stacks)
    assert [v["stack"] for v in shown.verdicts] == sorted(
        (v["stack"] for v in verdicts if v["layer"] or v["episodes"]), key=lambda s: next(
            (v["layer"] is None, {"high": 0, "medium": 1, "low": 2}.get(v["confidence"], 3), s)
            for v in verdicts if v["stack"] == s))
    assert "ready02" in [v["stack"] for v in shown.verdicts]
    assert shown.healthy == sum(1 for v in verdicts if not v["layer"] and not v["episodes"])


def test_columns_give_back_what_came_in_time_order_without_values_no_store_could_hold():
    from db2vtop.agent.core.model import Sample, clean_fields

    tags = {"vcenter": "vc1", "vm": "db01"}
    came = [Sample("vsphere_vm", tags, {"cpu_ready_pct": 1.5, "vcpus": 4, "state": "on"}, 40),
            Sample("vsphere_vm", dict(tags), {"cpu_ready_pct": float("nan"), "vcpus": 2**70}, 20),
            Sample("vsphere_vm", tags, {"cpu_ready_pct": 2, "flag": True, "other": 1}, 60),
            Sample("vsphere_vm", tags, {"cpu_ready_pct": float("inf"), "vcpus": None}, 40)]
    kept = ColumnSource({"vsphere_vm": frozenset({"cpu_ready_pct", "vcpus", "state", "flag"})})
    assert kept.add(came[:2]) == 2 and kept.add(came[2:], rank=1) == 2
    expect = [(s.ts, {k: v for k, v in clean_fields(s.fields).items() if k != "other"})
              for s in sorted(came, key=lambda s: s.ts)]
    rows = [r for part in kept.in_time_order({"vsphere_vm"}, step_ns=25) for r in part]
    assert [(r.ts, r.fields) for r in rows] == expect
    assert [type(r.fields.get("cpu_ready_pct")) for r in rows] == [type(None), float, type(None), int]
    (series,) = kept.series("vsphere_vm")
    assert kept.window(series.id, "vcpus", 0, 100) == [(40, 4)]
    assert kept.window(series.id, "cpu_ready_pct", 30, 60) == [(40, 1.5), (60, 2)]
    assert kept.count({"vsphere_vm"}) == 4 and kept.time_range() == (20, 60)
