"""Writing: exact round trips, fields merged at one time, versioned facts, annotations and findings, in
statements of a few hundred rows (agent/core/store/writing.py)."""

from __future__ import annotations

import json

from db2vtop.agent.core.model import Annotation, Fact, Finding, Sample
from db2vtop.agent.core.store import Store

T0 = 1_700_000_000_000_000_000


def test_every_field_type_round_trips_exactly(store_path):
    fields = {"int": 42, "neg": -7, "big": 2**62 + 1, "float": 0.1, "whole_float": 2.0, "tiny": 1e-300,
              "str": "SQL1032N  No start database manager command was issued.", "unicode": "µs ✓ \"q\" \\",
              "true": True, "false": False, "zero": 0, "empty": ""}
    tags = {"vm": "db2prod01", "naa": "naa.600a098038303053", "odd": "a b,c=d\"é"}
    with Store(store_path, writer=True) as w:
        w.write([Sample("m", tags, fields, T0)])
    with Store(store_path) as r:
        (row,) = list(r.rows("m"))
    assert row.ts == T0 and row.measurement == "m" and row.tags == tags
    assert row.fields == fields
    assert [type(v) for v in row.fields.values()] == [type(v) for v in fields.values()]


def test_non_finite_values_are_dropped_not_the_sample(store_path):
    with Store(store_path, writer=True) as w:
        w.write([Sample("m", {}, {"ok": 1.5, "nan": float("nan"), "inf": float("inf")}, T0)])
        (row,) = list(w.rows("m"))
    assert row.fields == {"ok": 1.5}


def test_same_series_and_time_merges_fields(store_path):
    with Store(store_path, writer=True) as w:
        w.write([Sample("m", {"a": "1"}, {"x": 1, "y": 2}, T0), Sample("m", {"a": "1"}, {"y": 3, "z": "s"}, T0)])
        w.write([Sample("m", {"a": "1"}, {"w": 0.5}, T0)])
        rows = list(w.rows("m"))
    assert len(rows) == 1 and rows[0].fields == {"x": 1, "y": 3, "z": "s", "w": 0.5}


def test_a_sample_the_store_holds_already_is_not_written_again(store_path):
    """A restart's first cycle hands on again samples the store holds (vCenter's history for the checks), some
    with only some of their fields: nothing in the file changes for them; a field that is new or different
    still merges."""
    tags = {"vm": "db01"}
    with Store(store_path, writer=True) as w:
        w.write([Sample("m", tags, {"x": 1, "y": 2.5}, T0 + i * 10**9) for i in range(3)]
                + [Sample("m", {"vm": "other"}, f, T0) for f in ({"x": 1}, {"x": 1, "y": 1, "z": "a"})])
        before = w.db.total_changes  # (the field sets below are known already)
        w.write([Sample("m", tags, {"x": 1}, T0 + i * 10**9) for i in range(3)]
                + [Sample("m", tags, {"x": 1, "y": 2.5}, T0 + 1 * 10**9)])
        assert w.db.total_changes == before
        w.write([Sample("m", tags, {"x": 2}, T0), Sample("m", tags, {"z": "new"}, T0 + 10**9)])
        assert w.db.total_changes > before
        rows = sorted(w.rows("m"), key=lambda r: r.ts)
    assert [r.fields for r in rows if r.tags == tags] == [{"x": 2, "y": 2.5}, {"x": 1, "y": 2.5, "z": "new"},
                                                           {"x": 1, "y": 2.5}]


def test_facts_keep_a_version_per_change(store_path):
    vm = {"vm": "db2prod01"}
    with Store(store_path, writer=True) as w:
        w.write(facts=[Fact("vm", vm, {"num_cpu": 8, "memory_mb": 65536}, T0)])
        w.write(facts=[Fact("vm", vm, {"memory_mb": 65536, "num_cpu": 8}, T0 + 1)])  # same data, other key order
        w.write(facts=[Fact("vm", vm, {"num_cpu": 12, "memory_mb": 65536}, T0 + 2)])
        w.write(facts=[Fact("vm", {"vm": "other"}, {"num_cpu": 2}, T0 + 3)])
    with Store(store_path) as r:
        history = r.fact_history("vm", vm)
        assert [f.data["num_cpu"] for f in history] == [8, 12]
        assert [f.ts for f in history] == [T0, T0 + 2]
        current = {f.tags["vm"]: f.data["num_cpu"] for f in r.facts("vm")}
    assert current == {"db2prod01": 12, "other": 2}


