"""A run report (checks/report.py) as text, Markdown, JSON or one self-contained HTML file.

The HTML has no script and loads nothing: its charts are inline SVG, the run's key series and
the baseline's on one time axis, both measured from their own run's start.
"""

from __future__ import annotations

import html
import json
from collections.abc import Callable
from typing import Any

from db2vtop.agent.core.text import plural
from db2vtop.checks.figures import LAYER_TITLES, LAYERS
from db2vtop.checks.report import FIGURE_BY_ID, MOVE_FLOOR, Report, RunFigures, Stat, change_pct
from db2vtop.checks.triage import EVENTS_LISTED
from db2vtop.checks.verdict import earlier_text, onset_text

#: how a unit is shown: (divide by, label)
DISPLAY = {"bytes/s": (1e6, "MB/s"), "bytes": (1e6, "MB"), "per second": (1.0, "/s"), "I/O per second": (1.0, "IOPS"),
           "%": (1.0, "%"), "ms": (1.0, "ms"), "µs": (1.0, "µs"), "MHz": (1.0, "MHz"), "": (1.0, "")}
# One pair for which run (this run orange and solid, the baseline purple and dashed: a pair colour-blind
# readers tell apart), another for which way a figure went (magenta up, teal down): red used to mean both
# "this run" and "went up", though up is often good.
RUN_COLOUR, BASELINE_COLOUR = "#e66100", "#5d3a9b"
BASELINE_DASH = "5 3"
NOTHING_MOVED = ("no layer's figures moved 10 % or more and beyond the noise floor "
                 f"({', '.join(f'{v:g} {u}' for u, v in MOVE_FLOOR.items() if u in ('%', 'ms'))}, …)")
DOTS_UP_TO = 30  # series with this few points are also drawn as dots


def shown(unit: str) -> tuple[float, str]:
    return DISPLAY.get(unit, (1.0, unit))


def num(x: float | None, unit: str = "") -> str:
    if x is None:
        return "—"
    x = x / shown(unit)[0]
    a = abs(x)
    if a == 0:
        return "0"
    if a >= 100:
        return f"{x:,.0f}"
    if a >= 10:
        return f"{x:.1f}"
    if a >= 0.01:
        return f"{x:.2f}"
    return f"{x:.2g}"


def pct(change: float | None, from_zero: bool = False) -> str:
    if change is None:
        return "new" if from_zero else "—"
    return f"{change:+,.0f} %" if abs(change) >= 10 else f"{change:+.1f} %"


