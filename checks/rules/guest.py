"""Guest OS rules (the white papers' practices §1.2, §1.3, §1.5) on guest_* samples and facts."""

from __future__ import annotations

from db2vtop.agent.core.model import Fact
from db2vtop.agent.core.source import Row
from db2vtop.agent.core.units import format_bytes
from db2vtop.checks.rule import FactIndex, Judgement, LiveRule, PerFactRule, StaticRule, Thresholds, as_float, pct


class GuestSwapZero(LiveRule):
    id, layer, measurement, subject_tags = "guest-swap-zero", "guest", "guest_mem", ("guest",)
    needs = {"guest_mem": "guest"}
    defaults = {"crit_bytes_per_s": 1048576}
    fix = ("Find what pushes DB2 memory out: ballooning (check the VM's balloon and reservation), an "
           "oversized DB2 memory configuration or another process; size DB2 and the VM so the guest never swaps.")

    def judge(self, row: Row, t: Thresholds, facts: FactIndex) -> Judgement | None:
        f = row.fields
        if "swap_in_bytes_per_s" not in f:
            return None
        sin, sout = as_float(f.get("swap_in_bytes_per_s")), as_float(f.get("swap_out_bytes_per_s"))
        severity = None
        if sin > 0 or sout > 0:
            severity = "critical" if max(sin, sout) >= as_float(t["crit_bytes_per_s"]) else "warning"
        return Judgement(self.subject(row), severity,
                       f"guest swapping: in {format_bytes(sin)}/s, out {format_bytes(sout)}/s",
                       {"swap_in_bytes_per_s": sin, "swap_out_bytes_per_s": sout,
                        "swap_used_bytes": f.get("swap_used_bytes", 0)})


class HugePagesSized(LiveRule):
    """Huge pages reserved but never used, or more than the machine can spare (mis-sized)."""

    id, layer, measurement, subject_tags = "linux-hugepages-db2", "guest", "guest_mem", ("guest",)
    needs = {"guest_mem": "guest"}
    defaults = {"max_share_pct": 90.0}
    fix = ("Size vm.nr_hugepages to DB2's database shared memory and set DB2_LARGE_PAGE_MEM=DB; "
           "release huge pages nothing uses, they are memory the guest cannot use otherwise.")

    def judge(self, row: Row, t: Thresholds, facts: FactIndex) -> Judgement | None:
        f = row.fields
        total, free = as_float(f.get("hugepages_total")), as_float(f.get("hugepages_free"))
        size, mem = as_float(f.get("hugepage_size_bytes")), as_float(f.get("total_bytes"))
        if "hugepages_total" not in f or not mem:
            return None
        reserved = total * size
        values = {"hugepages_total": total, "hugepages_free": free, "hugepages_bytes": reserved, "total_bytes": mem}
        if reserved and pct(reserved, mem) > as_float(t["max_share_pct"]):
            return Judgement(self.subject(row), "critical", f"huge pages take {pct(reserved, mem):.0f}% of memory "
                           f"({format_bytes(reserved)} of {format_bytes(mem)}): mis-sized", values)
        if total and free == total:
            return Judgement(self.subject(row), "warning", f"{int(total)} huge pages ({format_bytes(reserved)}) "
                           "reserved and none in use", values)
        return Judgement(self.subject(row), None, "", values)


class GuestIOLatency(LiveRule):
    """Per-device await against a rule of thumb, ignored below a minimum IOPS (Harvest's rule)."""

    id, layer, measurement, subject_tags = "guest-io-latency", "guest", "guest_disk", ("guest", "device")
    needs = {"guest_disk": "guest"}
    defaults = {"warn_ms": 20.0, "crit_ms": 50.0, "min_iops": 10.0}
    fix = ("Follow the I/O down the stack: compare with the VM's virtual disk latency, the host's KAVG/DAVG "
           "and the array's LUN latency to find the layer that adds it.")

    def judge(self, row: Row, t: Thresholds, facts: FactIndex) -> Judgement | None:
        f = row.fields
        if row.tags.get("type") != "disk" or "read_await_ms" not in f:
            return None
        r_iops, w_iops = as_float(f.get("read_iops")), as_float(f.get("write_iops"))
        if r_iops + w_iops < as_float(t["min_iops"]):
            return None
        worst = max(as_float(f.get("read_await_ms")) if r_iops else 0.0,
                    as_float(f.get("write_await_ms")) if w_iops else 0.0)
        severity = ("critical" if worst >= as_float(t["crit_ms"]) else
                    "warning" if worst >= as_float(t["warn_ms"]) else None)
        return Judgement(self.subject(row), severity,
                       f"{row.tags.get('device')}: await {worst:.1f} ms at {r_iops + w_iops:.0f} IOPS",
                       {"read_await_ms": f.get("read_await_ms"), "write_await_ms": f.get("write_await_ms"),
                        "read_iops": r_iops, "write_iops": w_iops, "queue_size": f.get("queue_size")})


