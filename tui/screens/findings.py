"""The Findings screen: by severity, each with its evidence, why, fix and the document it cites.

A popeye-style score line counts open findings per layer; Enter opens the finding's
subject (its stack, VM, host or guest).
"""

from __future__ import annotations

import textwrap
from collections import Counter
from datetime import datetime
from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.widgets import Static

from db2vtop.agent.core.model import Finding, Severity, severity_rank
from db2vtop.agent.core.text import plural
from db2vtop.checks.catalog import references_of
from db2vtop.checks.evidence import describe
from db2vtop.tui.data import Reader
from db2vtop.tui.format import ago
from db2vtop.tui.loaders.findings import FindingsView, load_findings
from db2vtop.tui.loaders.fleet import SEVERITY_CELL, without_subject
from db2vtop.tui.screens.base import ViewScreen
from db2vtop.tui.table import Column, GridTable, TableModel, TableRow
from db2vtop.tui.widgets import StatusLine

COLUMNS = [Column("severity"), Column("rule", max_width=28), Column("layer"),
           Column("subject", max_width=40, min_width=12), Column("summary", max_width=60, min_width=20),
           Column("since", right=True)]  # a narrow terminal shortens the subject, then the summary, not `since`


def _when(ns: int) -> str:
    return datetime.fromtimestamp(ns / 1e9).strftime("%Y-%m-%d %H:%M:%S")


def subject_text(f: Finding) -> str:
    return " ".join(f"{k}={v}" for k, v in f.subject.items() if k != "layer")


def subject_cell(f: Finding) -> str:
    """The Findings table's subject: the names its summary starts with (`db2prod02`, `esx02 naa.…`), which the
    summary column leaves out; else its tags."""
    head, sep, rest = f.summary.partition(": ")
    return head if sep and without_subject(f) == rest else subject_text(f)


def finding_key(f: Finding) -> str:
    return f"{f.key} {f.first_seen}"


def stale_at(f: Finding, now_ns: int) -> bool:
    """Open but no longer seen at that moment: its subject stopped reporting (its source down, or it gone)."""
    return f.stale_since is not None and f.stale_since <= now_ns


def _model(view: FindingsView) -> TableModel:
    rows = []
    for f in view.open:
        word, st = SEVERITY_CELL.get(f.severity, (f.severity, ""))
        age = (view.now_ns - f.first_seen) / 1e9
        stale = stale_at(f, view.now_ns)  # listed after the current ones, dimmed: it sets nothing
        rows.append(TableRow(finding_key(f), [(f"{word} stale" if stale else word, "dim" if stale else st), f.rule,
                                              f.subject.get("layer", ""), subject_cell(f), without_subject(f),
                                              ago(age)],
                             (severity_rank(f.severity) + (5 if stale else 0), f.rule, f.subject.get("layer", ""),
                              subject_cell(f), f.summary, age), style="dim" if stale else None))
    for f in view.resolved:
        age = (view.now_ns - (f.resolved_at or 0)) / 1e9
        rows.append(TableRow(finding_key(f), ["resolved", f.rule, f.subject.get("layer", ""), subject_cell(f),
                                              without_subject(f), ago(age)],
                             (9, f.rule, f.subject.get("layer", ""), subject_cell(f), f.summary, age), style="dim"))
    return TableModel(COLUMNS, rows)


LABEL = 10  # the detail's labels (`evidence  `, `reference `)


def hanging(body: str, room: int) -> str:
    """`body`'s lines wrapped `room` cells wide (no wrap when the pane is not laid out yet), each line after the
    first indented by a label's width: the text stays under its own start."""
    lines = [w for para in body.split("\n") for w in (textwrap.wrap(para, room) if room > 10 else [para]) or [""]]
    return ("\n" + " " * LABEL).join(lines)


