"""vSphere rules (the white papers' host, memory, VM and ESXi storage practices) on vsphere_* samples and facts,
and esxtop's memory figures.

VM configuration rules judge the VMs of the configured stacks (all VMs when no stack is
configured): the practices are for database VMs, and a 2,000-VM vCenter's other VMs are
not this tool's business.
"""

from __future__ import annotations

from db2vtop.agent.core.model import Fact
from db2vtop.agent.core.source import Row
from db2vtop.agent.core.text import plural
from db2vtop.agent.core.units import format_bytes, format_duration
from db2vtop.checks.rule import (
    ABOVE_ZERO,
    FactIndex,
    Judgement,
    LiveRule,
    PerFactRule,
    Screen,
    StaticRule,
    Thresholds,
    as_float,
    is_number,
    pct,
)
from db2vtop.checks.rules.common import ThresholdRule

MIB = 2**20
VM_TAGS = ("vcenter", "vm")
HOST_TAGS = ("vcenter", "host")


def _vm_memory(facts: FactIndex, vm: str | None) -> float:
    f = facts.find("vsphere_vm", vm=vm) if vm else None
    return as_float(f.data.get("memory_mb")) * MIB if f else 0.0


class BalloonZero(LiveRule):
    """Any balloon is a finding; growing, or >= 5 % of the VM's memory, is critical (WP-7109 §5.4)."""

    id, layer, subject_tags = "balloon-zero", "vm", VM_TAGS
    measurement, field = "vsphere_vm", "mem_balloon_bytes"
    needs = {"vsphere_vm": "vcenter"}
    defaults = {"crit_pct_of_vm_memory": 5.0, "growth_bytes": MIB}
    fix = ("Reserve the DB VM's memory (at least DB2's shared memory; reservation locked to max for production) "
           "and find the host's memory pressure: any balloon in a DB VM leads to guest swapping.")

    def __init__(self) -> None:
        self._low: dict[tuple, float] = {}  # the smallest balloon since it appeared: growth is judged from it

    def screen(self, t: Thresholds) -> Screen:
        return ((self.field, ABOVE_ZERO, False),)

    def judge(self, row: Row, t: Thresholds, facts: FactIndex) -> Judgement | None:
        value = row.fields.get(self.field)
        if not is_number(value):
            return None
        subject = self.subject(row)
        key = tuple(sorted(subject.items()))
        balloon = float(value)
        if balloon <= 0:
            self._low.pop(key, None)
            return Judgement(subject, None, "", {"balloon_bytes": 0})
        low = self._low[key] = min(self._low.get(key, balloon), balloon)
        memory = _vm_memory(facts, row.tags.get("vm"))
        share = pct(balloon, memory) if memory else None
        growing = balloon - low >= as_float(t["growth_bytes"])
        critical = growing or (share is not None and share >= as_float(t["crit_pct_of_vm_memory"]))
        how = " and growing" if growing else ""
        of = f" ({share:.1f}% of the VM's memory)" if share is not None else ""
        return Judgement(subject, "critical" if critical else "warning",
                       f"{row.tags.get('vm')}: balloon {format_bytes(balloon)}{of}{how}",
                       {"balloon_bytes": balloon, "balloon_low_bytes": low, "vm_memory_bytes": memory or None,
                        "pct_of_vm_memory": round(share, 2) if share is not None else None})


class BalloonQuickStats(BalloonZero):
    measurement, field = "vsphere_vm_quickstats", "balloon_bytes"
    needs = {"vsphere_vm_quickstats": "vcenter"}


class BalloonEsxtop(BalloonZero):
    subject_tags = ("host", "vm")
    measurement, field = "esxtop_vm", "balloon_bytes"
    needs = {"esxtop_vm": "esxtop"}


