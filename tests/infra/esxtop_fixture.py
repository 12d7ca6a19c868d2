"""esxtop batch CSV fixtures (no ESXi exists here), small for tests and large for the benchmark.

Format as VMware documents batch mode ("Interpreting esxtop Statistics", VMware communities
DOC-9279 §4.3 "Batch Mode Output" and §7 "Batch Mode"; Broadcom KB 382249 "Using ESXTop
and Interpreting ESXTop Statistics"): `esxtop -b -a` writes perfmon-style PDH-CSV, a header
row whose first cell is "(PDH-CSV 4.0) (UTC)(0)" and whose other cells are
`\\\\<host>\\<Object>(<Instance>)\\<Counter>`, then one row per sample: a "MM/DD/YYYY
hh:mm:ss" timestamp and the values, every cell double-quoted. Counter names of the CPU,
memory and disk-device objects are those of published captures (e.g. "% Ready", "% CoStop",
"% Max Limited", "Memctl MBytes", "Average Driver MilliSec/Command", "Device Q Depth");
a -a export also carries every other object (per-world Vcpu, Virtual Disk, Network Port,
paths, adapters, physical CPUs), generated here as realistic noise the parser must skip.
The NUMA counter names (NHN, NMIG, NRMEM, NLMEM, N%L of the memory screen) vary between
ESXi releases; the spelling used here is one of them, and the parser matches by words.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

GROUP_CPU = ("Members", "% Used", "% Run", "% System", "% Wait", "% VmWait", "% Ready", "% Idle", "% Overlap",
             "% CoStop", "% Max Limited", "% Swap Wait", "% Demand", "% CPU Latency")
GROUP_MEMORY = (
    "Members", "Memory Size MBytes", "Memory Granted Size MBytes", "Memory Consumed Size MBytes", "Target Size MBytes",
    "Touched MBytes", "Touched Write MBytes", "% Active Estimate", "% Active Slow Estimate", "% Active Fast Estimate",
    "% Active Next Estimate", "Memctl MBytes", "Memctl Target MBytes", "Memctl Max MBytes", "Swapped MBytes",
    "Swap Target MBytes", "Swap Read MBytes/sec", "Swap Written MBytes/sec", "Zipped MBytes", "Zip Saved MBytes",
    "Shared MBytes", "Shared Saved MBytes", "Zero MBytes", "Overhead MBytes", "Overhead Max MBytes",
    "Numa Home Nodes", "Numa Migrations", "Numa Remote Memory MBytes", "Numa Local Memory MBytes", "% Numa Local",
)
VCPU = ("% Used", "% Run", "% System", "% Wait", "% VmWait", "% Ready", "% Idle", "% Overlap", "% CoStop",
        "% Max Limited", "% Swap Wait", "% CPU Latency")
VIRTUAL_DISK = ("Commands/sec", "Reads/sec", "Writes/sec", "MBytes Read/sec", "MBytes Written/sec",
                "Average MilliSec/Read", "Average MilliSec/Write")
NETWORK_PORT = ("Packets Transmitted/sec", "MBits Transmitted/sec", "Packets Received/sec", "MBits Received/sec",
                "% Outbound Packets Dropped", "% Received Packets Dropped")
DISK_DEVICE = (
    "Device Q Depth", "World Q Depth", "Active Commands", "Queued Commands", "% Used", "Load", "Commands/sec",
    "Reads/sec", "Writes/sec", "MBytes Read/sec", "MBytes Written/sec",
    *(f"Average {k} MilliSec/{op}" for op in ("Command", "Read", "Write")
      for k in ("Driver", "Kernel", "Guest", "Queue")),
    "Failed Commands/sec", "Failed Reads/sec", "Failed Writes/sec", "Failed Bytes Read/sec",
    "Failed Bytes Written/sec", "Failed Reserves/sec", "Aborts/sec", "Resets/sec",
)
DISK_PATH = ("Commands/sec", "Reads/sec", "Writes/sec", "MBytes Read/sec", "MBytes Written/sec",
             "Average Driver MilliSec/Command", "Average Kernel MilliSec/Command", "Average Guest MilliSec/Command")
SYSTEM_GROUPS = ("system", "helper", "drivers", "ft", "vmotion", "hostd.2099470", "vpxa.2101377")


@dataclass
class VM:
    name: str
    vcpus: int = 4
    memory_mb: int = 16384
    used_pct: float = 120.0
    ready_pct: float = 2.0
    costop_pct: float = 0.1
    max_limited_pct: float = 0.0
    swap_wait_pct: float = 0.0
    balloon_mb: float = 0.0
    swapped_mb: float = 0.0
    home_nodes: str = "0"
    migrations: int = 0
    local_mb: float = 16000.0
    remote_mb: float = 384.0

    @property
    def local_pct(self) -> float:
        return round(self.local_mb * 100 / (self.local_mb + self.remote_mb), 1)


@dataclass
class Device:
    naa: str
    queue_depth: int = 64
    active: int = 12
    queued: int = 0
    davg_ms: float = 0.8
    kavg_ms: float = 0.02
    qavg_ms: float = 0.01
    reads_per_s: float = 1500.0
    writes_per_s: float = 500.0
    mb_read_per_s: float = 48.0
    mb_written_per_s: float = 12.0
    paths: int = 2
    extra: dict[str, float] = field(default_factory=dict)

    @property
    def gavg_ms(self) -> float:
        return round(self.davg_ms + self.kavg_ms, 3)


def _vm_values(vm: VM) -> tuple[dict[str, str], dict[str, str]]:
    cpu = {c: "0.00" for c in GROUP_CPU}
    cpu.update({"Members": str(vm.vcpus + 4), "% Used": f"{vm.used_pct:.2f}", "% Run": f"{vm.used_pct:.2f}",
                "% Ready": f"{vm.ready_pct:.2f}", "% CoStop": f"{vm.costop_pct:.2f}",
                "% Max Limited": f"{vm.max_limited_pct:.2f}", "% Swap Wait": f"{vm.swap_wait_pct:.2f}",
                "% Idle": f"{max(0.0, vm.vcpus * 100 - vm.used_pct):.2f}"})
    mem = {c: "0.00" for c in GROUP_MEMORY}
    mem.update({"Members": str(vm.vcpus + 4), "Memory Size MBytes": f"{vm.memory_mb:.2f}",
                "Memory Granted Size MBytes": f"{vm.memory_mb:.2f}",
                "Memory Consumed Size MBytes": f"{vm.local_mb + vm.remote_mb:.2f}",
                "Memctl MBytes": f"{vm.balloon_mb:.2f}", "Swapped MBytes": f"{vm.swapped_mb:.2f}",
                "Numa Home Nodes": vm.home_nodes, "Numa Migrations": str(vm.migrations),
                "Numa Remote Memory MBytes": f"{vm.remote_mb:.2f}", "Numa Local Memory MBytes": f"{vm.local_mb:.2f}",
                "% Numa Local": f"{vm.local_pct:.1f}", "Overhead MBytes": "92.41"})
    return cpu, mem


def _device_values(d: Device) -> dict[str, str]:
    v = {c: "0.00" for c in DISK_DEVICE}
    v.update({"Device Q Depth": str(d.queue_depth), "World Q Depth": str(d.queue_depth),
              "Active Commands": str(d.active), "Queued Commands": str(d.queued),
              "% Used": f"{d.active * 100 / d.queue_depth:.2f}", "Load": f"{(d.active + d.queued) / d.queue_depth:.2f}",
              "Commands/sec": f"{d.reads_per_s + d.writes_per_s:.2f}", "Reads/sec": f"{d.reads_per_s:.2f}",
              "Writes/sec": f"{d.writes_per_s:.2f}", "MBytes Read/sec": f"{d.mb_read_per_s:.2f}",
              "MBytes Written/sec": f"{d.mb_written_per_s:.2f}"})
    for op in ("Command", "Read", "Write"):
        for kind, ms in (("Driver", d.davg_ms), ("Kernel", d.kavg_ms), ("Guest", d.gavg_ms), ("Queue", d.qavg_ms)):
            v[f"Average {kind} MilliSec/{op}"] = f"{ms:.2f}"
    v.update({k: f"{x:.2f}" for k, x in d.extra.items()})
    return v


def batch_csv(host: str, vms: list[VM], devices: list[Device], samples: int = 1, seed: int = 0) -> str:
    """`esxtop -b -a -n <samples>` output for these VMs and LUNs (the last row carries their values)."""
    rnd = random.Random(seed)
    cols: list[str] = ["(PDH-CSV 4.0) (UTC)(0)"]
    last: list[str] = ["11/22/2026 10:15:02"]

    def add(obj: str, counters: tuple[str, ...], values: dict[str, str] | None = None) -> None:
        for c in counters:
            cols.append(f"\\\\{host}\\{obj}\\{c}")
            last.append(values[c] if values and c in values else f"{rnd.uniform(0, 50):.2f}")

    add("Memory", ("Machine MBytes", "Kernel MBytes", "NonKernel MBytes", "Free MBytes",
                   "Memory Overcommit (1 Minute Avg)"))
    for n in range(2):
        add(f"Numa Node({n})", ("Total MBytes", "Free MBytes", "% Processor Time"))
    for cpu in (*range(32), "_Total"):
        add(f"Physical Cpu({cpu})", ("% Processor Time", "% Util Time", "% Core Util Time"))
    for gid, name in enumerate(SYSTEM_GROUPS, start=1):
        add(f"Group Cpu({gid}:{name})", GROUP_CPU)
        add(f"Group Memory({gid}:{name})", GROUP_MEMORY, {"Memory Size MBytes": "0.00"})
    for i, vm in enumerate(vms):
        gid = 100000 + i * 37
        cpu, mem = _vm_values(vm)
        add(f"Group Cpu({gid}:{vm.name})", GROUP_CPU, cpu)
        add(f"Group Memory({gid}:{vm.name})", GROUP_MEMORY, mem)
        worlds = ["vmx", f"vmast.{gid}", "vmx-vthread-5", "vmx-mks", "vmx-svga"]
        worlds += [f"vmx-vcpu-{n}:{vm.name}" for n in range(vm.vcpus)]
        for w, world in enumerate(worlds):
            add(f"Vcpu({gid}:{vm.name}:{gid + 1 + w}:{world})", VCPU)
        add(f"Virtual Disk({vm.name})", VIRTUAL_DISK)
        for disk in ("scsi0:0", "scsi1:0"):
            add(f"Virtual Disk({vm.name}:{disk})", VIRTUAL_DISK)
        add(f"Network Port(vSwitch0:{50331650 + i}:{vm.name}.eth0)", NETWORK_PORT)
    for hba in ("vmhba0", "vmhba1", "vmhba2"):
        add(f"Physical Disk Adapter({hba})", DISK_PATH)
    for t, d in enumerate(devices):
        add(f"Physical Disk SCSI Device({d.naa})", DISK_DEVICE, _device_values(d))
        for p in range(d.paths):
            add(f"Physical Disk Path(vmhba{1 + p}:C0:T{t % 8}:L{t})", DISK_PATH)

    def row(cells: list[str]) -> str:
        return ",".join('"' + c.replace('"', '""') + '"' for c in cells)

    rows = [row(cols)]
    for s in range(samples - 1):  # earlier samples: same columns, other values
        rows.append(row([f"11/22/2026 10:14:{58 - 2 * (samples - 1 - s):02d}"]
                        + [f"{rnd.uniform(0, 9):.2f}" for _ in cols[1:]]))
    rows.append(row(last))
    return "\r\n".join(rows) + "\r\n"


def fleet(vms: int, devices: int, seed: int = 1) -> tuple[list[VM], list[Device]]:
    """A large host: `vms` VMs and `devices` LUNs with varied, seeded values (the benchmark)."""
    rnd = random.Random(seed)
    vm_list = [VM(f"vm-{i:04d}", vcpus=rnd.choice((2, 4, 8)), memory_mb=rnd.choice((8192, 16384, 65536)),
                  ready_pct=round(rnd.uniform(0, 20), 2), home_nodes=str(rnd.randrange(2)),
                  migrations=rnd.randrange(5), remote_mb=round(rnd.uniform(0, 4096), 2)) for i in range(vms)]
    dev_list = [Device(f"naa.600a0980{i:024x}", davg_ms=round(rnd.uniform(0.2, 30), 2), queued=rnd.randrange(3))
                for i in range(devices)]
    return vm_list, dev_list