class GuestSystemShare(LiveRule):
    """Kernel time out of proportion to user time (NFS and iSCSI cost kernel CPU per I/O)."""

    id, layer, measurement, subject_tags = "guest-cpu-sys-share", "guest", "guest_cpu", ("guest",)
    needs = {"guest_cpu": "guest"}
    defaults = {"min_busy_pct": 20.0, "info_share_pct": 40.0}
    fix = "Check which protocol carries the database I/O (TR-3581 §9: FCP costs the least CPU per transaction)."

    def judge(self, row: Row, t: Thresholds, facts: FactIndex) -> Judgement | None:
        if row.tags.get("cpu") != "total" or "system_pct" not in row.fields:
            return None
        busy = as_float(row.fields.get("busy_pct"))
        system = as_float(row.fields.get("system_pct")) + as_float(row.fields.get("softirq_pct"))
        share = pct(system, busy)
        high = busy >= as_float(t["min_busy_pct"]) and share >= as_float(t["info_share_pct"])
        return Judgement(self.subject(row), "info" if high else None,
                       f"kernel time is {share:.0f}% of busy CPU ({busy:.0f}% busy)",
                       {"busy_pct": busy, "system_pct": system, "system_share_pct": round(share, 1)})


class PartitionAlignment(StaticRule):
    id, layer = "partition-alignment", "guest"
    needs = {"guest_block_device": "guest"}
    defaults = {"align_sectors": 8}
    limits = {"align_sectors": (1, 2**20)}  # a divisor
    fix = "Recreate the partition starting on a 1 MiB boundary (parted ... mkpart primary 1MiB 100%)."

    def judge_facts(self, facts: FactIndex, t: Thresholds) -> list[Judgement]:
        out = []
        align = int(t["align_sectors"])
        for dev in facts.of("guest_block_device"):
            for part, start in (dev.data.get("partitions") or {}).items():
                if not isinstance(start, int):
                    continue
                bad = start % align != 0
                out.append(Judgement({"layer": "guest", **dev.tags, "partition": part}, "warning" if bad else None,
                                   f"{part} starts at sector {start}, not a multiple of {align} (4 KiB)",
                                   {"start_sector": start}))
        return out


class _GuestDriver(PerFactRule):
    """An emulated device driver in the guest where VMware's paravirtual one belongs."""

    layer, evidence = "guest", ("driver",)
    paravirtual: str
    emulated: dict[str, str]
    device: str

    def problem(self, f: Fact, t: Thresholds) -> str | bool | None:
        driver = f.data.get("driver")
        if driver not in self.emulated and driver != self.paravirtual:
            return False  # virtio, NVMe, not a VMware guest: nothing to say
        return f"emulated {self.emulated[driver]} {self.device}" if driver in self.emulated else None


class GuestNicVmxnet3(_GuestDriver):
    id, fact_kind, device, paravirtual = "nic-vmxnet3", "guest_net_interface", "vNIC driver", "vmxnet3"
    needs = {"guest_net_interface": "guest"}
    emulated = {"e1000": "E1000", "e1000e": "E1000E", "pcnet32": "PCnet32"}
    fix = "Replace the emulated vNIC with VMXNET3 (VMware Tools provides the driver)."


class GuestScsiPvscsi(_GuestDriver):
    id, fact_kind, device, paravirtual = "scsi-pvscsi", "guest_block_device", "SCSI controller", "vmw_pvscsi"
    needs = {"guest_block_device": "guest"}
    emulated = {"mptspi": "LSI Logic Parallel", "mptsas": "LSI Logic SAS", "BusLogic": "BusLogic",
                "ata_piix": "IDE"}
    fix = "Put the DB2 data and log disks on a VMware Paravirtual (PVSCSI) controller."


class NfsMountOptions(StaticRule):
    id, layer = "nfs-mount-options", "guest"
    needs = {"guest_mount": "guest"}
    fix = "Mount database NFS file systems hard, over TCP, NFSv3 or later, rsize/wsize >= 32768, timeo=600."

    def judge_facts(self, facts: FactIndex, t: Thresholds) -> list[Judgement]:
        out = []
        for m in facts.of("guest_mount"):
            if not str(m.data.get("fstype", "")).startswith("nfs"):
                continue
            opts = dict(o.partition("=")[::2] for o in str(m.data.get("options", "")).split(","))
            problems = []
            if "soft" in opts:
                problems.append("soft (I/O errors instead of retries: risks corruption)")
            if opts.get("proto", "tcp").startswith("udp"):
                problems.append("proto=udp")
            for size in ("rsize", "wsize"):
                if opts.get(size, "").isdigit() and int(opts[size]) < 32768:
                    problems.append(f"{size}={opts[size]}")
            severity = "critical" if "soft" in opts else ("warning" if problems else None)
            out.append(Judgement({"layer": "guest", **m.tags}, severity,
                               f"NFS mount {m.tags.get('mountpoint')}: " + ", ".join(problems), {"options": str(
                                   m.data.get("options"))}))
        return out


RULES = [GuestSwapZero(), HugePagesSized(), GuestIOLatency(), GuestSystemShare(), PartitionAlignment(),
         GuestNicVmxnet3(), GuestScsiPvscsi(), NfsMountOptions()]