class HostSwapVM(LiveRule):
    id, layer, subject_tags, measurement = "host-swap-zero", "vm", VM_TAGS, "vsphere_vm"
    needs = {"vsphere_vm": "vcenter"}
    fields = ("mem_swapped_bytes", "mem_swapin_bytes_per_s", "mem_swapout_bytes_per_s")
    fix = ("Give the host enough memory that ESXi never swaps VM memory: move VMs, reserve the DB VM's memory, "
           "stop overcommitting production hosts.")

    def screen(self, t: Thresholds) -> Screen:
        return tuple((f, ABOVE_ZERO, False) for f in (*self.fields, *self.reads_also))

    def judge(self, row: Row, t: Thresholds, facts: FactIndex) -> Judgement | None:
        values = {k: as_float(row.fields.get(k)) for k in self.fields if k in row.fields}
        if not values:
            return None
        if not any(v > 0 for v in values.values()):  # the engine reads no summary of a clean verdict
            return Judgement(self.subject(row), None, "", values)
        what = ", ".join(f"{k} {format_bytes(v)}{'/s' if k.endswith('_per_s') else ''}" for k, v in values.items())
        name = row.tags.get("vm") or row.tags.get("host")
        return Judgement(self.subject(row), "critical", f"{name}: host swapping: {what}", values)


class HostSwapQuickStats(HostSwapVM):
    measurement, fields = "vsphere_vm_quickstats", ("swapped_bytes",)
    needs = {"vsphere_vm_quickstats": "vcenter"}


class HostSwapEsxtop(HostSwapVM):
    subject_tags, measurement = ("host", "vm"), "esxtop_vm"
    fields = ("swapped_bytes", "swap_read_bytes_per_s", "swap_write_bytes_per_s")
    needs = {"esxtop_vm": "esxtop"}


class HostSwapHost(HostSwapVM):
    """A host swapping now (rates), or its swap in use growing."""

    layer, subject_tags, measurement = "host", HOST_TAGS, "vsphere_host"
    fields = ("mem_swapin_bytes_per_s", "mem_swapout_bytes_per_s")
    reads_also = ("mem_swap_used_bytes",)
    needs = {"vsphere_host": "vcenter"}

    def __init__(self) -> None:
        self._used: dict[tuple, float] = {}

    def judge(self, row: Row, t: Thresholds, facts: FactIndex) -> Judgement | None:
        v = super().judge(row, t, facts)
        used = row.fields.get("mem_swap_used_bytes")
        if is_number(used):
            key = tuple(sorted(self.subject(row).items()))
            before, self._used[key] = self._used.get(key), float(used)
            if before is not None and used > before:
                v = v or Judgement(self.subject(row), None, "", {})
                v.severity = "critical"
                v.summary = f"{row.tags.get('host')}: host swap in use growing to {format_bytes(used)}"
                v.values["mem_swap_used_bytes"] = used
        return v


class CpuReady(LiveRule):
    id, layer, subject_tags, measurement = "cpu-ready", "vm", VM_TAGS, "vsphere_vm"
    needs = {"vsphere_vm": "vcenter"}
    defaults = {"warn_pct": 5.0, "crit_pct": 10.0}
    field, label = "cpu_ready_pct", "CPU ready"
    reads_also = ("vcpus",)
    fix = ("The host's CPUs are overcommitted: move VMs off the host, give the DB VM CPU shares or a reservation, "
           "or reduce vCPUs that are not used.")

    def screen(self, t: Thresholds) -> Screen:
        return ((self.field, as_float(t["warn_pct"]), False),)

    def judge(self, row: Row, t: Thresholds, facts: FactIndex) -> Judgement | None:
        """The collector already gives these summation counters as % of the interval per vCPU."""
        per_vcpu = row.fields.get(self.field)
        if not is_number(per_vcpu):
            return None
        severity = ("critical" if per_vcpu >= as_float(t["crit_pct"]) else
                    "warning" if per_vcpu >= as_float(t["warn_pct"]) else None)
        if severity is None:  # most samples of a fleet: the engine reads no summary or values of a clean verdict
            return Judgement(self.subject(row), None)
        vcpus = as_float(row.fields.get("vcpus"))
        return Judgement(self.subject(row), severity,
                       f"{row.tags.get('vm')}: {self.label} {per_vcpu:.1f}% per vCPU ({int(vcpus)} vCPUs)",
                       {self.field: round(float(per_vcpu), 2), "vcpus": vcpus})


class CoStop(CpuReady):
    id, field, label = "vcpu-no-excess", "cpu_costop_pct", "co-stop"
    defaults = {"warn_pct": 3.0, "crit_pct": 10.0}
    fix = "Remove the vCPUs the database does not use: co-stop means the VM waits to schedule all its vCPUs together."


class MaxLimited(CpuReady):
    id, field, label = "cpu-limit-none", "cpu_maxlimited_pct", "time throttled by a CPU limit"
    defaults = {"warn_pct": 0.01, "crit_pct": 5.0}
    fix = "Remove the CPU limit from the DB VM (Edit Settings > CPU > Limit: Unlimited)."