def test_versions_in_one_batch_and_across_restarts_as_if_written_one_by_one(store_path):
    vm, v1, v2 = {"vm": "db2prod01"}, {"num_cpu": 8}, {"num_cpu": 12}
    with Store(store_path, writer=True) as w:
        w.write(facts=[Fact("vm", vm, v1, T0), Fact("vm", vm, v1, T0 + 1), Fact("vm", vm, v2, T0 + 2),
                       Fact("vm", vm, v1, T0 + 3), Fact("vm", vm, v1, T0 + 4), Fact("vm", {"vm": "b"}, v2, T0)])
    with Store(store_path, writer=True) as w:  # a restart: what it knows of the stored versions is read back
        w.write(facts=[Fact("vm", vm, v1, T0 + 5), Fact("vm", {"vm": "b"}, v1, T0 + 5)])
    with Store(store_path) as r:
        rows = r.db.execute("SELECT entity, data, first_seen, last_seen FROM facts ORDER BY id").fetchall()
        assert [(json.loads(e)["vm"], json.loads(d)["num_cpu"], a - T0, b - T0) for e, d, a, b in rows] == [
            ("db2prod01", 8, 0, 1), ("db2prod01", 12, 2, 2), ("db2prod01", 8, 3, 5), ("b", 12, 0, 0), ("b", 8, 5, 5)]
        assert {f.tags["vm"]: f.data["num_cpu"] for f in r.facts("vm")} == {"db2prod01": 8, "b": 8}


def test_a_batch_of_more_series_than_a_statement_holds(store_path, monkeypatch):
    """Rows go in multi-row statements (a step per row kept the writer waiting for the GIL): every row of a batch
    past their size, and every series, with tags that JSON must escape, is stored once and read back."""
    monkeypatch.setattr("db2vtop.agent.core.store.writing.ROWS_PER_STATEMENT", 7)
    odd = ['a,b', 'quote"d', "tab\tand\x1erecord", "é ü 中", "x" * 300]
    samples = [Sample("m", {"vm": f"{odd[i % len(odd)]}{i}", "n": str(i % 3)}, {"v": i}, T0 + k)
               for i in range(50) for k in range(3)]
    with Store(store_path, writer=True) as w:
        w.write(samples[:75])
        w.write(samples)  # the first half again: known series, rows the store holds
    with Store(store_path) as r:
        series = r.series("m")
        assert sorted(s.tags["vm"] for s in series) == sorted(f"{odd[i % len(odd)]}{i}" for i in range(50))
        got = {(row.tags["vm"], row.ts): row.fields["v"] for row in r.rows("m", 0, T0 + 10)}
    assert got == {(s.tags["vm"], s.ts): s.fields["v"] for s in samples}


def test_a_removed_entity_leaves_the_current_facts_and_keeps_its_history(store_path):
    vm = {"vm": "gone01"}
    with Store(store_path, writer=True) as w:
        w.write(facts=[Fact("vm", vm, {"num_cpu": 8}, T0), Fact("vm", {"vm": "stays"}, {"num_cpu": 2}, T0)])
        w.write(facts=[Fact.removal("vm", vm, T0 + 1)])
        w.write(facts=[Fact.removal("vm", vm, T0 + 2)])             # said again: no new version
    with Store(store_path) as r:
        assert [f.tags for f in r.facts("vm")] == [{"vm": "stays"}]
        assert [f.tags for f in r.facts()] == [{"vm": "stays"}]
        assert [(f.ts, f.removed) for f in r.fact_history("vm", vm)] == [(T0, False), (T0 + 1, True)]
    with Store(store_path, writer=True) as w:                          # the name comes back: a new entity
        w.write(facts=[Fact("vm", vm, {"num_cpu": 4}, T0 + 3)])
    with Store(store_path) as r:
        assert {f.tags["vm"]: f.data["num_cpu"] for f in r.facts("vm")} == {"gone01": 4, "stays": 2}


def test_annotations(store_path):
    with Store(store_path, writer=True) as w:
        w.write(annotations=[Annotation("marker", "run-2 start", {"by": "me"}, "", T0),
                             Annotation("reset", "db2 counters reset", {"db2": "prod"}, "MON_GET went back", T0 + 5)])
        got = w.annotations(T0 + 1)
    assert [(a.event, a.name, a.tags, a.text, a.ts) for a in got] == [
        ("reset", "db2 counters reset", {"db2": "prod"}, "MON_GET went back", T0 + 5)]


def finding(ts: int, severity: str = "warning") -> Finding:
    return Finding("balloon-zero", severity, {"layer": "vm", "vm": "db2prod01"}, "balloon 512 MiB",
                   {"balloon_bytes": 536870912}, "why", "fix", ["000_e991ec30bbd9209f.txt §5.4"], ts, ts)


def test_findings_open_refresh_resolve_reopen(store_path):
    with Store(store_path, writer=True) as w:
        w.write(findings=[finding(T0)])
        w.write(findings=[finding(T0 + 10, "critical")])  # still open: refreshed, not duplicated
        (open_,) = w.findings()
        assert (open_.severity, open_.first_seen, open_.last_seen) == ("critical", T0, T0 + 10)
        resolved = finding(T0 + 20, "critical")
        resolved.first_seen, resolved.resolved_at = T0, T0 + 20
        w.write(findings=[resolved])
        w.write(findings=[resolved])  # resolving twice changes nothing
        assert w.findings() == []
        w.write(findings=[finding(T0 + 30)])
        history = w.findings(open_only=False)
    assert [(f.first_seen, f.resolved_at) for f in history] == [(T0, T0 + 20), (T0 + 30, None)]
