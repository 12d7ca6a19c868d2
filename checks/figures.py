"""Each layer's key figures, declared once: the verdict's inputs, the report's figures and the Stack
screen's layer rows are all read from this table (docs/architecture.md, "The figure table").

A figure is one field of one measurement, read from the stack's series that its `entity` names
(checks/topology.py). Its unit follows from the field's name (agent/core/schema.py), its level from
the rule scale it is judged and coloured by (checks/scales.py), and tests/agent/core/test_read_model.py checks
every row against the collectors' declared measurements.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from statistics import fmean

from db2vtop.agent.core.schema import unit_of

#: the layers, top to bottom: the verdict's chain and the order every view shows them in
LAYERS = ("db2", "guest", "vm", "host", "storage")
LAYER_TITLES = {"db2": "DB2", "guest": "guest OS", "vm": "VM", "host": "ESXi host", "storage": "array"}
#: how several series' values at one time become one (a figure fed by a guest's disks, a VM's disks)
COMBINE: dict[str, Callable[[Iterable[float]], float]] = {"sum": math.fsum, "max": max, "min": min, "mean": fmean}


@dataclass(frozen=True)
class Chart:
    """A Stack screen chart that plots the figure: its label, and its y axis (a fixed top, or a floor)."""

    label: str
    top: float | None = None
    floor: float = 1.0


@dataclass(frozen=True)
class Figure:
    layer: str
    measurement: str
    field: str
    label: str  # what the report calls it
    entity: str  # which of the stack's series feed it (checks/topology.ENTITIES)
    combine: str = "sum"  # across series at one time: sum (rates), max (latencies), min (queue depths), mean
    where: tuple[tuple[str, str], ...] = ()  # tags the series must also have
    role: str | None = None  # its input to the verdict's chain (a key of the verdict's `figures`)
    level: str | None = None  # the scale it is judged and coloured by (checks/scales.py SCALES)
    report: bool = True  # among the report's figures (`db2vtop report`)
    key: bool = False  # charted in the report, and in the summary `db2vtop run` prints
    screen: str | None = None  # its name in its layer's row on the Stack screen
    alternate: bool = False  # on the screen only when the layer has none of its other figures (esxtop's VM)
    digits: int = 1  # decimals on the screen
    suffix: str | None = None  # after the number on the screen; None: from the unit
    detail: str | None = None  # a tag of the series with the worst value, shown after it (which disk)
    chart: Chart | None = None  # the Stack screen chart of its layer that plots it
    fleet: str | None = None  # the Fleet screen's column it fills, named less its unit's sign ("rdy" for rdy%)
    column: str | None = None  # its name as a detail panel's column, less its unit's sign; None: its `screen` name
    gate: tuple[str, ...] = ()  # fields of the same series whose sum must reach the verdict's `min_iops` for a
    # sample to count (a device doing a few I/O per second is not judged by its latency)

    @property
    def id(self) -> str:
        return f"{self.measurement}.{self.field}"

    @property
    def unit(self) -> str:
        return unit_of(self.field)

    @property
    def latency(self) -> bool:
        """Charted on the layer's right-hand chart, one scale for all layers (a time per I/O)."""
        return self.unit == "ms"