class VCenterClock(LiveRule):
    """vCenter's clock against the agent's (its CurrentTime, read each cycle). vCenter dates its VMs' and hosts'
    samples, the agent those of the guest and DB2: a minute apart, the layers of one moment fall three of the
    verdict's buckets apart. One reading decides (samples 1 of 1): it is no load figure that flaps, and its own
    error is half the call's round trip. Triage, which reads the clock once, judges it too."""

    id, layer, subject_tags = "timekeeping", "vcenter", ("vcenter",)
    measurement, field = "vsphere_vcenter", "clock_offset_ms"
    needs = {"vsphere_vcenter": "vcenter"}
    defaults = {"warn_vcenter_offset_ms": 60_000, "samples": 1, "window": 1}
    fix = ("Synchronise vCenter's clock with NTP (its appliance management interface, Time; or `timesync.set --mode "
           "NTP` and `ntp.set --servers` in its shell), from the same time source as its hosts, the DB2 guests and "
           "the machine db2vtop runs on.")

    def judge(self, row: Row, t: Thresholds, facts: FactIndex) -> Judgement | None:
        offset = row.fields.get(self.field)
        if not is_number(offset):
            return None
        if abs(offset) < as_float(t["warn_vcenter_offset_ms"]):
            return Judgement(self.subject(row), None)
        way = "ahead of" if offset > 0 else "behind"
        return Judgement(self.subject(row), "warning",
                       f"vCenter {row.tags.get('vcenter')}'s clock is {format_duration(abs(offset) / 1000)} {way} "
                       "the agent's", {"vcenter_offset_ms": float(offset)})


class HostCpuCeiling(ThresholdRule):
    id, layer, measurement, subject_tags = "host-cpu-ceiling", "host", "vsphere_host", HOST_TAGS
    needs = {"vsphere_host": "vcenter"}
    field, label, unit = "cpu_usage_pct", "host CPU", "%"
    warn_key, crit_key = "warn_pct", "crit_pct"
    defaults = {"warn_pct": 80.0, "crit_pct": 90.0}
    fix = "Move VMs off the host or add hosts; WP-7109 treats 80 % as the production ceiling and 90 % as the alert."


class HostMemState(ThresholdRule):
    id, layer, measurement, subject_tags = "host-mem-state", "host", "vsphere_host", HOST_TAGS
    needs = {"vsphere_host": "vcenter"}
    field, label = "mem_state", "memory state (0 high, 1 soft, 2 hard, 3 low)"
    warn_key, crit_key = "warn_state", "crit_state"
    defaults = {"warn_state": 1, "crit_state": 2}
    fix = "The host is short of free memory: ballooning and swapping follow. Move VMs or add memory."


class HostLunKernelLatency(ThresholdRule):
    id, layer, measurement, subject_tags = "disk-queue-saturation", "host", "vsphere_host_lun", (
        "vcenter", "host", "lun")
    needs = {"vsphere_host_lun": "vcenter"}
    field, label, unit = "kernel_latency_ms", "KAVG", " ms"
    warn_key, crit_key = "warn_kavg_ms", "crit_kavg_ms"
    defaults = {"warn_kavg_ms": 2.0, "crit_kavg_ms": 10.0}
    fix = ("I/O waits in the VMkernel: raise the HBA LUN queue depth (QLogic 32 -> 64, WP-7109 §5.2), keep "
           "Disk.SchedNumReqOutstanding consistent, and spread busy VMDKs over more LUNs.")


class HostLunQueueLatency(HostLunKernelLatency):
    field, label = "queue_latency_ms", "QAVG"
    warn_key, crit_key = "warn_qavg_ms", "crit_qavg_ms"
    defaults = {"warn_qavg_ms": 2.0, "crit_qavg_ms": 10.0}
    aspect = "queue"