def _when(ns: int | None) -> str:
    from datetime import UTC, datetime

    return "—" if ns is None else datetime.fromtimestamp(ns / 1e9, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _run_line(r: RunFigures, as_html: bool = False) -> str:
    """"bench~1: 2026-05-01 12:00:00 to ... (41.0 s, exit status 0, command `sleep 30`)"; `as_html`: escaped,
    the command in <code> (back-ticks are markdown's)."""
    run = r.run
    text: Callable[[str], str] = html.escape if as_html else str
    end = "still running" if run.open else _when(run.end_ns)
    status = "" if run.exit_status is None else f", exit status {run.exit_status}"
    command = "" if not run.command else \
        f", command <code>{html.escape(run.command)}</code>" if as_html else f", command `{run.command}`"
    return text(f"{run.called}: {_when(run.begin_ns)} to {end} ({(r.until_ns - run.begin_ns) / 1e9:,.1f} s{status}") \
        + command + ")"


def _entities(report: Report, name: str) -> str:
    e = report.run.entities.get(name)
    if e is None:
        return ""
    vm = f"vm {e.vm}" + (f" of vCenter {e.vcenter}" if e.vcenter else "") if e.vm else ""
    parts = [f"db2 {e.db2}" if e.db2 else "", f"guest {e.guest}" if e.guest else "", vm,
             f"host {', '.join(e.hosts)}" if e.hosts else "", plural(len(e.luns), "LUN") if e.luns else "",
             f"arrays {', '.join(e.arrays)}" if e.arrays else ""]
    return "; ".join(p for p in parts if p)


def _change(x: Stat | None, y: Stat | None) -> str:
    if x is None or y is None:
        return "—"
    return pct(change_pct(x.mean, y.mean), from_zero=y.mean == 0 and x.mean != 0)


def _moved_lines(report: Report, limit: int = 10) -> list[str]:
    out = []
    for m in report.moved[:limit]:
        figs = ", ".join(f"{FIGURE_BY_ID[k].label} {pct(c, c is None)}" for k, c in m.figures)
        out.append(f"{m.stack} / {LAYER_TITLES[m.layer]}: {figs}")
    return out


def _rows(report: Report, stack: str, layer: str) -> list[tuple[str, str, Stat | None, Stat | None]]:
    mine = report.run.stacks.get(stack, {}).get(layer, {})
    theirs = report.baseline.stacks.get(stack, {}).get(layer, {}) if report.baseline else {}
    keys = [k for k in FIGURE_BY_ID if k in mine or k in theirs]
    return [(k, shown(FIGURE_BY_ID[k].unit)[1], mine.get(k), theirs.get(k)) for k in keys]


def _left_out(report: Report) -> str:
    """"Not in this report: 15 stacks without DB2 data (db2prod01, ... and 12 more); --stack NAME reports one"."""
    names = report.left_out
    if not names:
        return ""
    shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
    return (f"Not in this report: {plural(len(names), 'stack')} without DB2 data ({shown}); "
            "--stack NAME reports one (db2vtop stacks lists them).")


def _verdict_line(v: dict[str, Any]) -> str:
    """The verdict at the run's end (its episode going on then, with its start), then the run's earlier ones;
    one that could not judge (too few buckets) is its summary alone, which says why."""
    if v["confidence"] == "none":
        return v["summary"]
    blame = f"blame: {v['layer']} {onset_text(v)}".rstrip() if v["layer"] else \
        "no layer to blame at its end"
    where = f"; VM {v['vm']} of vCenter {v['vcenter']}" if v.get("vm") and v.get("vcenter") else ""
    also = "".join(f"; also {c['layer']}: {c['summary']}" for c in v.get("causes", [])[1:])
    earlier = earlier_text(v.get("episodes", []), v.get("until")) if v["layer"] else ""
    return (f"{v['summary']}{also} ({blame}, confidence {v['confidence']}, {v['buckets']} buckets of 20 s{where})"
            + (f"; earlier in the run: {earlier}" if earlier else ""))


def to_text(report: Report, markdown: bool = False) -> str:
    h1, h2, h3 = ("# ", "## ", "### ") if markdown else ("", "", "")
    base = report.baseline
    lines = [f"{h1}db2vtop report: run {report.run.run.called}" + (f" against {base.run.called}" if base else ""), ""]
    lines += [f"- run {_run_line(report.run)}"] + ([f"- baseline {_run_line(base)}"] if base else []) + [""]
    if left_out := _left_out(report):
        lines += [left_out, ""]
    if base:
        lines += [f"{h2}What changed", ""]
        lines += [f"- {x}" for x in _moved_lines(report)] or [f"- {NOTHING_MOVED}"]
        lines.append("")
    for st in report.stacks:
        if st.name not in report.run.stacks and not (base and st.name in base.stacks):
            continue
        lines += [f"{h2}Stack {st.name}" + (f" ({_entities(report, st.name)})" if _entities(report, st.name) else ""),
                  ""]
        for layer in LAYERS:
            rows = _rows(report, st.name, layer)
            if not rows:
                continue
            lines += [f"{h3}{LAYER_TITLES[layer]}" if markdown else f"  {LAYER_TITLES[layer]}", ""]
            head = ["figure", "unit", "p50", "p95", "max", "mean"] + (["baseline mean", "change"] if base else [])
            table = []
            for key, unit, x, y in rows:
                fig = FIGURE_BY_ID[key]
                label = f"{fig.label} (`{key}`)" if markdown else fig.label
                cells = [label, unit] + ([num(v, fig.unit) for v in (x.p50, x.p95, x.max, x.mean)] if x else ["—"] * 4)
                if base:
                    cells += [num(y.mean, fig.unit) if y else "—", _change(x, y)]
                table.append(cells)
            lines += _table(head, table, markdown)
            lines.append("")
        for side in [report.run] + ([base] if base else []):
            for v in side.verdicts:
                if v["stack"] == st.name:
                    who = "verdict" if side is report.run else f"baseline verdict ({side.run.called})"
                    lines += [f"{'**' if markdown else '  '}{who}{'**' if markdown else ''}: {_verdict_line(v)}"]
                    events = v.get("events") or []
                    lines += [f"{'- ' if markdown else '    '}vCenter {e['time']}: {e['summary']}"
                              for e in events[-EVENTS_LISTED:]]
                    if len(events) > EVENTS_LISTED:
                        lines.append(f"{'- ' if markdown else '    '}(and {len(events) - EVENTS_LISTED} older vCenter "
                                     "events: --format json has them all)")
                    lines.append("")
    lines += [f"{h2}Findings opened during the run", ""]
    any_finding = False
    for side in [report.run] + ([base] if base else []):
        for f, stacks in zip(side.findings, side.finding_stacks, strict=True):
            any_finding = True
            where = f" [{', '.join(stacks)}]" if stacks else ""
            subject = " ".join(f"{k}={v}" for k, v in f.subject.items() if k != "layer")
            lines.append(f"- {side.run.called}: {f.severity.upper()} {f.rule} ({f.subject.get('layer')}: {subject})"
                         f"{where}: {f.summary}")
    if not any_finding:
        lines.append("- none")
    return "\n".join(lines) + "\n"


def _table(head: list[str], rows: list[list[str]], markdown: bool) -> list[str]:
    if markdown:
        rule = "|" + "|".join("---" if i < 2 else "--:" for i in range(len(head))) + "|"
        return ["| " + " | ".join(head) + " |", rule, *("| " + " | ".join(r) + " |" for r in rows)]
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]

    def line(cells: list[str]) -> str:
        return "    " + "  ".join(c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths,
                                                                                                    strict=True)))
    return [line(head), *(line(r) for r in rows)]


