"""The Fleet screen: every stack, VM, host and lone guest, worst first; Enter drills down."""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import Static

from db2vtop.agent.core.text import plural
from db2vtop.tui import prefs
from db2vtop.tui.data import Reader, TableState
from db2vtop.tui.loaders.fleet import COLUMNS, FINDING_COL, READY_TREND, FleetView, load_fleet
from db2vtop.tui.screens.base import ViewScreen
from db2vtop.tui.screens.dialogs import FieldChooser
from db2vtop.tui.table import GridTable
from db2vtop.tui.widgets import StatusLine, failing

SPARK_COLS = COLUMNS[READY_TREND].width
# esxtop's sort letters: R %RDY, U %USED, B the memory panel's MCTL (balloon); L latency, N name
EMPTY = "nothing in the store yet: waiting for the first samples…"
SORT_KEYS = {"R": "rdy%", "U": "cpu%", "B": "balloon", "L": "I/O ms", "N": "name"}


class FleetScreen(ViewScreen):
    HELP: ClassVar = [("↑ ↓ pgup pgdn", "move"), ("enter", "open the row: a stack, VM, host or guest"),
                      ("/", "filter rows (regex, !inverts); esc clears a kept filter"),
                      ("R U B L N", "sort by rdy%, cpu%, balloon, I/O ms latency, name (esxtop's letters; "
                                    "again reverses)"),
                      ("s S", "sort by the next column / reverse the order"), ("click a header", "sort by that column"),
                      ("f", "choose the columns shown (remembered)")]
    BINDINGS: ClassVar = [
        Binding("s", "sort(1)", "Sort"),
        Binding("S", "reverse", "Reverse", show=False),
        *(Binding(k, f"sort_by('{col}')", f"Sort by {col}", show=False) for k, col in SORT_KEYS.items()),
        Binding("f", "fields", "Fields"),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.view: FleetView | None = None
        self.table = GridTable(COLUMNS, id="fleet-table")
        self.table.set_sort(FINDING_COL, False)
        self.table.empty_text = EMPTY
        self.table.set_hidden(prefs.hidden_columns("fleet"))
        # the loader thread asks for the stacks through this, never through `self.app`: a screen the app is
        # taking down (a quit during a load) has none
        self.stacks_for = self.app.stacks_for

    def body(self) -> ComposeResult:
        yield StatusLine(id="status")
        yield Static(id="fleet-summary")
        yield self.table

    def crumbs(self) -> list[str]:
        return ["Fleet"]

    def load_view(self, reader: Reader, since_ns: int, until_ns: int) -> FleetView:
        return load_fleet(reader, self.stacks_for(reader), since_ns, until_ns, TableState.of(self.table),
                          SPARK_COLS, self.levels)

    def show_view(self, view: FleetView) -> None:
        self.view = view
        self.query_one(StatusLine).show(view.collectors, view.markers)
        bad = failing(view.collectors)
        self.table.empty_text = (f"nothing to show yet: {', '.join(s.collector for s in bad)} cannot be read "
                                 "(the reason is above)") if bad else EMPTY
        self.table.set_model(view.model)
        t = Text()
        order = ("stack", "vm", "host", "guest")
        parts = [plural(view.counts[k], k) for k in order if view.counts.get(k)]
        t.append(" · ".join(parts) or "no stacks, VMs, hosts or guests yet", style="bold")
        t.append(f"   {plural(view.findings, 'open finding')}", style="bold red" if view.findings else "green")
        if bad:  # "0 open findings" says nothing while a source cannot be read
            t.append(f"   {plural(len(bad), 'source')} failing", style="bold red")
        if view.stale:
            t.append(f"   {plural(view.stale, 'stale row')} (dimmed)", style="yellow")
        if view.rest is not None:  # the rows on screen are shown first (a large fleet's first load)
            t.append("   reading the other rows' figures…", style="dim")
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

    def action_sort_by(self, name: str) -> None:
        """A sort letter: that column, its natural order first; the same letter again reverses it."""
        i = next(i for i, c in enumerate(COLUMNS) if c.name == name)
        again = self.table.sort_col == i
        self.table.set_sort(i, not self.table.sort_reverse if again else COLUMNS[i].descending)
        self.app.request_reload()

    def action_fields(self) -> None:
        def chosen(hidden: frozenset[str] | None) -> None:
            if hidden is not None:
                self.table.set_hidden(hidden)
                prefs.save_hidden_columns("fleet", hidden)
                self.app.request_reload()

        self.app.push_screen(FieldChooser([c.name for c in COLUMNS], self.table.hidden, keep={"name"}), chosen)

    def on_grid_table_selected(self, event: GridTable.Selected) -> None:
        if self.view is not None and event.key in self.view.targets:
            self.app.open_target(self.view.targets[event.key])