class _LatencyAtLoad(LiveRule):
    """A latency against the published esxtop levels (VMware KB 1008205, Using esxtop to identify storage
    performance issues: DAVG and GAVG at 25 ms), judged only where the device does `min_iops` (a device doing a
    few I/O per second shows its slowest commands, not a slow device: a clean sample there)."""

    id, layer = "disk-queue-saturation", "host"
    latency: tuple[str, ...] = ()  # the latency fields, each judged where its own I/O is not none
    iops: tuple[tuple[str, ...], ...] = ()  # for each latency field, the fields whose sum is its I/O rate
    label, warn_key, crit_key = "", "", ""

    def reads(self) -> frozenset[str]:
        return frozenset((*self.latency, *(n for names in self.iops for n in names)))

    def screen(self, t: Thresholds) -> Screen:
        return tuple((f, as_float(t[self.warn_key]), False) for f in self.latency)

    def judge(self, row: Row, t: Thresholds, facts: FactIndex) -> Judgement | None:
        f = row.fields
        worst, io, known = None, 0.0, False
        for lat, names in zip(self.latency, self.iops, strict=True):
            rates = [float(f[n]) for n in names if is_number(f.get(n))]
            value = f.get(lat)
            known = known or bool(rates)
            io += sum(rates)
            if is_number(value) and (not rates or sum(rates) > 0):
                worst = float(value) if worst is None else max(worst, float(value))
        if worst is None:
            return None
        severity = ("critical" if worst >= as_float(t[self.crit_key]) else
                    "warning" if worst >= as_float(t[self.warn_key]) else None)
        if severity is None or (known and io < as_float(t["min_iops"])):
            return Judgement(self.subject(row), None)  # the engine reads no summary or values of a clean verdict
        what = " ".join(row.tags[k] for k in self.subject_tags if k in row.tags and k != "vcenter")
        at = f" at {io:.0f} IOPS" if known else ""
        return Judgement(self.subject(row), severity, f"{what}: {self.label} {worst:.1f} ms{at}",
                       {"latency_ms": worst, "iops": io if known else None})


class HostLunDeviceLatency(_LatencyAtLoad):
    measurement, subject_tags = "vsphere_host_lun", ("vcenter", "host", "lun")
    needs = {"vsphere_host_lun": "vcenter"}
    latency, iops = ("device_latency_ms",), (("read_iops", "write_iops"),)
    label, warn_key, crit_key, aspect = "DAVG", "warn_davg_ms", "crit_davg_ms", "device"
    defaults = {"warn_davg_ms": 25.0, "crit_davg_ms": 50.0, "min_iops": 10.0}
    fix = ("The latency is below the host: the HBA, the fabric or the array. Compare with the array's own LUN "
           "latency (the path is slow if the array answers fast), and see who else drives the LUN (the verdict's "
           "culprits).")


class EsxtopDeviceLatency(HostLunDeviceLatency):
    measurement, subject_tags = "esxtop_device", ("host", "device")
    needs = {"esxtop_device": "esxtop"}
    iops = (("reads_per_s", "writes_per_s"),)


class VmdkLatency(_LatencyAtLoad):
    """What the VM's virtual disk sees: the guest's latency as ESXi measures it (esxtop's GAVG per VM disk)."""

    layer, measurement, subject_tags = "vm", "vsphere_vm_disk", ("vcenter", "vm", "instance")
    needs = {"vsphere_vm_disk": "vcenter"}
    latency, iops = ("read_latency_ms", "write_latency_ms"), (("read_iops",), ("write_iops",))
    label, warn_key, crit_key, aspect = "VMDK latency", "warn_vmdk_ms", "crit_vmdk_ms", "vmdk"
    defaults = {"warn_vmdk_ms": 25.0, "crit_vmdk_ms": 50.0, "min_iops": 10.0}
    fix = ("Follow the I/O down: the host's KAVG (queueing in the hypervisor) and DAVG (below the host) on the "
           "LUN behind this disk tell which layer adds the time; the verdict's culprits name who else drives it.")


def _vm_facts(facts: FactIndex) -> list:
    """The DB2 VMs (every VM unless `[vsphere] db2_vms` narrows it)."""
    return [f for f in facts.of("vsphere_vm") if facts.db2_vm is None or facts.db2_vm(f)]


def _host_of(facts: FactIndex, vm_fact) -> object | None:
    return facts.find("vsphere_host", host=vm_fact.data.get("host")) if vm_fact.data.get("host") else None


