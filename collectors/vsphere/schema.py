"""What the vSphere collector writes. The realtime measurements are derived from the counter table
(collectors/vsphere/counters.py), so a counter added there is declared with it: its field, in the
unit its name carries, means the vCenter counter it comes from. The facts (facts.py) are declared
here too, beside the measurements, as a schema.toml would."""

from __future__ import annotations

from db2vtop.agent.core.schema import FactKind, Field, Measurement, Schema, fields, keys
from db2vtop.collectors.vsphere.counters import HOST_COUNTERS, VM_COUNTERS, Counter
from db2vtop.collectors.vsphere.counters import MEASUREMENT_OF as BY_GROUP

_VM = {"vcenter": "the [[vcenter]] name", "vm": "the VM's display name",
       "host": "the ESXi host running the VM at the sample's time", "cluster": "the host's cluster"}
_HOST = {"vcenter": "the [[vcenter]] name", "host": "the ESXi host", "cluster": "the host's cluster"}
_INSTANCE = {"instance": "the counter instance: virtual disk (scsi0:1) or vNIC key"}
TAGS = {
    "vsphere_vm": _VM,
    "vsphere_vm_disk": {**_VM, **_INSTANCE, "datastore": "the virtual disk's datastore",
                        "lun": "the canonical names (naa.…) of the datastore's LUNs, or the RDM's, comma-separated"},
    "vsphere_vm_net": {**_VM, **_INSTANCE}, "vsphere_host": _HOST,
    "vsphere_host_lun": {**_HOST, "lun": "the LUN's canonical name (naa.…, eui.…, t10.…, mpx.…)",
                         "datastore": "the datastore on the LUN"},
    "vsphere_datastore": {**_HOST, "datastore": "the datastore"},
}
DOCS = {
    "vsphere_vm": "A VM's CPU and memory, from vCenter's realtime (20 s) counters.",
    "vsphere_vm_disk": "Each virtual disk's I/O and latency (what the guest's I/O costs on the host).",
    "vsphere_vm_net": "Each vNIC's throughput and drops.",
    "vsphere_host": "A host's CPU and memory.",
    "vsphere_host_lun": "Each LUN as the host sees it: DAVG/KAVG/QAVG/GAVG and queue depth.",
    "vsphere_datastore": "Each datastore as the host sees it.",
}


def _realtime() -> tuple[Measurement, ...]:
    """Every (entity, counter group, per instance) row of the counter table as a measurement."""
    found: dict[str, dict[str, Field]] = {}
    for entity, counters in (("vm", VM_COUNTERS), ("host", HOST_COUNTERS)):
        for c in counters:
            group = c.name.split(".", 1)[0]
            for per_row in (False, True) if c.per_instance else (False,):
                name = BY_GROUP.get((entity, group, per_row))
                if name is not None:
                    found.setdefault(name, {})[c.field] = Field(c.field, _meaning(c))
    found["vsphere_vm"]["vcpus"] = Field("vcpus", "the VM's virtual CPUs (per-vCPU figures are divided by it)")
    return tuple(Measurement(name, DOCS[name], TAGS[name], tuple(found[name].values())) for name in DOCS)


def _meaning(c: Counter) -> str:
    per = {"ms_pct": ", as % of the 20 s interval per vCPU", "per_s": ", per second"}.get(c.convert, "")
    if c.quick:
        per += f" reaching back; a steady cycle's newest sample, quickStats.{c.quick} (the same level)"
    return f"vCenter `{c.name}`{per}"


#: vCenter's own figures (its clock), beside its VMs' and hosts'
CLOCK_MEASUREMENT = "vsphere_vcenter"

