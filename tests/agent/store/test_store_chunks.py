"""Sealed chunks: the codec round-trips every value bit for bit, sealing changes no read,
older stores open, and the file stays sound when the writer dies while it seals."""

from __future__ import annotations

import random
import sqlite3
import struct
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from db2vtop.agent.core import chunks
from db2vtop.agent.core.model import Sample
from db2vtop.agent.core.store import CHUNK_SPAN_NS, Store, StoreError, StoreWriter
from tests.agent.store.test_store import committed, kill_9_midway, spawn_writer

T0 = 1_700_000_000_000_000_000 // CHUNK_SPAN_NS * CHUNK_SPAN_NS
S = 10**9

values = st.one_of(st.integers(-(2**63), 2**63 - 1), st.floats(allow_nan=False, allow_infinity=False),
                   st.text(max_size=8), st.booleans())
column_kinds = st.sampled_from([
    st.integers(-(2**63), 2**63 - 1), st.integers(0, 10**6), st.floats(allow_nan=False, allow_infinity=False),
    st.decimals(-10**6, 10**6, places=2, allow_nan=False).map(float), st.just(7.25), values])


def same(a, b) -> bool:
    """Equal with the same type, and -0.0 told from 0.0."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return struct.pack("<d", a) == struct.pack("<d", b)
    return a == b


@st.composite
def chunk_data(draw):
    n = draw(st.integers(1, 60))
    ts = sorted(draw(st.lists(st.integers(0, 2**62), min_size=n, max_size=n, unique=True)))
    columns = []
    for _ in range(draw(st.integers(0, 5))):
        kind = draw(column_kinds)
        columns.append([draw(st.one_of(st.none(), kind)) if draw(st.booleans()) else draw(kind) for _ in range(n)])
    return ts, columns


@settings(max_examples=300, deadline=None)
@given(chunk_data())
def test_every_value_comes_back_with_its_type_bit_for_bit(data):
    ts, columns = data
    back_ts, back = chunks.decode(chunks.encode(ts, columns))
    assert back_ts == ts
    assert len(back) == len(columns)
    for col, got in zip(columns, back, strict=True):
        assert all(same(a, b) for a, b in zip(col, got, strict=True)), (col, got)


@settings(max_examples=300, deadline=None)
@given(chunk_data(), st.integers(0, 59))
def test_one_row_alone_is_the_same_as_that_row_of_the_whole_chunk(data, at):
    """chunks.row decodes each column only as far as the row a reader wants (the newest before a past
    cursor, for each of 10,000 series): bit for bit what the whole decode gives, timestamps aside."""
    ts, columns = data
    i = at % len(ts)
    blob = chunks.encode(ts, columns)
    assert list(chunks.timestamps(blob)) == ts
    got = chunks.row(blob, i)
    assert len(got) == len(columns)
    assert all(same(col[i], g) for col, g in zip(columns, got, strict=True)), (i, [c[i] for c in columns], got)


@settings(max_examples=200, deadline=None)
@given(chunk_data(), st.sets(st.integers(0, 5)))
def test_chosen_columns_alone_are_the_same_as_those_of_the_whole_chunk(data, wanted):
    """chunks.select decodes the columns a reader keeps (the Fleet's figures), as numbers' arrays where it can:
    each value bit for bit and of its type, the timestamps too; the others are not handed over."""
    ts, columns = data
    got_ts, got = chunks.select(chunks.encode(ts, columns), wanted)
    assert list(got_ts) == ts
    assert set(got) == {k for k in wanted if k < len(columns)}
    for k, values in got.items():
        assert len(values) == len(ts)
        assert all(same(a, b) for a, b in zip(columns[k], values, strict=True)), (columns[k], values)


def test_a_regular_grid_of_timestamps_is_known_without_decoding_it():
    ts = [T0 + k * 20 * S for k in range(90)]
    assert chunks.timestamps(chunks.encode(ts, [[1.5] * 90])) == range(ts[0], ts[-1] + 1, 20 * S)
    ts[40] += 1  # one sample off the grid: decoded
    assert chunks.timestamps(chunks.encode(ts, [[1.5] * 90])) == ts


def test_short_decimals_and_negative_zero_are_exact():
    for column in ([0.1, 0.2, 0.30000000000000004], [-0.0, 1.5], [1e-300, 2.5], [123456.789, 0.001, 5e-10]):
        _, (back,) = chunks.decode(chunks.encode(list(range(len(column))), [column]))
        assert all(same(a, b) for a, b in zip(column, back, strict=True))


def test_a_damaged_chunk_is_a_clear_error_not_a_crash(store_path):
    with Store(store_path, writer=True) as w:
        w.write([Sample("m", {"k": "a"}, {"v": float(i)}, T0 + i * S) for i in range(10)])
        w.compact()
        w.db.execute("UPDATE chunks SET data = CAST(substr(data, 1, length(data) - 3) || x'000102' AS BLOB)")
    with Store(store_path) as r, pytest.raises(StoreError, match=r"chunk \d+: damaged chunk"):
        list(r.rows("m"))
    with pytest.raises(chunks.ChunkError, match="bytes left over"):
        good = chunks.encode([1, 2], [[1.5, 2.5]])
        raw = chunks._zstd()[1].decompress(good)
        chunks.decode(chunks._zstd()[0].compress(raw + b"\0"))


def fleet_samples(spans: int, seed: int = 1) -> list[Sample]:
    """Counters, noisy gauges, flat values, strings, gaps and a field that comes and goes."""
    rng = random.Random(seed)
    out = []
    for vm in range(6):
        counter = rng.randrange(10**9)
        for i in range(spans * CHUNK_SPAN_NS // (20 * S)):
            if rng.random() < 0.05:
                continue  # a missed collection
            counter += rng.randrange(5000)
            fields: dict = {"ready_pct": round(rng.uniform(0, 9), 2), "bytes": counter, "flat": 4.0,
                            "ratio": rng.random(), "state": "on" if i % 50 else "off"}
            if i % 7 == 0:
                fields["rare_ms"] = rng.uniform(0, 3)
            out.append(Sample("vm", {"vm": f"vm{vm}"}, fields, T0 + i * 20 * S + rng.randrange(10**6)))
    return out


def every_read(store: Store) -> dict:
    series = store.series("vm")
    mid = T0 + CHUNK_SPAN_NS + 7 * 60 * S
    return {
        "rows": [r.to_json() for r in store.rows("vm")],
        "window": [r.to_json() for r in store.rows("vm", T0 + 25 * 60 * S, T0 + 95 * 60 * S)],
        "rows_of": [r.to_json() for r in store.rows_of(series[1:3], T0 + 10 * 60 * S, mid)],
        "latest": [r.to_json() for r in store.latest("vm")],
        "latest_then": [r.to_json() for r in store.latest("vm", until_ns=mid)],
        "latest_of_then": [r.to_json() for r in store.latest_of(series[:2], mid - 60 * S, mid)],
        "newest": store.newest("vm", T0 + 20 * 60 * S, mid),
        "field": [store.window(s.id, f, T0 + 5 * 60 * S, mid) for s in series for f in ("ready_pct", "rare_ms")],
        "range": store.time_range(),
    }


def test_every_read_is_the_same_before_and_after_sealing(store_path):
    with Store(store_path, writer=True) as w:
        w.write(fleet_samples(spans=3))
        before = every_read(w)
        moved = w.compact()
        assert moved > 0 and w.db.execute("SELECT count(*) FROM samples").fetchone()[0] == 6
        assert before == every_read(w)
    with Store(store_path) as r:  # a fresh reader: nothing cached
        assert before == every_read(r)


def only(rows: list, fields: tuple[str, ...]) -> list:
    return [(r.ts, r.tags, {k: v for k, v in r.fields.items() if k in fields}) for r in rows]


def test_a_few_fields_of_the_newest_rows_are_those_of_the_whole_rows_at_every_moment(store_path):
    """latest(fields=) keeps the chosen fields of each chunk decoded: at every moment (a cursor scrubbed back and
    forth, across spans, a field asked for later, a field some rows lack) the rows are the whole rows' fields."""
    with Store(store_path, writer=True) as w:
        w.write(fleet_samples(spans=3))
        w.compact()
    moments = [T0 + k * 7 * 60 * S + 13 * S for k in range(13)]
    with Store(store_path) as r:
        series = r.series("vm")
        for fields in [("ready_pct",), ("ready_pct", "rare_ms", "state"), ("bytes", "nothing")]:
            for until in [*moments, *reversed(moments)]:
                whole = r.latest("vm", until_ns=until)
                assert only(r.latest("vm", 0, until, fields=fields), fields) == only(whole, fields)
                got = r.latest_of(series[2:5], until - 60 * S, until, fields=fields)
                assert only(got, fields) == only(r.latest_of(series[2:5], until - 60 * S, until), fields)
                assert all(set(x.fields) <= set(fields) for x in r.latest("vm", 0, until, fields=fields)
                           if x.ts < T0 + 3 * CHUNK_SPAN_NS - 60 * S)  # sealed rows hold the fields asked for alone


def test_a_measurement_read_again_within_a_span_is_its_whole_rows_and_asks_no_chunk_again(store_path):
    """The few fields of a whole measurement at moment after moment of one span come from what the first read there
    kept (no chunk asked for again), and are still the whole rows' fields: a series that begins inside the span, rows
    of the head newer than the chunks, a late row written at a moment already read, a cursor past the chunks."""
    on_grid = [Sample("m", {"k": k}, {"v": float(i), "w": i, "s": "x" if i % 3 else None}, T0 + i * 20 * S)
               for k in "abc" for i in range(200)]
    late_starter = [Sample("m", {"k": "d"}, {"v": -1.0 * i, "w": i}, T0 + 40 * 60 * S + i * 20 * S) for i in range(60)]
    fields = ("v", "w", "s")
    with Store(store_path, writer=True) as w:
        w.write([*on_grid, *late_starter])
        w.compact()  # sealed but each series' newest row: the head holds those
        with Store(store_path) as r:
            asked: list[str] = []
            r.db.set_trace_callback(asked.append)
            moments = [T0 + 35 * 60 * S + 7 * S, T0 + 36 * 60 * S, T0 + 31 * 60 * S, T0 + 40 * 60 * S + 30 * S,
                       T0 + 39 * 60 * S, T0 + 66 * 60 * S + 3 * S, T0 + 70 * 60 * S, T0 + 59 * 60 * S + 59 * S]
            for k, until in enumerate(moments):
                if k == 4:  # a late row at a moment read before, in the head beside its sealed span
                    w.write([Sample("m", {"k": "b"}, {"v": 99.5, "w": 7}, T0 + 38 * 60 * S + 50 * S)])
                asked.clear()
                got = r.latest("m", until - 300 * S, until, fields=fields)
                with Store(store_path) as fresh:
                    assert only(got, fields) == only(fresh.latest("m", until - 300 * S, until), fields), k
                if k in (1, 2):  # the same span, nothing written: what the first read kept answers
                    assert not [q for q in asked if "chunks" in q], (k, asked)


def test_a_measurement_read_column_shaped_is_its_rows_at_each_moment(store_path):
    """latest_columns (the Fleet's read of 10,000 VMs): at each moment of a span a whole read planned, each series'
    time and fields of its row at that moment (None where the row has none); no answer (rows are read) before a
    plan, in another span, or at a moment the head holds a row of."""
    on_grid = [Sample("m", {"k": k}, {"v": float(i), "w": i, "s": "x" if i % 3 else None}, T0 + i * 20 * S)
               for k in "abc" for i in range(200)]
    fields = ("v", "w", "s")
    with Store(store_path, writer=True) as w:
        w.write(on_grid)
        w.compact()  # sealed but each series' newest row (T0 + 66m20s): the head holds those
    with Store(store_path) as r:
        first = T0 + 35 * 60 * S + 7 * S
        assert r.latest_columns("m", first, fields) is None  # nothing planned yet
        r.latest("m", 0, first, fields=fields)
        for until in (first, T0 + 36 * 60 * S, T0 + 30 * 60 * S + 19 * S, T0 + 59 * 60 * S + 59 * S):
            cols = r.latest_columns("m", until, fields)
            assert cols is not None, until - T0
            got = sorted(((cols.ts[i], cols.tags[i], {n: cols.values[n][i] for n in fields
                                                      if cols.values[n][i] is not None}) for i in range(len(cols.ids))),
                         key=lambda x: x[1]["k"])
            with Store(store_path) as fresh:
                assert got == sorted(only(fresh.latest("m", 0, until), fields), key=lambda x: x[1]["k"]), until - T0
                assert sorted((cols.row(i) for i in range(len(cols.ids))), key=lambda x: x.tags["k"]) == sorted(
                    fresh.latest("m", 0, until, fields=fields), key=lambda x: x.tags["k"]), until - T0
        assert r.latest_columns("m", T0 + 61 * 60 * S, fields) is None  # another span: not planned
        assert r.latest_columns("m", T0 + 199 * 20 * S, fields) is None  # the head holds the rows then


def test_which_series_moved_is_asked_again_once_the_file_changed(store_path):
    """newest() answers a question asked again from what it said (a paused cursor, at every key), but only
    while nothing was written: a row written since, by this connection or another, is in the answer."""
    with Store(store_path, writer=True) as w:
        w.write([Sample("m", {"k": k}, {"v": 1.0}, T0 + i * 20 * S) for k in "ab" for i in range(200)])
        w.compact()
        with Store(store_path) as r:
            since, until = T0 + 50 * 20 * S, T0 + 100 * 20 * S + 5 * S
            assert r.newest("m", since, until) == [(1, T0 + 100 * 20 * S), (2, T0 + 100 * 20 * S)]
            w.write([Sample("m", {"k": "a"}, {"v": 2.0}, until - S)])  # late, inside the window
            assert r.newest("m", since, until) == [(1, until - S), (2, T0 + 100 * 20 * S)]
            w.write([Sample("m", {"k": "b"}, {"v": 2.0}, until - 2 * S)])
            assert w.newest("m", since, until)[1] == (2, until - 2 * S)
            w.write([Sample("m", {"k": "b"}, {"v": 3.0}, until)])
            assert w.newest("m", since, until)[1] == (2, until)  # its own write too
            for at in (since + 7 * S, until):  # after a whole read at a moment, that read says it until a write
                r.latest("m", 0, at, fields=("v",))
                with Store(store_path) as other:
                    assert r.newest("m", since, at) == other.newest("m", since, at)
                w.write([Sample("m", {"k": "a"}, {"v": 4.0}, at - S // 2)])
                assert r.newest("m", since, at)[0] == (1, at - S // 2)


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


def test_a_schema_2_store_is_read_as_is_and_converted_by_the_writer(store_path):
    with Store(store_path, writer=True) as w:
        w.write(fleet_samples(spans=2))
        expected = every_read(w)
    db = sqlite3.connect(store_path)  # what a store of the previous release looks like
    db.executescript("DROP TABLE chunks; UPDATE meta SET value='2' WHERE key='schema_version';")
    db.close()
    with Store(store_path) as r:
        assert every_read(r) == expected
    with Store(store_path, writer=True) as w:
        assert w.db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone() == ("3",)
        w.compact()
        assert w.db.execute("SELECT count(*) FROM chunks").fetchone()[0] > 0
    with Store(store_path) as r:
        assert every_read(r) == expected


def test_a_newer_schema_is_refused_before_anything_is_touched(store_path):
    with Store(store_path, writer=True) as w:
        w.write([Sample("m", {}, {"a": 1}, T0)])
    db = sqlite3.connect(store_path)
    db.execute("UPDATE meta SET value='9' WHERE key='schema_version'")
    db.commit()
    db.close()
    before = store_path.read_bytes()
    for writer in (False, True):
        with pytest.raises(StoreError, match="schema 9, written by a newer db2vtop"):
            Store(store_path, writer=writer)
    assert store_path.read_bytes() == before


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
