"""A stack's identity includes its vCenter (issue 27). Two scenario simulators, two `[[vcenter]]`s, each with a
host `esx01` running a VM `db01` on its own LUN: in vc-prod the VM waits for CPUs (ready 15 % per vCPU), in
vc-dr it is healthy (0.5 %). Triage, the run report and the Stack screen judge each on its own samples and
name its vCenter; `--vm vc-dr/db01` picks one, a bare `db01` judges both."""

from __future__ import annotations

import json
import ssl
import time

import pytest

from db2vtop.agent.benchmark import make_report
from db2vtop.agent.config import load_config
from db2vtop.agent.core.runs import BEGIN, END, edge_marker
from db2vtop.agent.core.store import Store
from db2vtop.agent.gather import look_now
from db2vtop.tui.app import Db2vtopApp
from db2vtop.tui.screens.fleet import FleetScreen
from db2vtop.tui.screens.stack import StackScreen
from db2vtop.tui.timecursor import TimeCursor
from tests.conftest import run_cli
from tests.infra.vsphere_sim import Simulator

READY_MS = {"vc-prod": 12000, "vc-dr": 400}  # per 20 s over 4 vCPUs: 15 % and 0.5 % per vCPU
S = 10**9


def _scenario(vcenter: str) -> dict:
    lun = "naa.600a09803830301" + ("0" if vcenter == "vc-prod" else "1") * 9
    return {"datacenter": "DC1",
            "datastores": [{"name": "ds_db01", "type": "VMFS", "capacity_gb": 1024, "free_gb": 512, "luns": [lun]}],
            "hosts": [{"name": "esx01", "cluster": "prod", "cpu_sockets": 2, "cpu_cores": 16, "cpu_threads": 32,
                       "cpu_mhz": 2600, "memory_mb": 262144, "numa_nodes": 2, "hyperthreading": True,
                       "perf": {"disk.deviceLatency.average": {lun: 1}},
                       "vms": [{"name": "db01", "num_cpu": 4, "cores_per_socket": 4, "memory_mb": 16384,
                                "nic": "vmxnet3", "scsi": "pvscsi", "tools": "guestToolsRunning",
                                "disks": [{"datastore": "ds_db01", "size_gb": 100}],
                                "quickstats": {"balloonedMemory": 0, "swappedMemory": 0},
                                "perf": {"mem.vmmemctl.average": 0,
                                         "cpu.ready.summation": {"": READY_MS[vcenter]}}}]}]}


@pytest.fixture(scope="module")
def two(tmp_path_factory):
    """Both simulators and the config naming them."""
    d = tmp_path_factory.mktemp("two-vcenters")
    parts = [f'[store]\npath = "{d / "none.db"}"\n[guest]\nenabled = false\n']  # no agent recorded anything
    sims = []
    try:
        for name in READY_MS:
            (d / f"{name}.json").write_text(json.dumps(_scenario(name)))
            sim = Simulator(d / f"{name}.json").start()
            sims.append(sim)
            ca = d / f"{name}-ca.pem"
            ca.write_text(ssl.get_server_certificate(("127.0.0.1", sim.port)))
            parts.append(f'[[vcenter]]\nname = "{name}"\nurl = "{sim.url}"\nuser = "monitor"\n'
                         f'password_env = "VC_PASSWORD"\nca_file = "{ca}"\n')
        cfg = d / "two.toml"
        cfg.write_text("\n".join(parts))
        yield cfg
    finally:
        for sim in sims:
            sim.stop()


@pytest.fixture(scope="module")
def recorded(two, tmp_path_factory, monkeypatch_module):
    """The vCenters' realtime hour and facts in a store, as an agent would have recorded them, with a run over
    its last ten minutes."""
    monkeypatch_module.setenv("VC_PASSWORD", "secret")
    samples, facts, sources, _ = look_now(load_config(two), 3600.0)
    assert all(s.startswith("ok") for s in sources.values()), sources
    end = max(s.ts for s in samples)
    path = tmp_path_factory.mktemp("two-store") / "m.db"
    with Store(path, writer=True) as w:
        w.write(samples, facts=facts, annotations=[edge_marker("load", BEGIN, ts=end - 600 * S),
                                                   edge_marker("load", END, ts=end)])
    return path, end


@pytest.fixture(scope="module")
def monkeypatch_module():
    mp = pytest.MonkeyPatch()
    yield mp
    mp.undo()


def _triage(cfg, *args):
    r = run_cli("triage", "-c", str(cfg), *args, env={"VC_PASSWORD": "secret"}, timeout=120)
    return r.returncode, r.stdout, r.stderr


