"""The Fleet screen: every stack, VM, host and lone guest, worst first; Enter drills down."""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import Static

from db2vtop.tui.data import Reader, TableState
from db2vtop.tui.fleet_view import COLUMNS, FINDING_COL, FleetView, load_fleet
from db2vtop.tui.screens.base import ViewScreen
from db2vtop.tui.table import GridTable
from db2vtop.tui.widgets import Breadcrumbs, FilterBar, KeyBar, StatusLine, TitleBar

SPARK_COLS = COLUMNS[-1].width


class FleetScreen(ViewScreen):
    HELP: ClassVar = [("↑ ↓ pgup pgdn", "move"), ("enter", "open the row: a stack, VM, host or guest"),
                      ("/", "filter rows (regex, !inverts)"), ("s S", "sort by the next column / reverse the order"),
                      ("click a header", "sort by that column")]
    BINDINGS: ClassVar = [
        Binding("s", "sort(1)", "Sort"),
        Binding("S", "reverse", "Reverse", show=False),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.view: FleetView | None = None
        self.table = GridTable(COLUMNS, id="fleet-table")
        self.table.set_sort(FINDING_COL, False)
        self.table.empty_text = "nothing in the store yet: waiting for the first samples…"

    def compose(self) -> ComposeResult:
        yield TitleBar()
        yield Breadcrumbs(id="crumbs")
        yield StatusLine(id="status")
        yield Static(id="fleet-summary")
        yield self.table
        yield FilterBar(id="filter")
        yield KeyBar()

    def on_mount(self) -> None:
        self.table.focus()
        self.show_crumbs()

    def crumbs(self) -> list[str]:
        return ["Fleet"]

    def load_view(self, reader: Reader, since_ns: int, until_ns: int) -> FleetView:
        return load_fleet(reader, self.app.stacks_for(reader), since_ns, until_ns, TableState.of(self.table),
                          SPARK_COLS, self.levels)

    def show_view(self, view: FleetView) -> None:
        self.view = view
        self.query_one(StatusLine).show(view.collectors, view.markers)
        self.table.set_model(view.model)
        t = Text()
        order = ("stack", "vm", "host", "guest")
        parts = [f"{view.counts[k]} {k}{'s' if view.counts[k] != 1 else ''}" for k in order if view.counts.get(k)]
        t.append(" · ".join(parts) or "no stacks, VMs, hosts or guests yet", style="bold")
        t.append(f"   {view.findings} open findings", style="bold red" if view.findings else "green")
        if view.stale:
            t.append(f"   {view.stale} stale rows (dimmed)", style="yellow")
        self.query_one("#fleet-summary", Static).update(t, layout=False)
        self.show_crumbs()

    def action_sort(self, step: int) -> None:
        cols = [i for i, c in enumerate(COLUMNS) if c.sortable]
        now = self.table.sort_col if self.table.sort_col in cols else cols[0]
        nxt = cols[(cols.index(now) + step) % len(cols)]
        self.table.set_sort(nxt, COLUMNS[nxt].descending)
        self.app.request_reload()

    def action_reverse(self) -> None:
        self.table.set_sort(self.table.sort_col, not self.table.sort_reverse)
        self.app.request_reload()

    def sort_by(self, name: str) -> bool:
        """`:sort NAME`: the first column whose name starts with NAME."""
        for i, c in enumerate(COLUMNS):
            if c.sortable and c.name.lower().startswith(name.lower()):
                self.table.set_sort(i, COLUMNS[i].descending)
                self.app.request_reload()
                return True
        return False

    def on_grid_table_selected(self, event: GridTable.Selected) -> None:
        if self.view is not None and event.key in self.view.targets:
            self.app.open_target(self.view.targets[event.key])
