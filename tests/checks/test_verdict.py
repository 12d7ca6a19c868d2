"""The cross-layer verdict on designed cases: each names the right layer from the same 20 s buckets."""

from __future__ import annotations

import pytest

from db2vtop.agent.core.config import StackConfig
from db2vtop.agent.core.model import Sample
from db2vtop.agent.core.store import Store
from db2vtop.checks.topology import placement, resolve
from db2vtop.checks.verdict import stack_verdict
from db2vtop.tui.data import Reader

T0 = 1_700_000_000 * 10**9
S = 10**9
STACK = StackConfig(name="prod", db2="prod", vm="db2prod01", guest="db2prod01", storage=["netapp1"])
LUN = "naa.600a098038303053"

HEALTHY = {
    "db2": {"log_disk_wait_pct": 5.0, "pool_read_wait_pct": 5.0, "direct_read_wait_pct": 0.0, "lock_wait_pct": 2.0},
    "log": {"log_write_ms": 0.8},
    "guest_disk": {"write_await_ms": 0.9, "read_await_ms": 1.0},
    "guest_cpu": {"steal_pct": 0.0},
    "guest_mem": {"swap_in_bytes_per_s": 0.0},
    "vm": {"cpu_ready_pct": 0.5, "vcpus": 8, "cpu_costop_pct": 0.0, "mem_balloon_bytes": 0,
           "mem_swapin_bytes_per_s": 0.0, "mem_swapped_bytes": 0},
    "vmdk": {"write_latency_ms": 0.8, "read_latency_ms": 0.9},
    "host_lun": {"kernel_latency_ms": 0.0, "queue_latency_ms": 0.0, "device_latency_ms": 0.7, "max_queue_depth": 32},
    "host": {"mem_swapin_bytes_per_s": 0.0},
    "array": {"avg_latency_ms": 0.5, "queue_full_per_s": 0.0},
}
WHERE = {
    "db2": ("db2_database", {"db2": "prod", "database": "PROD", "member": "0"}),
    "log": ("db2_log", {"db2": "prod", "database": "PROD", "member": "0"}),
    "guest_disk": ("guest_disk", {"guest": "db2prod01", "device": "sdb", "type": "disk"}),
    "guest_cpu": ("guest_cpu", {"guest": "db2prod01", "cpu": "total"}),
    "guest_mem": ("guest_mem", {"guest": "db2prod01"}),
    "vm": ("vsphere_vm", {"vcenter": "vc1", "vm": "db2prod01", "host": "esx01"}),
    "vmdk": ("vsphere_vm_disk", {"vcenter": "vc1", "vm": "db2prod01", "host": "esx01", "instance": "scsi0:1",
                                 "datastore": "ds_data", "lun": LUN}),
    "host_lun": ("vsphere_host_lun", {"vcenter": "vc1", "host": "esx01", "lun": LUN}),
    "host": ("vsphere_host", {"vcenter": "vc1", "host": "esx01"}),
    "array": ("storage_lun", {"storage": "netapp1", "kind": "ontap", "vserver": "svm1", "lun": "/vol/db/l0",
                              "naa": LUN}),
}


def judge(tmp_path, changes: dict[str, dict], buckets: int = 30, layers=tuple(WHERE)):
    path = tmp_path / "v.db"
    with Store(path, writer=True) as w:
        rows = []
        for i in range(buckets):
            for layer in layers:
                measurement, tags = WHERE[layer]
                rows.append(Sample(measurement, tags, {**HEALTHY[layer], **changes.get(layer, {})}, T0 + i * 20 * S))
        w.write(rows)
    with Store(path) as r:
        return stack_verdict(r, STACK, T0, T0 + buckets * 20 * S)


