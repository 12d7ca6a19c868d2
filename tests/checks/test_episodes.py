"""The verdict judges the incident, not the hour (issue 28), on the vSphere scenario simulator.

One host runs a VM per incident, each on its own datastore and LUN, its `perf` lists ending at the
sample the simulator started in (the anchor):
- vmready: CPU ready 0.5 % per vCPU for the hour, 15 % for the last 9 samples (3 minutes);
- vmkavg: its LUN's KAVG 0 ms for the hour, 18 ms for the last 9 samples;
- vmswap: no host swapping for the hour, then the host swaps it in (20 MiB/s, swapped memory growing);
- vmended: CPU ready 16 % until 60 samples (20 minutes) ago, 0.5 % since;
- vmburst: CPU ready 15 % from 45 to 30 samples ago: an incident that starts and ends inside the lookback;
- vmboth: CPU ready 18.8 % and its LUN's KAVG 12 ms in the same buckets, the last 9 samples;
- vmhot: CPU ready 15 % all hour (the agent's first cycle must already see it).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from datetime import datetime

import pytest

from db2vtop.agent.core.store import Store, StoreError
from tests.conftest import ROOT, run_cli
from tests.infra.vsphere_sim import Simulator, one_host

S = 10**9
STEP = 20  # vCenter's realtime samples, seconds apart
VCPUS = 4
LUNS = {vm: f"naa.600a0980383031{i:010x}" for i, vm in
        enumerate(("vmready", "vmkavg", "vmswap", "vmended", "vmburst", "vmboth", "vmhot"))}


def ready_ms(pct: float) -> int:
    """vCenter's cpu.ready.summation of a 20 s sample for a ready % per vCPU."""
    return round(pct / 100 * STEP * 1000 * VCPUS)


def last(n: int, healthy: int, bad: int) -> list[int]:
    """Healthy for the hour, bad for the last `n` samples."""
    return [healthy] + [bad] * n


def until_ago(n: int, bad: int, healthy: int) -> list[int]:
    """Bad until `n` samples ago, healthy since."""
    return [bad] + [healthy] * n


def _vm(name: str, ready: int | list[int], **perf) -> dict:
    return {"name": name, "num_cpu": VCPUS, "cores_per_socket": VCPUS, "memory_mb": 16384,
            "memory_reservation_mb": 16384, "disks": [{"datastore": f"ds_{name}", "size_gb": 100}],
            "quickstats": {"balloonedMemory": 0, "swappedMemory": 0},
            "perf": {"mem.vmmemctl.average": 0, "cpu.ready.summation": {"": ready}, **perf}}


OK = ready_ms(0.5)
SCENARIO = one_host(LUNS, [
    _vm("vmready", last(9, OK, ready_ms(15))),
    _vm("vmkavg", OK),
    _vm("vmswap", OK, **{"mem.swapinRate.average": last(9, 0, 20480),
                         "mem.swapped.average": [0] + [(k + 1) * 262144 for k in range(9)]}),
    _vm("vmended", until_ago(60, ready_ms(16), OK)),
    _vm("vmburst", [OK] + [ready_ms(15)] * 15 + [OK] * 30),
    _vm("vmboth", last(9, OK, ready_ms(18.8))),
    _vm("vmhot", ready_ms(15)),
], {"disk.kernelLatency.average": {LUNS["vmkavg"]: last(9, 0, 18), LUNS["vmboth"]: last(9, 0, 12)},
    "disk.deviceLatency.average": {lun: 1 for lun in LUNS.values()}})


@pytest.fixture(scope="module")
def sim(tmp_path_factory):
    d = tmp_path_factory.mktemp("episodes-sim")
    sim = Simulator.of(SCENARIO, d)
    before = time.time()
    with sim as s:
        after = time.time()
        s.anchor = int(after) // STEP * STEP  # the sample the lists end at (the simulator's start)
        assert int(before) // STEP * STEP in (s.anchor, s.anchor - STEP)
        yield s


@pytest.fixture(scope="module")
def config(sim, tmp_path_factory) -> str:
    return str(sim.vcenter_only(tmp_path_factory.mktemp("episodes-cfg")))


def triage(config: str, vm: str) -> tuple[int, dict]:
    r = run_cli("triage", "-c", config, "--vm", vm, "--format", "json", env={"VC1_PASSWORD": "secret"}, timeout=120)
    assert r.stdout.strip(), r.stderr
    return r.returncode, json.loads(r.stdout)


