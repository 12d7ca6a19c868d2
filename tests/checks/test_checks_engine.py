"""The check engine: persistence, hysteresis, flapping, overrides, static rules, restarts."""

from __future__ import annotations

import json
import os
import re
from importlib.resources import files
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from db2vtop.agent.core.config import ConfigError, StackConfig
from db2vtop.agent.core.model import Fact, Sample, canonical_tags
from db2vtop.checks.catalog import baselines, practices
from db2vtop.checks.engine import Engine, validate_overrides
from db2vtop.checks.rules import all_rules
from db2vtop.checks.rules.guest import GuestIOLatency, GuestSwapZero, PartitionAlignment
from db2vtop.checks.rules.vsphere import CpuLimitConfigured, EagerZeroed, NicVmxnet3
from tests.conftest import ROOT

#: practices.md, which catalog.json is made from; it lives beside the repository, in ../shared, not in it (skipped
#: if absent)
REFERENCE = Path(os.environ.get("DB2VTOP_PRACTICES", ROOT.parent / "shared" / "reference" / "practices.md"))


def reference_ids(start: str, end: str) -> set[str]:
    """The ids in the first column of practices.md's tables between two headings."""
    text = REFERENCE.read_text(encoding="utf-8")
    part = text[text.index(start):text.index(end)]
    return set(re.findall(r"^\| `([a-z0-9-]+)` \|", part, re.M))


S = 20 * 10**9
T0 = 1_700_000_000 * 10**9


def mem(i: int, swap_in: float, guest: str = "db2prod01") -> Sample:
    return Sample("guest_mem", {"guest": guest}, {"swap_in_bytes_per_s": swap_in, "swap_out_bytes_per_s": 0.0,
                                                  "swap_used_bytes": 1 << 20}, T0 + i * S)


def run(engine: Engine, values: list[float]) -> list:
    changes = []
    for i, v in enumerate(values):
        engine.feed([mem(i, v)])
        changes += engine.changes()
    return changes


def test_catalog_has_every_practice_and_baseline():
    doc = json.loads(files("db2vtop.checks").joinpath("catalog.json").read_text(encoding="utf-8"))
    assert len(practices()) == len(doc["rules"]) > 0  # one practice per row: no id given twice, none dropped
    rows = [(scope, row["id"]) for scope, scoped in doc["db2_cfg_profiles"].items() for row in scoped]
    assert [(b.scope, b.id) for b in baselines()] == rows and len(set(rows)) == len(rows) > 0
    if REFERENCE.exists():  # the reference the catalog is made from (outside the repository)
        assert set(practices()) == reference_ids("### 1.1 ", "### 1.11 "), "catalog.json != practices.md §1.1-1.10"
        assert {b.id for b in baselines()} == reference_ids("### 1.11 ", "## 2. "), "baselines != practices.md §1.11"
    ref = practices()["balloon-zero"].references[0]
    assert ref.startswith("NetApp WP-7109") and "§5.4" in ref
    assert {r.id for r in all_rules()} - set(practices()) == {"db2-cfg-drift", "stack-verdict"}  # not catalog rows


def test_a_sustained_condition_opens_one_finding_with_evidence():
    e = Engine([GuestSwapZero()])
    changes = run(e, [0, 4096, 4096, 4096, 4096])
    opened = [c for c in changes if c.resolved_at is None]
    assert len({c.key for c in opened}) == 1
    (f,) = e.open_findings()
    assert f.rule == "guest-swap-zero" and f.severity == "warning"
    assert f.subject == {"layer": "guest", "guest": "db2prod01"}
    assert f.first_seen == T0 + S and f.last_seen == T0 + 4 * S
    assert f.evidence["values"]["swap_in_bytes_per_s"] == 4096 and f.evidence["samples"] == 4
    assert f.evidence["thresholds"] == {"crit_bytes_per_s": 1048576}
    assert f.references == list(practices()["guest-swap-zero"].references)
    assert "swap" in f.summary and f.why and f.fix


def test_a_near_miss_does_not_open():
    e = Engine([GuestSwapZero()])
    assert run(e, [0, 4096, 0, 0, 4096, 0, 0, 0]) == []  # never 3 breaches within 5 samples
    assert e.open_findings() == []


