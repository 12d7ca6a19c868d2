"""Storage and hypervisor-queue rules (the white papers' practices §1.4, §1.7, §1.9) on storage_* and esxtop_* data."""

from __future__ import annotations

from db2vtop.agent.core.model import Fact
from db2vtop.checks.rule import FactIndex, Judgement, PerFactRule, StaticRule, Thresholds, as_float, is_number
from db2vtop.checks.rules.common import ThresholdRule

QUEUE_FIX = ("Find where I/O queues: KAVG/QAVG > 0 means the VMkernel holds I/O back (raise the HBA LUN queue depth "
             "from 32 to 64 and keep Disk.SchedNumReqOutstanding consistent, spread LUNs); queue full at the array "
             "or in the guest means that device's queue is the limit.")


class EsxtopKernelLatency(ThresholdRule):
    id, layer, measurement, subject_tags = "disk-queue-saturation", "host", "esxtop_device", ("host", "device")
    needs = {"esxtop_device": "esxtop"}
    field, label, unit = "kernel_latency_ms", "KAVG", " ms"
    warn_key, crit_key = "warn_kavg_ms", "crit_kavg_ms"
    gate = ("commands_per_s", "min_iops")
    defaults = {"warn_kavg_ms": 2.0, "crit_kavg_ms": 10.0, "min_iops": 10.0}
    fix = QUEUE_FIX


class EsxtopQueued(ThresholdRule):
    id, layer, measurement, subject_tags = "disk-queue-saturation", "host", "esxtop_device", ("host", "device")
    needs = {"esxtop_device": "esxtop"}
    field, label, unit = "queued", "QUED", " commands"
    warn_key, crit_key = "warn_queued", "crit_queued"
    defaults = {"warn_queued": 1.0, "crit_queued": 32.0}
    fix = QUEUE_FIX
    aspect = "queued"


class StorageDiskQueueFull(ThresholdRule):
    """A Linux storage host's (or gateway's) device queue at its depth."""

    id, layer, measurement, subject_tags = "disk-queue-saturation", "storage", "storage_disk", ("storage", "device")
    needs = {"storage_disk": "storage"}
    field, label, unit = "queue_depth_used_pct", "queue depth used", "%"
    warn_key, crit_key = "warn_pct", "crit_pct"
    defaults = {"warn_pct": 100.0, "crit_pct": 200.0}
    limits = {"warn_pct": (0, 10_000), "crit_pct": (0, 10_000)}  # requests queued beyond the depth count above 100
    fix = QUEUE_FIX


class ArrayQueueFull(ThresholdRule):
    id, layer, measurement, subject_tags = "disk-queue-saturation", "storage", "storage_lun", (
        "storage", "vserver", "lun")
    needs = {"storage_lun": "storage"}
    field, label, unit = "queue_full_per_s", "queue full", "/s"
    warn_key, crit_key = "warn_queue_full_per_s", "crit_queue_full_per_s"
    defaults = {"warn_queue_full_per_s": 0.01, "crit_queue_full_per_s": 10.0}
    fix = QUEUE_FIX


class NumaLocality(ThresholdRule):
    id, layer, measurement, subject_tags = "numa-locality", "vm", "esxtop_vm", ("host", "vm")
    needs = {"esxtop_vm": "esxtop"}
    field, label, unit = "numa_local_pct", "NUMA local memory", "%"
    higher_is_worse = False
    warn_key, crit_key = "warn_pct", "crit_pct"
    defaults = {"warn_pct": 80.0, "crit_pct": 50.0}
    fix = ("Size the VM to fit one NUMA node (vCPUs <= cores per node, memory <= node memory) or expose vNUMA; "
           "WP-7109 §4.3 traces most of its overallocation loss to remote memory.")


class NumaColumnsFound(StaticRule):
    """NUMA locality can only be judged if esxtop's NUMA columns are found. They are matched by exact name
    (collectors/esxtop/batch.py NUMA); a host whose esxtop names them otherwise is a warning that shows the
    columns it does export, where a guess could have read nothing, or the wrong column, in silence."""

    id, layer = "numa-locality", "host"
    needs = {"esxtop_host": "esxtop"}
    fix = ("Until db2vtop knows this ESXi release's names for NHN, NMIG, NRMEM, NLMEM and N%L, report the columns "
           "shown here; meanwhile check NUMA locality on the host with `sched-stats -t numa-clients` and sizing "
           "with rule vm-fits-numa-node.")

    def judge_facts(self, facts: FactIndex, t: Thresholds) -> list[Judgement]:
        out = []
        for f in facts.of("esxtop_host"):
            if "numa_columns" not in f.data:
                continue  # recorded before hosts' headers were
            seen = ", ".join((f.data.get("columns") or {}).get("Group Memory") or ()) or "no Group Memory columns"
            missing = not f.data["numa_columns"]
            out.append(Judgement({"layer": self.layer, **f.tags}, "warning" if missing else None,
                               f"NUMA columns not found in esxtop output of {f.tags.get('host')} (columns seen: "
                               f"{seen})" if missing else "",
                               {"esxtop_hostname": f.data.get("esxtop_hostname"), "group_memory_columns": seen}))
        return out