def at(iso: str | None) -> float:
    assert iso is not None
    return datetime.fromisoformat(iso).timestamp()


@pytest.mark.parametrize(("vm", "layer", "words", "rule"), [
    ("vmready", "host", "CPU contention on the host", "cpu-ready"),
    ("vmkavg", "host", "queueing in the hypervisor", "disk-queue-saturation"),
    ("vmswap", "host", "the host is swapping VM memory", "host-swap-zero"),
])
def test_an_incident_of_three_minutes_is_blamed_since_its_onset(sim, config, vm, layer, words, rule):
    """The hour before was healthy: its mean would dilute the incident under every level."""
    status, doc = triage(config, vm)
    (v,) = doc["verdicts"]
    onset = sim.anchor - 8 * STEP  # the first of the last 9 samples
    assert v["layer"] == layer and words in v["summary"], v
    assert abs(at(v["since"]) - onset) <= 60, (v["since"], onset)
    ongoing = v["episodes"][-1]
    assert ongoing["end"] is None and ongoing["start"] == v["since"] and ongoing["layer"] == layer
    assert [e for e in v["episodes"] if e["end"] is not None] == []  # nothing earlier in the hour
    assert v["causes"][0]["layer"] == layer and words in v["causes"][0]["summary"]
    assert status == 2 and any(f["rule"] == rule and f["resolved_at"] is None for f in doc["findings"])
    opened = min(at(f["first_seen"]) for f in doc["findings"] if f["rule"] == rule)
    assert abs(opened - onset) <= 60  # the finding opened with the incident, not an hour ago


def test_the_figures_are_the_episodes_not_the_hours(sim, config):
    _, doc = triage(config, "vmready")
    (v,) = doc["verdicts"]
    ongoing = v["episodes"][-1]
    assert v["figures"]["ready_pct"] == pytest.approx(15.0, abs=0.1)  # the hour's mean is about 1.2 %
    assert ongoing["figures"]["ready_pct"]["mean"] == pytest.approx(15.0, abs=0.1)
    assert ongoing["figures"]["ready_pct"]["peak"] == pytest.approx(15.0, abs=0.1)
    assert v["chain"][0] == "CPU ready 15.0% per vCPU"


def test_an_incident_that_ended_twenty_minutes_ago_is_not_blamed_now(sim, config):
    status, doc = triage(config, "vmended")
    (v,) = doc["verdicts"]
    assert v["layer"] is None and v["since"] is None and v["causes"] == []
    (ended,) = v["episodes"]
    assert ended["layer"] == "host" and "CPU contention" in ended["summary"]
    end = sim.anchor - 59 * STEP  # the last bad sample's bucket ends where the first healthy one begins
    assert abs(at(ended["end"]) - end) <= STEP and at(ended["start"]) < end - 30 * 60
    assert ended["figures"]["ready_pct"]["mean"] == pytest.approx(16.0, abs=0.1)
    assert "earlier: host CPU contention" in v["summary"] and "ended 2" in v["summary"]  # ~20 min ago
    assert "healthy" not in v["summary"] and "no DB2 data for this stack" in v["not_known"]
    ready = [f for f in doc["findings"] if f["rule"] == "cpu-ready"]
    assert ready and all(f["resolved_at"] is not None for f in ready)  # ended: resolved
    assert status == 0, doc["findings"]  # a resolved condition does not raise the exit status


def test_an_incident_inside_the_lookback_has_a_start_and_an_end(sim, config):
    status, doc = triage(config, "vmburst")
    (v,) = doc["verdicts"]
    (burst,) = v["episodes"]
    assert v["layer"] is None and burst["layer"] == "host"
    start, end = sim.anchor - 45 * STEP, sim.anchor - 30 * STEP  # 15 samples of 15 %
    assert abs(at(burst["start"]) - start) <= STEP and abs(at(burst["end"]) - end) <= STEP, burst
    assert burst["figures"]["ready_pct"]["mean"] == pytest.approx(15.0, abs=0.1)
    ready = [f for f in doc["findings"] if f["rule"] == "cpu-ready"]
    assert ready and all(f["resolved_at"] is not None and at(f["resolved_at"]) < sim.anchor - 20 * STEP
                         for f in ready)
    assert status == 0