def test_severity_escalates_and_a_finding_clears_only_after_a_clean_run():
    e = Engine([GuestSwapZero()])
    changes = run(e, [4096, 4096, 2 << 20, 0, 0, 0, 0])
    assert e.open_findings()[0].severity == "critical"
    assert all(c.resolved_at is None for c in changes)
    more = run_from(e, 7, [0])  # the fifth clean sample in a row
    assert [c.resolved_at for c in more] == [T0 + 7 * S]
    assert e.open_findings() == []


def run_from(engine: Engine, start: int, values: list[float]) -> list:
    out = []
    for i, v in enumerate(values, start):
        engine.feed([mem(i, v)])
        out += engine.changes()
    return out


def test_a_flapping_condition_opens_one_finding_not_many():
    e = Engine([GuestSwapZero()])
    changes = run(e, [4096 if i % 2 else 0 for i in range(60)])
    assert len({c.first_seen for c in changes}) == 1
    assert all(c.resolved_at is None for c in changes)
    assert len(e.open_findings()) == 1


def test_thresholds_from_config_and_per_stack():
    stacks = [StackConfig(name="prod", guest="db2prod01", checks={"guest-swap-zero": {"crit_bytes_per_s": 1000}})]
    e = Engine([GuestSwapZero()], {"guest-swap-zero": {"samples": 2}}, stacks)
    run(e, [4096, 4096])
    (f,) = e.open_findings()
    assert f.severity == "critical"  # the stack's lower critical threshold
    other = Engine([GuestSwapZero()], {"guest-swap-zero": {"enabled": False}})
    assert run(other, [4096] * 10) == []


def test_validate_overrides():
    rules = all_rules()
    validate_overrides(rules, "f.toml", {"guest-swap-zero": {"crit_bytes_per_s": 10, "samples": 2, "enabled": False}})
    with pytest.raises(ConfigError, match=r"checks\.nope: no such rule"):
        validate_overrides(rules, "f.toml", {"nope": {}})
    with pytest.raises(ConfigError) as e:
        validate_overrides(rules, "f.toml", {"guest-io-latency": {"warn": 5}})
    assert e.value.key == "checks.guest-io-latency.warn" and "warn_ms" in str(e.value)
    with pytest.raises(ConfigError, match="expected a number"):
        validate_overrides(rules, "f.toml", {"guest-io-latency": {"warn_ms": "high"}})


def test_idle_devices_do_not_alarm_on_latency():
    e = Engine([GuestIOLatency()])
    for i in range(6):
        e.feed([Sample("guest_disk", {"guest": "g", "device": "sdb", "type": "disk"},
                       {"read_iops": 2.0, "write_iops": 1.0, "read_await_ms": 400.0, "write_await_ms": 0.0}, T0 + i)])
    assert e.open_findings() == []
    for i in range(6, 10):
        e.feed([Sample("guest_disk", {"guest": "g", "device": "sdb", "type": "disk"},
                       {"read_iops": 500.0, "write_iops": 0.0, "read_await_ms": 35.0, "write_await_ms": 0.0}, T0 + i)])
    (f,) = e.open_findings()
    assert f.severity == "warning" and f.subject["device"] == "sdb"


def device(start: int, ts: int) -> Fact:
    return Fact("guest_block_device", {"guest": "g", "device": "sdb"}, {"partitions": {"sdb1": start}}, ts)


def test_static_rules_open_at_once_and_clear_when_the_facts_change():
    e = Engine([PartitionAlignment()])
    e.feed(facts=[device(2048, T0)])
    assert e.open_findings() == [] and e.changes() == []
    e.feed(facts=[device(63, T0 + 1)])
    (f,) = e.changes()
    assert f.severity == "warning" and f.subject["partition"] == "sdb1" and "63" in f.summary
    e.feed(facts=[device(63, T0 + 2)])  # unchanged facts: nothing new
    assert e.changes() == []
    e.feed(facts=[device(2048, T0 + 3)])
    (resolved,) = e.changes()
    assert resolved.resolved_at == T0 + 3 and e.open_findings() == []