class XtremioLatency(ThresholdRule):
    id, layer, measurement, subject_tags = "xio-iops-latency", "storage", "storage_cluster", ("storage", "cluster")
    needs = {"storage_cluster": "storage"}
    field, label, unit = "avg_latency_ms", "average latency", " ms"
    warn_key, crit_key = "warn_ms", "crit_ms"
    where = {"kind": "xtremio"}
    gate = ("total_iops", "min_iops")
    defaults = {"warn_ms": 1.0, "crit_ms": 5.0, "min_iops": 100.0}
    fix = "Check the array's load and the front-end paths (round robin on all paths, the XtremIO white paper, App. C)."


class XtremioVolumeLatency(XtremioLatency):
    measurement, subject_tags = "storage_volume", ("storage", "cluster", "volume")
    needs = {"storage_volume": "storage"}


class XtremioHeadroom(ThresholdRule):
    id, layer, measurement, subject_tags = "xio-capacity-headroom", "storage", "storage_cluster", (
        "storage", "cluster")
    needs = {"storage_cluster": "storage"}
    field, label, unit = "free_ssd_pct", "free physical SSD", "%"
    higher_is_worse = False
    warn_key, crit_key = "warn_pct", "crit_pct"
    where = {"kind": "xtremio"}
    defaults = {"warn_pct": 20.0, "crit_pct": 10.0}
    fix = "Add X-Bricks or move workloads before the cluster runs short of physical space."


class ArrayLatency(ThresholdRule):
    id, layer, measurement, subject_tags = "na-perf-latency", "storage", "storage_lun", ("storage", "vserver", "lun")
    needs = {"storage_lun": "storage"}
    field, label, unit = "avg_latency_ms", "LUN latency", " ms"
    warn_key, crit_key = "warn_ms", "crit_ms"
    where = {"kind": "ontap"}
    defaults = {"warn_ms": 10.0, "crit_ms": 25.0}
    fix = ("The array itself is slow: check the aggregate's disk utilisation and the node's CPU; if the array is "
           "fast but the host's DAVG is not, look at the fabric.")


class ArrayVolumeLatency(ArrayLatency):
    measurement, subject_tags = "storage_volume", ("storage", "vserver", "volume")
    needs = {"storage_volume": "storage"}


class SnapReserve(PerFactRule):
    id, layer, fact_kind = "na-snap-reserve-0", "storage", "storage_volume"
    needs, evidence = {"storage_volume": "storage"}, ("snapshot_reserve_pct",)
    fix = "volume modify -vserver V -volume X -percent-snapshot-space 0"

    def problem(self, f: Fact, t: Thresholds) -> str | None:
        reserve = f.data.get("snapshot_reserve_pct")
        return f"snapshot reserve {reserve}% (WP-7109: 0)" if is_number(reserve) and reserve > 0 else None


class NoSnapSchedule(PerFactRule):
    id, layer, fact_kind = "na-nosnap", "storage", "storage_volume"
    needs, evidence = {"storage_volume": "storage"}, ("snapshot_policy",)
    fix = "volume modify -vserver V -volume X -snapshot-policy none (take database-consistent snapshots instead)"

    def problem(self, f: Fact, t: Thresholds) -> str | None:
        policy = f.data.get("snapshot_policy")
        return f"automatic snapshot policy {policy!r}" if policy and str(policy).lower() != "none" else None


class NoAtime(PerFactRule):
    id, layer, fact_kind = "na-no-atime", "storage", "storage_volume"
    needs, evidence = {"storage_volume": "storage"}, ("atime_update",)
    fix = "volume modify -vserver V -volume X -atime-update false"

    def problem(self, f: Fact, t: Thresholds) -> str | None:
        return "inode access times are updated on every read" if f.data.get("atime_update") is True else None


class NoSnapDir(PerFactRule):
    id, layer, fact_kind, severity = "na-nosnapdir", "storage", "storage_volume", "info"
    needs, evidence = {"storage_volume": "storage"}, ("snapdir_access",)
    fix = "volume modify -vserver V -volume X -snapdir-access false"

    def problem(self, f: Fact, t: Thresholds) -> str | None:
        return "the .snapshot directory is visible to clients" if f.data.get("snapdir_access") is True else None


