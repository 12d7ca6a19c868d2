"""The realtime counters db2vtop reads, and how each becomes a field.

vCenter names a counter `group.name.rollup` and reports it in raw units: percent in
hundredths, summation counters in milliseconds (or events) per sample, memory in KB,
rates in KBps. Each Counter says which instances to ask for and how to normalise once,
here, into the unit its field name carries.
"""

from __future__ import annotations

from dataclasses import dataclass

# conversions
PCT100 = "pct100"      # hundredths of a percent -> percent
MS_PCT = "ms_pct"      # ms of the sample interval -> % of it, per vCPU (per logical CPU on a host)
KB = "kb"              # KB -> bytes
KBPS = "kbps"          # KBps -> bytes per second
PER_S = "per_s"        # events per sample -> per second
RAW = "raw"            # already in the field's unit (ms latency, IOPS, OIO, queue depth, state)


@dataclass(frozen=True, slots=True)
class Counter:
    name: str            # group.name.rollup
    field: str           # field name, unit included
    convert: str
    per_instance: bool   # ask for every instance ("*") rather than the aggregate ("")
    #: the VM quickStats property (MB) that gives the same level every cycle: the counter is asked only when
    #: reaching back (an entity's history, a gap, a lookback), a steady cycle's newest sample takes quickStats'
    quick: str = ""


def _c(name: str, field: str, convert: str, per_instance: bool = False, quick: str = "") -> Counter:
    return Counter(name, field, convert, per_instance, quick)


def _io(group: str, throughput: bool = True, latency: bool = True) -> tuple[Counter, ...]:
    """Per-instance I/O counters that virtual disks, LUNs and datastores share."""
    out = [_c(f"{group}.numberReadAveraged.average", "read_iops", RAW, True),
           _c(f"{group}.numberWriteAveraged.average", "write_iops", RAW, True)]
    if throughput:
        out += [_c(f"{group}.read.average", "read_bytes_per_s", KBPS, True),
                _c(f"{group}.write.average", "write_bytes_per_s", KBPS, True)]
    if latency:
        out += [_c(f"{group}.totalReadLatency.average", "read_latency_ms", RAW, True),
                _c(f"{group}.totalWriteLatency.average", "write_latency_ms", RAW, True)]
    return tuple(out)


_SWAP_RATES = (
    _c("mem.swapinRate.average", "mem_swapin_bytes_per_s", KBPS),
    _c("mem.swapoutRate.average", "mem_swapout_bytes_per_s", KBPS),
)

# Only what the rules, the verdict, the report and the TUI read (tests/collectors/vsphere/test_vsphere_counters.py
# holds each counter to a reader), and of a VM nothing its light inventory already gives every cycle: a VM's active and
# compressed memory are its quickStats (vsphere_vm_quickstats). Every counter is a metric id per entity in
# every QueryPerf request, which vCenter parses for each VM each cycle. CPU ready and co-stop are asked for
# the VM as a whole (the instance ""): nothing reads a single vCPU's, and "*" would bring one series per
# vCPU. A VM's balloon, swapped and consumed memory are asked only when reaching back (triage reads their
# last hour, which only the counters keep; the verdict's memory culprits read the consumed): each steady
# cycle's light inventory has them as quickStats.
VM_COUNTERS: tuple[Counter, ...] = (
    _c("cpu.usage.average", "cpu_usage_pct", PCT100),
    _c("cpu.ready.summation", "cpu_ready_pct", MS_PCT),
    _c("cpu.costop.summation", "cpu_costop_pct", MS_PCT),
    _c("cpu.maxlimited.summation", "cpu_maxlimited_pct", MS_PCT),
    _c("cpu.swapwait.summation", "cpu_swapwait_pct", MS_PCT),
    _c("mem.vmmemctl.average", "mem_balloon_bytes", KB, quick="balloonedMemory"),
    *_SWAP_RATES,
    _c("mem.vmmemctltarget.average", "mem_balloon_target_bytes", KB),
    _c("mem.swapped.average", "mem_swapped_bytes", KB, quick="swappedMemory"),
    _c("mem.consumed.average", "mem_consumed_bytes", KB, quick="hostMemoryUsage"),
    *_io("virtualDisk"),
    _c("virtualDisk.readOIO.latest", "read_oio", RAW, True),
    _c("virtualDisk.writeOIO.latest", "write_oio", RAW, True),
    _c("net.received.average", "rx_bytes_per_s", KBPS, True),
    _c("net.transmitted.average", "tx_bytes_per_s", KBPS, True),
    _c("net.droppedRx.summation", "rx_drops_per_s", PER_S, True),
    _c("net.droppedTx.summation", "tx_drops_per_s", PER_S, True),
)

HOST_COUNTERS: tuple[Counter, ...] = (
    _c("cpu.usage.average", "cpu_usage_pct", PCT100),
    _c("cpu.ready.summation", "cpu_ready_pct", MS_PCT),
    _c("mem.state.latest", "mem_state", RAW),
    _c("mem.vmmemctl.average", "mem_balloon_bytes", KB),
    *_SWAP_RATES,
    _c("mem.swapused.average", "mem_swap_used_bytes", KB),
    _c("disk.deviceLatency.average", "device_latency_ms", RAW, True),
    _c("disk.kernelLatency.average", "kernel_latency_ms", RAW, True),
    _c("disk.queueLatency.average", "queue_latency_ms", RAW, True),
    _c("disk.totalLatency.average", "total_latency_ms", RAW, True),
    _c("disk.maxQueueDepth.average", "max_queue_depth", RAW, True),
    *_io("disk", throughput=False, latency=False),   # per LUN; its latencies are the DAVG/KAVG/QAVG/GAVG above
    *_io("datastore", throughput=False),
)

#: (entity kind, counter group, per-instance row) -> the measurement its counters go to (schema.py MEASUREMENTS
#: declares the measurements themselves)
MEASUREMENT_OF = {
    ("vm", "cpu", False): "vsphere_vm", ("vm", "mem", False): "vsphere_vm",
    ("vm", "virtualDisk", True): "vsphere_vm_disk",
    ("vm", "net", True): "vsphere_vm_net",
    ("host", "cpu", False): "vsphere_host", ("host", "mem", False): "vsphere_host",
    ("host", "disk", True): "vsphere_host_lun",
    ("host", "datastore", True): "vsphere_datastore",
}


def convert(kind: str, raw: int, interval_s: int, cpus: int) -> float | int:
    """One raw vCenter value in the unit of its field. `cpus` is 1 for a per-vCPU row."""
    if kind == PCT100:
        return raw / 100.0
    if kind == MS_PCT:
        return raw / (interval_s * 1000.0) * 100.0 / max(cpus, 1)
    if kind in (KB, KBPS):
        return raw * 1024
    if kind == PER_S:
        return raw / interval_s
    return raw
