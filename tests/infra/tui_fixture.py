"""A recorded store for the TUI's tests and benchmark: a vSphere fleet with DB2 stacks on an array.

Deterministic (fixed start, arithmetic "noise"), so snapshots are reproducible, and
written in time-major batches straight through Store.write, so the 2,000-VM store of
bench/tui.py builds in seconds. Stack 1 ("prod01") has the incident the UI is for:
from minute 6 to 9 the host's kernel queue fills (KAVG 9 ms, QUED 14) while the array
stays at 1.5 ms, so log writes and VMDK latency rise and TPS falls.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from db2vtop.agent.core.model import Annotation, Fact, Finding, Sample
from db2vtop.agent.core.store import Store

T0 = 1_714_564_800 * 10**9  # 2024-05-01 12:00:00 UTC
S = 10**9
STEP_S = 20


@dataclass(frozen=True)
class Fleet:
    vms: int = 6
    hosts: int = 2
    stacks: int = 2
    minutes: int = 15

    @property
    def steps(self) -> int:
        return self.minutes * 60 // STEP_S

    def host(self, i: int) -> str:
        return f"esx{i % self.hosts + 1:02d}.lab"

    def vm(self, i: int) -> str:
        return f"db2prod{i + 1:02d}" if i < self.stacks else f"app{i + 1:04d}"

    def naa(self, i: int) -> str:
        return f"naa.600a0980383030{i:010x}"

    @property
    def end_ns(self) -> int:
        return T0 + (self.steps - 1) * STEP_S * S


def _wave(k: int, i: int, period: int = 17) -> float:
    """Deterministic 0..1 noise."""
    return ((k * 7 + i * 13) % period) / period


def _incident(k: int, i: int) -> float:
    """0..1: how deep stack i is in its incident at step k (only stack 0 has one)."""
    if i != 0:
        return 0.0
    minute = k * STEP_S / 60
    return 1.0 if 6 <= minute < 9 else 0.0


def _step(f: Fleet, k: int) -> list[Sample]:
    ts = T0 + k * STEP_S * S
    out: list[Sample] = []
    for i in range(f.vms):
        vm, host = f.vm(i), f.host(i)
        base = {"vcenter": "vc1", "vm": vm, "host": host, "cluster": "prod-cl"}
        hot = i == 3  # one noisy neighbour with real CPU ready
        out.append(Sample("vsphere_vm", base, {
            "cpu_usage_pct": 20 + 40 * _wave(k, i), "cpu_ready_pct": (12.0 if hot else 0.5) + 2 * _wave(k, i),
            "cpu_costop_pct": 0.2, "mem_balloon_bytes": 512 * 2**20 if hot else 0,
            "mem_swapped_bytes": 0, "vcpus": 8}, ts))
        out.append(Sample("vsphere_vm_quickstats", base, {
            "balloon_bytes": 512 * 2**20 if hot else 0, "swapped_bytes": 0, "compressed_bytes": 0,
            "cpu_usage_mhz": 2000 + 4000 * _wave(k, i), "guest_mem_usage_bytes": 4 * 2**30,
            "host_mem_usage_bytes": 16 * 2**30, "overhead_bytes": 96 * 2**20}, ts))
        inc = _incident(k, i)
        data_ms = 1.8 + 9.5 * inc + 0.3 * _wave(k, i)
        out.append(Sample("vsphere_vm_disk", {**base, "instance": "scsi0:1", "datastore": f"ds-data{i + 1:02d}",
                                              "lun": f.naa(i)}, {
            "read_iops": 800 + 100 * _wave(k, i), "write_iops": 1500 - 400 * inc, "read_bytes_per_s": 12e6,
            "write_bytes_per_s": 30e6, "read_latency_ms": data_ms, "write_latency_ms": data_ms + 0.2,
            "read_oio": 2 + 10 * inc, "write_oio": 4 + 14 * inc}, ts))
        if i < f.stacks:
            out.append(Sample("vsphere_vm_net", {**base, "instance": "4000"}, {
                "rx_bytes_per_s": 4.1e6, "tx_bytes_per_s": 6.2e6, "rx_drops_per_s": 0.0, "tx_drops_per_s": 0.0}, ts))
    for h in range(f.hosts):
        host = f.host(h)
        luns = [i for i in range(f.vms) if f.host(i) == host]
        for i in luns[:8]:
            inc = _incident(k, i)
            out.append(Sample("vsphere_datastore", {"vcenter": "vc1", "host": host, "cluster": "prod-cl",
                                                    "datastore": f"ds-data{i + 1:02d}"}, {
                "read_iops": 800.0, "write_iops": 1500 - 400 * inc, "read_latency_ms": 1.8 + 9.5 * inc,
                "write_latency_ms": 2.0 + 9.5 * inc}, ts))
        out.append(Sample("vsphere_host", {"vcenter": "vc1", "host": host, "cluster": "prod-cl"}, {
            "cpu_usage_pct": 45 + 20 * _wave(k, h), "cpu_ready_pct": 1.0 + _wave(k, h), "mem_state": 0,
            "mem_balloon_bytes": 512 * 2**20 if 3 in luns else 0, "mem_swap_used_bytes": 0}, ts))
        for i in luns:
            inc = _incident(k, i)
            kavg = 0.05 + 9.0 * inc
            davg = 1.6 + 0.2 * _wave(k, i)
            tags = {"vcenter": "vc1", "host": host, "cluster": "prod-cl", "lun": f.naa(i),
                    "datastore": f"ds-data{i + 1:02d}"}
            out.append(Sample("vsphere_host_lun", tags, {
                "device_latency_ms": davg, "kernel_latency_ms": kavg, "queue_latency_ms": kavg * 0.9,
                "total_latency_ms": davg + kavg, "read_iops": 800.0, "write_iops": 1500 - 400 * inc,
                "max_queue_depth": 32}, ts))
            if i < f.stacks:
                out.append(Sample("esxtop_device", {"host": host, "device": f.naa(i)}, {
                    "queue_depth": 32, "active": 32 if inc else 6, "queued": 14 * inc, "used_pct": 100 if inc else 19,
                    "device_latency_ms": davg, "kernel_latency_ms": kavg, "guest_latency_ms": davg + kavg,
                    "queue_latency_ms": kavg * 0.9, "commands_per_s": 2300 - 400 * inc}, ts))
    for i in range(f.stacks):
        out += _stack_step(f, k, i, ts)
    # the collectors as the agent names them (agent/assemble.py): vsphere:VCENTER, storage:ARRAY, db2:NAME, a
    # remote guest guest:SSH-TARGET, the agent's own self
    for name in ["vsphere:vc1", "storage:netapp1", "self", *(f"db2:prod{i + 1:02d}" for i in range(f.stacks)),
                 *(f"guest:{f.vm(i)}" for i in range(f.stacks))]:
        out.append(Sample("db2vtop_collector", {"collector": name}, {
            "duration_ms": 35.0 + 5 * _wave(k, len(name)), "samples": 40, "errors": 0, "skipped": 0, "status": "ok",
            "last_error": ""}, ts))
    return out


def _stack_step(f: Fleet, k: int, i: int, ts: int) -> list[Sample]:
    inc = _incident(k, i)
    db = {"db2": f"prod{i + 1:02d}", "database": "PROD", "member": "0"}
    guest = f.vm(i)
    out = [
        Sample("db2_database", db, {
            "commits_per_s": 1450 - 900 * inc + 60 * _wave(k, i), "rollbacks_per_s": 2.0, "wait_pct": 35 + 40 * inc,
            "pool_read_wait_pct": 8.0, "log_disk_wait_pct": 12 + 45 * inc, "lock_wait_pct": 3.0,
            "cpu_pct": 40 - 20 * inc,
            "request_ms_per_s": 4200.0, "lock_waits_per_s": 1.5, "lock_wait_ms": 4.0, "deadlocks_per_s": 0.0}, ts),
        Sample("db2_log", db, {
            "log_write_ms": 1.9 + 10.2 * inc + 0.2 * _wave(k, i), "log_writes_per_s": 900 - 300 * inc,
            "log_write_bytes_per_s": 9e6, "log_buffer_full_per_s": 0.0, "log_used_pct": 22.0}, ts),
    ]
    for bp, hit in (("IBMDEFAULTBP", 99.2), ("BP_DATA", 97.5)):
        out.append(Sample("db2_bufferpool", {**db, "bufferpool": bp}, {
            "hit_pct": hit, "data_hit_pct": hit - 0.5, "index_hit_pct": 99.8, "logical_reads_per_s": 90000.0,
            "physical_reads_per_s": 90000.0 * (100 - hit) / 100, "async_read_pct": 60.0, "read_ms_per_page": 1.7,
            "writes_per_s": 300.0, "write_ms_per_page": 1.2}, ts))
    for ts_name in ("SYSCATSPACE", "DATA_TS"):
        out.append(Sample("db2_tablespace", {**db, "tablespace": ts_name}, {
            "pages_read_per_s": 400.0, "pages_written_per_s": 120.0, "read_ms_per_page": 1.8 + 9 * inc,
            "write_ms_per_page": 1.1, "async_read_pct": 55.0, "used_pct": 61.0}, ts))
        for c in range(2):
            out.append(Sample("db2_container", {**db, "tablespace": ts_name,
                                                "container": f"/db2/data{c + 1}/{ts_name.lower()}"}, {
                "pages_read_per_s": 200.0, "pages_written_per_s": 60.0, "read_ms_per_page": 1.7 + c * 0.4 + 9 * inc,
                "write_ms_per_page": 1.0, "fs_used_pct": 48.0}, ts))
    minute = k * STEP_S / 60
    if not (i == 0 and 3 <= minute < 4):  # the guest collector of stack 1 lost a minute: a gap, not zeros
        g = {"guest": guest}
        out.append(Sample("guest_cpu", {**g, "cpu": "total"}, {
            "busy_pct": 55 + 20 * _wave(k, i) - 25 * inc, "user_pct": 40.0, "system_pct": 10.0,
            "iowait_pct": 3 + 25 * inc, "steal_pct": 0.3, "idle_pct": 40.0, "load1": 6.2, "load5": 5.9, "load15": 5.5,
            "procs_running": 7, "procs_blocked": 1 + 6 * inc}, ts))
        out.append(Sample("guest_mem", g, {
            "total_bytes": 64 * 2**30, "used_bytes": 52 * 2**30, "used_pct": 81.3, "available_bytes": 12 * 2**30,
            "swap_in_bytes_per_s": 0.0, "swap_out_bytes_per_s": 0.0}, ts))
        for dev, lat in (("sda", 0.6), ("sdb", 2.1 + 11 * inc)):
            out.append(Sample("guest_disk", {**g, "device": dev, "type": "disk"}, {
                "read_iops": 700.0, "write_iops": 1400 - 400 * inc, "read_bytes_per_s": 11e6,
                "write_bytes_per_s": 29e6, "read_await_ms": lat, "write_await_ms": lat + 0.3,
                "queue_size": 3 + 20 * inc, "util_pct": 60 + 39 * inc}, ts))
        out.append(Sample("guest_net", {**g, "interface": "ens192"}, {
            "rx_bytes_per_s": 4e6, "tx_bytes_per_s": 6e6, "rx_packets_per_s": 5000.0, "tx_packets_per_s": 5200.0,
            "rx_drops_per_s": 0.0, "tx_drops_per_s": 0.0, "rx_errors_per_s": 0.0, "tx_errors_per_s": 0.0}, ts))
    out.append(Sample("storage_lun", {"storage": "netapp1", "kind": "ontap", "vserver": "svm1", "volume": f"db2v{i}",
                                      "lun": f"/vol/db2v{i}/lun0", "naa": f.naa(i)}, {
        "total_iops": 2300 - 400 * inc, "read_iops": 800.0, "write_iops": 1500 - 400 * inc, "avg_latency_ms": 1.5,
        "read_latency_ms": 1.2, "write_latency_ms": 1.6, "queue_full_per_s": 0.0}, ts))
    return out


def _findings(f: Fleet) -> list[Finding]:
    mid = T0 + f.minutes * 30 * S
    incident = T0 + 6 * 60 * S
    crowd = [Finding("cpu-costop", "warning", {"layer": "vm", "vcenter": "vc1", "vm": f.vm(i)},
                     f"{f.vm(i)}: co-stop 3.4%", {"values": {"cpu_costop_pct": 3.4}, "samples": 5},
                     "vCPUs wait for each other.", "Use fewer vCPUs.", ["Duncan Epping, esxtop metrics and thresholds"],
                     T0 + i * S, mid)
             for i in range(10, f.vms, 4)]  # a big fleet has a crowd of findings
    return [
        *crowd,
        Finding("cpu-ready", "critical", {"layer": "vm", "vcenter": "vc1", "vm": f.vm(3)},
                f"{f.vm(3)}: CPU ready 12.9% per vCPU", {"values": {"cpu_ready_pct": 12.9}, "samples": 12,
                                                        "thresholds": {"warn_pct": 5, "crit_pct": 10}},
                "vCPUs wait for a physical CPU.", "Reduce host overcommit or move the VM.", ["VMware KB 2002181"],
                T0 + 60 * S, mid),
        Finding("balloon-zero", "warning", {"layer": "vm", "vcenter": "vc1", "vm": f.vm(3)},
                f"{f.vm(3)}: balloon 512.0MiB", {"values": {"mem_balloon_bytes": 512 * 2**20}, "samples": 30},
                "Ballooning leads to guest swapping.", "Reserve the VM's memory.",
                ["NetApp WP-7109, Best Practices for Virtualizing IBM DB2 with Technologies from VMware, Intel, "
                 "and NetApp (2010), §5.4"], T0 + 30 * S, mid),
        Finding("disk-queue-saturation", "critical", {"layer": "host", "vcenter": "vc1", "host": f.host(0),
                                                      "lun": f.naa(0)},
                f"{f.host(0)} {f.naa(0)}: KAVG 9.1 ms, QUED 14", {"values": {"kernel_latency_ms": 9.1, "queued": 14},
                                                               "samples": 9},
                "Commands queue in the VMkernel: the LUN queue is full.",
                "Raise the LUN queue depth (and PVSCSI's), or spread the I/O over more LUNs.", ["VMware KB 1008205"],
                incident, incident + 180 * S, incident + 200 * S),
        Finding("guest-io-latency", "warning", {"layer": "guest", "guest": f.vm(0), "device": "sdb"},
                f"{f.vm(0)} sdb: write await 13.4 ms", {"values": {"write_await_ms": 13.4}, "samples": 5},
                "The guest waits on its disk.", "Follow the latency down the stack (u: LUNs).",
                ["db2vtop default: 20 ms is the usual bound for spinning disks"], incident + 20 * S,
                incident + 180 * S),
    ]


def steps(fleet: Fleet = Fleet()) -> Iterator[list[Sample]]:
    """The recording's samples, one collection step at a time."""
    for k in range(fleet.steps):
        yield _step(fleet, k)