class VmFitsNumaNode(StaticRule):
    id, layer = "vm-fits-numa-node", "vm"
    needs = {"vsphere_vm": "vcenter", "vsphere_host": "vcenter"}
    fix = ("Size the VM to one NUMA node (vCPUs <= cores per node, memory <= a node's memory), or expose vNUMA so "
           "DB2 can place memory; a VM spanning two sockets gets about half its memory accesses remote.")

    def judge_facts(self, facts: FactIndex, t: Thresholds) -> list[Judgement]:
        """Every VM against its host's nodes. The engine asks again each time VM facts come (a first facts pass
        hands on 10,000 VMs in parts, before their hosts): without a host fact there is nothing to judge, and a
        clean VM's verdict carries no text (the engine reads neither summary nor values of a clean verdict)."""
        out: list[Judgement] = []
        if not facts.by_kind.get("vsphere_host"):
            return out
        for vm in _vm_facts(facts):
            host = _host_of(facts, vm)
            if host is None or not host.data.get("numa_nodes"):
                continue
            nodes = int(host.data["numa_nodes"])
            cores = int(host.data.get("cpu_cores") or 0) // max(nodes, 1)
            node_mem = min((n.get("memory_bytes") or 0 for n in host.data.get("numa") or []), default=0) or (
                as_float(host.data.get("memory_bytes")) / max(nodes, 1))
            vcpus, memory = int(vm.data.get("num_cpu") or 0), as_float(vm.data.get("memory_mb")) * MIB
            too_many, too_big = bool(cores and vcpus > cores), bool(node_mem and memory > node_mem)
            if not (too_many or too_big):
                out.append(Judgement({"layer": "vm", **vm.tags}, None, ""))
                continue
            wide = [w for w, bad in ((f"{vcpus} vCPUs > {cores} cores per node", too_many),
                                     (f"{format_bytes(memory)} > {format_bytes(node_mem)} per node", too_big)) if bad]
            out.append(Judgement({"layer": "vm", **vm.tags}, "warning",
                               f"{vm.tags.get('vm')} is wider than a NUMA node of {host.tags.get('host')}: "
                               + "; ".join(wide),
                               {"vcpus": vcpus, "memory_bytes": memory, "numa_nodes": nodes,
                                "cores_per_node": cores, "node_memory_bytes": node_mem}))
        return out


class VcpuLeThreads(StaticRule):
    id, layer = "vcpu-le-threads", "host"
    needs = {"vsphere_host": "vcenter"}
    defaults = {"max_ratio": 1.0}
    fix = ("Keep the powered-on vCPUs of the host at or below its hardware threads; if you must go above, give "
           "the DB VMs higher CPU shares (WP-7109 §5.3).")

    def judge_facts(self, facts: FactIndex, t: Thresholds) -> list[Judgement]:
        out = []
        for h in facts.of("vsphere_host"):
            threads, vcpus = int(h.data.get("cpu_threads") or 0), int(h.data.get("vcpus_powered_on") or 0)
            if not threads:
                continue
            ratio = vcpus / threads
            over = ratio > as_float(t["max_ratio"])
            # WP-7109 §4.3: 1.3 % lower peak per 10 % of vCPU overallocation, measured up to 1.5:1 only
            loss = max(0.0, (ratio - 1.0) * 13.0) if ratio <= 1.5 else None
            expect = (f"WP-7109 §4.3 measured ~{loss:.1f}% lower peak at that ratio" if loss is not None else
                      "beyond the 1.5:1 (6.5% lower peak) WP-7109 §4.3 measured")
            out.append(Judgement({"layer": "host", **h.tags}, "warning" if over else None,
                               f"{h.tags.get('host')}: {vcpus} powered-on vCPUs on {threads} threads "
                               f"({ratio:.2f}:1; {expect})",
                               {"vcpus_powered_on": vcpus, "threads": threads, "ratio": round(ratio, 3),
                                "expected_loss_pct": round(loss, 1) if loss is not None else None}))
        return out


class _StackVmRule(PerFactRule):
    """Judges the VMs of the configured stacks (every VM when no stack is configured)."""

    layer, fact_kind = "vm", "vsphere_vm"
    needs = {"vsphere_vm": "vcenter"}

    def judges(self, fact: Fact, facts: FactIndex) -> bool:
        return facts.db2_vm is None or facts.db2_vm(fact)


class CpuLimitConfigured(_StackVmRule):
    id, evidence = "cpu-limit-none", ("cpu_limit_mhz",)
    fix = MaxLimited.fix

    def problem(self, f: Fact, t: Thresholds) -> str | bool | None:
        limit = f.data.get("cpu_limit_mhz")
        if limit is None:
            return False
        return f"a CPU limit of {limit} MHz" if limit != -1 else None


