"""The time-axis charts and the virtual table: buckets, gaps, markers, scales, filters, sorting."""

from __future__ import annotations

import os

import pytest
from hypothesis import given
from hypothesis import strategies as st

from db2vtop.checks.scales import Level
from db2vtop.tui.chart import MARKER_STYLE, Marks, braille, buckets, merge_max, nice_top, short, spark, time_axis
from db2vtop.tui.table import Column, TableRow, arrange, filtered, matcher, measure, narrows, row_strip

S = 10**9
T0 = 1_714_564_800 * S


@pytest.fixture(autouse=True)
def _utc(utc):
    yield


def test_a_sample_fills_the_interval_before_it_and_a_gap_stays_empty():
    points = [(T0 + k * 20 * S, float(k)) for k in range(1, 16) if k not in (6, 7, 8)]
    values = buckets(points, T0, T0 + 300 * S, 30)  # 10 s buckets: two per sample
    assert values[:2] == [1.0, 1.0] and values[2:4] == [2.0, 2.0]
    assert values[10:16] == [None] * 6  # samples 6, 7 and 8 are missing: no data, not zeros
    assert values[16:18] == [9.0, 9.0]  # after a gap a sample covers one interval only
    assert values[-2:] == [15.0, 15.0]


def test_before_the_first_sample_and_after_the_last_there_is_no_data():
    points = [(T0 + 100 * S, 5.0), (T0 + 120 * S, 6.0)]
    values = buckets(points, T0, T0 + 300 * S, 15)
    assert values[:4] == [None] * 4 and values[4:6] == [5.0, 6.0] and values[6:] == [None] * 9


def test_several_samples_in_one_bucket_keep_the_worst_and_series_merge_on_the_worst():
    points = [(T0 + k * S, float(k % 7)) for k in range(1, 3601)]
    values = buckets(points, T0, T0 + 3600 * S, 60)
    assert all(v == 6.0 for v in values)
    assert merge_max([[1.0, None, 3.0], [2.0, None, 1.0], [None, 4.0, None]]) == [2.0, 4.0, 3.0]


@given(st.lists(st.tuples(st.integers(0, 3600), st.floats(0, 1e6)), max_size=200), st.integers(1, 300))
def test_buckets_never_invent_values(samples, n):
    points = sorted({(T0 + t * S, v) for t, v in samples})
    values = buckets(points, T0, T0 + 3600 * S, n)
    assert len(values) == n
    assert {v for v in values if v is not None} <= {v for _, v in points}


def test_the_y_axis_starts_at_zero_and_ends_on_a_round_number():
    assert nice_top(12.3) == 20 and nice_top(0.42, floor=0.1) == 0.5 and nice_top(2300) == 2500
    assert nice_top(None, floor=5.0) == 5 and nice_top(0.0) == 1
    assert [short(v) for v in (0.25, 12.5, 950, 12_000, 1_500_000, 2.0)] == ["0.25", "12.5", "950", "12k", "1.5M", "2"]


def test_braille_area_marks_and_thresholds():
    values = [0.0, 0.0, 5.0, 5.0, 10.0, 10.0, None, None]
    strips = braille(values, 2, 10.0, Marks(frozenset({3}), frozenset()), level=Level(4.0, 9.0), gutter=4)
    assert len(strips) == 2 and all(s.cell_length == 4 + 4 for s in strips)
    top, bottom = (s.text for s in strips)
    assert top.startswith(" 10┤") and bottom.startswith("  0┤")
    assert bottom[4] == "⣀"  # zero draws a baseline
    assert top[6] == "⣿" and bottom[6] == "⣿"  # full height at the top of the scale
    assert top[7] == "│" and bottom[7] == "│"  # the marker through an empty column
    colours = [str(seg.style) for seg in strips[1] for _ in seg.text]
    assert colours[4:8] == ["green", "yellow", "bold red", MARKER_STYLE]  # 0, 5 ≥ warn, 10 ≥ crit, marker


def test_a_marker_column_is_where_its_time_falls():
    marks = Marks.at(T0, T0 + 300 * S, 60, [T0 + 150 * S, T0 - S, T0 + 301 * S], [T0 + 300 * S])
    assert marks.markers == frozenset({30}) and marks.events == frozenset({59})


def test_time_axis_labels_are_local_times_on_round_minutes():
    axis = time_axis(T0 + 10 * S, T0 + 310 * S, 60, Marks.at(T0 + 10 * S, T0 + 310 * S, 60, [T0 + 130 * S]))
    text = axis.text
    assert len(text) == 60 and "└12:01" in text and "└12:04" in text and text[24] == "▼"
    assert "└12:02" not in text  # its place is the marker's: labels give way


def test_a_narrow_time_axis_keeps_a_time():
    """An 80-column Stack screen's charts are 21 columns wide: 5 minutes there had no time at all (the step was
    chosen for 9-cell labels, its only tick too near the end); events beside every place still leave one."""
    since, until = T0 + 10 * S, T0 + 310 * S
    text = time_axis(since, until, 21).text
    assert "└12:02" in text, text
    events = [since + k * 15 * S for k in range(20)]  # one in every column
    text = time_axis(since, until, 21, Marks.at(since, until, 21, [T0 + 250 * S], events)).text
    assert text.count("└") == 1 and text.count("▼") == 1, text  # over the events, never over the marker


