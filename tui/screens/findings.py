"""The Findings screen: by severity, each with its evidence, why, fix and seed reference."""

from __future__ import annotations

from datetime import datetime

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Header, Static

from agent.model import Finding
from agent.store import Store
from tui.data import FindingsView, load_findings
from tui.format import ago
from tui.widgets import StatusLine

SEVERITY_STYLE = {"critical": "bold red", "warning": "bold yellow", "info": "cyan"}


def _when(ns: int) -> str:
    return datetime.fromtimestamp(ns / 1e9).strftime("%Y-%m-%d %H:%M:%S")


def subject_text(f: Finding) -> str:
    return " ".join(f"{k}={v}" for k, v in f.subject.items() if k != "layer")


class FindingsScreen(Screen):
    def __init__(self) -> None:
        super().__init__()
        self.view: FindingsView | None = None
        self._rows: list[Finding] = []

    def compose(self) -> ComposeResult:
        yield Header()
        yield StatusLine(id="status")
        table = DataTable(id="findings-table", cursor_type="row", zebra_stripes=True)
        table.add_columns("severity", "rule", "layer", "subject", "summary", "since")
        yield table
        with VerticalScroll(id="finding-detail", classes="pane"):
            yield Static("no finding selected", id="detail")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#finding-detail").border_title = "Detail"

    def load_view(self, store: Store, since_ns: int, until_ns: int) -> FindingsView:
        return load_findings(store, since_ns, until_ns)

    def show_view(self, view: FindingsView) -> None:
        self.view = view
        self.query_one(StatusLine).show(view.collectors, view.markers)
        table = self.query_one("#findings-table", DataTable)
        keep = table.cursor_row
        table.clear()
        self._rows = view.open + view.resolved
        for f in view.open:
            table.add_row(Text(f.severity.upper(), style=SEVERITY_STYLE.get(f.severity, "")), f.rule,
                          f.subject.get("layer", ""), subject_text(f), f.summary,
                          ago((view.now_ns - f.first_seen) / 1e9))
        for f in view.resolved:
            table.add_row(Text("resolved", style="dim"), f.rule, f.subject.get("layer", ""), subject_text(f),
                          Text(f.summary, style="dim"), ago((view.now_ns - (f.resolved_at or 0)) / 1e9))
        title = (f"Findings — {len(view.open)} open, {len(view.resolved)} resolved in the window"
                 if self._rows else "Findings — none: no deviation from the documented practices")
        table.border_title = title
        if self._rows:
            table.move_cursor(row=min(keep, len(self._rows) - 1))
            self._detail(self._rows[table.cursor_row])
        else:
            self.query_one("#detail", Static).update("no finding in this window")

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        if 0 <= event.cursor_row < len(self._rows):
            self._detail(self._rows[event.cursor_row])

    def _detail(self, f: Finding) -> None:
        t = Text()
        t.append(f"{f.severity.upper()} ", style=SEVERITY_STYLE.get(f.severity, ""))
        t.append(f"{f.rule}  {f.subject.get('layer', '')}: {subject_text(f)}\n", style="bold")
        t.append(f"{f.summary}\n\n")
        ev = f.evidence
        values = ", ".join(f"{k}={v}" for k, v in (ev.get("values") or {}).items())
        window = ev.get("window") or {}
        t.append("evidence  ", style="bold")
        t.append(f"{values}\n          {ev.get('samples', 1)} samples, {_when(window.get('from_ns', f.first_seen))}"
                 f" .. {_when(window.get('to_ns', f.last_seen))}\n")
        if ev.get("thresholds"):
            t.append("          thresholds " + ", ".join(f"{k}={v}" for k, v in ev["thresholds"].items()) + "\n")
        t.append("why       ", style="bold")
        t.append(f"{f.why}\n")
        t.append("fix       ", style="bold")
        t.append(f"{f.fix}\n")
        t.append("reference ", style="bold")
        t.append("; ".join(f.references) + "\n")
        if f.resolved_at:
            t.append(f"resolved  {_when(f.resolved_at)}\n", style="dim")
        self.query_one("#detail", Static).update(t)