class MemReservation(LiveRule):
    """The DB VM's memory reservation against DB2's committed memory (DATABASE and DBMS sets)."""

    id, layer, measurement = "mem-reservation-db2-shm", "vm", "db2_memory"
    needs = {"db2_memory": "db2", "vsphere_vm": "vcenter"}
    fix = ("Set the VM's memory reservation to at least DB2's shared memory (MON_GET_MEMORY_SET committed for the "
           "DATABASE and DBMS sets; WP-7109 §5.3), so the host never balloons or swaps it.")

    def __init__(self) -> None:
        self._committed: dict[tuple[str, str], dict[str, float]] = {}

    def judge(self, row: Row, t: Thresholds, facts: FactIndex) -> Judgement | None:
        db2 = row.tags.get("db2")
        stack = next((s for s in facts.stacks if s.db2 == db2 and s.vm), None)
        committed = row.fields.get("committed_bytes")
        if stack is None or not is_number(committed):
            return None
        sets = self._committed.setdefault((db2, stack.vm), {})
        key = "/".join(row.tags.get(k, "") for k in sorted(row.tags) if k not in ("db2",))
        sets[key] = float(committed)
        vm = facts.find("vsphere_vm", vm=stack.vm)
        if vm is None:
            return None
        reserved = as_float(vm.data.get("mem_reservation_mb")) * MIB
        need = sum(sets.values())
        return Judgement({"layer": "vm", **vm.tags}, "warning" if reserved < need else None,
                       f"{stack.vm}: memory reservation {format_bytes(reserved)} below DB2's committed "
                       f"{format_bytes(need)}", {"reservation_bytes": reserved, "db2_committed_bytes": need})


class HostMemHeadroom(PerFactRule):
    id, layer, fact_kind = "host-mem-headroom-10pct", "host", "vsphere_host"
    needs, evidence = {"vsphere_host": "vcenter"}, ("memory_bytes", "vm_memory_mb_powered_on")
    defaults = {"headroom_pct": 10.0}
    fix = "Leave about 10 % of the host's memory unallocated to VMs for overhead and the hypervisor (WP-7109 §5.4)."

    def problem(self, f: Fact, t: Thresholds) -> str | bool | None:
        memory = as_float(f.data.get("memory_bytes"))
        if not memory:
            return False
        share = pct(as_float(f.data.get("vm_memory_mb_powered_on")) * MIB, memory)
        if share > 100 - as_float(t["headroom_pct"]):
            return f"{share:.0f}% of host memory allocated to powered-on VMs"
        return None


class _VmDeviceRule(_StackVmRule):
    list_key, good, what = "", (), ""

    def problem(self, f: Fact, t: Thresholds) -> str | bool | None:
        items = f.data.get(self.list_key) or []
        if not items:
            return False
        bad = sorted({str(i.get("type")) for i in items if i.get("type") not in self.good})
        return f"{self.what}: {', '.join(bad)}" if bad else None


class NicVmxnet3(_VmDeviceRule):
    id, list_key, good, what = "nic-vmxnet3", "nics", ("vmxnet3",), "emulated vNICs"
    fix = "Replace E1000/E1000E/PCnet vNICs with VMXNET3."


class ScsiPvscsi(_VmDeviceRule):
    id, list_key, good, what = "scsi-pvscsi", "scsi_controllers", ("pvscsi",), "non-paravirtual SCSI controllers"
    fix = "Put the DB2 data and log disks on VMware Paravirtual (PVSCSI) controllers."


class ToolsRunning(_StackVmRule):
    id, evidence = "vmtools-running", ("tools_running_status", "tools_version_status")
    fix = "Install or start VMware Tools (balloon driver, time sync, paravirtual drivers) and keep it current."
    _OLD = ("guestToolsNeedUpgrade", "guestToolsTooOld", "guestToolsSupportedOld")

    def problem(self, f: Fact, t: Thresholds) -> str | bool | None:
        if f.data.get("power_state") != "poweredOn":
            return False
        running, version = f.data.get("tools_running_status"), str(f.data.get("tools_version_status") or "")
        if (running and running != "guestToolsRunning") or version in self._OLD:
            return f"VMware Tools {running}, {version}"
        return None

    def severity_of(self, f: Fact, t: Thresholds) -> str:
        running = f.data.get("tools_running_status")
        return "warning" if running and running != "guestToolsRunning" else "info"