def records(fleet: Fleet = Fleet()) -> tuple[list[Fact], list[Annotation], list[Finding]]:
    """The recording's facts, annotations (markers, a counter reset) and findings (resolved ones too)."""
    facts = [Fact("guest", {"guest": fleet.vm(i)}, {"hostname": fleet.vm(i)}, T0) for i in range(fleet.stacks)]
    # each VM's configuration as the vSphere collector records it (collectors/vsphere/facts.py): its host, disks
    # and vNICs, the guest's host name as VMware Tools reports it
    facts += [Fact("vsphere_vm", {"vcenter": "vc1", "vm": fleet.vm(i)}, {
        "host": fleet.host(i), "cluster": "prod-cl", "num_cpu": 8, "guest_hostname": fleet.vm(i), "ip_addresses": [],
        "disks": [{"instance": "scsi0:1", "label": "Hard disk 2", "backing": "flat",
                   "datastore": f"ds-data{i + 1:02d}", "luns": [fleet.naa(i)]}],
        "nics": [{"key": 4000, "type": "vmxnet3", "label": "Network adapter 1"}] if i < fleet.stacks else []}, T0)
        for i in range(fleet.vms)]
    facts += [Fact("db2_database", {"db2": f"prod{i + 1:02d}", "database": "PROD"},
                   {"log_path": "/db2/log/NODE0000/LOGSTREAM0000/"}, T0) for i in range(fleet.stacks)]
    marks = [Annotation("marker", "run 1 start", {"by": "cli"}, "", T0 + 2 * 60 * S),
             Annotation("marker", "run 1 stop", {"by": "cli"}, "", T0 + 12 * 60 * S),
             Annotation("reset", "prod01 member 0", {"db2": "prod01", "database": "PROD", "member": "0"},
                        "MON_GET_DATABASE", T0 + 10 * 60 * S)]
    return facts, [m for m in marks if m.ts <= fleet.end_ns], _findings(fleet)