def test_hypervisor_queueing(tmp_path):
    v = judge(tmp_path, {"log": {"log_write_ms": 12.0}, "guest_disk": {"write_await_ms": 11.5},
                         "vmdk": {"write_latency_ms": 11.0},
                         "host_lun": {"kernel_latency_ms": 9.0, "queue_latency_ms": 8.5, "device_latency_ms": 1.5},
                         "array": {"avg_latency_ms": 1.2}})
    assert v.layer == "host" and "queueing in the hypervisor (LUN queue depth 32)" in v.summary
    assert v.summary.startswith("log write 12.0 ms/IO ← guest await 11.5 ms ← VMDK latency 11.0 ms ← "
                                "host esx01 KAVG 9.0 ms")
    assert "array LUN 1.2 ms" in v.summary and v.confidence == "high" and v.buckets == 30


def test_array_latency(tmp_path):
    v = judge(tmp_path, {"log": {"log_write_ms": 15.0}, "guest_disk": {"write_await_ms": 14.0},
                         "vmdk": {"write_latency_ms": 14.0}, "host_lun": {"device_latency_ms": 13.0},
                         "array": {"avg_latency_ms": 12.0}})
    assert v.layer == "storage" and v.summary.endswith("⇒ the array is slow")


def test_fabric_between_host_and_array(tmp_path):
    v = judge(tmp_path, {"log": {"log_write_ms": 14.0}, "vmdk": {"write_latency_ms": 13.0},
                         "host_lun": {"device_latency_ms": 12.0}, "array": {"avg_latency_ms": 1.0}})
    assert v.layer == "storage-network"


def test_host_swap(tmp_path):
    v = judge(tmp_path, {"vm": {"mem_swapin_bytes_per_s": 50 * 2**20, "mem_swapped_bytes": 2 * 2**30},
                         "log": {"log_write_ms": 6.0}})
    assert v.layer == "host" and "the host is swapping VM memory" in v.summary


def test_cpu_ready(tmp_path):
    v = judge(tmp_path, {"vm": {"cpu_ready_pct": 12.0}})  # % of the interval per vCPU
    assert v.layer == "host" and v.chain[0] == "CPU ready 12.0% per vCPU" and "CPU contention" in v.summary


def test_lock_contention(tmp_path):
    v = judge(tmp_path, {"db2": {"lock_wait_pct": 60.0}})
    assert v.layer == "db2" and "lock contention" in v.summary and "infrastructure is not the cause" in v.summary


def test_healthy_stack_blames_nobody(tmp_path):
    v = judge(tmp_path, {})
    assert v.layer is None and "healthy" in v.summary


def test_too_little_data_says_so(tmp_path):
    v = judge(tmp_path, {"log": {"log_write_ms": 30.0}}, buckets=2)
    assert v.layer is None and v.confidence == "none" and "not enough data" in v.summary


def test_only_db2_known_gives_a_low_confidence_db2_verdict(tmp_path):
    v = judge(tmp_path, {"log": {"log_write_ms": 9.0}}, layers=("db2", "log"))
    assert v.layer == "db2" and v.confidence == "low" and "no layer below it is monitored" in v.summary


@pytest.mark.parametrize("bad_buckets", [6, 12])
def test_only_the_symptom_buckets_are_judged(tmp_path, bad_buckets):
    """A short burst: the verdict looks at the buckets where DB2 suffered, not the healthy average."""
    path = tmp_path / "burst.db"
    with Store(path, writer=True) as w:
        rows = []
        for i in range(30):
            bad = i >= 30 - bad_buckets
            for layer, (measurement, tags) in WHERE.items():
                fields = dict(HEALTHY[layer])
                if bad and layer == "log":
                    fields["log_write_ms"] = 12.0
                if bad and layer == "host_lun":
                    fields.update(kernel_latency_ms=9.0, queue_latency_ms=8.0)
                rows.append(Sample(measurement, tags, fields, T0 + i * 20 * S))
        w.write(rows)
    with Store(path) as r:
        v = stack_verdict(r, STACK, T0, T0 + 30 * 20 * S)
    assert v.layer == "host" and v.buckets == bad_buckets and v.figures["kavg_ms"] == 9.0