def test_ready_and_kavg_together_are_both_causes(sim, config):
    """Either alone would be blamed; together both are named, ranked (with no DB2 data to weigh them by:
    KAVG 12 ms is 6 times its 2 ms level, ready 18.8 % under 4 times its 5 %)."""
    status, doc = triage(config, "vmboth")
    (v,) = doc["verdicts"]
    kinds = [c["kind"] for c in v["causes"]]
    assert kinds == ["hypervisor-queue", "ready"], v["causes"]
    assert v["layer"] == "host" and "KAVG 12.0 ms" in v["summary"]
    assert "CPU ready 18.8% per vCPU" in v["causes"][1]["summary"]
    assert v["causes"][0]["times_level"] == pytest.approx(6.0, abs=0.1)
    assert abs(at(v["since"]) - (sim.anchor - 8 * STEP)) <= 60 and status == 2


def test_the_text_says_what_and_since_when_first(sim, config):
    r = run_cli("triage", "-c", config, "--vm", "vmready", env={"VC1_PASSWORD": "secret"}, timeout=120)
    first = r.stdout.splitlines()[0]
    assert first.startswith("db2vtop triage: CRITICAL: ") and "stack vmready: host since " in first, first
    assert "Verdict for stack vmready (blame: host since " in r.stdout
    ended = run_cli("triage", "-c", config, "--vm", "vmended", env={"VC1_PASSWORD": "secret"}, timeout=120)
    assert ended.stdout.startswith("db2vtop triage: OK") and "earlier: host CPU contention" in ended.stdout
    assert "Resolved within the window" in ended.stdout and "resolved 20" in ended.stdout


def test_the_agent_judges_from_vcenters_history_from_its_first_cycle(sim, config, tmp_path):
    """CPU ready has been high all hour: the cpu-ready finding is open in the store once the first cycle is
    in, not three cycles (a minute) later: vCenter's realtime hour is the engine's history, as triage's."""
    store = tmp_path / "agent.db"
    agent = subprocess.Popen([sys.executable, "-m", "db2vtop.agent", "agent", "-c", config, "--store", str(store),
                              "--duration", "30"], cwd=ROOT, env={**os.environ, "VC1_PASSWORD": "secret"},
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    found, cycles = None, -1
    try:
        deadline = time.monotonic() + 60
        while found is None and agent.poll() is None and time.monotonic() < deadline:
            time.sleep(0.3)
            try:
                with Store(store) as s:
                    found = next((f for f in s.findings(open_only=True)
                                  if f.rule == "cpu-ready" and f.subject.get("vm") == "vmhot"), None)
                    cycles = sum(1 for r in s.rows("db2vtop_collector")
                                 if r.tags.get("collector") == "vsphere:vc1" and r.fields.get("status") == "ok")
            except StoreError:  # still being created
                continue
        assert agent.wait(timeout=90) == 0, agent.stderr.read()
    finally:
        agent.kill()
    assert found is not None and found.severity == "critical", "no cpu-ready finding during the agent's run"
    assert cycles <= 1, f"the finding came after {cycles} vCenter cycles"
    assert found.evidence["samples"] >= 3 and found.first_seen < found.last_seen  # judged from history
    with Store(store) as s:  # vmended's history is clean now: nothing opened for it
        assert not [f for f in s.findings(open_only=False) if f.subject.get("vm") == "vmended"]


def test_the_agent_judges_the_stores_history_before_its_first_cycle(tmp_path):
    """An agent restarted while a guest swaps: the store's last samples open the finding at once, before any
    cycle of a source (here none judges the guest: its collector is off, as after a reload without it)."""
    from db2vtop.agent.core.model import Sample

    store = tmp_path / "m.db"
    now = time.time_ns()
    with Store(store, writer=True) as w:
        w.write([Sample("guest_mem", {"guest": "db2prod01"}, {"swap_in_bytes_per_s": float(4 << 20)},
                        now - k * 5 * S) for k in range(1, 7)])
    cfg = tmp_path / "c.toml"
    cfg.write_text("[guest]\nenabled = false\n")
    r = run_cli("agent", "-c", str(cfg), "--store", str(store), "--once")
    assert r.returncode == 0, r.stderr
    with Store(store) as s:
        (f,) = [f for f in s.findings(open_only=False) if f.rule == "guest-swap-zero"]
    assert f.severity == "critical" and f.resolved_at is None and f.first_seen == now - 6 * 5 * S