class FindingsScreen(ViewScreen):
    HELP: ClassVar = [("↑ ↓", "select a finding: its evidence, why, fix and reference show below"),
                      ("enter", "open the finding's subject (stack, VM, host or guest)"),
                      ("/", "filter findings (regex over rule, layer, subject, summary)"), ("esc", "back")]

    def __init__(self, filter_text: str = "") -> None:
        super().__init__()
        self.view: FindingsView | None = None
        self.table = GridTable(COLUMNS, id="findings-table")
        self.table.set_filter(filter_text)
        self._by_key: dict[str, Finding] = {}

    def body(self) -> ComposeResult:
        yield StatusLine(id="status")
        yield Static(id="score")
        yield self.table
        with VerticalScroll(id="finding-detail", classes="pane") as detail:
            detail.border_title = "Detail"
            yield Static("no finding selected", id="detail")

    def crumbs(self) -> list[str]:
        return ["Findings"]

    def load_view(self, reader: Reader, since_ns: int, until_ns: int) -> tuple[FindingsView, TableModel]:
        view = load_findings(reader, since_ns, until_ns)
        return view, _model(view)

    def show_view(self, loaded: tuple[FindingsView, TableModel]) -> None:
        view, model = loaded
        self.view = view
        self._by_key = {finding_key(f): f for f in view.open + view.resolved}
        self.query_one(StatusLine).show(view.collectors, view.markers)
        self.table.set_model(model)
        self.table.empty_text = "no finding in this window: no deviation from the documented practices"
        self.query_one("#score", Static).update(self._score(view), layout=False)
        self._detail(self._by_key.get(self.table.cursor_key or ""))
        self.show_crumbs()

    def _score(self, view: FindingsView) -> Text:
        """Open findings per layer and severity (k9s popeye's sanitizer report, per layer)."""
        t = Text(no_wrap=True)
        current = [f for f in view.open if not stale_at(f, view.now_ns)]
        stale = len(view.open) - len(current)
        t.append(f"{len(current)} open, " + (f"{stale} stale, " if stale else "")
                 + f"{len(view.resolved)} resolved in the window   ", style="bold")
        per = Counter((f.subject.get("layer", "?"), f.severity) for f in current)
        for layer in sorted({layer for layer, _ in per}):
            t.append(f"{layer} ", style="bold")
            for sev in Severity:
                if per[(layer, sev)]:
                    word, st = SEVERITY_CELL[sev]
                    t.append(f"{per[(layer, sev)]} {word} ", style=st)
            t.append("  ")
        return t

    def on_grid_table_highlighted(self, event: GridTable.Highlighted) -> None:
        self._detail(self._by_key.get(event.key or ""))

    def on_grid_table_selected(self, event: GridTable.Selected) -> None:
        f = self._by_key.get(event.key)
        if f is not None:
            self.app.open_subject(f.subject)

    def on_resize(self) -> None:  # the detail is wrapped to its pane's width
        if self.view is not None:
            self._detail(self._by_key.get(self.table.cursor_key or ""))

    def _detail(self, f: Finding | None) -> None:
        if f is None:
            self.query_one("#detail", Static).update("no finding selected")
            return
        word, st = SEVERITY_CELL.get(f.severity, (f.severity, ""))
        t = Text()
        t.append(f"{word} ", style=st)
        t.append(f"{f.rule}  {f.subject.get('layer', '')}: {subject_text(f)}\n", style="bold")
        t.append(f"{f.summary}\n\n")
        ev = f.evidence
        window = ev.get("window") or {}
        # label and text side by side, the text wrapped under its own start (as the help's), not back to column 0:
        # to the pane's width less its scroll bar
        pane = self.query_one("#finding-detail", VerticalScroll)
        room = pane.content_size.width - 1 - LABEL
        seen = f"{_when(window.get('from_ns', f.first_seen))} .. {_when(window.get('to_ns', f.last_seen))}"
        for label, body in (
                ("evidence", f"{describe(ev)}\n{plural(int(ev.get('samples', 1)), 'sample')}, {seen}"),
                ("why", f.why), ("fix", f.fix),
                ("reference", "; ".join(references_of(f.rule, f.references)))):  # an older recording's too
            t.append(label.ljust(LABEL), style="bold")
            t.append(hanging(body, room) + "\n")
        t.append(f"first seen {_when(f.first_seen)}, last seen {_when(f.last_seen)}\n", style="dim")
        if f.resolved_at:
            t.append(f"resolved  {_when(f.resolved_at)}\n", style="dim")
        elif self.view is not None and f.stale_since is not None and stale_at(f, self.view.now_ns):
            t.append(f"stale since {_when(f.stale_since)}: no sample of its subject since (its source down, or it "
                     "gone); not current\n", style="yellow")
        self.query_one("#detail", Static).update(t)

