"""The embedded store: exact round trips, versioned facts, findings, retention, one writer
with concurrent readers in other processes, and a kill -9 that loses only the open batch."""

from __future__ import annotations

import json
import os
import random
import signal
import sqlite3
import stat
import subprocess
import sys
import time

import pytest

from db2vtop.agent.core.model import Annotation, Fact, Finding, Sample
from db2vtop.agent.core.store import Store, StoreAccessError, StoreError, StoreLockedError, StoreWriter
from db2vtop.agent.core.supervise import Supervisor
from tests.conftest import ROOT

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


def test_reads_latest_window_and_series(store_path):
    with Store(store_path, writer=True) as w:
        w.write([Sample("disk", {"device": d}, {"util_pct": float(i), "s": "x"}, T0 + i * 10**9)
                 for i in range(10) for d in ("sda", "sdb")])
        latest = w.latest("disk")
        assert [(r.tags["device"], r.fields["util_pct"]) for r in latest] == [("sda", 9.0), ("sdb", 9.0)]
        back_then = w.latest("disk", until_ns=T0 + 4 * 10**9)
        assert [r.fields["util_pct"] for r in back_then] == [4.0, 4.0]
        assert w.latest("disk", since_ns=T0 + 10 * 10**9) == []
        sda = next(s for s in w.series("disk") if s.tags == {"device": "sda"})
        assert w.window(sda.id, "util_pct", T0 + 3 * 10**9, T0 + 5 * 10**9) == [
            (T0 + 3 * 10**9, 3.0), (T0 + 4 * 10**9, 4.0), (T0 + 5 * 10**9, 5.0)]
        assert w.window(sda.id, "missing", T0) == []
        assert w.time_range() == (T0, T0 + 9 * 10**9)
        assert w.measurements() == ["disk"]
        assert len(list(w.rows("disk", since_ns=T0 + 8 * 10**9))) == 4
        of_sda = list(w.rows_of([sda], T0 + 2 * 10**9, T0 + 3 * 10**9))
        assert [(r.ts, r.tags, r.fields["util_pct"]) for r in of_sda] == [
            (T0 + 2 * 10**9, {"device": "sda"}, 2.0), (T0 + 3 * 10**9, {"device": "sda"}, 3.0)]


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
    monkeypatch.setattr("db2vtop.agent.core.store.ROWS_PER_STATEMENT", 7)
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


def test_retention_is_incremental(store_path):
    now = time.time_ns()
    old = now - 10 * 86400 * 10**9
    with Store(store_path, writer=True) as w:
        w.write([Sample("m", {"s": str(s)}, {"v": i}, old + i) for s in range(3) for i in range(1000)])
        w.write([Sample("m", {"s": str(s)}, {"v": 1}, now) for s in (0, 1)])  # series 2 is all old
        w.write(annotations=[Annotation("marker", "old", ts=old)])
        cutoff = now - 7 * 86400 * 10**9
        steps = []
        while n := w.enforce_retention(cutoff, budget=700):
            steps.append(n)
            assert len(steps) < 50
        assert max(steps) <= 700 and sum(steps) == 3000
        assert len(steps) >= 5  # the backlog took several short steps, not one long delete
        assert [r.tags["s"] for r in w.rows("m")] == ["0", "1"]
        assert [s.tags["s"] for s in w.series("m")] == ["0", "1"]  # the empty series is gone
        assert w.annotations() == []
        w.write([Sample("m", {"s": "2"}, {"v": 5}, now + 1)])  # a removed series can come back
        assert w.latest("m")[-1].fields == {"v": 5}


