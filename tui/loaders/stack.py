"""The Stack screen's data: five layers on one time axis, the verdict, and one detail panel.

Layers, top to bottom, follow the verdict's chain: DB2 → guest → VM → host → array.
Each has a load/contention chart (left) and a latency chart (right); the latency charts
share one y scale, so "log write 12 ms ← VMDK 11 ms ← host 9 ms ← array 1.5 ms" reads
as areas shrinking down the column. The detail panel is chosen with esxtop's letters
(c m d u v n) and db2top's (b l w t); `e` lists the stack's vCenter events, which are also marked on the
time axis (`◆`) and on the charts of the layer they touch, unless the app hides them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from rich.segment import Segment
from textual.strip import Strip

from db2vtop.agent.core.events import EVENT, VCenterEvent
from db2vtop.agent.core.model import Annotation, Finding
from db2vtop.agent.core.text import plural
from db2vtop.checks.culprits import Culprit
from db2vtop.checks.figures import LATENCY_FLOOR_MS
from db2vtop.checks.scales import Levels
from db2vtop.checks.topology import StackEntities
from db2vtop.checks.verdict import StackVerdict, earlier_text, onset_text, stack_verdict
from db2vtop.tui.chart import EVENT_STYLE, MARKER_STYLE, VCENTER_STYLE, Marks, braille, nice_top, style, time_axis
from db2vtop.tui.data import (
    Reader,
    Status,
    TableState,
    fill_trends,
    is_stale,
    load_status,
    open_at,
    top_of,
    trend_values,
)
from db2vtop.tui.format import ago
from db2vtop.tui.layers import Layer, load_layers
from db2vtop.tui.panels import EVENTS_PANEL, PANEL_LOADERS, cpu_panel, events_panel
from db2vtop.tui.stacks import Target, resolve_at
from db2vtop.tui.table import Run, TableModel

GUTTER = 6


FIGURES = 46  # the figures column left of the charts (narrower on a narrow terminal: `Geometry.figures`)


@dataclass(frozen=True)
class Geometry:
    """The layer block's size on screen, read by the loader (kept by the main thread on resize)."""

    width: int = 166
    height: int = 21  # the layers' lines and the time axis: as tall as the screen leaves the block
    spark_cols: int = 16

    @property
    def figures(self) -> int:
        """The figures column: 46 cells, down to a third of the width so the charts keep two thirds."""
        return max(24, min(FIGURES, self.width // 3))

    @property
    def a_cols(self) -> int:
        return max((self.width - self.figures) // 2, GUTTER + 4)

    @property
    def b_cols(self) -> int:
        return max(self.width - self.figures - self.a_cols, GUTTER + 4)

    def chart_rows(self, shown: int, folded: bool) -> int:
        """Chart lines per layer: the block's height shared by the `shown` layers (each a label line
        and its chart), less the time axis and, when some layers have no data, their one line."""
        return max(1, (self.height - 1 - folded) // max(shown, 1) - 1)


@dataclass
class LayerView:
    key: str
    title: str
    figures: list[Run]
    a_label: str = ""
    b_label: str = ""
    a: list[Strip] = field(default_factory=list)
    b: list[Strip] = field(default_factory=list)
    age_s: float | None = None
    stale: bool = False
    present: bool = True
    data: bool = True  # samples in the window: without, the layer folds into the block's one "no data" line
    culprits: list[Run] = field(default_factory=list)  # the blamed layer's: who takes what it contends for


@dataclass
class EventMarks:
    """Whether vCenter's events are marked on the Stack screen: one for the app (its `E` key flips it), handed
    to each Stack screen when it is made, so the loader thread reads it there (it cannot ask the app)."""

    shown: bool = True


@dataclass
class StackView:
    target: Target
    resolved: StackEntities  # at the cursor
    now_ns: int
    since_ns: int
    verdict: list[Run]
    layers: list[LayerView]
    block: list[Strip]  # the layers and the time axis, drawn here so the main thread only copies lines
    panel: str
    panel_summary: list[Run]
    detail: TableModel
    collectors: list[Status]
    markers: list[Annotation]
    findings: list[Finding]
    events: list[VCenterEvent] = field(default_factory=list)  # the stack's vCenter events in the window
    culprits: list[Culprit] = field(default_factory=list)  # the verdict's, ranked


#: culprits shown beside the blamed layer
SHOWN_CULPRITS = 3


# --- verdict -------------------------------------------------------------------------------


def _verdict(rd: Reader, target: Target, since: int, until: int, levels: Levels,
             findings: list[Finding]) -> tuple[list[Run], StackVerdict | None]:
    """The verdict at the cursor: the episode going on then, since when, the other causes beside it and the
    earlier episodes of the window (checks/verdict.py), in local time; and the stack's vCenter events."""
    try:  # over the window: its own entities (the VM's hosts in the window, each bucket with its own)
        v = stack_verdict(rd, target.stack, since, until, levels.overrides, resolve_at(rd, target, since, until))
        v.note_findings(findings)
    except Exception as e:  # the verdict is the checks' business: show its failure, keep the screen
        return [("verdict failed: ", "bold red"), (str(e)[:200], "red")], None
    if v.confidence == "none":
        return [("verdict: too little data ", "dim"), (f"({plural(v.samples, 'sample')} in the window)", "dim")], v
    st = {"high": "bold red", "medium": "bold yellow", "low": "yellow"}.get(v.confidence, "bold")
    blame = " ".join(x for x in (v.layer, onset_text(v, utc=False)) if x) + ": " if v.layer else ""
    out: list[Run] = [("VERDICT ", "bold reverse"), (" ", None), (blame, st), (v.summary, "bold"),
                      (f"  [{v.confidence} confidence, {plural(v.samples, 'sample')}]", "dim")]
    also = [f"{c.layer}: {c.label}" for c in v.causes[1:]]
    earlier = earlier_text([e.to_json() for e in v.episodes], until, utc=False) if v.layer else ""
    more = "; ".join(x for x in (f"also {', '.join(also)}" if also else "", f"earlier: {earlier}" if earlier else "",
                                 "; ".join(v.not_known)) if x)
    if more:
        out += [("\n", None), (more, "dim")]
    return out, v


def _culprit_runs(found: list[Culprit]) -> list[Run]:
    """The first culprits as the blamed layer shows them, each a figure: `◀ etl-7 72%  db01 (itself) 5%  J`."""
    out: list[Run] = []
    for i, c in enumerate(found[:SHOWN_CULPRITS]):
        who = c.vm or c.lun or "?"
        out += [("◀ " if i == 0 else "", "bold red"),
                (f"{who}{' (itself)' if c.own else ''} {c.share_pct:.0f}%", "bold red" if i == 0 else "bold"),
                SEPARATOR]
    return [*out, ("J", "dim"), SEPARATOR]


def _event_runs(events: list[VCenterEvent]) -> list[Run]:
    """One line under the verdict: how many vCenter events the window has, the newest two."""
    if not events:
        return []
    newest = "; ".join(f"{datetime.fromtimestamp(e.ts / 1e9).strftime('%H:%M:%S')} {e.summary}"
                       for e in reversed(events[-2:]))
    return [("\n", None), (f"◆ {len(events)} vCenter event{'s' if len(events) != 1 else ''}: ", VCENTER_STYLE),
            (newest, None), ("  (key e lists them, E hides them)", "dim")]


# --- the whole screen ------------------------------------------------------------------------


def _has_data(*series: list[float | None] | None) -> bool:
    return any(v is not None for vals in series if vals for v in vals)


def _draw_layers(rd: Reader, layers: list[Layer], since: int, until: int, geo: Geometry,
                 marks_a: Callable[[str], Marks], marks_b: Callable[[str], Marks]) -> list[LayerView]:
    a_n, b_n = 2 * max(geo.a_cols - GUTTER, 1), 2 * max(geo.b_cols - GUTTER, 1)
    a_vals = [trend_values(rd, x.a, since, until, a_n) if x.a else None for x in layers]
    b_vals = [trend_values(rd, x.b, since, until, b_n) if x.b else None for x in layers]
    shared = nice_top(max((v for vals in b_vals if vals for v in vals if v is not None), default=0.0),
                      LATENCY_FLOOR_MS)
    data = [_has_data(av, bv) for av, bv in zip(a_vals, b_vals, strict=True)]
    rows = geo.chart_rows(sum(data), not all(data))
    out = []
    for x, av, bv, has in zip(layers, a_vals, b_vals, data, strict=True):
        view = LayerView(x.key, x.title, x.figures, x.a_label, x.b_label, present=x.present, data=has)
        if x.a and av is not None and has:
            view.a = [_label(x.a_label, av), *braille(av, rows, top_of(x.a, av), marks_a(x.key),
                                                      level=x.a.level, gutter=GUTTER)]
        if x.b and bv is not None and has:
            view.b = [_label(x.b_label + " (one scale for all layers)", bv), *braille(
                bv, rows, shared, marks_b(x.key), color="cyan", level=x.b.level,
                gutter=GUTTER)]
        ages = [(s, row) for s, row in x.newest if s is not None]
        if ages:
            s, row = max(ages, key=lambda p: p[1].ts)
            view.age_s = (until - row.ts) / 1e9
            view.stale = is_stale(view.age_s, rd.period(s.measurement, [row], key=s.id))
        out.append(view)
    return out


_LEGEND = [("▼", MARKER_STYLE), (" marker ", "dim"), ("◆", VCENTER_STYLE), (" vCenter ", "dim"), ("┊", EVENT_STYLE),
           (" gap/reset blank=no data", "dim")]
_SHORT_LEGEND = [("▼", MARKER_STYLE), (" marker ", "dim"), ("◆", VCENTER_STYLE), (" vCenter ", "dim"),
                 ("┊", EVENT_STYLE), (" gap", "dim")]  # a narrow figures column (80 columns)
SEPARATOR = ("  ", None)


def _line(runs: list[Run]) -> Strip:
    return Strip([Segment(text, style(st)) for text, st in runs if text])


def _figure_lines(layer: LayerView, rows: int, width: int) -> list[Strip]:
    """The title, then the culprits beside a blamed layer, then the figures, packed into the column: a figure
    (a culprit) never breaks across lines."""
    title: list[Run] = [(layer.title, "bold" if layer.present else "dim")]
    if layer.stale and layer.age_s is not None:
        title.append((f"  STALE {ago(layer.age_s)}", "bold yellow"))
    lines = [title, *_packed(layer.culprits, width), *_packed(layer.figures, width)]
    return [_line([(" ", None), *runs]) for runs in lines[:rows]]


def _packed(runs: list[Run], width: int) -> list[list[Run]]:
    """Runs of figures (each ended by SEPARATOR, the last one may not be) as lines no wider than `width`."""
    lines: list[list[Run]] = []
    line: list[Run] = []
    used, chunk = 0, []
    for run in [*runs, SEPARATOR] if runs and runs[-1] != SEPARATOR else runs:
        chunk.append(run)
        if run != SEPARATOR:
            continue
        size = sum(len(t) for t, _ in chunk[:-1])
        if line and used + size > width - 2:
            lines.append(line)
            line, used = [], 0
        line += chunk
        used += size + 2
        chunk = []
    if line:
        lines.append(line)
    return lines


def _block(layers: list[LayerView], axis_a: Strip, axis_b: Strip, geo: Geometry) -> list[Strip]:
    shown = [x for x in layers if x.data]
    rows = geo.chart_rows(len(shown), len(shown) < len(layers)) + 1

    def cell(strips: list[Strip], i: int, width: int) -> Strip:
        return (strips[i] if i < len(strips) else Strip.blank(width)).crop_extend(0, width, None)

    out = []
    for layer in shown:
        figures = _figure_lines(layer, rows, geo.figures)
        out += [Strip.join([cell(figures, i, geo.figures), cell(layer.a, i, geo.a_cols),
                            cell(layer.b, i, geo.b_cols)])
                for i in range(rows)]
    empty = [x.title for x in layers if not x.data]
    if empty:  # layers without a sample in the window take one line between them, not a chart each
        out.append(_line([(" ", None), (" · ".join(empty), "dim bold"), ("  no data in the window", "dim")]))
    full = sum(len(t) for t, _ in _LEGEND) + 1 <= geo.figures
    legend = _line([(" ", None), *(_LEGEND if full else _SHORT_LEGEND)])
    out.append(Strip.join([cell([legend], 0, geo.figures), cell([axis_a], 0, geo.a_cols),
                           cell([axis_b], 0, geo.b_cols)]))
    return out


def _label(text: str, values: list[float | None]) -> Strip:
    segments = [Segment(" " * GUTTER), Segment(text, style("italic"))]
    if all(v is None for v in values):
        segments.append(Segment("  no data in the window", style("yellow")))
    return Strip(segments)


def _layer_of_annotation(a: Annotation) -> str | None:
    t = a.tags
    if "db2" in t:
        return "db2"
    if "storage" in t:
        return "storage"
    if "vcenter" in t:
        return "vm"
    if "host" in t:
        return "host"
    if "guest" in t:
        return "guest"
    return None


def load_stack(rd: Reader, target: Target, since: int, until: int, panel: str, geo: Geometry,
               table: TableState, levels: Levels, show_events: bool = True) -> StackView:
    """`show_events`: the stack's vCenter events marked on the time axis and charts (the `E` key hides them)."""
    r = resolve_at(rd, target, until, until)
    annotations = rd.annotations(since, until)
    markers = [a for a in annotations if a.event == "marker"]
    events = [a for a in annotations if a.event not in ("marker", EVENT)]
    a_cols, b_cols = max(geo.a_cols - GUTTER, 1), max(geo.b_cols - GUTTER, 1)
    findings = _stack_findings(rd, r, until)
    verdict, judged = _verdict(rd, target, since, until, levels, findings)
    vcenter = judged.events if judged is not None else []
    culprits = judged.culprits if judged is not None else []
    marked = vcenter if show_events else []

    def vcenter_layer(e: VCenterEvent) -> str:  # the VM's own events on its layer, the others on the host's
        return "vm" if e.vm and e.vm == r.vm else "host"

    def marks(cols: int) -> Callable[[str], Marks]:
        return lambda key: Marks.at(since, until, cols, [m.ts for m in markers],
                                    [e.ts for e in events if _layer_of_annotation(e) == key],
                                    vcenter=[e.ts for e in marked if vcenter_layer(e) == key])

    layers = _draw_layers(rd, load_layers(rd, r, until, levels), since, until, geo, marks(a_cols), marks(b_cols))
    if culprits and judged is not None and judged.episodes:
        blamed = judged.episodes[-1].layer
        for x in layers:
            if x.key == (blamed if blamed in {y.key for y in layers} else "host"):
                x.culprits = _culprit_runs(culprits)
    spans = rd.run_spans(since, until)
    all_marks = Marks.at(since, until, a_cols, [m.ts for m in markers], [e.ts for e in events], spans,
                         [e.ts for e in marked])
    if panel == EVENTS_PANEL:
        summary, model, trends, column = events_panel(vcenter, r.vm)
    else:
        summary, model, trends, column = PANEL_LOADERS.get(panel, cpu_panel)(rd, r, until, levels, target.label)
    if trends:
        fill_trends(rd, model, trends.get, column, table, since, until, geo.spark_cols, [m.ts for m in markers])
    axis_a = time_axis(since, until, a_cols, all_marks, GUTTER)
    axis_b = time_axis(since, until, b_cols, Marks.at(since, until, b_cols, [m.ts for m in markers],
                                                      [e.ts for e in events], spans, [e.ts for e in marked]), GUTTER)
    return StackView(target, r, until, since, verdict + (_event_runs(vcenter) if show_events else []), layers,
                     _block(layers, axis_a, axis_b, geo), panel, summary, model,
                     load_status(rd, until, r.collectors()), markers, findings, vcenter, culprits)


def _stack_findings(rd: Reader, r: StackEntities, until: int) -> list[Finding]:
    return [f for f in open_at(rd.every_finding(), until) if r.owns(f.subject)]