_DISK, _TOTAL = (("type", "disk"),), (("cpu", "total"),)
LATENCY_FLOOR_MS = 5.0  # a latency chart's y axis reaches at least this: noise does not look like a crisis
_LAT = LATENCY_FLOOR_MS
_RDY = 5.0  # a CPU ready chart's: a few per cent of ready is a VM's normal
F = Figure
TABLE: tuple[Figure, ...] = (
    F("db2", "db2_database", "activities_per_s", "throughput (activities)", "db2", key=True),
    F("db2", "db2_database", "commits_per_s", "commits", "db2", key=True, screen="TPS", chart=Chart("TPS"),
      fleet="TPS"),
    F("db2", "db2_database", "rollbacks_per_s", "rollbacks", "db2"),
    F("db2", "db2_database", "rows_read_per_s", "rows read", "db2"),
    F("db2", "db2_log", "log_write_ms", "log write time", "db2", "max", key=True, role="log_write_ms",
      level="log_write", screen="log write", digits=2, chart=Chart("log write ms", floor=_LAT), fleet="log"),
    F("db2", "db2_log", "log_writes_per_s", "log writes", "db2"),
    F("db2", "db2_log", "log_write_bytes_per_s", "log written", "db2"),
    F("db2", "db2_bufferpool", "hit_pct", "buffer pool hit ratio", "db2", "mean", level="hit_ratio", screen="hit"),
    F("db2", "db2_database", "wait_pct", "wait share of time", "db2", "max", report=False, screen="wait"),
    F("db2", "db2_database", "lock_waits_per_s", "lock waits", "db2"),
    F("db2", "db2_database", "lock_wait_ms", "lock wait time", "db2", "max"),
    F("db2", "db2_database", "lock_wait_pct", "lock wait share of time", "db2", "max", role="lock_wait_pct",
      level="lock_wait", screen="lock"),
    F("db2", "db2_database", "log_disk_wait_pct", "log disk wait share", "db2", "max", role="log_disk_wait_pct",
      level="log_disk_wait"),
    F("db2", "db2_database", "pool_read_wait_pct", "buffer pool read wait share", "db2", "max", role="read_wait_pct",
      level="read_wait"),
    F("db2", "db2_database", "direct_read_wait_pct", "direct read wait share", "db2", "max", report=False,
      role="direct_read_wait_pct", level="read_wait"),
    F("db2", "db2_database", "cpu_ms_per_s", "DB2 CPU", "db2"),
    F("guest", "guest_cpu", "busy_pct", "CPU busy", "guest", "max", _TOTAL, key=True, level="cpu_busy",
      screen="busy", chart=Chart("CPU busy %", top=100.0), fleet="cpu"),
    F("guest", "guest_cpu", "iowait_pct", "CPU iowait", "guest", "max", _TOTAL, screen="iowait"),
    F("guest", "guest_cpu", "steal_pct", "CPU steal", "guest", "max", _TOTAL, role="guest_steal_pct", level="steal",
      screen="steal"),
    F("guest", "guest_cpu", "load1", "load (1 min)", "guest", "max", _TOTAL),
    F("guest", "guest_mem", "used_pct", "memory used", "guest", "max"),
    F("guest", "guest_mem", "swap_in_bytes_per_s", "swap-in", "guest", role="guest_swap_in", level="guest_swap",
      screen="swap"),
    F("guest", "guest_mem", "swap_out_bytes_per_s", "swap-out", "guest", report=False, level="guest_swap",
      screen="swap"),
    F("guest", "guest_disk", "read_await_ms", "read await", "guest", "max", _DISK, role="guest_read_await_ms",
      level="io_latency", screen="await", detail="device", digits=2, chart=Chart("await ms", floor=_LAT),
      fleet="I/O"),
    F("guest", "guest_disk", "write_await_ms", "write await", "guest", "max", _DISK, key=True,
      role="guest_write_await_ms", level="io_latency", screen="await", detail="device", digits=2,
      chart=Chart("await ms", floor=_LAT), fleet="I/O"),
    F("guest", "guest_disk", "read_iops", "read IOPS", "guest", "sum", _DISK),
    F("guest", "guest_disk", "write_iops", "write IOPS", "guest", "sum", _DISK),
    F("guest", "guest_disk", "read_bytes_per_s", "read throughput", "guest", "sum", _DISK, key=True),
    F("guest", "guest_disk", "write_bytes_per_s", "write throughput", "guest", "sum", _DISK, key=True),
    F("vm", "vsphere_vm", "cpu_ready_pct", "CPU ready (per vCPU)", "vm", "max", key=True, role="ready_pct",
      level="ready", screen="rdy", chart=Chart("ready % per vCPU", floor=_RDY), fleet="rdy"),
    F("vm", "vsphere_vm", "cpu_costop_pct", "co-stop (per vCPU)", "vm", "max", role="costop_pct", level="costop",
      screen="cstp"),
    F("vm", "vsphere_vm", "cpu_usage_pct", "CPU usage", "vm", "max", level="cpu_busy", fleet="cpu", column="usage"),
    F("vm", "vsphere_vm", "mem_balloon_bytes", "balloon", "vm", "max", role="balloon_bytes", level="balloon",
      screen="balloon", fleet="balloon"),
    F("vm", "vsphere_vm", "mem_balloon_target_bytes", "balloon target", "vm", "max", report=False,
      role="balloon_target_bytes", level="balloon"),
    F("vm", "vsphere_vm", "mem_swapped_bytes", "swapped", "vm", "max", report=False, role="vm_swapped_bytes",
      level="host_swap", screen="swapped"),
    F("vm", "vsphere_vm", "mem_swapin_bytes_per_s", "host swap-in of the VM", "vm", role="vm_swapin"),
    F("vm", "vsphere_vm_disk", "read_latency_ms", "VMDK read latency", "vm", "max", role="vmdk_read_ms",
      level="io_latency", screen="VMDK", digits=2, chart=Chart("VMDK ms", floor=_LAT), fleet="I/O"),
    F("vm", "vsphere_vm_disk", "write_latency_ms", "VMDK write latency", "vm", "max", key=True, role="vmdk_write_ms",
      level="io_latency", screen="VMDK", digits=2, chart=Chart("VMDK ms", floor=_LAT), fleet="I/O"),
    F("vm", "vsphere_vm_disk", "read_iops", "VMDK read IOPS", "vm"),
    F("vm", "vsphere_vm_disk", "write_iops", "VMDK write IOPS", "vm"),
    F("vm", "vsphere_vm_disk", "read_bytes_per_s", "VMDK read throughput", "vm"),
    F("vm", "vsphere_vm_disk", "write_bytes_per_s", "VMDK write throughput", "vm"),
    F("vm", "esxtop_vm", "ready_pct", "esxtop %RDY", "vm", "max", screen="%RDY", alternate=True, suffix="",
      chart=Chart("%RDY (all vCPUs)", floor=_RDY)),
    F("vm", "esxtop_vm", "costop_pct", "esxtop %CSTP", "vm", "max", screen="%CSTP", alternate=True,
      suffix=""),
    F("vm", "esxtop_vm", "balloon_bytes", "esxtop MCTLSZ", "vm", "max", screen="MCTLSZ", alternate=True,
      fleet="balloon"),
    F("vm", "esxtop_vm", "swapped_bytes", "esxtop SWCUR", "vm", "max", report=False, screen="SWCUR", alternate=True),
    F("vm", "esxtop_vm", "numa_local_pct", "esxtop N%L", "vm", "min", report=False, screen="N%L", alternate=True,
      digits=0, suffix=""),
    F("host", "vsphere_host", "cpu_usage_pct", "host CPU usage", "host", "max", level="cpu_busy", screen="cpu",
      chart=Chart("CPU usage %", top=100.0), fleet="cpu"),
    F("host", "vsphere_host", "mem_state", "host memory state", "host", "max", report=False, level="mem_state",
      screen="mem", role="host_mem_state"),
    F("host", "vsphere_host", "mem_swapin_bytes_per_s", "host swap-in", "host", role="host_swapin"),
    F("host", "vsphere_host_lun", "total_latency_ms", "GAVG", "lun", "max", report=False, level="io_latency",
      screen="GAVG", digits=2, chart=Chart("GAVG ms", floor=_LAT), fleet="I/O"),
    F("host", "vsphere_host_lun", "kernel_latency_ms", "KAVG", "lun", "max", key=True, role="kavg_ms", level="kavg",
      screen="KAVG", digits=2),
    F("host", "vsphere_host_lun", "device_latency_ms", "DAVG", "lun", "max", key=True, role="davg_ms",
      level="io_latency", screen="DAVG", digits=2, gate=("read_iops", "write_iops")),
    F("host", "vsphere_host_lun", "queue_latency_ms", "QAVG", "lun", "max", role="qavg_ms", level="qavg"),
    F("host", "vsphere_host_lun", "max_queue_depth", "LUN queue depth", "lun", "min", report=False,
      role="queue_depth"),
    F("host", "vsphere_host_lun", "read_iops", "LUN read IOPS", "lun"),
    F("host", "vsphere_host_lun", "write_iops", "LUN write IOPS", "lun"),
    F("host", "esxtop_device", "guest_latency_ms", "esxtop GAVG", "lun", "max", report=False, level="io_latency",
      screen="GAVG", digits=2, chart=Chart("GAVG ms", floor=_LAT), fleet="I/O"),
    F("host", "esxtop_device", "kernel_latency_ms", "esxtop KAVG", "lun", "max", role="esx_kavg_ms", level="kavg",
      screen="KAVG", digits=2),
    F("host", "esxtop_device", "device_latency_ms", "esxtop DAVG", "lun", "max", role="esx_davg_ms",
      level="io_latency", screen="DAVG", digits=2, gate=("reads_per_s", "writes_per_s")),
    F("host", "esxtop_device", "queue_latency_ms", "esxtop QAVG", "lun", "max", level="qavg"),
    F("host", "esxtop_device", "queued", "esxtop QUED", "lun", "max", role="esx_qued", level="queued",
      screen="QUED", digits=0),
    F("host", "esxtop_device", "queue_depth", "esxtop DQLEN", "lun", "min", report=False, role="esx_dqlen"),
    F("storage", "storage_lun", "avg_latency_ms", "LUN latency", "volume", "max", key=True, role="array_ms",
      level="array_latency", screen="latency", digits=2, chart=Chart("array ms", floor=_LAT)),
    F("storage", "storage_lun", "read_latency_ms", "LUN read latency", "volume", "max"),
    F("storage", "storage_lun", "write_latency_ms", "LUN write latency", "volume", "max"),
    F("storage", "storage_lun", "total_iops", "LUN IOPS", "volume", key=True, screen="IOPS", digits=0,
      chart=Chart("IOPS")),
    F("storage", "storage_lun", "read_bytes_per_s", "LUN read throughput", "volume"),
    F("storage", "storage_lun", "write_bytes_per_s", "LUN write throughput", "volume"),
    F("storage", "storage_lun", "queue_full_per_s", "LUN queue full", "volume", report=False,
      role="array_queue_full", level="queue_full", screen="queue full", suffix="/s"),
    F("storage", "storage_volume", "avg_latency_ms", "volume latency", "volume", "max", role="array_ms",
      level="array_latency", screen="latency", digits=2, chart=Chart("array ms", floor=_LAT)),
    F("storage", "storage_volume", "total_iops", "volume IOPS", "volume", screen="IOPS", digits=0,
      chart=Chart("IOPS")),
    F("storage", "storage_device", "total_iops", "device IOPS", "volume", screen="IOPS", digits=0,
      chart=Chart("IOPS")),
    F("storage", "storage_disk", "write_await_ms", "storage host write await", "volume", "max", role="array_ms",
      level="array_latency", screen="latency", digits=2, chart=Chart("array ms", floor=_LAT)),
    F("storage", "storage_disk", "read_await_ms", "storage host read await", "volume", "max",
      level="array_latency", screen="latency", digits=2, chart=Chart("array ms", floor=_LAT)),
    F("storage", "storage_disk", "write_iops", "storage host write IOPS", "volume", screen="IOPS", digits=0,
      chart=Chart("IOPS")),
    F("storage", "storage_disk", "read_iops", "storage host read IOPS", "volume", screen="IOPS", digits=0,
      chart=Chart("IOPS")),
    F("storage", "storage_group", "avg_latency_ms", "storage group latency", "volume", "max", report=False,
      level="array_latency", screen="latency", digits=2, chart=Chart("array ms", floor=_LAT)),
    F("storage", "storage_group", "total_iops", "storage group IOPS", "volume", report=False, screen="IOPS",
      digits=0, chart=Chart("IOPS")),
    F("storage", "storage_node", "cpu_busy_pct", "array node CPU busy", "array", "max", report=False,
      level="cpu_busy", screen="node cpu"),
)
del F

BY_ID: dict[str, Figure] = {f.id: f for f in TABLE}
#: the report's figures, in the table's order
REPORTED: tuple[Figure, ...] = tuple(f for f in TABLE if f.report)
#: the verdict's inputs: role -> the figures that can give it, the first with samples wins
ROLES: dict[str, tuple[Figure, ...]] = {}
_roles: dict[str, list[Figure]] = defaultdict(list)
for _f in TABLE:
    if _f.role is not None:
        _roles[_f.role].append(_f)
ROLES = {role: tuple(figs) for role, figs in _roles.items()}
del _roles, _f


def of_layer(layer: str) -> tuple[Figure, ...]:
    return tuple(f for f in TABLE if f.layer == layer)