def test_one_writer_at_a_time(store_path):
    with Store(store_path, writer=True):
        with pytest.raises(StoreLockedError, match=r"pid \d+"):
            Store(store_path, writer=True)
        r = subprocess.run([sys.executable, "-m", "db2vtop.agent", "agent", "--once", "--store", str(store_path)],
                           cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert r.returncode == 2 and "being written by another db2vtop process" in r.stderr
    with Store(store_path, writer=True):
        pass  # released on close


def test_reader_errors_are_clear(tmp_path):
    with pytest.raises(StoreError, match="no store at"):
        Store(tmp_path / "missing.db")
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(StoreError, match=r"junk\.db"):
        Store(junk)


def spawn_writer(path, batches, per_batch, pause, *extra: str) -> subprocess.Popen:
    p = subprocess.Popen([sys.executable, "-m", "tests.infra.store_writer_proc", str(path), str(batches),
                          str(per_batch), str(pause), *extra], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "ready"
    return p


def committed(p: subprocess.Popen, upto: int) -> int:
    for line in p.stdout:
        n = int(line.split()[1])
        if n >= upto:
            return n
    raise AssertionError("writer ended early")


def test_reader_process_sees_writer_process_data_while_it_writes(store_path):
    p = spawn_writer(store_path, 40, 100, 0.05)
    try:
        seen = []
        with Store(store_path) as r:
            for target in (3, 10, 20):
                n = committed(p, target)
                seen.append(len(list(r.rows("bench"))))
                assert seen[-1] >= (n + 1) * 100
        assert seen == sorted(seen) and seen[0] < seen[-1]
    finally:
        p.kill()
        p.wait()


def kill_9_midway(store_path, per_batch: int, after: int, *extra: str) -> tuple[int, dict[int, int]]:
    """Start a writer process, kill -9 it at a random moment after batch `after` is committed, check the
    file is sound; (the last batch it said was committed, rows read back per batch)."""
    p = spawn_writer(store_path, 1000, per_batch, 0.0, *extra)
    try:
        last = committed(p, after)
        time.sleep(random.uniform(0.0, 0.3))  # land inside a later batch's transaction (or a sealing step)
        p.send_signal(signal.SIGKILL)
        p.wait()
        for line in p.stdout:
            last = int(line.split()[1])
    finally:
        p.kill()
    db = sqlite3.connect(store_path)
    assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    db.close()
    with Store(store_path) as r:
        counts: dict[int, int] = {}
        for row in r.rows("bench"):
            counts[row.fields["batch"]] = counts.get(row.fields["batch"], 0) + 1
    assert all(counts.get(b) == per_batch for b in range(last + 1)), "a committed batch is incomplete"
    assert all(n == per_batch for n in counts.values()), "a batch was half written"
    return last, counts


def test_kill_9_mid_batch_keeps_every_committed_batch_and_a_sound_file(store_path):
    last, counts = kill_9_midway(store_path, 20000, 3)
    assert max(counts) <= last + 1


def test_writer_thread_commits_in_order_and_flushes(store_path):
    w = StoreWriter(store_path, retention_s=86400)
    for i in range(50):
        w.submit([Sample("m", {}, {"i": i}, T0 + i)], annotations=[Annotation("marker", f"m{i}", ts=T0 + i)])
    w.flush()
    assert w.call(lambda s: len(list(s.rows("m")))) == 50
    w.close()
    with Store(store_path) as r:
        assert [row.fields["i"] for row in r.rows("m")] == list(range(50))
        assert len(r.annotations()) == 50
    assert w.stats.samples == 50 and w.stats.last_error == ""


def test_a_record_the_store_cannot_hold_is_set_aside_and_the_writer_goes_on(store_path):
    """A time past 2262 (a marker file, a source's clock) raised OverflowError in the writer thread and
    ended it for good: every later sample was lost. Now the record is set aside alone and counted."""
    sup = Supervisor()
    w = StoreWriter(store_path, retention_s=86400, supervisor=sup)
    good = [Sample("m", {"i": str(i)}, {"v": i}, T0 + i) for i in range(10)]
    w.submit([*good[:5], Sample("m", {"i": "bad"}, {"v": 1}, 10**30), *good[5:]],
             annotations=[Annotation("marker", "evil", ts=10**30), Annotation("marker", "fine", ts=T0)])
    w.submit([Sample("m", {"i": "after"}, {"v": 1}, T0 + 100)])
    w.flush()
    assert w._thread.is_alive()
    health = {h.name: h for h in sup.snapshot()}["store-writer"]
    assert health.set_aside == 2 and health.state == "ok" and "OverflowError" in health.last_error
    w.close()
    with Store(store_path) as r:
        assert sorted(row.tags["i"] for row in r.rows("m")) == sorted([str(i) for i in range(10)] + ["after"])
        assert [a.name for a in r.annotations()] == ["fine"]
    assert not sup.failed


def test_a_store_that_cannot_be_written_at_exit_fails_the_writer(store_path):
    sup = Supervisor()
    w = StoreWriter(store_path, retention_s=86400, supervisor=sup)
    w.exit_tries = 1
    w.flush()
    w.store.db.execute("PRAGMA query_only=1")  # every write now fails as a full disk would, for good
    w.submit([Sample("m", {}, {"v": 1}, T0)])
    w.close()
    assert sup.failed and "1 samples could not be written at exit" in sup.failures[0]


def test_store_files_are_private_and_never_written_through_a_link(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("root:x:0:0:IMPORTANT\n")
    (tmp_path / "m.db-writer.lock").symlink_to(victim)  # planted by another user of a shared directory
    with pytest.raises(StoreAccessError, match="symbolic link"):
        Store(tmp_path / "m.db", writer=True)
    assert victim.read_text() == "root:x:0:0:IMPORTANT\n"
    (tmp_path / "m.db-writer.lock").unlink()
    old = os.umask(0)
    try:
        with Store(tmp_path / "deep" / "m.db", writer=True) as s:
            s.write([Sample("m", {}, {"v": 1}, T0)])
            modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in (tmp_path / "deep").iterdir()}
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "deep").stat().st_mode) == 0o700
    assert modes == {"m.db": 0o600, "m.db-wal": 0o600, "m.db-shm": 0o600, "m.db-writer.lock": 0o600}