def test_samples_in_memory_are_judged_as_in_the_store(tmp_path):
    from db2vtop.agent.core.source import MemorySource

    path = tmp_path / "same.db"
    rows = [Sample(m, t, {**HEALTHY[k], "log_write_ms": 12.0} if k == "log" else
                   {**HEALTHY[k], "kernel_latency_ms": 9.0, "queue_latency_ms": 8.0} if k == "host_lun" else HEALTHY[k],
                   T0 + i * 20 * S) for i in range(20) for k, (m, t) in WHERE.items()]
    with Store(path, writer=True) as w:
        w.write(rows)
    with Store(path) as r:
        from_store = stack_verdict(r, STACK, T0, T0 + 20 * 20 * S)
    from_memory = stack_verdict(MemorySource(rows), STACK, T0, T0 + 20 * 20 * S)
    assert from_memory.to_json() == from_store.to_json() and from_store.layer == "host"


def _moved(tmp_path, move_at: int, buckets: int = 45):
    """db2prod01 runs on esx01, then on esx02 from bucket `move_at` on. esx01 keeps queueing for its
    other VMs (KAVG 8 ms on the shared LUN); esx02 is clean; the array answers in 6 ms throughout."""
    path = tmp_path / "moved.db"
    slow = {"kernel_latency_ms": 8.0, "queue_latency_ms": 7.5, "device_latency_ms": 6.2}
    clean = {"kernel_latency_ms": 0.1, "queue_latency_ms": 0.0, "device_latency_ms": 6.1}
    with Store(path, writer=True) as w:
        rows = []
        for i in range(buckets):
            ts = T0 + i * 20 * S
            host = "esx01" if i < move_at else "esx02"
            for layer in ("db2", "log", "guest_disk", "vmdk", "array"):
                measurement, tags = WHERE[layer]
                tags = {**tags, "host": host} if "host" in tags else tags
                fields = {"log": {"log_write_ms": 9.0}, "guest_disk": {"write_await_ms": 8.5},
                          "vmdk": {"write_latency_ms": 8.0}, "array": {"avg_latency_ms": 6.0}}.get(layer, {})
                rows.append(Sample(measurement, tags, {**HEALTHY[layer], **fields}, ts))
            rows.append(Sample("vsphere_vm", {"vcenter": "vc1", "vm": "db2prod01", "host": host}, HEALTHY["vm"], ts))
            for h, figures in (("esx01", slow), ("esx02", clean)):
                rows.append(Sample("vsphere_host_lun", {"vcenter": "vc1", "host": h, "lun": LUN},
                                   {**HEALTHY["host_lun"], **figures}, ts))
        w.write(rows)
    return path


def test_after_a_vmotion_only_the_new_host_is_judged(tmp_path):
    path = _moved(tmp_path, move_at=10)
    with Store(path) as r:
        after = stack_verdict(r, STACK, T0 + 15 * 20 * S, T0 + 45 * 20 * S)
        rd = Reader(r)
        rd.begin()
        on_screen = resolve(rd, STACK, T0 + 44 * 20 * S, T0 + 44 * 20 * S)  # the Stack screen at the cursor
        before = resolve(rd, STACK, T0 + 5 * 20 * S, T0 + 5 * 20 * S)
    assert on_screen.host == "esx02" and before.host == "esx01"
    assert after.layer == "storage" and after.summary.endswith("⇒ the array is slow"), after.summary
    assert "host esx02 KAVG 0.1 ms" in after.summary and "esx01" not in after.summary
    assert after.figures["kavg_ms"] == pytest.approx(0.1)
    assert [e.layer for e in after.episodes] == ["storage"]  # only the new host
    # going on at the window's start: its onset looked for further back, the vMotion (esx01's queue was blamed before)
    assert after.since == T0 + 10 * 20 * S and not after.since_before
    assert [c.kind for c in after.causes] == ["array"]  # esx01's queue is no cause of the VM's any more


