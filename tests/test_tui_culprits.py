"""The Stack screen names the culprits beside the blamed layer, and `J` shows them on the Fleet: the real
`db2vtop watch` against the vSphere scenario simulator, in a pty through a VT emulator (tests/pty_term.py).

One host of 32 cores at 2,600 MHz: crm-db waits for CPUs (ready 15 % per vCPU) while batch-etl takes 72 % of
the host (32 vCPUs at 72 %); web-calm idles beside them, far-away on another host.
"""

from __future__ import annotations

import pytest

from tests.pty_term import Terminal
from tests.test_tui_terminal import ROOT, check, db2vtop, env_for
from tests.vsphere_sim import Simulator


def _vm(name: str, vcpus: int, perf: dict) -> dict:
    return {"name": name, "num_cpu": vcpus, "cores_per_socket": vcpus, "memory_mb": 16384, "nic": "vmxnet3",
            "scsi": "pvscsi", "tools": "guestToolsRunning", "perf": perf}


SCENARIO = {"datacenter": "DC1", "hosts": [{
    "name": "esx-t1", "cluster": "prod", "cpu_sockets": 2, "cpu_cores": 32, "cpu_threads": 64, "cpu_mhz": 2600,
    "memory_mb": 262144, "numa_nodes": 2, "hyperthreading": True,
    "vms": [_vm("crm-db", 8, {"cpu.ready.summation": {"": 24_000}}),
            _vm("batch-etl", 32, {"cpu.usage.average": 7200}),
            _vm("web-calm", 4, {"cpu.usage.average": 1000})]},
    {"name": "esx-t2", "cluster": "prod", "vms": [_vm("far-away", 4, {})]}]}


@pytest.fixture(scope="module")
def sim(tmp_path_factory):
    with Simulator.of(SCENARIO, tmp_path_factory.mktemp("tui-culprits-sim")) as s:
        yield s


@pytest.mark.parametrize(("cols", "rows"), [(80, 24), (120, 40)], ids=["80x24", "120x40"])
def test_the_stack_screen_names_the_culprits_and_the_fleet_lists_them(sim, tmp_path, cols, rows):
    config = sim.vcenter_only(tmp_path, 'interval = "20s"\n')
    term = Terminal([*db2vtop(), "watch", "-c", str(config), "--store", str(tmp_path / "m.db")], cols, rows,
                    truecolor=False, env={**env_for(tmp_path / "home"), "VC1_PASSWORD": "secret"}, cwd=ROOT)
    try:
        term.wait(lambda s: "batch-etl" in s and "crm-db" in s, 60, "the Fleet with the simulator's VMs")
        term.send(":")
        term.wait_for("stack NAME")
        term.send("vm crm-db\r")
        screen = term.wait(lambda s: "◀ batch-etl 72%" in s, 60, "the culprits beside the blamed layer")
        check(term, f"Stack screen {cols}x{rows} with culprits")
        lines = screen.splitlines()
        at = next(i for i, line in enumerate(lines) if "◀ batch-etl 72%" in line)
        assert lines[at - 1].lstrip().startswith("Host esx-t1"), screen  # beside the blamed layer, under its title
        assert "batch-etl uses 59.9 of 83.2 GHz (72 %)" in " ".join(x.strip() for x in lines), screen
        term.send("J")
        fleet = term.wait(lambda s: " Fleet " in s and "filter /" in s, 30, "the Fleet filtered to the culprits")
        check(term, f"Fleet {cols}x{rows} of the culprits")
        names = [line.split()[1] for line in fleet.splitlines() if line.lstrip().startswith("vm ")]
        assert "batch-etl" in names and "far-away" not in names and set(names) <= {"batch-etl", "crm-db", "web-calm"}, \
            fleet
        term.send("q")
        assert term.exited(15) == 0
    finally:
        term.close()