def test_triage_judges_each_vcenters_vm_on_its_own_samples(two):
    status, out, err = _triage(two, "--format", "json", "--vm", "db01")
    doc = json.loads(out)
    verdicts = {v["vcenter"]: v for v in doc["verdicts"]}
    assert set(verdicts) == {"vc-prod", "vc-dr"} and all(v["vm"] == "db01" for v in verdicts.values()), err
    prod, dr = verdicts["vc-prod"], verdicts["vc-dr"]
    assert prod["layer"] == "host" and "CPU contention" in prod["summary"], prod
    assert prod["figures"]["ready_pct"] == pytest.approx(15.0, abs=0.5)
    assert dr["layer"] is None and dr["figures"]["ready_pct"] == pytest.approx(0.5, abs=0.2), dr
    assert {v["stack"] for v in doc["verdicts"]} == {"vc-prod/db01", "vc-dr/db01"}
    assert status == 2  # vc-prod's cpu-ready is critical
    ready = [f for f in doc["findings"] if f["rule"] == "cpu-ready"]
    assert [f["subject"]["vcenter"] for f in ready] == ["vc-prod"]

    status, out, _ = _triage(two, "--format", "json", "--vm", "vc-dr/db01")
    (v,) = json.loads(out)["verdicts"]
    assert (v["vcenter"], v["layer"], status) == ("vc-dr", None, 0)
    status, text, _ = _triage(two, "--vm", "vc-prod/db01")
    assert status == 2 and "Verdict for stack vc-prod/db01 (blame: host" in text and "vCenter vc-prod" in text
    assert "vc-dr" not in text.split("Sources")[0]


def test_the_report_judges_each_on_its_own_samples(two, recorded):
    path, _ = recorded
    report = make_report(load_config(two), path, "load", stacks=["vc-prod/db01", "vc-dr/db01"], workers=1)
    verdicts = {v["vcenter"]: v for v in report.run.verdicts}
    assert verdicts["vc-prod"]["layer"] == "host" and verdicts["vc-dr"]["layer"] is None, verdicts
    prod = verdicts["vc-prod"]  # the run's own episodes: CPU contention all along, still going at its end
    (episode,) = prod["episodes"]
    assert episode["end"] is None and prod["since"] == episode["start"] and prod["causes"][0]["kind"] == "ready"
    assert episode["figures"]["ready_pct"]["peak"] == pytest.approx(15.0, abs=0.5)
    assert verdicts["vc-dr"]["episodes"] == [] and verdicts["vc-dr"]["since"] is None
    from db2vtop.checks.report_render import to_text
    assert "blame: host since " in to_text(report)
    for name, ready in (("vc-prod/db01", 15.0), ("vc-dr/db01", 0.5)):
        stat = report.run.stacks[name]["vm"]["vsphere_vm.cpu_ready_pct"]
        assert stat.mean == pytest.approx(ready, abs=0.5) and stat.series == 1, (name, stat)
        host = report.run.stacks[name]["host"]
        assert all(s.series == 1 for s in host.values())  # esx01 of its own vCenter only
        assert report.run.entities[name].vcenter == name.split("/")[0]


async def test_the_stack_screen_shows_each_vcenters_vm(recorded):
    path, end = recorded
    with Store(path) as s:
        first, last = s.time_range()
    cursor = TimeCursor(window_s=600.0, live=False, end_ns=end, first_ns=first, last_ns=last)
    app = Db2vtopApp(path, None, cursor=cursor, clock=lambda: last, refresh_s=0.2, prefer_fleet=True)
    async with app.run_test(size=(170, 50)) as pilot:
        deadline = time.monotonic() + 20
        while not (isinstance(app.screen, FleetScreen) and app.screen.view is not None):
            assert time.monotonic() < deadline
            await pilot.pause(0.05)
        targets = app.screen.view.targets
        assert {k for k in targets if k.startswith("vm:")} == {"vm:vc-prod/db01", "vm:vc-dr/db01"}
        for key, ready, blame in (("vm:vc-prod/db01", "15.", "host: "), ("vm:vc-dr/db01", "0.5", None)):
            app.open_target(targets[key])
            while not (isinstance(app.screen, StackScreen) and app.screen.view is not None
                       and app.screen.view.target == targets[key]):
                assert time.monotonic() < deadline + 20
                await pilot.pause(0.05)
            view = app.screen.view
            assert view.resolved.vcenter == key[3:].split("/")[0] and view.resolved.host == "esx01"
            vm = next(x for x in view.layers if x.key == "vm")
            shown = "".join(t for t, _ in vm.figures)
            assert f"rdy {ready}" in shown, shown
            verdict = "".join(t for t, _ in view.verdict)
            assert (blame in verdict) if blame else ("no layer stands out" in verdict), verdict
            await pilot.press("escape")
        await pilot.press("q")


def test_stacks_without_a_store_asks_the_sources(two, tmp_path):
    """Nothing recorded yet: `db2vtop stacks` reads the vCenters now, as triage does, instead of "no stacks"."""
    r = run_cli("stacks", "-c", str(two), "--store", str(tmp_path / "none.db"), "--format", "json",
                env={"VC_PASSWORD": "secret"}, timeout=120)
    stacks = {s["stack"]: s for s in json.loads(r.stdout)}
    assert set(stacks) == {"vc-prod/db01", "vc-dr/db01"}, r.stderr
    assert {(s["vm"], s["vcenter"]) for s in stacks.values()} == {("db01", "vc-prod"), ("db01", "vc-dr")}
    text = run_cli("stacks", "-c", str(two), "--store", str(tmp_path / "none.db"), env={"VC_PASSWORD": "secret"},
                   timeout=120).stdout
    assert "vc-dr/db01 (inferred): vm db01" in text and "vCenter vc-dr" in text and "the sources, read now" in text