def summary(report: Report) -> str:
    """What `db2vtop run` prints at the end: the key figures of each stack, the change against the
    baseline, what moved most and the verdicts."""
    base = report.baseline
    lines = [f"db2vtop: run {_run_line(report.run)}"]
    if base:
        lines.append(f"  baseline {_run_line(base)}")
    for st in report.stacks:
        layers = report.run.stacks.get(st.name)
        if not layers:
            continue
        lines.append(f"  stack {st.name}:")
        for layer in LAYERS:
            parts = []
            for key, _unit, x, y in _rows(report, st.name, layer):
                fig = FIGURE_BY_ID[key]
                if not fig.key or x is None:
                    continue
                unit = shown(fig.unit)[1]
                text = f"{fig.label} {num(x.mean, fig.unit)}{' ' + unit if unit else ''} (p95 {num(x.p95, fig.unit)})"
                if y is not None:
                    text += f" vs {num(y.mean, fig.unit)}, {_change(x, y)}"
                parts.append(text)
            if parts:
                lines.append(f"    {LAYER_TITLES[layer]}: " + "; ".join(parts))
        for v in report.run.verdicts:
            if v["stack"] == st.name and v["layer"]:
                lines.append(f"    verdict: {_verdict_line(v)}")
    if base:
        moved = _moved_lines(report, 5)
        lines.append("  what changed: " + ("; ".join(moved) if moved else NOTHING_MOVED))
    if report.run.findings:
        lines.append(f"  findings opened during the run: {len(report.run.findings)} "
                     f"({', '.join(sorted({f.rule for f in report.run.findings}))})")
    if not report.run.stacks:
        lines.append("  no samples of any stack in the run (is an agent or watch recording this store?)")
    if left_out := _left_out(report):
        lines.append(f"  {left_out}")
    return "\n".join(lines) + "\n"