def test_a_window_across_the_vmotion_judges_each_bucket_with_its_own_host(tmp_path):
    path = _moved(tmp_path, move_at=20, buckets=40)
    with Store(path) as r:
        across = stack_verdict(r, STACK, T0, T0 + 40 * 20 * S)
        where = placement(r, "db2prod01", T0, T0 + 40 * 20 * S)
    # each host's buckets are judged with its own figures: esx01's queue was the VM's until the move, then
    # the array's 6 ms is what the VM waits on
    before, after = across.episodes
    assert (before.layer, before.start, before.end) == ("host", T0, T0 + 20 * 20 * S)
    assert "host esx01 KAVG 8.0 ms" in before.summary and before.figures["kavg_ms"] == (8.0, 8.0)
    assert [c.kind for c in before.causes] == ["hypervisor-queue", "array"]  # both add latency, the queue most
    assert (after.layer, after.start, after.end) == ("storage", T0 + 20 * 20 * S, None)
    assert across.layer == "storage" and across.since == after.start and "host esx02 KAVG 0.1 ms" in across.summary
    assert across.figures["kavg_ms"] == pytest.approx(0.1) and "esx01" not in across.summary
    assert where.host_at(T0 + 5 * 20 * S) == "esx01" and where.host_at(T0 + 25 * 20 * S) == "esx02"
    assert where.hosts_between(T0 + 25 * 20 * S, T0 + 30 * 20 * S) == {"esx02"}


# --- episodes (issue 28) ------------------------------------------------------------------------


def judge_over(tmp_path, changes_at, buckets: int = 30, until_extra: int = 0, layers=tuple(WHERE)):
    """Each bucket `i` with the changes `changes_at(i)` gives; the window ends `until_extra` buckets after."""
    path = tmp_path / "e.db"
    with Store(path, writer=True) as w:
        rows = []
        for i in range(buckets):
            changes = changes_at(i)
            for layer in layers:
                measurement, tags = WHERE[layer]
                rows.append(Sample(measurement, tags, {**HEALTHY[layer], **changes.get(layer, {})}, T0 + i * 20 * S))
        w.write(rows)
    with Store(path) as r:
        return stack_verdict(r, STACK, T0, T0 + (buckets + until_extra) * 20 * S)


READY = {"vm": {"cpu_ready_pct": 12.0}}


@pytest.mark.parametrize(("clean", "episodes"), [(1, 1), (2, 2)])
def test_one_bucket_gap_does_not_end_an_episode(tmp_path, clean, episodes):
    """Ready from bucket 10 to 29 with `clean` healthy buckets from 20: one gap bucket is tolerated."""
    v = judge_over(tmp_path, lambda i: READY if 10 <= i < 20 or i >= 20 + clean else {})
    assert len(v.episodes) == episodes and v.layer == "host" and v.episodes[-1].end is None
    assert v.episodes[0].start == T0 + 10 * 20 * S
    if episodes == 2:
        assert v.episodes[0].end == T0 + 20 * 20 * S and v.since == T0 + (20 + clean) * 20 * S


def test_a_single_bucket_is_no_episode(tmp_path):
    v = judge_over(tmp_path, lambda i: READY if i == 12 else {})
    assert v.episodes == [] and v.layer is None and "healthy" in v.summary


def test_causes_are_ranked_by_the_share_of_time_they_explain(tmp_path):
    """DB2 waits on its log 25 % of its time, the hypervisor's queue is 20 of the 21 ms it waits: about 24 % of
    DB2's time; the VM waits 30 % of its time for CPUs. By how far past their levels, KAVG (10x) would come
    first; by the time each explains, CPU ready does."""
    both = {"log": {"log_write_ms": 21.0}, "db2": {"log_disk_wait_pct": 25.0, "pool_read_wait_pct": 0.0},
            "guest_disk": {"write_await_ms": 20.5}, "vmdk": {"write_latency_ms": 20.5},
            "host_lun": {"kernel_latency_ms": 20.0, "device_latency_ms": 0.5}, "vm": {"cpu_ready_pct": 30.0}}
    v = judge_over(tmp_path, lambda i: both if i >= 20 else {})
    assert [c.kind for c in v.causes] == ["ready", "hypervisor-queue"]
    assert v.causes[0].share == pytest.approx(30.0) and v.causes[1].share == pytest.approx(25 * 20 / 21, rel=1e-3)
    assert v.layer == "host" and v.since == T0 + 20 * 20 * S and v.summary.startswith("CPU ready 30.0% per vCPU")
    doc = v.to_json()
    assert [c["layer"] for c in doc["causes"]] == ["host", "host"] and doc["since"] == "2023-11-14T22:20:00+00:00"


