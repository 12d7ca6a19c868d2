"""The writer thread: batches committed in order, a record the store cannot hold set aside, what cannot be
written at exit said, spans sealed once they are over (agent/core/store/writer.py)."""

from __future__ import annotations

import time

from db2vtop.agent.core.model import Annotation, Sample
from db2vtop.agent.core.store import CHUNK_SPAN_NS, Store, StoreWriter
from db2vtop.agent.core.supervise import Supervisor
from tests.agent.store.records import T0, fleet_samples


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


def test_the_writer_thread_seals_spans_once_they_are_over(store_path):
    w = StoreWriter(store_path, retention_s=10 * 365 * 86400)
    try:
        samples = fleet_samples(spans=3)
        for i in range(0, len(samples), 100):
            w.submit(samples[i:i + 100])
        def sealed_spans() -> set[int]:
            return {s for (s,) in w.call(lambda st: st.db.execute("SELECT DISTINCT span FROM chunks").fetchall())}

        deadline = time.monotonic() + 20
        while len(sealed_spans()) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.5)  # the pass would go on to a third span now if it wrongly took the open one
        spans = sealed_spans()
        newest = max(s.ts for s in samples)
        # the open span (the newest sample's) is left to the head; the closed ones are sealed
        assert spans == {T0 // CHUNK_SPAN_NS, T0 // CHUNK_SPAN_NS + 1}
        assert newest // CHUNK_SPAN_NS == T0 // CHUNK_SPAN_NS + 2
        assert len(w.call(lambda st: list(st.rows("vm")))) == len(samples)
    finally:
        w.close()
    assert w.stats.sealed > 0