def to_json(report: Report) -> str:
    return json.dumps(report.to_json(), indent=2, ensure_ascii=False)


# --- HTML -----------------------------------------------------------------------------

_CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#222;background:#fff}
h1{font-size:20px}h2{font-size:17px;margin-top:28px;border-bottom:1px solid #ccc}h3{font-size:15px;margin:14px 0 4px}
table{border-collapse:collapse;margin:4px 0 10px}td,th{padding:2px 8px;border-bottom:1px solid #eee}
th{text-align:left;background:#f6f6f6}td.n{text-align:right;font-variant-numeric:tabular-nums}
code{font-size:12px;color:#555}.up{color:#c2185b}.down{color:#00796b}.charts{display:flex;flex-wrap:wrap;gap:8px}
.legend span{display:inline-block;width:14px;height:3px;margin:0 4px 3px 10px;vertical-align:middle}
figure{margin:0}figcaption{font-size:12px}
"""


def _chart(title: str, unit: str, divide: float, run: list[tuple[float, float]],
           base: list[tuple[float, float]] | None) -> str:
    w, h, left, bottom, top, right = 360, 150, 48, 22, 8, 8
    series = [s for s in (run, base) if s]
    xmax = max((p[0] for s in series for p in s), default=1.0) or 1.0
    ymax = max((p[1] / divide for s in series for p in s), default=1.0) or 1.0
    ymax *= 1.05

    def pts(points: list[tuple[float, float]]) -> str:
        sx, sy = (w - left - right) / xmax, (h - bottom - top) / ymax
        return " ".join(f"{left + x * sx:.1f},{h - bottom - y / divide * sy:.1f}" for x, y in points)

    out = [f'<figure><figcaption>{html.escape(title)}{" (" + html.escape(unit) + ")" if unit else ""}</figcaption>'
           f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" role="img">',
           f'<rect x="{left}" y="{top}" width="{w - left - right}" height="{h - top - bottom}" fill="none" '
           'stroke="#bbb"/>',
           f'<text x="{left - 4}" y="{top + 10}" font-size="10" text-anchor="end">{num(ymax)}</text>',
           f'<text x="{left - 4}" y="{h - bottom}" font-size="10" text-anchor="end">0</text>',
           f'<text x="{left}" y="{h - 6}" font-size="10">0 s</text>',
           f'<text x="{w - right}" y="{h - 6}" font-size="10" text-anchor="end">{xmax:,.0f} s</text>']
    for points, colour in ((base, BASELINE_COLOUR), (run, RUN_COLOUR)):
        if not points:
            continue
        dash = f' stroke-dasharray="{BASELINE_DASH}"' if colour == BASELINE_COLOUR else ""
        out.append(f'<polyline fill="none" stroke="{colour}" stroke-width="2"{dash} points="{pts(points)}"/>')
        if len(points) <= DOTS_UP_TO:  # a run shorter than a few samples: its points, not a line one sample long
            out += [f'<circle cx="{xy.split(",")[0]}" cy="{xy.split(",")[1]}" r="3" fill="{colour}"/>'
                    for xy in pts(points).split()]
    out.append("</svg></figure>")
    return "".join(out)


def _downsample(points: list[tuple[float, float]], limit: int = 400) -> list[tuple[float, float]]:
    step = max(1, len(points) // limit)
    return points[::step]


def to_html(report: Report) -> str:
    base = report.baseline
    e = html.escape
    title = f"db2vtop report: run {report.run.run.called}" + (f" against {base.run.called}" if base else "")
    out = ["<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>",
           f"<title>{e(title)}</title><style>{_CSS}</style></head><body>", f"<h1>{e(title)}</h1><ul>",
           f"<li>run {_run_line(report.run, as_html=True)}</li>"]
    if base:
        out.append(f"<li>baseline {_run_line(base, as_html=True)}</li>")
    out.append("</ul>")
    if left_out := _left_out(report):
        out.append(f"<p>{e(left_out)}</p>")
    if base:
        out.append("<h2>What changed</h2><ul>")
        out += [f"<li>{e(x)}</li>" for x in _moved_lines(report)] or [f"<li>{e(NOTHING_MOVED)}</li>"]
        out.append("</ul>")
    for st in report.stacks:
        if st.name not in report.run.stacks and not (base and st.name in base.stacks):
            continue
        out.append(f"<h2>Stack {e(st.name)}</h2><p>{e(_entities(report, st.name))}</p>")
        charts = report.run.charts.get(st.name, {})
        base_charts = base.charts.get(st.name, {}) if base else {}
        keys = [k for k in FIGURE_BY_ID if k in charts or k in base_charts]
        if keys:
            out.append(f"<p class='legend'>time from each run's start: <span style='background:{RUN_COLOUR}'></span>"
                       f"{e(report.run.run.called)} (run)" + (f"<span style='background:{BASELINE_COLOUR}'></span>"
                                                             f"{e(base.run.called)} (baseline)" if base else "")
                       + "</p>")
            out.append("<div class='charts'>")
            for k in keys:
                fig = FIGURE_BY_ID[k]
                divide, unit = shown(fig.unit)
                out.append(_chart(f"{LAYER_TITLES[fig.layer]}: {fig.label}", unit, divide,
                                  _downsample(charts.get(k, [])),
                                  _downsample(base_charts.get(k, [])) if base else None))
            out.append("</div>")
        for layer in LAYERS:
            rows = _rows(report, st.name, layer)
            if not rows:
                continue
            extra = "<th>baseline mean</th><th>change</th>" if base else ""
            out.append(f"<h3>{e(LAYER_TITLES[layer])}</h3><table><tr><th>figure</th><th>unit</th><th>p50</th>"
                       f"<th>p95</th><th>max</th><th>mean</th>{extra}</tr>")
            for key, unit, x, y in rows:
                fig = FIGURE_BY_ID[key]
                cells = "".join(f"<td class='n'>{num(v, fig.unit)}</td>" for v in (x.p50, x.p95, x.max, x.mean)) \
                    if x else "<td class='n'>—</td>" * 4
                if base:
                    c = change_pct(x.mean, y.mean) if x and y else None
                    cls = "" if not c else " up" if c > 0 else " down"
                    cells += f"<td class='n'>{num(y.mean, fig.unit) if y else '—'}</td><td class='n{cls}'>" \
                             f"{e(_change(x, y))}</td>"
                out.append(f"<tr><td>{e(fig.label)} <code>{e(key)}</code></td><td>{e(unit)}</td>{cells}</tr>")
            out.append("</table>")
        for side in [report.run] + ([base] if base else []):
            for v in side.verdicts:
                if v["stack"] == st.name:
                    who = "Verdict" if side is report.run else f"Baseline verdict ({side.run.called})"
                    out.append(f"<p><b>{e(who)}</b>: {e(_verdict_line(v))}</p>")
    out.append("<h2>Findings opened during the run</h2><ul>")
    found = False
    for side in [report.run] + ([base] if base else []):
        for f, stacks in zip(side.findings, side.finding_stacks, strict=True):
            found = True
            subject = " ".join(f"{k}={v}" for k, v in f.subject.items() if k != "layer")
            where = f" [{e(', '.join(stacks))}]" if stacks else ""
            out.append(f"<li>{e(side.run.called)}: <b>{e(f.severity.upper())}</b> <code>{e(f.rule)}</code> "
                       f"({e(str(f.subject.get('layer')))}: {e(subject)}){where}: {e(f.summary)}</li>")
    if not found:
        out.append("<li>none</li>")
    out.append(f"</ul><p><small>generated by db2vtop at {e(_when(report.generated_at))}</small></p></body></html>")
    return "\n".join(out) + "\n"