def test_without_db2_data_the_verdict_says_so(tmp_path):
    v = judge_over(tmp_path, lambda i: {}, layers=("vm", "vmdk", "host_lun", "host"))
    assert v.layer is None and "healthy" not in v.summary and "no DB2 data for this stack" in v.summary
    assert v.not_known[0] == "no DB2 data for this stack" and "guest OS" in v.not_known[1]


def test_never_healthy_beside_an_open_critical_finding(tmp_path):
    from db2vtop.agent.core.model import Finding

    v = judge_over(tmp_path, lambda i: {})
    assert "look healthy" in v.summary
    crit = Finding("vm-fits-numa-node", "critical", {"layer": "vm", "vm": "db2prod01"},
                   "db2prod01: 12 vCPUs on a node of 8 cores", {"values": {}, "window": {}, "samples": 1},
                   "", "", [], T0, T0)
    v.note_findings([crit])
    assert "healthy" not in v.summary and "vm-fits-numa-node is critical" in v.summary
    assert "not blamed because it is configuration" in v.summary
    (tmp_path / "b").mkdir()
    v = judge_over(tmp_path / "b", lambda i: {})
    ready = Finding("cpu-ready", "critical", {"layer": "vm", "vm": "db2prod01"}, "db2prod01: CPU ready 12% per vCPU",
                    {"values": {}, "window": {"from_ns": T0, "to_ns": T0 + S}, "samples": 3}, "", "", [], T0, T0 + S)
    v.note_findings([ready])
    assert "cpu-ready is critical" in v.summary and "do not reach their levels" in v.summary


def test_data_that_stopped_is_not_an_ongoing_episode(tmp_path):
    """Ready high until the samples stop, ten minutes before the window's end: nothing is blamed now."""
    v = judge_over(tmp_path, lambda i: READY if i >= 20 else {}, until_extra=30)
    assert v.layer is None and v.episodes[-1].end == T0 + 30 * 20 * S
    assert v.summary.startswith("no sample since ") and any(x.startswith("no sample since") for x in v.not_known)


@pytest.mark.parametrize("reservation_mb", [0, 65536])
def test_a_host_in_the_hard_memory_state_is_a_memory_episode_unless_the_vms_memory_is_reserved(reservation_mb):
    """Nothing but the host's memory state (no DB2 or guest data, no balloon or swap counter of the VM): an
    unreserved VM's memory is reclaimed, a memory-layer episode with its onset; one reserved whole is not."""
    from db2vtop.agent.core.model import Fact
    from db2vtop.agent.core.source import MemorySource

    rows = []
    for i in range(30):
        ts = T0 + i * 20 * S
        rows.append(Sample("vsphere_vm", WHERE["vm"][1], {"cpu_ready_pct": 0.5, "vcpus": 8}, ts))
        rows.append(Sample("vsphere_host", WHERE["host"][1], {"mem_state": 2 if i >= 10 else 0}, ts))
    vm = Fact("vsphere_vm", {"vcenter": "vc1", "vm": "db2prod01"},
              {"memory_mb": 65536, "mem_reservation_mb": reservation_mb}, T0)
    v = stack_verdict(MemorySource(rows, [vm]), STACK, T0, T0 + 30 * 20 * S)
    if reservation_mb:
        assert v.layer is None and not v.episodes, v.summary
    else:
        assert v.layer == "host" and v.causes[0].kind == "host-memory" and v.since == T0 + 10 * 20 * S, v.summary
        assert "host memory state hard" in v.summary