MEASUREMENTS = (
    *_realtime(),
    Measurement(
        CLOCK_MEASUREMENT,
        "vCenter's own clock, read each cycle (CurrentTime): its samples are dated by it, the agent's other "
        "sources by the agent's clock.",
        {"vcenter": "the [[vcenter]] name"},
        fields(clock_offset_ms="vCenter's clock minus the agent's (positive: vCenter is ahead), taken against the "
                               "middle of the call"),
    ),
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

_ALLOCATION = "(-1 or absent: unlimited)"
FACTS = (
    FactKind(
        "vsphere_vm", "A VM's configuration: placement, sizing, resource allocation, devices, tools.",
        {"vcenter": "the [[vcenter]] name", "vm": "the VM's display name"},
        keys(moid=("string", "the VM's managed object id"), host=("string", "the ESXi host running it"),
             host_moid=("string", "the host's managed object id"), cluster=("string", "the host's cluster"),
             identity=("string", "a digest of what the fact was read from (a restart re-reads only VMs whose "
                                 "digest moved)"),
             power_state=("string", "`poweredOn`, `poweredOff` or `suspended`"),
             num_cpu=("number", "virtual CPUs"), cores_per_socket=("number", "cores per virtual socket"),
             sockets=("number", "virtual sockets"), memory_mb=("number", "configured memory", "MiB"),
             cpu_reservation_mhz=("number", "CPU reservation"),
             cpu_limit_mhz=("number", f"CPU limit {_ALLOCATION}"),
             cpu_shares=("number", "CPU shares"), cpu_shares_level=("string", "`low`, `normal`, `high` or `custom`"),
             mem_reservation_mb=("number", "memory reservation", "MiB"),
             mem_limit_mb=("number", f"memory limit {_ALLOCATION}", "MiB"),
             mem_shares=("number", "memory shares"), mem_shares_level=("string", "`low`, `normal`, `high` or `custom`"),
             mem_reservation_locked_to_max=("bool", "reserve all guest memory"),
             latency_sensitivity=("string", "`normal`, `high`, ..."), cpu_hot_add=("bool", "CPU hot add enabled "
                                                                                           "(disables vNUMA)"),
             hw_version=("string", "the virtual hardware version (`vmx-19`)"),
             tools_running_status=("string", "VMware Tools running status"),
             tools_version_status=("string", "VMware Tools version status"),
             tools_version=("string", "VMware Tools version"),
             nics=("list", "each vNIC: key, type (`vmxnet3`, `e1000e`, ...), label"),
             scsi_controllers=("list", "each SCSI controller: key, bus, type (`pvscsi`, `lsilogic-sas`, ...)"),
             disks=("list", "each virtual disk: instance (scsi0:1), label, capacity_bytes, backing (`thin`, "
                            "`lazy_zeroed`, `eager_zeroed`, `rdm`), datastore, luns (canonical names), file, "
                            "controller"),
             swap_placement=("string", "where the VM's swap file goes"),
             guest_hostname=("string", "the guest's host name, from VMware Tools"),
             ip_addresses=("list", "the guest's IP addresses, from VMware Tools")),
    ),
    FactKind(
        "vsphere_host", "An ESXi host: CPU and NUMA layout, power policy, storage paths, networking, its VMs' totals.",
        {"vcenter": "the [[vcenter]] name", "host": "the ESXi host"},
        keys(moid=("string", "the host's managed object id"), cluster=("string", "its cluster"),
             cpu_model=("string", "the CPU model"), cpu_mhz=("number", "the CPU's clock", "MHz"),
             cpu_sockets=("number", "CPU packages"), cpu_cores=("number", "physical cores"),
             cpu_threads=("number", "logical CPUs (hyperthreads)"),
             hyperthreading_available=("bool", "hyperthreading available"),
             hyperthreading_active=("bool", "hyperthreading active"),
             power_policy=("string", "the power policy's short name (`static` = High Performance)"),
             memory_bytes=("number", "physical memory"), numa_nodes=("number", "NUMA nodes"),
             numa=("list", "each NUMA node: node, cpus, memory_bytes"),
             esxi_version=("string", "ESXi version"), esxi_build=("string", "ESXi build"),
             luns=("list", "each storage device: lun (its canonical name: naa.…, eui.…, t10.…, mpx.…), uuid (the SCSI "
                           "UUID multipathInfo keys it by), type (`disk`, `cdrom`, ...), local, datastore, "
                           "queue_depth, plugin (`NMP`, `HPP`), policy (path selection: `VMW_PSP_RR`, ...; HPP's "
                           "scheme: `LB-RR`, `FIXED`, ...), satp (none under HPP), paths_total, paths_active, "
                           "paths"),
             vswitches=("list", "each standard vSwitch: name, mtu"),
             vmknics=("list", "each VMkernel NIC: device, portgroup, mtu"),
             datastores=("list", "the datastores it mounts"),
             vms_powered_on=("number", "VMs powered on"), vms=("list", "their names"),
             vcpus_powered_on=("number", "their virtual CPUs"),
             vm_memory_mb_powered_on=("number", "their configured memory", "MiB")),
    ),
    FactKind(
        "vsphere_datastore", "A datastore and the LUNs behind it.",
        {"vcenter": "the [[vcenter]] name", "datastore": "the datastore"},
        keys(moid=("string", "the datastore's managed object id"), type=("string", "`VMFS`, `NFS`, `vsan`, ..."),
             capacity_bytes=("number", "capacity"), free_bytes=("number", "free space"),
             url=("string", "the datastore's URL"), vmfs_uuid=("string", "VMFS: the volume's UUID"),
             vmfs_version=("string", "VMFS: its version"), nas_remote=("string", "NFS: host:path"),
             luns=("list", "VMFS: the canonical names of its extents"), hosts=("list", "the hosts that mount it"),
             vms=("list", "the VMs with files on it (its neighbours: who shares its I/O)")),
    ),
)

SCHEMA = Schema(MEASUREMENTS, FACTS)
