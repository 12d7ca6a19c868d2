"""Facts for the static checks, and the maps that tag perf rows with datastore and LUN."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Any

from db2vtop.agent.core.model import Fact, shared_strings
from db2vtop.collectors.vsphere.inventory import VM, FullRead, Host, Rows, identity, vm_from
from db2vtop.collectors.vsphere.soapxml import Node, Ref, as_list, to_bool, to_int

# Every concrete device class of the vim25 API (8.0.3) under VirtualEthernetCard, VirtualSCSIController and
# the disk controllers, by the xsi:type vCenter gives it.
NIC_TYPES = {"VirtualVmxnet3": "vmxnet3", "VirtualVmxnet3Vrdma": "vmxnet3-vrdma", "VirtualVmxnet2": "vmxnet2",
             "VirtualVmxnet": "vmxnet", "VirtualE1000e": "e1000e", "VirtualE1000": "e1000",
             "VirtualPCNet32": "pcnet32", "VirtualSriovEthernetCard": "sriov"}
SCSI_TYPES = {"ParaVirtualSCSIController": "pvscsi", "VirtualLsiLogicSASController": "lsilogic-sas",
              "VirtualLsiLogicController": "lsilogic", "VirtualBusLogicController": "buslogic"}
#: a disk controller's class -> the prefix of its disks' counter instance (scsi0:1, ide0:0, sata0:0, nvme0:0)
CONTROLLER_PREFIX = {**dict.fromkeys(SCSI_TYPES, "scsi"), "VirtualIDEController": "ide",
                     "VirtualSATAController": "sata", "VirtualAHCIController": "sata", "VirtualNVMEController": "nvme"}


@dataclass
class TagMaps:
    """What perf rows need beyond the light inventory, from the last facts pass."""

    ds_by_uuid: dict[str, str] = field(default_factory=dict)         # datastore perf instance -> name
    ds_luns: dict[str, list[str]] = field(default_factory=dict)      # datastore -> its extents' canonical names
    #: host moid -> LUN canonical name -> the datastore on it that the host mounts (an mpx. name is the host's own:
    #: the same name on two hosts is two devices)
    lun_ds: dict[str, dict[str, str]] = field(default_factory=dict)
    vm_disks: dict[str, dict[str, tuple[str, str]]] = field(default_factory=dict)  # vm moid -> instance -> (ds, lun)
    vm_nic: dict[str, str] = field(default_factory=dict)  # vm moid -> the perf instance of its only vNIC

    def set_vm(self, moid: str, disks: dict[str, tuple[str, str]], nics: list) -> None:
        """A VM's disk tags and vNIC, from its fact's devices (`nics`: each with its device `key`). Only a VM
        with exactly one vNIC of a known key has one here; the others are asked for every instance ("*")."""
        self.vm_disks[moid] = disks
        key = nics[0].get("key") if len(nics) == 1 else None
        if key is None:
            self.vm_nic.pop(moid, None)
        else:
            self.vm_nic[moid] = sys.intern(str(key))

    def forget_vm(self, moid: str) -> None:
        self.vm_disks.pop(moid, None)
        self.vm_nic.pop(moid, None)

    def add_vms_of(self, older: TagMaps) -> None:
        """Keep the per-VM and per-host maps of the VMs and hosts this pass did not read (this pass's win where
        both have one)."""
        self.vm_disks = {**older.vm_disks, **self.vm_disks}
        self.vm_nic = {**older.vm_nic, **self.vm_nic}
        self.lun_ds = {**older.lun_ds, **self.lun_ds}


def _alloc(a: Any) -> dict:
    if not isinstance(a, Node):
        return {}
    shares = a.get("shares") if isinstance(a.get("shares"), Node) else {}
    return {"reservation": to_int(a.get("reservation")), "limit": to_int(a.get("limit")),
            "shares": to_int(shares.get("shares")), "shares_level": shares.get("level")}


def _disk_backing(b: Node | dict) -> str:
    if b.get("_type") == "VirtualDiskRawDiskMappingVer1BackingInfo":
        return "rdm"
    if to_bool(b.get("thinProvisioned")):
        return "thin"
    if to_bool(b.get("eagerlyScrub")):
        return "eager_zeroed"
    return "lazy_zeroed"


def _label(d: Node) -> str | None:
    info = d.get("deviceInfo")
    return info.get("label") if isinstance(info, Node) else None


class FactsBuilder:
    """The facts pass, one object at a time: datastores first (VM disks name them), then each VM row as
    it is read (its fact and inventory entry made at once, the row then dropped: a page of parsed XML is
    the most ever held), then the hosts with their VMs' totals. The hosts' rows are read before the VMs'
    (an RDM names its LUN by the SCSI UUID its host's devices resolve)."""

    def __init__(self, vcenter: str, hosts: dict[str, Host], host_rows: Rows, ds_rows: Rows, ts: int,
                 names: dict[str, str] | None = None):
        self.vcenter, self.hosts, self.host_rows, self.ts = vcenter, hosts, host_rows, ts
        self.maps = TagMaps()
        self.ds_names: dict[str, str] = {}
        self.facts: list[Fact] = []
        self.vms: dict[str, VM] = {}
        self.names = names or {}  # VM moid -> name of VMs this pass reads no row of
        self.per_host: dict[str, dict[str, Any]] = {}
        self.ds_vms: list[tuple[Fact, list[str]]] = []  # each datastore's fact and the moids of its VMs
        #: host moid -> SCSI UUID -> canonical name, of each host's devices
        self.uuids = {obj.value: {d.get("uuid"): d.get("canonicalName") for d in _scsi_luns(p) if d.get("uuid")}
                      for obj, p in host_rows if obj.type == "HostSystem"}
        for obj, p in ds_rows:
            self.facts.append(self._datastore(obj, p))
        for obj, p in host_rows:  # known before any perf is tagged (a first cycle asks while VMs are read)
            if obj.type == "HostSystem":
                self.maps.lun_ds[obj.value] = {lun: ds for ds in _mounted(p, self.ds_names)
                                               for lun in self.maps.ds_luns.get(ds, ())}

    def _datastore(self, obj: Ref, p: dict) -> Fact:
        maps, hosts = self.maps, self.hosts
        name = p.get("name") or obj.value
        self.ds_names[obj.value] = name
        info = p.get("info") if isinstance(p.get("info"), Node) else {}
        data: dict[str, Any] = {"moid": obj.value, "type": p.get("summary.type"),
                                "capacity_bytes": to_int(p.get("summary.capacity")),
                                "free_bytes": to_int(p.get("summary.freeSpace")), "url": info.get("url")}
        luns: list[str] = []
        vmfs = info.get("vmfs")
        if isinstance(vmfs, Node):
            luns = [e.get("diskName") for e in as_list(vmfs.get("extent")) if e.get("diskName")]
            if vmfs.get("uuid"):
                maps.ds_by_uuid[vmfs.get("uuid")] = name
            data["vmfs_uuid"], data["vmfs_version"] = vmfs.get("uuid"), vmfs.get("version")
        nas = info.get("nas")
        if isinstance(nas, Node):
            data["nas_remote"] = f"{nas.get('remoteHost')}:{nas.get('remotePath')}"
        maps.ds_by_uuid.setdefault(name, name)
        data["luns"] = luns
        data["hosts"] = sorted(hosts[m.get("key").value].name for m in as_list(p.get("host"))
                               if isinstance(m, Node) and isinstance(m.get("key"), Ref) and m.get("key").value in hosts)
        maps.ds_luns[name] = luns
        fact = Fact("vsphere_datastore", {"vcenter": self.vcenter, "datastore": name}, shared_strings(data), self.ts)
        self.ds_vms.append((fact, [v.value for v in as_list(p.get("vm")) if isinstance(v, Ref)]))
        return fact

    def count(self, obj: Ref, p: dict) -> VM:
        """A VM's inventory entry, and its share of its host's totals (a light row carries enough)."""
        vm = vm_from(obj, p)
        self.vms[obj.value] = vm
        if vm.powered_on and vm.host in self.hosts:
            agg = self.per_host.setdefault(vm.host, {"vms_powered_on": 0, "vcpus_powered_on": 0,
                                                     "vm_memory_mb_powered_on": 0, "vms": []})
            agg["vms_powered_on"] += 1
            agg["vms"].append(vm.name)
            agg["vcpus_powered_on"] += vm.vcpus
            agg["vm_memory_mb_powered_on"] += to_int(p.get("config.hardware.memoryMB"), 0) or 0
        return vm

    def _name_of(self, moid: str) -> str | None:
        vm = self.vms.get(moid)
        return vm.name if vm is not None else self.names.get(moid)

    def add_vm(self, obj: Ref, p: dict, counted: bool = False) -> Fact:
        """A VM's full row: its fact, returned (and, unless `counted` already, its inventory entry and
        totals)."""
        vm = self.vms[obj.value] if counted and obj.value in self.vms else self.count(obj, p)
        fact = _vm_fact(self.vcenter, vm, self.hosts.get(vm.host), obj, p, self.ds_names, self.maps,
                        self.uuids.get(vm.host, {}), self.ts)
        self.facts.append(fact)
        return fact

    def finish(self) -> tuple[list[Fact], TagMaps]:
        """The hosts' facts, and each datastore's VMs by name (known once every VM is counted)."""
        for fact, moids in self.ds_vms:
            fact.data["vms"] = sorted({name for m in moids if (name := self._name_of(m))})
        for obj, p in self.host_rows:
            if obj.value in self.hosts:
                self.facts.append(_host_fact(self.vcenter, self.hosts[obj.value], p, self.ds_names, self.maps,
                                             self.per_host.get(obj.value, {}), self.ts))
        return self.facts, self.maps


def build_facts(vcenter: str, read: FullRead, ts: int) -> tuple[list[Fact], TagMaps]:
    """Facts and tag maps from rows already read (every VM's light row in agg_rows when vm_rows holds
    only some)."""
    b = FactsBuilder(vcenter, read.inventory.hosts, read.host_rows, read.ds_rows, ts, read.names)
    if read.agg_rows:
        for obj, p in read.agg_rows:
            b.count(obj, p)
    for obj, p in read.vm_rows:
        b.add_vm(obj, p, counted=bool(read.agg_rows))
    return b.finish()


def rdm_lun(b: Node | dict, uuids: dict[str, str]) -> str:
    """The canonical name of an RDM's LUN. Its backing names the device by the host's path to it
    (`/vmfs/devices/disks/vml.<uuid>` on real hosts) and by `lunUuid`; the VM's host resolves the UUID (as
    its scsiLun lists it) to the canonical name. Unresolved (its host's devices not read), the path's name."""
    device = str(b.get("deviceName") or "").rsplit("/", 1)[-1]
    uuid = b.get("lunUuid") or device.removeprefix("vml.")
    return uuids.get(uuid) or device


def _devices(p: dict, ds_names: dict[str, str], maps: TagMaps,
             uuids: dict[str, str]) -> tuple[list, list, list, dict]:
    devices = [d for d in as_list(p.get("config.hardware.device")) if isinstance(d, Node)]
    controllers = {d.get("key"): d for d in devices if "busNumber" in d}
    nics, scsi, disks = [], [], []
    vm_disks: dict[str, tuple[str, str]] = {}
    for d in devices:
        t = d.type
        if t in NIC_TYPES:
            nics.append({"key": to_int(d.get("key")), "type": NIC_TYPES[t], "label": _label(d)})
        elif t in SCSI_TYPES:
            scsi.append({"key": to_int(d.get("key")), "bus": to_int(d.get("busNumber")), "type": SCSI_TYPES[t]})
        elif t == "VirtualDisk":
            ctrl = controllers.get(d.get("controllerKey"), {})
            prefix = CONTROLLER_PREFIX.get(ctrl.type, "disk") if isinstance(ctrl, Node) else "disk"
            instance = sys.intern(f"{prefix}{ctrl.get('busNumber', 0)}:{d.get('unitNumber', 0)}")
            b = d.get("backing")
            if not isinstance(b, Node):
                b = {}
            ds_ref = b.get("datastore")
            ds = ds_names.get(ds_ref.value, "") if isinstance(ds_ref, Ref) else ""
            backing = _disk_backing(b)
            if backing == "rdm":
                lun = rdm_lun(b, uuids)
                luns = [lun] if lun else []
            else:
                luns = maps.ds_luns.get(ds, [])
            capacity = to_int(d.get("capacityInBytes")) or (to_int(d.get("capacityInKB"), 0) or 0) * 1024
            ctype = ctrl.get("_type", "")
            disks.append({"instance": instance, "label": _label(d), "capacity_bytes": capacity, "backing": backing,
                          "datastore": ds, "luns": luns, "file": b.get("fileName"),
                          "controller": SCSI_TYPES.get(ctype, ctype) or None})
            vm_disks[instance] = (ds, sys.intern(",".join(luns)))  # held per VM disk for the process's life
    return nics, scsi, disks, vm_disks


def _vm_fact(vcenter: str, vm: VM, host: Host | None, obj: Ref, p: dict, ds_names: dict[str, str], maps: TagMaps,
             uuids: dict[str, str], ts: int) -> Fact:
    nics, scsi, disks, vm_disks = _devices(p, ds_names, maps, uuids)
    maps.set_vm(obj.value, vm_disks, nics)
    cpu, mem = _alloc(p.get("config.cpuAllocation")), _alloc(p.get("config.memoryAllocation"))
    cores = to_int(p.get("config.hardware.numCoresPerSocket"), 1) or 1
    memory_mb = to_int(p.get("config.hardware.memoryMB"), 0) or 0
    ips = {ip for n in as_list(p.get("guest.net")) if isinstance(n, Node) for ip in as_list(n.get("ipAddress"))}
    if p.get("guest.ipAddress"):
        ips.add(p["guest.ipAddress"])
    data = {
        "moid": obj.value, "host": host.name if host else "", "host_moid": vm.host,
        "cluster": host.cluster if host else "", "identity": identity(p),
        "power_state": p.get("runtime.powerState"), "num_cpu": vm.vcpus, "cores_per_socket": cores,
        "sockets": max(vm.vcpus // cores, 1), "memory_mb": memory_mb,
        "cpu_reservation_mhz": cpu.get("reservation"), "cpu_limit_mhz": cpu.get("limit"),
        "cpu_shares": cpu.get("shares"), "cpu_shares_level": cpu.get("shares_level"),
        "mem_reservation_mb": mem.get("reservation"), "mem_limit_mb": mem.get("limit"),
        "mem_shares": mem.get("shares"), "mem_shares_level": mem.get("shares_level"),
        "mem_reservation_locked_to_max": to_bool(p.get("config.memoryReservationLockedToMax")),
        "latency_sensitivity": p.get("config.latencySensitivity.level") or "",
        "cpu_hot_add": to_bool(p.get("config.cpuHotAddEnabled")), "hw_version": p.get("config.version"),
        "tools_running_status": p.get("guest.toolsRunningStatus"),
        "tools_version_status": p.get("guest.toolsVersionStatus2"), "tools_version": p.get("guest.toolsVersion"),
        "nics": nics, "scsi_controllers": scsi, "disks": disks, "swap_placement": p.get("config.swapPlacement"),
        "guest_hostname": p.get("guest.hostName"), "ip_addresses": sorted(ips),
    }
    # held by the check engine for the process's life, and 10,000 of them at once by a first pass
    return Fact("vsphere_vm", {"vcenter": vcenter, "vm": vm.name}, shared_strings(data), ts)


def _host_fact(vcenter: str, host: Host, p: dict, ds_names: dict[str, str], maps: TagMaps, agg: dict,
               ts: int) -> Fact:
    numa = p.get("hardware.numaInfo") if isinstance(p.get("hardware.numaInfo"), Node) else {}
    nodes = [{"node": to_int(n.get("typeId")), "cpus": len(as_list(n.get("cpuID"))),
              "memory_bytes": to_int(n.get("memoryRangeLength")) or to_int(n.get("memorySize"))}
             for n in as_list(numa.get("numaNode")) if isinstance(n, Node)]
    ht = p.get("config.hyperThread") if isinstance(p.get("config.hyperThread"), Node) else None
    luns = host_luns(p, maps.lun_ds.get(host.moid, {}))
    data = {
        "moid": host.moid, "cluster": host.cluster, "cpu_model": p.get("summary.hardware.cpuModel"),
        "cpu_mhz": to_int(p.get("summary.hardware.cpuMhz")),
        "cpu_sockets": to_int(p.get("summary.hardware.numCpuPkgs")),
        "cpu_cores": to_int(p.get("summary.hardware.numCpuCores")), "cpu_threads": host.threads,
        "hyperthreading_available": to_bool(ht.get("available")) if ht else None,
        "hyperthreading_active": to_bool(ht.get("active")) if ht else None,
        "power_policy": p.get("config.powerSystemInfo.currentPolicy.shortName"),
        "memory_bytes": to_int(p.get("hardware.memorySize")), "numa_nodes": to_int(numa.get("numNodes")),
        "numa": nodes, "esxi_version": p.get("config.product.version"), "esxi_build": p.get("config.product.build"),
        "luns": luns,
        "vswitches": [{"name": v.get("name"), "mtu": to_int(v.get("mtu"))}
                      for v in as_list(p.get("config.network.vswitch")) if isinstance(v, Node)],
        "vmknics": [{"device": v.get("device"), "portgroup": v.get("portgroup"),
                     "mtu": to_int((v.get("spec") or {}).get("mtu"))}
                    for v in as_list(p.get("config.network.vnic")) if isinstance(v, Node)],
        "datastores": sorted(_mounted(p, ds_names)),
        "vms_powered_on": agg.get("vms_powered_on", 0), "vms": sorted(agg.get("vms", ())),
        "vcpus_powered_on": agg.get("vcpus_powered_on", 0),
        "vm_memory_mb_powered_on": agg.get("vm_memory_mb_powered_on", 0),
    }
    return Fact("vsphere_host", {"vcenter": vcenter, "host": host.name}, shared_strings(data), ts)


def _mounted(p: dict, ds_names: dict[str, str]) -> list[str]:
    """The datastores a host mounts, by name."""
    return [ds_names.get(d.value, d.value) for d in as_list(p.get("datastore")) if isinstance(d, Ref)]


def _scsi_luns(p: dict) -> list[Node]:
    return [d for d in as_list(p.get("config.storageDevice.scsiLun")) if isinstance(d, Node)]


#: HostMultipathInfoLogicalUnitPolicy's subclass for a device the High-Performance Plug-in claims (API 7.0)
HPP_POLICY = "HostMultipathInfoHppLogicalUnitPolicy"
#: the HPP's path selection schemes (the API reference spells the last `LB--Latency`): an API older than 7.0 gives an
#: HPP device's policy as the base type, with one of these and no SATP
HPP_SCHEMES = ("FIXED", "LB-RR", "LB-IOPS", "LB-BYTES", "LB-Latency", "LB--Latency")


def host_luns(p: dict, lun_ds: dict[str, str]) -> list[dict]:
    """Each storage device of a host as the host names it. multipathInfo's logical units carry the paths and
    policies; each is the device whose scsiLun `key` its `lun` names, and the device's name is that scsiLun's
    `canonicalName` (naa./eui./t10./mpx./vml.). The logical unit's `id` is the SCSI UUID on every real host, kept
    as `uuid`. `lun_ds`: the datastore on each (its VMFS extents), of those the host mounts."""
    devices = {d.get("key"): d for d in _scsi_luns(p)}
    mp = p.get("config.storageDevice.multipathInfo")
    out = []
    for unit in as_list(mp.get("lun")) if isinstance(mp, Node) else ():
        if not isinstance(unit, Node):
            continue
        device = devices.get(unit.get("lun"))
        device = device if isinstance(device, Node) else {}
        name = device.get("canonicalName") or unit.get("id")
        paths = [{"name": x.get("name"), "state": x.get("pathState")} for x in as_list(unit.get("path"))
                 if isinstance(x, Node)]
        policy, satp = unit.get("policy"), unit.get("storageArrayTypePolicy")
        scheme = policy.get("policy") if isinstance(policy, Node) else None
        hpp = isinstance(policy, Node) and (policy.type == HPP_POLICY or (scheme in HPP_SCHEMES and satp is None))
        local = device.get("localDisk")
        out.append({"lun": name, "uuid": unit.get("id"), "type": device.get("lunType"),
                    "local": None if local is None else to_bool(local),
                    "datastore": lun_ds.get(name, ""), "queue_depth": to_int(device.get("queueDepth")),
                    "plugin": "HPP" if hpp else "NMP" if str(scheme or "").startswith("VMW_PSP_") else None,
                    "policy": scheme, "satp": satp.get("policy") if isinstance(satp, Node) else None,
                    "paths_total": len(paths), "paths_active": sum(x["state"] == "active" for x in paths),
                    "paths": paths})
    return out
