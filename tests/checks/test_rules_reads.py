"""Each live rule's declared reads (`LiveRule.reads`) are all its judge() looks at: a source that keeps history
(vCenter's realtime hour) hands on again only those fields for the check engine's start, so a rule that reads
a field it does not declare would judge its first samples without it, and open or clear a finding late."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from db2vtop.agent.core.source import Row
from db2vtop.checks.engine import Engine
from db2vtop.checks.rule import FactIndex, LiveRule, thresholds_of
from db2vtop.checks.rules import all_rules


class Reading(dict):
    """A sample's fields that remember which were looked at: every field is there, with a value that breaches."""

    def __init__(self, value: float) -> None:
        super().__init__()
        self.value = value
        self.seen: set[str] = set()
        self.all = False

    def get(self, key, default=None):  # type: ignore[override]
        self.seen.add(key)
        return self.value

    def __getitem__(self, key):
        self.seen.add(key)
        return self.value

    def __contains__(self, key) -> bool:
        self.seen.add(key)
        return True

    def __iter__(self) -> Iterator:
        self.all = True
        return iter(())

    def items(self):  # type: ignore[override]
        self.all = True
        return super().items()


def _declaring() -> list[LiveRule]:
    return [r for r in all_rules() if isinstance(r, LiveRule) and r.reads() is not None]


@pytest.mark.parametrize("rule", _declaring(), ids=lambda r: f"{r.id}:{type(r).__name__}")
def test_a_live_rule_reads_only_the_fields_it_declares(rule: LiveRule):
    tags = {"vcenter": "vc", "vm": "db01", "host": "esx01", "lun": "naa.1", "cluster": "c", "db2": "PROD",
            "guest": "db01", "bufferpool": "IBMDEFAULTBP", "device": "sda", "cpu": "total", "kind": "xtremio",
            "volume": "v1", "array": "a1", "disk": "d1"}
    for value in (0.0, 1e12, 50.0):  # clean, breaching, in between: every branch that reads a field
        fields = Reading(value)
        rule.judge(Row(1, rule.measurement, tags, fields), thresholds_of(rule), FactIndex())  # type: ignore[arg-type]
        assert not fields.all, f"{type(rule).__name__} reads every field; it must not declare reads"
        assert fields.seen <= rule.reads(), (
            f"{type(rule).__name__} reads {sorted(fields.seen - rule.reads())} beyond what it declares")


def test_a_field_read_but_not_declared_is_found():
    class Sneaky(LiveRule):
        id, layer, measurement, field = "cpu-ready", "vm", "vsphere_vm", "cpu_ready_pct"

        def judge(self, row, t, facts):
            row.fields.get("cpu_costop_pct")
            return None

    fields = Reading(1.0)
    Sneaky().judge(Row(1, "vsphere_vm", {}, fields), {}, FactIndex())
    assert not fields.seen <= Sneaky().reads()


def test_history_fields_are_what_the_live_rules_read_by_measurement():
    engine = Engine(all_rules())
    wanted = engine.history_fields()
    assert wanted["vsphere_vm"] >= {"cpu_ready_pct", "mem_balloon_bytes", "mem_swapped_bytes", "vcpus"}
    assert "read_latency_ms" not in wanted["vsphere_vm"]  # a disk counter: no live rule reads it
    assert "vsphere_datastore" not in wanted
    # the VMDK latency rule: each disk's latencies and the I/O that gates them, not its throughput
    assert wanted["vsphere_vm_disk"] == {"read_latency_ms", "write_latency_ms", "read_iops", "write_iops"}
    assert wanted["db2_memory"] is None  # a rule that declares no field reads the whole sample
