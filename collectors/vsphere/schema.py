"""What the vSphere collector writes. The realtime measurements are derived from the counter table
(collectors/vsphere/counters.py), so a counter added there is declared with it: its field, in the
unit its name carries, means the vCenter counter it comes from."""

from __future__ import annotations

from db2vtop.agent.core.schema import Field, Measurement, Schema, fields
from db2vtop.collectors.vsphere.counters import HOST_COUNTERS, VM_COUNTERS, Counter
from db2vtop.collectors.vsphere.counters import MEASUREMENTS as BY_GROUP

_VM = {"vcenter": "the [[vcenter]] name", "vm": "the VM's display name",
       "host": "the ESXi host running the VM at the sample's time", "cluster": "the host's cluster"}
_HOST = {"vcenter": "the [[vcenter]] name", "host": "the ESXi host", "cluster": "the host's cluster"}
_INSTANCE = {"instance": "the counter instance: vCPU number, virtual disk (scsi0:1) or vNIC"}
TAGS = {
    "vsphere_vm": _VM, "vsphere_vm_cpu": {**_VM, **_INSTANCE},
    "vsphere_vm_disk": {**_VM, **_INSTANCE, "datastore": "the virtual disk's datastore",
                        "lun": "the datastore's LUN NAA ids, comma-separated"},
    "vsphere_vm_net": {**_VM, **_INSTANCE}, "vsphere_host": _HOST,
    "vsphere_host_lun": {**_HOST, "lun": "the LUN's NAA id", "datastore": "the datastore on the LUN"},
    "vsphere_datastore": {**_HOST, "datastore": "the datastore"},
}
DOCS = {
    "vsphere_vm": "A VM's CPU and memory, from vCenter's realtime (20 s) counters.",
    "vsphere_vm_cpu": "Each vCPU's ready and co-stop time.",
    "vsphere_vm_disk": "Each virtual disk's I/O and latency (what the guest's I/O costs on the host).",
    "vsphere_vm_net": "Each vNIC's throughput and drops.",
    "vsphere_host": "A host's CPU and memory.",
    "vsphere_host_lun": "Each LUN as the host sees it: DAVG/KAVG/QAVG/GAVG and queue depth.",
    "vsphere_datastore": "Each datastore as the host sees it.",
}


def _realtime() -> tuple[Measurement, ...]:
    """Every (entity kind, counter group, per instance) row of the counter table as a measurement."""
    found: dict[str, dict[str, Field]] = {}
    for kind, counters in (("vm", VM_COUNTERS), ("host", HOST_COUNTERS)):
        for c in counters:
            group = c.name.split(".", 1)[0]
            for per_row in (False, True) if c.per_instance else (False,):
                name = BY_GROUP.get((kind, group, per_row))
                if name is not None:
                    field = c.field.removeprefix("cpu_") if name == "vsphere_vm_cpu" else c.field
                    found.setdefault(name, {})[field] = Field(field, _meaning(c))
    found["vsphere_vm"]["vcpus"] = Field("vcpus", "the VM's virtual CPUs (per-vCPU figures are divided by it)")
    return tuple(Measurement(name, DOCS[name], TAGS[name], tuple(found[name].values())) for name in DOCS)


def _meaning(c: Counter) -> str:
    per = {"ms_pct": ", as % of the 20 s interval per vCPU", "per_s": ", per second"}.get(c.convert, "")
    return f"vCenter `{c.name}`{per}"


MEASUREMENTS = (
    *_realtime(),
    Measurement(
        "vsphere_vm_quickstats",
        "A VM's quick statistics from the inventory (no performance query), every cycle.",
        _VM,
        fields("cpu_usage_mhz", balloon_bytes="quickStats.balloonedMemory",
               compressed_bytes="quickStats.compressedMemory",
               guest_mem_usage_bytes="quickStats.guestMemoryUsage (active memory)",
               host_mem_usage_bytes="quickStats.hostMemoryUsage (consumed)",
               overhead_bytes="quickStats.consumedOverheadMemory", swapped_bytes="quickStats.swappedMemory"),
    ),
    Measurement(
        "vsphere_host_quickstats",
        "A host's quick statistics from the inventory.",
        _HOST,
        fields(cpu_usage_mhz="quickStats.overallCpuUsage", mem_usage_bytes="quickStats.overallMemoryUsage"),
    ),
)

SCHEMA = Schema(MEASUREMENTS)