def test_a_benchmark_run_is_a_span_under_the_chart_where_no_label_or_marker_is():
    since, until = T0 + 10 * S, T0 + 310 * S
    marks = Marks.at(since, until, 60, [T0 + 130 * S, T0 + 250 * S],
                     runs=[(T0 + 130 * S, T0 + 250 * S), (T0 - 100 * S, T0 + 20 * S)])  # the second began earlier
    axis = time_axis(since, until, 60, marks).text
    assert axis[24] == "▼" and axis[48] == "▼"  # the run's begin and end markers stay
    assert axis[:3] == "━━━" and axis[3] == " "  # clipped at the window's start, ends at its end
    inside = axis[25:48]
    assert inside.count("━") >= 10 and set(inside) <= set("━└0123456789:")  # the labels keep their place
    assert "━" not in axis[49:]


def test_spark_cells_mark_markers_and_leave_gaps_blank():
    cells = spark([0.0, None, 5.0, 10.0], 10.0, Marks(frozenset({1}), frozenset()))
    assert "".join(t for t, _ in cells) == "▁│▅█"


def test_filter_is_a_case_insensitive_regex_bang_inverts_and_bad_regex_is_plain_text():
    assert matcher("DB2")("db2prod01") and not matcher("!db2")("db2prod01")
    assert matcher("prod0[12]")("prod02") and not matcher("prod0[12]")("prod03")
    assert matcher("a[")("xa[y")  # not a regex: a substring


def test_sort_puts_missing_values_last_either_way():
    rows = [TableRow("a", ["a"], (3.0,)), TableRow("b", ["b"], (None,)), TableRow("c", ["c"], (1.0,))]
    assert [r.key for r in arrange(rows, "", 0, False)] == ["c", "a", "b"]
    assert [r.key for r in arrange(rows, "", 0, True)] == ["a", "c", "b"]
    assert [r.key for r in arrange(rows, "!a", None, False)] == ["b", "c"]


@given(st.lists(st.text("abAB.1 -[]!*?|()\\", max_size=8), max_size=12), st.text("abAB.1 -[]!*?|()\\", max_size=5),
       st.text("abAB.1 -[]!*?|()\\", max_size=4))
def test_a_filter_typed_on_keeps_what_it_would_keep_from_all_rows(texts, before, typed):
    """Typing on looks only at the rows the last key left (a 10,000-row Fleet is not filtered again from the
    start at each key): only when that keeps exactly what filtering all rows keeps (plain text; not `!`, not a
    regex such as `a?` after `a`)."""
    rows = [TableRow(str(i), [t]) for i, t in enumerate(texts)]
    after = before + typed
    if narrows(before, after):
        assert filtered(filtered(rows, before), after) == filtered(rows, after)
    assert not narrows("a", "a?") and not narrows("!a", "!ab") and not narrows("ab", "a")


def test_rows_are_cut_to_their_column_and_numbers_align_right():
    cols = [Column("name", max_width=6), Column("ms", right=True)]
    rows = [TableRow("x", ["a-very-long-name", ("1.5", "bold red")], ())]
    widths = measure(cols, rows)
    assert widths == [6, 3]
    assert row_strip(rows[0], widths, cols).text == "a-ver… 1.5 "


def test_environment_timezone_is_restored_after_the_chart_tests():
    assert os.environ["TZ"] == "UTC"


def test_the_readers_latest_cache_follows_new_late_and_backfilled_samples(tmp_path):
    from db2vtop.agent.core.model import Sample
    from db2vtop.agent.core.store import Store
    from db2vtop.tui.data import FULL_READ_S, RECHECK_S, Reader

    path = tmp_path / "s.db"
    clock = [0.0]
    with Store(path, writer=True) as w:
        w.write([Sample("vsphere_vm", {"vm": f"vm{i}"}, {"cpu_ready_pct": 1.0}, T0) for i in range(3)])
        rd = Reader(Store(path), clock=lambda: clock[0])

        def ready(until: int) -> dict[str, float]:
            rd.begin()
            return {r.tags["vm"]: r.fields["cpu_ready_pct"] for r in rd.latest_at("vsphere_vm", until)}

        assert ready(T0 + 10 * S) == {"vm0": 1.0, "vm1": 1.0, "vm2": 1.0}
        w.write([Sample("vsphere_vm", {"vm": "vm0"}, {"cpu_ready_pct": 2.0}, T0 + 20 * S)])
        assert ready(T0 + 30 * S)["vm0"] == 2.0  # new
        w.write([Sample("vsphere_vm", {"vm": "vm1"}, {"cpu_ready_pct": 3.0}, T0 + 25 * S)])  # stamped in the past
        assert ready(T0 + 31 * S)["vm1"] == 3.0
        w.write([Sample("vsphere_vm", {"vm": "vm3"}, {"cpu_ready_pct": 4.0}, T0 + 31 * S)])  # a new series
        assert ready(T0 + 32 * S)["vm3"] == 4.0
        assert ready(T0 + 15 * S) == {"vm0": 1.0, "vm1": 1.0, "vm2": 1.0}  # back in time: as it was then
        ready(T0 + 400 * S)
        w.write([Sample("vsphere_vm", {"vm": "vm2"}, {"cpu_ready_pct": 5.0}, T0 + 100 * S)])  # backfill after an outage
        assert ready(T0 + 401 * S)["vm2"] == 1.0  # too far back for the quick look...
        clock[0] += FULL_READ_S
        assert ready(T0 + 402 * S)["vm2"] == 5.0  # ...the periodic full read has it
        w.write([Sample("vsphere_vm", {"vm": "vm0"}, {"cpu_ready_pct": 6.0}, T0 + 401 * S)])  # late, at a paused cursor
        assert ready(T0 + 402 * S)["vm0"] == 2.0  # a key's reload within RECHECK_S does not ask what moved...
        clock[0] += RECHECK_S
        assert ready(T0 + 402 * S)["vm0"] == 6.0  # ...the next one does
        rd.source.close()