def build_store(path: Path, fleet: Fleet = Fleet(), more: Sequence[Sample] = (),
                more_marks: Sequence[Annotation] = ()) -> Path:
    """Write the fleet's recording to a new store at `path` (with `more` samples and marks a test adds)."""
    with Store(path, writer=True) as store:
        batch: list[Sample] = []
        for step in steps(fleet):
            batch += step
            if len(batch) > 20000:
                store.write(batch)
                batch = []
        facts, marks, findings = records(fleet)
        opened = [dataclasses.replace(x, resolved_at=None) for x in findings]  # the store opens, then resolves
        store.write([*batch, *more], facts=facts, annotations=[*marks, *more_marks], findings=opened)
        store.write(findings=[x for x in findings if x.resolved_at is not None])
        store.compact()  # what an agent's writer would have sealed by then: the screens read chunks
        store.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return path


def field_values(fleet: Fleet = Fleet()) -> int:
    """How many field values `build_store` writes (bench/store.py's bytes per value)."""
    return sum(len(s.fields) for step in steps(fleet) for s in step)


def write_config(path: Path, fleet: Fleet = Fleet()) -> Path:
    """The config the fleet was recorded with: its [[stack]] sections tie DB2, VM, guest and array together."""
    parts = ['[[vcenter]]\nname = "vc1"\nurl = "https://vc1.lab/sdk"\nuser = "monitor@vsphere.local"\n'
             'password_env = "VC1_PASSWORD"\n',
             '[[storage]]\nname = "netapp1"\nkind = "ontap"\nssh = "netapp1"\n',
             '[[ssh]]\nname = "netapp1"\nhost = "netapp1.lab"\nuser = "monitor"\n']
    for i in range(fleet.stacks):
        vm = fleet.vm(i)
        parts += [f'[[ssh]]\nname = "{vm}"\nhost = "{vm}.lab"\nuser = "db2inst1"\n',
                  f'[[db2]]\nname = "prod{i + 1:02d}"\nssh = "{vm}"\ndatabase = "PROD"\n',
                  f'[[stack]]\nname = "prod{i + 1:02d}"\ndb2 = "prod{i + 1:02d}"\nvm = "{vm}"\nvcenter = "vc1"\n'
                  f'guest = "{vm}"\nstorage = ["netapp1"]\n']
    path.write_text("\n".join(parts))
    return path
