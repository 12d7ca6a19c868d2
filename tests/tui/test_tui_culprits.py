"""The Stack screen names the culprits beside the blamed layer, and `J` shows them on the Fleet; a VM whose
virtual disk waits 40 ms on a device at 38 ms (DAVG) has its finding in the Fleet's column and on the Findings
screen: the real `db2vtop watch` against the vSphere scenario simulator, in a pty through a VT emulator
(tests/infra/pty_term.py).

One host of 32 cores at 2,600 MHz: crm-db waits for CPUs (ready 15 % per vCPU) while batch-etl takes 72 % of
the host (32 vCPUs at 72 %); web-calm idles beside them, far-away and slow-disk on another host, slow-disk's
datastore on a LUN that answers in 38 ms.
"""

from __future__ import annotations

import pytest

from tests.infra.pty_term import Terminal
from tests.infra.vsphere_sim import Simulator
from tests.tui.test_tui_terminal import ROOT, check, db2vtop, env_for


def _vm(name: str, vcpus: int, perf: dict, **more) -> dict:
    return {"name": name, "num_cpu": vcpus, "cores_per_socket": vcpus, "memory_mb": 16384, "nic": "vmxnet3",
            "scsi": "pvscsi", "tools": "guestToolsRunning", "perf": perf, **more}


SLOW = "naa.6000c2900000000000000000000b0001"
SCENARIO = {"datacenter": "DC1", "datastores": [{"name": "ds-slow", "type": "VMFS", "capacity_gb": 2048,
                                                 "free_gb": 1024, "luns": [SLOW]}], "hosts": [{
    "name": "esx-t1", "cluster": "prod", "cpu_sockets": 2, "cpu_cores": 32, "cpu_threads": 64, "cpu_mhz": 2600,
    "memory_mb": 262144, "numa_nodes": 2, "hyperthreading": True,
    "vms": [_vm("crm-db", 8, {"cpu.ready.summation": {"": 24_000}}),
            _vm("batch-etl", 32, {"cpu.usage.average": 7200}),
            _vm("web-calm", 4, {"cpu.usage.average": 1000})]},
    {"name": "esx-t2", "cluster": "prod", "datastores": ["ds-slow"],
     "perf": {"disk.deviceLatency.average": {SLOW: 38}},
     "vms": [_vm("far-away", 4, {}),
             _vm("slow-disk", 4, {"virtualDisk.totalReadLatency.average": {"scsi0:0": 40},
                                  "virtualDisk.totalWriteLatency.average": {"scsi0:0": 40}},
                 disks=[{"datastore": "ds-slow", "size_gb": 100}])]}]}


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
        fleet = term.wait(lambda s: "batch-etl" in s and "crm-db" in s and "VMDK" in s, 60,
                          "the Fleet with the simulator's VMs and slow-disk's finding")
        rows_of = {tuple(line.split()[:2]): line for line in fleet.splitlines()}
        # the worst open finding of the VM (its virtual disk's latency) and of its host (the LUN's DAVG): warnings
        assert "WARN VMDK" in rows_of["vm", "slow-disk"] and "WARN DAVG 38" in rows_of["host", "esx-t2"], fleet
        term.send("3")
        found = term.wait(lambda s: "disk-queue-saturation" in s and "DAVG 38.0 ms" in s, 30,
                          "the Findings screen with the VMDK and DAVG findings")
        check(term, f"Findings {cols}x{rows} with VMDK and device latency")
        assert "VMDK latency 40.0 ms" in found, found
        term.send("1")
        term.wait(lambda s: " Fleet " in s and "batch-etl" in s, 30, "back on the Fleet")
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
