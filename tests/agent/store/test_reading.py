"""Reading: the Source's reads from head and chunks, a damaged chunk a clear error, the kept columns and plans
of a cursor moving through the past the same as whole reads, another process's batches seen as they commit
(agent/core/store/reading.py)."""

from __future__ import annotations

import pytest

from db2vtop.agent.core import chunks
from db2vtop.agent.core.model import Sample
from db2vtop.agent.core.store import CHUNK_SPAN_NS, Store, StoreError
from tests.agent.store.records import T0, S, committed, fleet_samples, spawn_writer


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


def test_series_read_back_hold_each_tag_name_and_short_value_once(store_path):
    """A restart holds every live measurement's series tags through the checks' history (8,000 series of a
    2,000-VM store): the same vCenter, host and disk instance in 600 series are one string each, not 600."""
    with Store(store_path, writer=True) as w:
        w.write([Sample("vsphere_vm_disk", {"vcenter": "vc-prod", "host": f"esx{v % 3}", "vm": f"vm{v}",
                                            "instance": "scsi0:0"}, {"read_iops": 1.0}, T0) for v in range(600)])
        series = w.series("vsphere_vm_disk")
    assert len(series) == 600
    objects = {name: {id(s.tags[name]) for s in series} for name in ("vcenter", "host", "instance")}
    keys = {id(k) for s in series for k in s.tags}
    assert {name: len(ids) for name, ids in objects.items()} == {"vcenter": 1, "host": 3, "instance": 1}
    assert len(keys) == 4
    assert len({id(s.measurement) for s in series}) == 1


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