class EagerZeroed(_StackVmRule):
    id, severity = "vmdk-eager-zeroed", "info"
    fix = "Use thick provisioned, eager-zeroed VMDKs for DB2 data and logs (the XtremIO white paper, App. C)."

    def problem(self, f: Fact, t: Thresholds) -> str | bool | None:
        disks = f.data.get("disks") or []
        if not disks:
            return False
        lazy = [str(d.get("instance")) for d in disks if d.get("backing") in ("thin", "lazy_zeroed")]
        return f"not eager-zeroed: {', '.join(lazy)}" if lazy else None


class _HostLunRule(StaticRule):
    """A verdict per storage device of each host, named by its canonical name. `problem` returns a sentence (the
    practice is not met), None (met) or False (this device is not what the practice is about, or its facts
    cannot tell): a CD-ROM is never judged."""

    layer = "host"
    needs = {"vsphere_host": "vcenter"}

    def problem(self, lun: dict, t: Thresholds) -> str | bool | None:
        raise NotImplementedError

    def judge_facts(self, facts: FactIndex, t: Thresholds) -> list[Judgement]:
        out = []
        for h in facts.of("vsphere_host"):
            for lun in h.data.get("luns") or []:
                if lun.get("type") not in (None, "disk"):
                    continue
                problem = self.problem(lun, t)
                if problem is False:
                    continue
                out.append(Judgement({"layer": "host", **h.tags, "lun": str(lun.get("lun"))},
                                   "warning" if problem else None, f"{h.tags.get('host')} {lun.get('lun')}: {problem}",
                                   {k: lun.get(k) for k in ("plugin", "policy", "satp", "queue_depth", "paths_active",
                                                            "paths_total")}))
        return out


def _local(lun: dict) -> bool:
    """A device of the host's own (a local disk or NVMe drive: no fabric, one path by nature)."""
    return lun.get("local") is True or lun.get("satp") == "VMW_SATP_LOCAL"


class MultipathRoundRobin(_HostLunRule):
    """NMP devices: Round Robin (the white papers). A device the High-Performance Plug-in claims has no SATP or
    PSP: its path selection scheme is judged as VMware documents the HPP (vSphere Storage, "VMware High
    Performance Plug-In and Path Selection Schemes"): a load-balancing scheme (LB-RR, its default, LB-IOPS,
    LB-BYTES, LB-Latency), or FIXED on a device with a single path (nothing to balance). A local device is not
    an array's LUN and is not judged; nor is one a third-party plug-in claims."""

    id = "mpio-rr-alua"
    fix = ("esxcli storage nmp device set -d <naa> -P VMW_PSP_RR (with SATP ALUA for NetApp), or set it per array; "
           "an HPP device: esxcli storage hpp device set -d <device> -P LB-RR.")

    def problem(self, lun: dict, t: Thresholds) -> str | bool | None:
        policy, paths = lun.get("policy"), lun.get("paths_total")
        if _local(lun) or not policy:
            return False
        if lun.get("plugin") == "HPP":
            if str(policy).upper().startswith("LB-") or not isinstance(paths, int) or paths <= 1:
                return None
            return f"HPP path selection scheme {policy} on {paths} paths, not load balancing (LB-RR)"
        if lun.get("plugin") not in (None, "NMP") or not str(policy).startswith("VMW_PSP_"):
            return False
        return f"path selection {policy}, not VMW_PSP_RR" if policy != "VMW_PSP_RR" else None


class RedundantPaths(_HostLunRule):
    """Two active paths to every array LUN; a local device has one by nature and is not judged."""

    id = "mpio-redundant-paths"
    defaults = {"min_active_paths": 2}
    fix = "Give every LUN at least two active paths (two HBA ports on two fabrics)."

    def problem(self, lun: dict, t: Thresholds) -> str | bool | None:
        active = lun.get("paths_active")
        if _local(lun) or not isinstance(active, int):
            return False
        if active < as_float(t["min_active_paths"]):
            return f"{plural(active, 'active path')} of {lun.get('paths_total')}"
        return None


