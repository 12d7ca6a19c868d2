"""Zero configuration beyond the vCenter: every VM's stack is inferred and judged (issue 13).

Four VMs on one host of the scenario simulator, each on its own datastore and LUN:
- vmqueue's LUN queues in the hypervisor (KAVG 9 ms, QAVG 8 ms);
- vmslow's LUN is slow below the host (DAVG 15 ms), the host itself does not queue;
- vmready waits for physical CPUs (ready 7 % per vCPU);
- vmcalm is healthy.
"""

from __future__ import annotations

import json
import os
import ssl
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT, run_cli
from tests.infra.vsphere_sim import Simulator, one_host

LUNS = {vm: f"naa.600a0980383030{i:010x}" for i, vm in enumerate(("vmqueue", "vmslow", "vmready", "vmcalm"))}


def _vm(name: str, ready_ms: int = 400) -> dict:
    return {"name": name, "num_cpu": 4, "cores_per_socket": 4, "memory_mb": 16384, "nic": "vmxnet3",
            "scsi": "pvscsi", "tools": "guestToolsRunning", "disks": [{"datastore": f"ds_{name}", "size_gb": 100}],
            "quickstats": {"balloonedMemory": 0, "swappedMemory": 0},
            "perf": {"mem.vmmemctl.average": 0, "cpu.ready.summation": {"": ready_ms}}}


SCENARIO = one_host(
    LUNS,
    [_vm("vmqueue"), _vm("vmslow"), {**_vm("vmready", ready_ms=5600), "guest_hostname": "dbhost7.lab"},
     {**_vm("vmcalm"), "ips": ["192.0.2.10", "127.0.0.1"]}],
    {"cpu.usage.average": 3000,
     "disk.kernelLatency.average": {LUNS["vmqueue"]: 9}, "disk.queueLatency.average": {LUNS["vmqueue"]: 8},
     "disk.deviceLatency.average": {LUNS["vmqueue"]: 1, LUNS["vmslow"]: 15, LUNS["vmready"]: 1, LUNS["vmcalm"]: 1}})


@pytest.fixture(scope="module")
def sim(tmp_path_factory):
    d = tmp_path_factory.mktemp("inferred-sim")
    with Simulator.of(SCENARIO, d) as s:
        yield s


@pytest.fixture
def vcenter_only(tmp_path, sim) -> str:
    return str(sim.vcenter_only(tmp_path))


def triage(cfg: str, store, *args: str):
    """`--store` when there is one; None: the config's, where no agent recorded anything."""
    where = ("--store", str(store)) if store is not None else ()
    r = run_cli("triage", "-c", cfg, *where, "--format", "json", *args, env={"VC1_PASSWORD": "secret"}, timeout=120)
    return r.returncode, json.loads(r.stdout) if r.stdout.strip() else r.stderr


def test_every_vm_gets_its_verdict_without_any_stack(vcenter_only, tmp_path):
    status, out = triage(vcenter_only, None)
    verdicts = {v["vm"]: v for v in out["verdicts"]}
    assert verdicts["vmqueue"]["layer"] == "host" and "KAVG 9.0 ms" in verdicts["vmqueue"]["summary"]
    assert "queueing in the hypervisor" in verdicts["vmqueue"]["summary"]
    assert verdicts["vmslow"]["layer"] == "storage" and "DAVG 15.0 ms" in verdicts["vmslow"]["summary"]
    assert verdicts["vmready"]["layer"] == "host" and "CPU contention" in verdicts["vmready"]["summary"]
    assert "vmcalm" not in verdicts and out["healthy_stacks"] == 1
    for v in verdicts.values():
        assert {"stack", "vm", "layer", "summary", "chain", "confidence", "figures"} <= set(v)
    assert status in (1, 2)


def test_triage_of_one_vm_is_judged_and_exits_by_that_vm_alone(vcenter_only, tmp_path):
    status, out = triage(vcenter_only, None, "--vm", "vmcalm")
    assert [v["vm"] for v in out["verdicts"]] == ["vmcalm"] and out["verdicts"][0]["layer"] is None
    assert status == 0, out["findings"]
    status, out = triage(vcenter_only, None, "--vm", "vmqueue")
    assert status in (1, 2) and any(f["rule"] == "disk-queue-saturation" for f in out["findings"])
    code, err = triage(vcenter_only, None, "--vm", "nope")
    assert code == 3 and "no stack or VM named nope" in err