def test_a_restart_continues_open_findings_instead_of_duplicating_them():
    e = Engine([GuestSwapZero(), PartitionAlignment()])
    run(e, [4096] * 4)
    e.feed(facts=[device(63, T0)])
    left_open = e.open_findings()
    e.changes()
    restarted = Engine([GuestSwapZero(), PartitionAlignment()])
    restarted.adopt(left_open)
    restarted.feed([mem(10, 4096)], facts=[device(63, T0 + 5)])
    assert {f.key for f in restarted.changes()} <= {f.key for f in left_open}
    assert {(f.key, f.first_seen) for f in restarted.open_findings()} == {(f.key, f.first_seen) for f in left_open}


def test_the_runner_stores_findings_and_a_restart_resumes_them(store_path):
    from db2vtop.agent.core.store import Store, StoreWriter
    from db2vtop.checks.runner import CheckRunner

    def settle(runner, writer):
        runner.close()  # drains its queue
        writer.flush()

    writer = StoreWriter(store_path, 86400)
    runner = CheckRunner(Engine([GuestSwapZero()]), [writer])
    runner.resume(writer.store)
    runner.submit([mem(i, 4096) for i in range(4)])
    settle(runner, writer)
    (stored,) = writer.call(lambda s: s.findings())
    assert stored.rule == "guest-swap-zero" and stored.first_seen == T0
    writer.close()

    writer = StoreWriter(store_path, 86400)
    runner = CheckRunner(Engine([GuestSwapZero()]), [writer])
    runner.resume(writer.store)
    runner.submit([mem(i, 4096) for i in range(4, 6)] + [mem(i, 0) for i in range(6, 11)])
    settle(runner, writer)
    writer.close()
    with Store(store_path) as s:
        history = s.findings(open_only=False)
    assert [(f.first_seen, f.resolved_at) for f in history] == [(T0, T0 + 10 * S)]


_NICS = ("vmxnet3", "e1000", "e1000e")


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5), st.sampled_from((*_NICS, None)), st.integers(-1, 2000)),
                min_size=1, max_size=25),
       st.integers(1, 6))
def test_per_fact_rules_judging_only_the_facts_brought_end_where_judging_all_would(changes, batch):
    """A per-fact rule judges just the facts a feed brings (a reconfigured VM among thousands, a facts pass
    handed on in parts): any sequence of VM changes and removals, fed in batches, leaves the same open
    findings as one engine fed the final facts at once."""
    rules = [NicVmxnet3(), CpuLimitConfigured(), EagerZeroed()]
    stepwise, current = Engine(rules), {}
    facts = []
    for i, (vm, nic, limit) in enumerate(changes):
        tags = {"vcenter": "vc1", "vm": f"vm{vm}"}
        if nic is None:
            f = Fact.removal("vsphere_vm", tags, T0 + i)
            current.pop(vm, None)
        else:
            f = Fact("vsphere_vm", tags, {"nics": [{"key": 4000, "type": nic}], "cpu_limit_mhz": limit,
                                          "disks": [{"instance": "scsi0:0", "backing": "thin" if limit > 0
                                                     else "eager_zeroed"}]}, T0 + i)
            current[vm] = f
        facts.append(f)
    for i in range(0, len(facts), batch):
        stepwise.feed(facts=facts[i:i + batch])
    at_once = Engine([NicVmxnet3(), CpuLimitConfigured(), EagerZeroed()])
    at_once.feed(facts=list(current.values()))

    def state(e: Engine) -> set:
        return {(f.key, f.severity, f.summary) for f in e.open_findings()}
    assert state(stepwise) == state(at_once)
    assert {f.key for f in stepwise.open_findings()} >= {f"nic-vmxnet3 {canonical_tags({'layer': 'vm', **x.tags})}"
                                                          for x in current.values()
                                                          if x.data["nics"][0]["type"] != "vmxnet3"}


# --- history and silence (issue 28) ---------------------------------------------------------


def arrive(e: Engine, start: int, values: list[float], delay: int = 0, guest: str = "db2prod01") -> None:
    """Samples every 20 s, each judged `delay` ns after its time (as the runner does, right after each feed)."""
    for i, v in enumerate(values, start):
        e.feed([mem(i, v, guest)])
        e.mark_stale(T0 + i * S + delay)


