"""Sealing and retention: sealing changes no read, a late row is merged into its chunk, retention works in
short steps and removes whole chunks, then the series; readers see every batch whole while the writer seals,
and a kill -9 while it seals keeps the file sound (agent/core/store/sealing.py)."""

from __future__ import annotations

import time

from db2vtop.agent.core.model import Annotation, Sample
from db2vtop.agent.core.store import CHUNK_SPAN_NS, Store
from tests.agent.store.records import T0, S, committed, every_read, fleet_samples, kill_9_midway, spawn_writer


def test_every_read_is_the_same_before_and_after_sealing(store_path):
    with Store(store_path, writer=True) as w:
        w.write(fleet_samples(spans=3))
        before = every_read(w)
        moved = w.compact()
        assert moved > 0 and w.db.execute("SELECT count(*) FROM samples").fetchone()[0] == 6
        assert before == every_read(w)
    with Store(store_path) as r:  # a fresh reader: nothing cached
        assert before == every_read(r)


def test_a_late_row_of_a_sealed_span_is_merged_into_its_chunk(store_path):
    with Store(store_path, writer=True) as w:
        w.write([Sample("m", {}, {"a": i}, T0 + i * 20 * S) for i in range(0, 200, 2)])
        w.compact()
        w.write([Sample("m", {}, {"a": 1, "b": "late"}, T0 + 20 * S),  # a new time in the sealed span
                 Sample("m", {}, {"b": "x"}, T0 + 40 * S)])  # a time already sealed: fields merge
        expected = [(T0, {"a": 0}), (T0 + 20 * S, {"a": 1, "b": "late"}), (T0 + 40 * S, {"a": 2, "b": "x"})]
        assert [(r.ts, r.fields) for r in w.rows("m", 0, T0 + 40 * S)] == expected
        w.compact()
        assert [(r.ts, r.fields) for r in w.rows("m", 0, T0 + 40 * S)] == expected
        assert w.db.execute("SELECT count(*) FROM chunks WHERE span=?", (T0 // CHUNK_SPAN_NS,)).fetchone()[0] == 1


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


def test_retention_removes_whole_chunks_then_the_series(store_path):
    with Store(store_path, writer=True) as w:
        w.write(fleet_samples(spans=4))
        w.compact()
        cutoff = T0 + 2 * CHUNK_SPAN_NS + 60 * S
        while w.enforce_retention(cutoff, budget=3):
            pass
        left = list(w.rows("vm"))
        # a chunk straddling the cutoff is kept whole: nothing older than its span survives
        assert left and min(r.ts for r in left) >= T0 + 2 * CHUNK_SPAN_NS
        assert max(r.ts for r in left) == max(s.ts for s in fleet_samples(spans=4))
        while w.enforce_retention(T0 + 10 * CHUNK_SPAN_NS):
            pass
        w.enforce_retention(T0 + 10 * CHUNK_SPAN_NS)
        assert w.series() == [] and w.db.execute("SELECT count(*) FROM chunks").fetchone()[0] == 0


def test_sealed_chunks_take_a_fraction_of_the_heads_json(store_path):
    """A size guard, not a benchmark: bench/store.py measures bytes per value on a fleet's data."""
    samples = fleet_samples(spans=4, seed=7)
    with Store(store_path, writer=True) as w:
        w.write(samples)
        head = w.db.execute("SELECT sum(length(vals)) + 8 * count(*) FROM samples").fetchone()[0]
        w.compact()
        sealed = w.db.execute("SELECT sum(length(data)) FROM chunks").fetchone()[0]
    # a random full-precision gauge ("ratio") keeps its 7 bytes; everything else shrinks to 1-2
    assert sealed < head / 3, (sealed, head)


def test_a_reader_process_sees_every_batch_whole_while_the_writer_seals(store_path):
    per_batch = 300
    p = spawn_writer(store_path, 60, per_batch, 0.0, "seal")
    try:
        with Store(store_path) as r:
            for target in (5, 15, 30):
                n = committed(p, target)
                counts: dict[int, int] = {}
                for row in r.rows("bench"):
                    counts[row.fields["batch"]] = counts.get(row.fields["batch"], 0) + 1
                assert all(counts.get(b) == per_batch for b in range(n + 1)), "a row was lost or seen twice"
                assert all(c == per_batch for c in counts.values())
            assert r.db.execute("SELECT count(*) FROM chunks").fetchone()[0] > 0
    finally:
        p.kill()
        p.wait()


def test_kill_9_while_sealing_keeps_every_committed_batch_and_a_sound_file(store_path):
    kill_9_midway(store_path, 2000, 4, "seal")
    with Store(store_path) as r:
        assert r.db.execute("SELECT count(*) FROM chunks").fetchone()[0] > 0