def test_stacks_says_what_matched_each_layer(vcenter_only, tmp_path):
    """The guest by IP (vmcalm's Tools report 127.0.0.1) or by guest host name (vmready is dbhost7),
    DB2 by running on that guest's [[ssh]] target; what could not be matched says why."""
    store = tmp_path / "facts.db"
    r = run_cli("agent", "-c", vcenter_only, "--store", str(store), "--once", env={"VC1_PASSWORD": "secret"},
                timeout=120)
    assert r.returncode == 0, r.stderr
    full = tmp_path / "full.toml"
    full.write_text(Path(vcenter_only).read_text() + (
        '[[ssh]]\nname = "calm"\nhost = "127.0.0.1"\nuser = "db2inst1"\npassword_env = "SSH_PW"\n'
        '[[ssh]]\nname = "seven"\nhost = "dbhost7.lab.example.com"\nuser = "db2inst1"\npassword_env = "SSH_PW"\n'
        '[[db2]]\nname = "calmdb"\ndatabase = "PROD"\nssh = "calm"\n'
        '[[stack]]\nname = "queue"\nvm = "vmqueue"\nvcenter = "vc1"\n'))
    r = run_cli("stacks", "-c", str(full), "--store", str(store), "--format", "json")
    assert r.returncode == 0, r.stderr
    stacks = {s["stack"]: s for s in json.loads(r.stdout)}
    assert stacks["queue"]["configured"] and "vmqueue" not in stacks  # a [[stack]] section wins
    calm, ready, slow = stacks["vmcalm"], stacks["vmready"], stacks["vmslow"]
    assert (calm["guest"], calm["db2"]) == ("calm", "calmdb") and "IP address" in calm["matched"]["guest"]
    assert ready["guest"] == "seven" and "guest host name" in ready["matched"]["guest"]
    assert ready["db2"] is None and "no [[db2]] runs on [[ssh]] seven" in ready["unmatched"]["db2"]
    assert slow["guest"] is None and "no [[ssh]] target" in slow["unmatched"]["guest"]
    assert "no [[storage]] array configured to match the LUNs" in slow["unmatched"]["storage"]
    text = run_cli("stacks", "-c", str(full), "--store", str(store)).stdout
    assert "vmcalm (inferred): vm vmcalm, guest calm, db2 calmdb" in text


def test_a_db2_vm_found_by_its_guest_ip_is_judged_from_db2_down(sshd, tmp_path):
    """Zero [[stack]]: the VM whose guest IP is the [[ssh]] target running a [[db2]] (the CLP stand-in over
    the real sshd) gets guest and DB2 layers, and its verdict's chain starts at DB2's log writes."""
    from tests.collectors.db2.test_db2 import Scenario

    db2 = Scenario(sshd, tmp_path)
    lun = "naa.600a0980383030aaaaaaaaaa"
    scenario = {"datacenter": "DC1",
                "datastores": [{"name": "ds_db", "type": "VMFS", "capacity_gb": 1024, "free_gb": 512, "luns": [lun]}],
                "hosts": [{"name": "esx01", "cluster": "prod", "cpu_sockets": 2, "cpu_cores": 16, "cpu_threads": 32,
                           "cpu_mhz": 2600, "memory_mb": 262144, "numa_nodes": 2, "hyperthreading": True,
                           "perf": {"disk.kernelLatency.average": {lun: 9}, "disk.queueLatency.average": {lun: 8},
                                    "disk.deviceLatency.average": {lun: 1}},
                           "vms": [{**_vm("db2vm"), "disks": [{"datastore": "ds_db", "size_gb": 100}],
                                    "ips": ["10.1.1.1", "127.0.0.1"]}]}]}
    with Simulator.of(scenario, tmp_path) as sim:
        ca = tmp_path / "sim-ca.pem"
        ca.write_text(ssl.get_server_certificate(("127.0.0.1", sim.port)))
        ssh = sshd.ssh_config(name="db")
        cfg = tmp_path / "c.toml"
        cfg.write_text(
            f'[guest]\nenabled = false\n[[vcenter]]\nname = "vc1"\nurl = "{sim.url}"\nuser = "monitor"\n'
            f'password_env = "VC1_PASSWORD"\nca_file = "{ca}"\n'
            + "[[ssh]]\n" + "".join(f'{k} = {json.dumps(v)}\n' for k, v in ssh.items())
            + f'[[db2]]\nname = "prod"\ndatabase = "PROD"\nssh = "db"\ninterval = "1s"\n'
                  'timeout = "10s"\n'  # triage's one read over ssh: over 1 s under a load of 3.5 (a full run timed out)
                  f'instance_profile = "{db2.profile}"\n[[remote_guest]]\nssh = "db"\ninterval = "1s"\n'
                  'timeout = "10s"\n')  # as db2's: triage's guest read timed out at 1 s under a load of 14
        store = tmp_path / "m.db"
        env = {"VC1_PASSWORD": "secret"}
        agent = subprocess.Popen([sys.executable, "-m", "db2vtop.agent", "agent", "-c", str(cfg), "--store",
                                  str(store), "--duration", "14"], cwd=ROOT, env={**os.environ, **env},
                                 stderr=subprocess.PIPE, text=True)
        try:
            io, write_ms = 100000, 30000
            for k in range(1, 14):  # the log writes slowly: 12 ms per I/O from now on; the server clock moves
                time.sleep(1)
                io, write_ms = io + 100, write_ms + 1200
                db2.edit("MON_GET_TRANSACTION_LOG", {"MEMBER": "0"}, NUM_LOG_WRITE_IO=io, LOG_WRITE_TIME=write_ms)
                db2.set(clock=f"2026-11-22-10.00.{k:02d}.000000")
            assert agent.wait(timeout=60) == 0, agent.stderr.read()
        finally:
            agent.kill()
        stacks = {s["stack"]: s for s in json.loads(run_cli("stacks", "-c", str(cfg), "--store", str(store),
                                                            "--format", "json").stdout)}
        assert (stacks["db2vm"]["guest"], stacks["db2vm"]["db2"]) == ("db", "prod")
        status, out = triage(str(cfg), store, "--vm", "db2vm")
    (v,) = out["verdicts"]
    assert status in (1, 2), out["sources"]  # the VM's LUN saturates: disk-queue-saturation
    assert v["chain"][0].startswith("log write 12.0 ms/IO"), v
    assert v["layer"] == "host" and "KAVG 9.0 ms" in v["summary"]