@pytest.mark.parametrize("delay", [0, 150 * 10**9])  # samples on time, or arriving 2.5 min late (a clock apart)
def test_a_finding_whose_subject_stops_reporting_turns_stale_and_back(delay):
    """Samples every 20 s: after three missed cycles (plus one) without a sample it is stale since its last one;
    its next sample makes it current again. Silence counts on the source's clock: its samples' delay is not
    silence."""
    e = Engine([GuestSwapZero()])
    arrive(e, 0, [4096] * 4, delay)
    e.changes()
    last = T0 + 3 * S
    e.mark_stale(last + delay + 4 * S)  # four periods: not yet
    assert e.changes() == [] and e.open_findings()[0].stale_since is None
    e.mark_stale(last + delay + 4 * S + 10**9)
    (f,) = e.changes()
    assert f.stale_since == last and f.resolved_at is None
    e.mark_stale(last + delay + 10 * S)
    assert e.changes() == []  # stale once, not again at every check
    arrive(e, 10, [4096], delay)
    (f,) = e.open_findings()
    assert f.stale_since is None and f.last_seen == T0 + 10 * S


def test_one_subject_silent_among_others_reporting_is_stale():
    """Triage judges a lookback in one go: a guest whose samples stopped while others of its kind go on."""
    e = Engine([GuestSwapZero()])
    for i in range(40):
        e.feed([mem(i, 4096, "busy")] + ([mem(i, 4096, "quiet")] if i < 10 else []))
    e.mark_stale(T0 + 40 * S)
    stale = {f.subject["guest"]: f.stale_since for f in e.open_findings()}
    assert stale == {"busy": None, "quiet": T0 + 9 * S}


def test_an_adopted_finding_that_never_reports_again_turns_stale():
    """A collector removed from the config: the finding the last run left open is adopted, no sample comes."""
    first = Engine([GuestSwapZero()])
    run(first, [4096] * 6)
    (left,) = first.open_findings()
    e = Engine([GuestSwapZero()])
    e.adopt([left])
    e.mark_stale(left.last_seen + 10 * S)
    (f,) = e.changes()
    assert f.key == left.key and f.stale_since == left.last_seen


def test_history_is_judged_first_and_not_twice():
    """The store's recent samples open the finding before any new sample; the same samples handed on again
    (vCenter's first cycle reaching back over them) are not counted twice."""
    e = Engine([GuestSwapZero()])
    history = [mem(i, 4096) for i in range(3)]
    e.start_from(reversed(history))  # in time order whatever order they come in
    (f,) = e.changes()
    assert f.resolved_at is None and f.first_seen == T0 and f.evidence["samples"] == 3
    e.feed([*history, mem(3, 4096)])
    (f,) = e.changes()
    assert f.evidence["samples"] == 4 and f.last_seen == T0 + 3 * S


def test_history_covers_what_the_rules_need_to_open_and_clear():
    assert Engine(all_rules()).history_samples() == 10  # window 5 + clear_samples 5
    longer = Engine(all_rules(), {"cpu-ready": {"window": 8}},
                    [StackConfig(name="s", vm="v", checks={"guest-swap-zero": {"clear_samples": 9}})])
    assert longer.history_samples() == 14 and "vsphere_vm" in longer.live_measurements()


def _judged(samples: list[Sample], screened: bool) -> list[tuple]:
    """Triage's judgement of a history: fed in time order, the quiet series left out when `screened`."""
    from db2vtop.agent.core.columns import ColumnSource

    engine = Engine(all_rules())
    kept = ColumnSource(engine.history_fields())
    kept.add(samples)
    live = engine.live_measurements()
    quiet = engine.quiet([s for m in live for s in kept.series(m)], kept.column, kept.newest_ts) if screened else set()
    for rows in kept.in_time_order(live, skip=quiet):
        engine.feed(rows)
    changes = {f.key: f for f in engine.changes()}
    return sorted((f.rule, canonical_tags(f.subject), f.severity, f.first_seen, f.resolved_at)
                  for f in changes.values())


