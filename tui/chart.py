"""Time-axis charts rendered to strips off the main thread.

Textual's Sparkline scales to the data's min..max and has no time axis, gaps or
markers; plotext takes 20-40 ms per chart. These charts take well under a millisecond
(`bench/tui.py` measures them): every chart of a screen maps the same window
[since, until] onto its columns, so layers line up column for column. A sample at `ts`
stands for the interval before it (rates are averages over that interval), so it fills
the columns back to the previous sample; a gap longer than 1.5 sampling intervals is
left empty, and an empty column means "no data", never zero (zero draws a baseline).
The y axis starts at 0 (never at the data's minimum) and ends at a round number.
Markers are vertical violet lines through every chart; vCenter's events (a migration, a
reconfiguration, a device's latency) orange lines on the charts of the layer they touch and `◆` on the
time axis; other annotations (resets, gaps) are yellow lines on the charts of their own layer.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache
from itertools import pairwise
from statistics import median

from rich.segment import Segment
from rich.style import Style
from textual.strip import Strip

from db2vtop.checks.scales import NO_LEVEL, Level

Points = Sequence[tuple[int, float]]

# A violet of its own: the theme's "magenta" comes out as the critical colour's pink-red in 256 colours,
# so a marker on a red chart vanished and one on a cyan chart looked like a spike.
MARKER_STYLE = "bold #af87ff"
RUN_STYLE = "#af87ff"
EVENT_STYLE = "yellow"
VCENTER_STYLE = "bold #ff8700"
GAP_FACTOR = 1.5

# braille dots from the bottom up: left column 7,3,2,1 and right column 8,6,5,4
_LEFT = (0x40, 0x04, 0x02, 0x01)
_RIGHT = (0x80, 0x20, 0x10, 0x08)
_FILL = [[chr(0x2800 + sum(_LEFT[:a]) + sum(_RIGHT[:b])) if a or b else " " for b in range(5)] for a in range(5)]
_BLOCKS = "▁▂▃▄▅▆▇█"
_NICE = (1.0, 2.0, 2.5, 5.0, 10.0)


@lru_cache(maxsize=256)
def style(name: str | None) -> Style | None:
    return Style.parse(name) if name else None


@dataclass(frozen=True)
class Marks:
    """Columns of one chart width that carry a marker, a vCenter event or another event, or lie inside a
    benchmark run."""

    markers: frozenset[int] = frozenset()
    events: frozenset[int] = frozenset()
    runs: frozenset[int] = frozenset()
    vcenter: frozenset[int] = frozenset()

    @classmethod
    def at(cls, since: int, until: int, cols: int, markers: Iterable[int], events: Iterable[int] = (),
           runs: Iterable[tuple[int, int]] = (), vcenter: Iterable[int] = ()) -> Marks:
        """`runs`: (begin, end) of the runs, drawn as a span on the time axis where they overlap."""
        def columns(times: Iterable[int]) -> frozenset[int]:
            return frozenset(c for ts in times if 0 <= (c := column(ts, since, until, cols)) < cols)
        spans = frozenset(c for begin, end in runs if begin <= until and end >= since
                          for c in range(column(max(begin, since), since, until, cols),
                                         min(column(min(end, until), since, until, cols), cols - 1) + 1))
        return cls(columns(markers), columns(events), spans, columns(vcenter))


def column(ts: int, since: int, until: int, cols: int) -> int:
    span = max(until - since, 1)
    return min(cols - 1, (ts - since) * cols // span) if ts <= until else cols


def typical_interval(points: Points) -> int | None:
    tail = points[-12:]
    gaps = [b[0] - a[0] for a, b in pairwise(tail) if b[0] > a[0]]
    return int(median(gaps)) if gaps else None


def buckets(points: Points, since: int, until: int, n: int, interval_ns: int | None = None) -> list[float | None]:
    """The highest value covering each of n equal time buckets of [since, until]; None = no data."""
    out: list[float | None] = [None] * n
    if n <= 0 or not points:
        return out
    step = interval_ns or typical_interval(points) or max((until - since) // n, 1)
    width = max(until - since, 1) / n
    prev: int | None = None
    for ts, value in points:
        gap = ts - prev if prev is not None else step
        cover = gap if gap <= GAP_FACTOR * step else step
        prev = ts
        if ts < since or ts - cover > until:
            continue
        first = max(0, math.floor((ts - cover - since) / width))
        last = min(n - 1, math.ceil((ts - since) / width) - 1)
        for b in range(first, last + 1):
            held = out[b]
            if held is None or value > held:
                out[b] = value
    return out


def merge_max(series: Iterable[list[float | None]]) -> list[float | None]:
    """Bucket by bucket, the worst (highest) of several series: "the slowest of the LUNs"."""
    merged: list[float | None] | None = None
    for values in series:
        if merged is None:
            merged = list(values)
            continue
        for i, v in enumerate(values):
            if v is not None and (merged[i] is None or v > merged[i]):
                merged[i] = v
    return merged or []


def nice_top(high: float | None, floor: float = 1.0) -> float:
    """The round number at or above the highest value (1, 2, 2.5, 5 x 10^k), at least `floor`."""
    high = max(high or 0.0, floor)
    if high <= 0:
        return 1.0
    exp = 10 ** math.floor(math.log10(high))
    return next(n * exp for n in _NICE if n * exp >= high * (1 - 1e-9))


def short(v: float) -> str:
    """At most 5 characters: 0.25 12.5 950 12k 1.5M."""
    a = abs(v)
    if a >= 1e9:
        return f"{v / 1e9:.3g}G"
    if a >= 1e6:
        return f"{v / 1e6:.3g}M"
    if a >= 1e4:
        return f"{v / 1e3:.3g}k"
    if a >= 100 or v == int(v):
        return f"{v:.0f}"
    return f"{v:.3g}"


def level_style(level: Level, v: float | None, normal: str) -> str:
    """A value's colour on its scale's level (checks/scales.py): red at crit, yellow at warn."""
    grade = level.grade(v)
    return "bold red" if grade == "crit" else "yellow" if grade == "warn" else normal


def _run_segments(cells: list[tuple[str, str | None]]) -> list[Segment]:
    segments: list[Segment] = []
    text, current = [], None
    for ch, st in cells:
        if st != current and text:
            segments.append(Segment("".join(text), style(current)))
            text = []
        current = st
        text.append(ch)
    if text:
        segments.append(Segment("".join(text), style(current)))
    return segments


def braille(values: list[float | None], height: int, top: float, marks: Marks = Marks(),
            color: str = "green", level: Level = NO_LEVEL, gutter: int = 0) -> list[Strip]:
    """An area chart two values per cell wide, four per cell high; `values` has 2 x columns items."""
    cols = len(values) // 2
    height = max(1, height)
    levels = height * 4
    dots = [None if v is None else max(1, min(levels, round(v / top * levels))) if top > 0 else 1 for v in values]
    cell_style = [level_style(level, _max2(values[2 * c], values[2 * c + 1]), color) for c in range(cols)]
    strips = []
    for row in range(height):
        base = (height - 1 - row) * 4  # dots below this row
        cells: list[tuple[str, str | None]] = []
        if gutter:
            label = short(top) if row == 0 else ("0" if row == height - 1 else "")
            cells.append((label.rjust(gutter - 1)[: gutter - 1] + "┤", "dim"))
        for c in range(cols):
            a, b = dots[2 * c], dots[2 * c + 1]
            fa = 0 if a is None else min(4, max(0, a - base))
            fb = 0 if b is None else min(4, max(0, b - base))
            ch = _FILL[fa][fb]
            if c in marks.markers:
                cells.append((ch if fa or fb else "│", MARKER_STYLE))
            elif c in marks.vcenter:
                cells.append((ch if fa or fb else "╎", VCENTER_STYLE))
            elif c in marks.events:
                cells.append((ch if fa or fb else "┊", EVENT_STYLE))
            else:
                cells.append((ch, cell_style[c] if fa or fb else None))
        strips.append(Strip(_run_segments(cells)))
    return strips


def _max2(a: float | None, b: float | None) -> float | None:
    if a is None:
        return b
    if b is None:
        return a
    return a if a > b else b


def spark(values: list[float | None], top: float, marks: Marks = Marks(), color: str | None = None,
          level: Level = NO_LEVEL) -> list[tuple[str, str | None]]:
    """One cell per bucket (block characters) for table cells: (text, style) runs."""
    cells: list[tuple[str, str | None]] = []
    for c, v in enumerate(values):
        ch = " " if v is None else _BLOCKS[max(0, min(7, round(v / top * 7))) if top > 0 else 0]
        if c in marks.markers:
            cells.append((ch if v is not None else "│", MARKER_STYLE))
        elif c in marks.events:
            cells.append((ch if v is not None else "┊", EVENT_STYLE))
        else:
            cells.append((ch, level_style(level, v, color or "")))
    out: list[tuple[str, str | None]] = []
    for ch, st in cells:
        if out and out[-1][1] == st:
            out[-1] = (out[-1][0] + ch, st)
        else:
            out.append((ch, st))
    return out


_TICKS = (10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200)


def time_axis(since: int, until: int, cols: int, marks: Marks = Marks(), gutter: int = 0) -> Strip:
    """Tick labels under a chart of `cols` columns; local time, markers as ▼, vCenter events as ◆, benchmark runs
    as ━."""
    span_s = max((until - since) / 1e9, 1e-9)
    label_w = 9 if span_s <= 600 else 6
    step = next((t for t in _TICKS if t / span_s * cols >= label_w + 2), _TICKS[-1])
    offset = datetime.fromtimestamp(since / 1e9).astimezone().utcoffset()
    off_s = int(offset.total_seconds()) if offset else 0
    cells: list[tuple[str, str | None]] = [(" ", "dim")] * cols
    for c in marks.events:
        if c < cols:
            cells[c] = ("▽", EVENT_STYLE)
    for c in marks.vcenter:
        if c < cols:
            cells[c] = ("◆", VCENTER_STYLE)
    for c in marks.markers:
        if c < cols:
            cells[c] = ("▼", MARKER_STYLE)
    t = math.ceil((since / 1e9 + off_s) / step) * step - off_s
    fmt = "%H:%M:%S" if step < 60 else "%H:%M"
    while t * 1e9 <= until:  # labels where they fit, around the markers
        c = column(int(t * 1e9), since, until, cols)
        label = "└" + datetime.fromtimestamp(t).strftime(fmt)
        if c + len(label) <= cols and all(ch == " " for ch, _ in cells[max(0, c - 1): c + len(label) + 1]):
            cells[c: c + len(label)] = [(ch, "dim") for ch in label]
        t += step
    for c in marks.runs:  # a benchmark run: a line under its span, where no label or marker is
        if c < cols and cells[c][0] == " ":
            cells[c] = ("━", RUN_STYLE)
    if gutter:
        cells.insert(0, (" " * gutter, None))
    return Strip(_run_segments(cells))