class NvFail(PerFactRule):
    id, layer, fact_kind = "na-nvfail", "storage", "storage_volume"
    needs, evidence = {"storage_volume": "storage"}, ("nvfail",)
    fix = "volume modify -vserver V -volume X -nvfail on"

    def problem(self, f: Fact, t: Thresholds) -> str | None:
        off = f.data.get("nvfail") is False
        return "nvfail is off: a bad NVRAM at boot would not stop the database" if off else None


class RaidDp(PerFactRule):
    id, layer, fact_kind = "na-raid-dp", "storage", "storage_aggregate"
    needs, evidence = {"storage_aggregate": "storage"}, ("raid_type",)
    fix = "Use RAID-DP (or RAID-TEC) aggregates for database volumes."

    def problem(self, f: Fact, t: Thresholds) -> str | None:
        raid = str(f.data.get("raid_type") or "")
        return f"RAID type {raid} has less than double parity" if raid and raid not in ("raid_dp", "raid_tec") else None


class ThinLunVolume(PerFactRule):
    id, layer, fact_kind = "na-thin-lun-2x-vol", "storage", "storage_lun"
    needs, evidence = {"storage_lun": "storage"}, ("volume_to_luns_ratio", "space_reserve")
    defaults = {"min_ratio": 2.0}
    fix = "Size the FlexVol holding thin LUNs at twice their size (it then acts as the LUNs' quota)."

    def problem(self, f: Fact, t: Thresholds) -> str | None:
        ratio = f.data.get("volume_to_luns_ratio")
        if f.data.get("space_reserve") is False and is_number(ratio) and ratio < as_float(t["min_ratio"]):
            return f"thin LUN in a volume only {ratio:.2f}x its LUNs (WP-7109: 2x)"
        return None


class PortJumboFrames(PerFactRule):
    id, layer, fact_kind, severity = "jumbo-frames", "storage", "storage_port", "info"
    needs, evidence = {"storage_port": "storage"}, ("mtu",)
    defaults = {"mtu": 9000}
    fix = "Use MTU 9000 end to end (array port, switch, ESXi vmknic/vSwitch) on the storage network."

    def problem(self, f: Fact, t: Thresholds) -> str | None:
        mtu = f.data.get("mtu")
        return f"MTU {mtu}, not {t['mtu']}" if isinstance(mtu, int) and mtu < as_float(t["mtu"]) else None

    def judges(self, fact: Fact, facts: FactIndex) -> bool:
        # only ports that carry data: ONTAP's e0M/e0P are management and cluster-internal
        return not fact.tags.get("port", "").startswith(("e0M", "e0P"))


class FlowControl(PerFactRule):
    id, layer, fact_kind, severity = "flowcontrol-full", "storage", "storage_port", "info"
    needs, evidence = {"storage_port": "storage"}, ("flowcontrol_admin",)
    fix = "network port modify -node N -port P -flowcontrol-admin full (current NetApp guidance for 10 GbE+ differs)"

    def problem(self, f: Fact, t: Thresholds) -> str | None:
        fc = f.data.get("flowcontrol_admin")
        return f"flow control {fc}" if fc and fc != "full" else None


class IscsiMaxIos(PerFactRule):
    id, layer, fact_kind, severity = "na-iscsi-max-ios", "storage", "storage_iscsi", "info"
    needs, evidence = {"storage_iscsi": "storage"}, ("cmd_window_size_min",)
    defaults = {"min_commands": 256}
    fix = "Raise the iSCSI command window (WP-7109: from 128 to 256 outstanding commands per session)."

    def problem(self, f: Fact, t: Thresholds) -> str | None:
        window = f.data.get("cmd_window_size_min")
        if isinstance(window, int) and window < as_float(t["min_commands"]):
            return f"sessions allow {window} outstanding commands, WP-7109 uses {t['min_commands']}"
        return None


RULES = [EsxtopKernelLatency(), EsxtopQueued(), StorageDiskQueueFull(), ArrayQueueFull(), NumaLocality(),
         NumaColumnsFound(),
         XtremioLatency(), XtremioVolumeLatency(), XtremioHeadroom(), ArrayLatency(), ArrayVolumeLatency(),
         SnapReserve(), NoSnapSchedule(), NoAtime(), NoSnapDir(), NvFail(), RaidDp(), ThinLunVolume(),
         PortJumboFrames(), FlowControl(), IscsiMaxIos()]