def test_the_series_triage_leaves_out_change_no_finding():
    """A VM whose CPU ready breached on one host and was clean after it moved: its series on the second host
    breaches nothing, yet its clean samples resolve the finding (a subject's series share one fate); a calm
    VM's series are left out; a balloon and a VMDK latency are judged as before."""
    rows = []
    for i in range(20):
        moved = i >= 8
        rows.append(Sample("vsphere_vm", {"vcenter": "vc1", "vm": "mover", "host": "esx02" if moved else "esx01"},
                           {"cpu_ready_pct": 0.5 if moved else 12.0, "vcpus": 4, "mem_balloon_bytes": 0}, T0 + i * S))
        rows.append(Sample("vsphere_vm", {"vcenter": "vc1", "vm": "calm", "host": "esx01"},
                           {"cpu_ready_pct": 0.5, "vcpus": 4, "mem_balloon_bytes": 0}, T0 + i * S))
        rows.append(Sample("vsphere_vm", {"vcenter": "vc1", "vm": "ballooned", "host": "esx01"},
                           {"cpu_ready_pct": 0.5, "vcpus": 4, "mem_balloon_bytes": 2**30 if i > 12 else 0}, T0 + i * S))
        rows.append(Sample("vsphere_vm_disk", {"vcenter": "vc1", "vm": "calm", "host": "esx01", "instance": "scsi0:0"},
                           {"read_latency_ms": 2.0, "write_latency_ms": 40.0 if i > 10 else 1.0, "read_iops": 50,
                            "write_iops": 50}, T0 + i * S))
    full, screened = _judged(rows, False), _judged(rows, True)
    assert screened == full
    assert {(rule, resolved is None) for rule, _, _, _, resolved in full} == {
        ("cpu-ready", False), ("balloon-zero", True), ("disk-queue-saturation", True)}
    from db2vtop.agent.core.columns import ColumnSource
    engine = Engine(all_rules())
    kept = ColumnSource(engine.history_fields())
    kept.add(rows)
    quiet = engine.quiet([s for m in engine.live_measurements() for s in kept.series(m)], kept.column,
                         kept.newest_ts)
    assert {kept.series()[i].tags["vm"] for i in quiet} == {"calm"}  # its vsphere_vm series; its disk breaches


def test_the_runner_makes_a_finding_judged_from_facts_stale_while_their_only_source_fails():
    """The agent's side of N16 (what the TUI's Findings read): the vCPU ratio judged from vCenter's host fact
    is stale once vCenter failed three cycles in a row (the runtime's cycle samples say so), since it was last
    judged, and current again at vCenter's next good cycle; the guest failing alone does not touch it."""
    import time

    from db2vtop.agent.core.model import SELF_MEASUREMENT
    from db2vtop.checks.rules.vsphere import VcpuLeThreads
    from db2vtop.checks.runner import CheckRunner

    class Seen:
        def __init__(self):
            self.changes = []

        def submit(self, findings=(), **_):
            self.changes += [(f.rule, f.stale_since) for f in findings]

    def cycle(name, status, i):
        return Sample(SELF_MEASUREMENT, {"collector": name}, {"status": status}, T0 + i * S)

    def after(step, want):  # the changes a step brings: `want` of them, or none within half a second
        n = len(seen.changes)
        step()
        deadline = time.monotonic() + (5 if want else 0.5)
        while len(seen.changes) < n + max(want, 1) and time.monotonic() < deadline:
            time.sleep(0.01)
        return seen.changes[n:]

    seen = Seen()
    runner = CheckRunner(Engine([VcpuLeThreads()]), [seen])
    runner.declared = {"vsphere:vc1": frozenset({"vsphere_host", "vsphere_vm"}), "guest": frozenset({"guest_mem"})}
    host = Fact("vsphere_host", {"vcenter": "vc1", "host": "esx01"}, {"cpu_threads": 16, "vcpus_powered_on": 28}, T0)
    try:
        assert after(lambda: runner.submit(facts=[host]), 1) == [("vcpu-le-threads", None)]
        assert after(lambda: [runner.submit([cycle("guest", "error", i)]) for i in range(4)], 0) == []
        assert after(lambda: [runner.submit([cycle("vsphere:vc1", "error", i)]) for i in range(2)], 0) == []
        assert after(lambda: runner.submit([cycle("vsphere:vc1", "timeout", 3)]), 1) == [("vcpu-le-threads", T0)]
        assert after(lambda: runner.submit([cycle("vsphere:vc1", "ok", 4)]), 1) == [("vcpu-le-threads", None)]
    finally:
        runner.close()
