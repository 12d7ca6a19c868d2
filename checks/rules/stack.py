"""The cross-layer verdict's own parameters, as a rule's thresholds: `[checks.stack-verdict]` overrides
them like any rule's, and `db2vtop rules` lists them. The verdict itself (checks/verdict.py) reads
these, and the thresholds of the rules it shares a question with (cpu-ready, vcpu-no-excess,
disk-queue-saturation), through checks/thresholds.py."""

from __future__ import annotations

from db2vtop.checks.catalog import Practice
from db2vtop.checks.rule import FactIndex, Judgement, StaticRule, Thresholds


class VerdictRule(StaticRule):
    id, layer = "stack-verdict", "stack"
    defaults = {
        # the buckets where DB2 shows the symptom are the ones judged
        "symptom_log_write_ms": 2.0, "symptom_log_disk_wait_pct": 20.0, "symptom_read_wait_pct": 30.0,
        "symptom_lock_wait_pct": 20.0,
        # the I/O chain: a device this slow is looked at; this slow (device or array) is to blame
        "device_ms": 10.0, "slow_ms": 5.0,
        # the array answers this many times faster than the host sees it: the path between them
        "fabric_ratio": 3.0,
        # the guest queues on its own when its await exceeds the VMDK's this many times, plus this many ms
        "guest_queue_ratio": 2.0, "guest_queue_ms": 1.0,
        "steal_pct": 5.0,
        # too few buckets to judge; enough for high confidence
        "min_buckets": 3, "confident_buckets": 9,
        # an episode lasts at least this many buckets (one is noise); this many buckets between two runs of
        # one layer (empty, or blaming another) do not end it
        "episode_buckets": 2, "gap_buckets": 1,
    }
    fix = "Follow the chain: the layer named is the first that adds most of the time."

    @property
    def practice(self) -> Practice:
        return Practice(self.id, "The cross-layer verdict", "stack",
                        "Name the layer to blame by walking DB2's waits down the I/O, memory and CPU chains",
                        "the thresholds below; the shared ones come from cpu-ready, vcpu-no-excess and "
                        "disk-queue-saturation", "every layer's samples on 20 s buckets", "D",
                        ("db2vtop documentation, docs/checks.md, The verdict",
                         "VMware KB 1008205, Using esxtop to identify storage performance issues for ESX/ESXi"), True)

    def judge_facts(self, facts: FactIndex, t: Thresholds) -> list[Judgement]:
        return []  # the verdict is judged per stack over a window by checks/verdict.py, not per fact


RULES = [VerdictRule()]