class HbaQueueDepth(_HostLunRule):
    """The device's queue depth as the host reports it (scsiLun queueDepth); a device that reports none is not
    judged, nor a local one (a SATA boot disk's AHCI queue is 31 or 32, and no HBA driver setting moves it)."""

    id = "hba-queue-depth"
    defaults = {"min_queue_depth": 64}
    fix = ("Raise the HBA driver's LUN queue depth (QLogic: esxcli system module parameters set -m qlnativefc -p "
           "ql2xmaxqdepth=64; WP-7109 §5.2 raised it from 32 to 64) and reboot the host.")

    def problem(self, lun: dict, t: Thresholds) -> str | bool | None:
        depth = lun.get("queue_depth")
        if _local(lun) or not isinstance(depth, int) or depth <= 0:
            return False
        if depth < as_float(t["min_queue_depth"]):
            return f"LUN queue depth {depth} (WP-7109: 32 -> 64)"
        return None


class HostSettings(PerFactRule):
    """Host platform facts: hyper-threading on, NUMA not interleaved, power policy."""

    layer, fact_kind = "host", "vsphere_host"
    needs = {"vsphere_host": "vcenter"}


class HyperThreading(HostSettings):
    id = "ht-enabled"
    fix = "Enable hyper-threading in the BIOS and in ESXi (WP-7109 §5.1, VMware's solidDB/DB2 study)."

    def problem(self, f: Fact, t: Thresholds) -> str | bool | None:
        d = f.data
        if d.get("hyperthreading_available") is None:
            return False
        if d.get("hyperthreading_available") and not d.get("hyperthreading_active"):
            return "hyper-threading is available but not active"
        return None


class NumaEnabled(HostSettings):
    id = "numa-enabled"
    fix = "Turn off node interleaving in the BIOS so ESXi sees the NUMA nodes (WP-7109 §5.1)."

    def problem(self, f: Fact, t: Thresholds) -> str | bool | None:
        d = f.data
        nodes, sockets = d.get("numa_nodes"), d.get("cpu_sockets")
        if not nodes or not sockets:
            return False
        return f"{sockets} sockets but {nodes} NUMA node: node interleaving is on" if nodes == 1 < sockets else None


class PowerPolicy(HostSettings):
    id, severity = "host-power-policy", "info"
    fix = ("Use the High Performance power policy (static) on database hosts "
           "(VMware, Performance Best Practices for VMware vSphere).")

    def problem(self, f: Fact, t: Thresholds) -> str | bool | None:
        d = f.data
        policy = d.get("power_policy")
        if not policy:
            return False
        return f"power policy {policy}, not static (High Performance)" if policy != "static" else None


class VmkJumboFrames(StaticRule):
    id, layer = "jumbo-frames", "host"
    needs = {"vsphere_host": "vcenter"}
    defaults = {"mtu": 9000}
    fix = "Use MTU 9000 on the storage vmknics, their vSwitch, the physical switch and the array ports."

    def judge_facts(self, facts: FactIndex, t: Thresholds) -> list[Judgement]:
        out = []
        want = as_float(t["mtu"])
        for h in facts.of("vsphere_host"):
            storage = [v for v in h.data.get("vmknics") or []
                       if any(w in str(v.get("portgroup", "")).lower() for w in ("iscsi", "nfs", "storage", "vmotion"))]
            if not storage:
                continue
            small = [f"{v.get('device')} ({v.get('portgroup')}) MTU {v.get('mtu')}" for v in storage
                     if isinstance(v.get("mtu"), int) and v["mtu"] < want]
            out.append(Judgement({"layer": "host", **h.tags}, "warning" if small else None,
                               f"{h.tags.get('host')}: storage vmknics without jumbo frames: {', '.join(small)}",
                               {"vmknics": small}))
        return out


RULES = [BalloonZero(), BalloonQuickStats(), BalloonEsxtop(), HostSwapVM(), HostSwapQuickStats(), HostSwapEsxtop(),
         HostSwapHost(), CpuReady(), CoStop(), MaxLimited(), HostCpuCeiling(), HostMemState(),
         HostLunKernelLatency(), HostLunQueueLatency(), HostLunDeviceLatency(), EsxtopDeviceLatency(), VmdkLatency(),
         VmFitsNumaNode(), VcpuLeThreads(), CpuLimitConfigured(), MemReservation(), HostMemHeadroom(), NicVmxnet3(),
         ScsiPvscsi(), ToolsRunning(), EagerZeroed(), MultipathRoundRobin(), RedundantPaths(), HbaQueueDepth(),
         HyperThreading(), NumaEnabled(), PowerPolicy(), VmkJumboFrames(), VCenterClock()]
