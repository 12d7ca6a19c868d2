"""The Stack screen: the verdict, then DB2, guest, VM, host and array on one time axis, then a
detail panel picked with esxtop's and db2top's letters."""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import Static

from db2vtop.agent.core.model import severity_rank
from db2vtop.agent.core.text import plural
from db2vtop.tui.data import Reader, TableState
from db2vtop.tui.loaders.fleet import SEVERITY_CELL
from db2vtop.tui.loaders.stack import Geometry, StackView, load_stack
from db2vtop.tui.panels import PANELS
from db2vtop.tui.screens.base import ViewScreen
from db2vtop.tui.stacks import Target
from db2vtop.tui.table import GridTable, TableModel
from db2vtop.tui.widgets import StatusLine, StripView, runs_text

VMWARE_LETTERS = "cmduvn"
DB2_LETTERS = "blwt"
EVENT_LETTERS = "e"


class StackScreen(ViewScreen):
    HELP: ClassVar = [
        ("c m d u v n", "detail panel, esxtop's letters: CPU (VMs on the host), memory, disk adapters "
                        "(datastores), LUNs (GAVG = KAVG + DAVG vs the array), VM disks (VMDK vs guest), network"),
        ("b l w t", "detail panel, db2top's letters: buffer pools, log, waits (time spent), tablespaces "
                    "and containers"),
        ("e", "detail panel: the stack's vCenter events in the window (migrations, HA, reconfigurations, snapshots, "
              "host and storage problems, alarms), newest first"),
        ("↑ ↓ pgup pgdn", "move in the detail table"), ("enter", "open the VM under the cursor (c, m panels)"),
        ("J", "jump to the culprits (◀ beside the blamed layer) on the Fleet, which lists them alone"),
        ("/", "filter the detail rows"), ("esc", "back to the Fleet"),
    ]
    WHOLE_STATUS: ClassVar = False  # its status line names the stack's own sources
    BINDINGS: ClassVar = [
        *(Binding(k, f"panel('{k}')", PANELS[k], show=False) for k in VMWARE_LETTERS + DB2_LETTERS + EVENT_LETTERS),
        Binding("J", "culprits", "Culprits", show=False),
        Binding("escape", "back", "Back"),
    ]

    def __init__(self, target: Target, panel: str = "c"):
        super().__init__()
        self.target = target
        self.panel = panel
        self.view: StackView | None = None
        self.detail = GridTable(id="detail")
        self.block = StripView(id="layers")
        self._cached: dict[str, TableModel] = {}
        self._verdict_lines = 0
        self.event_marks = self.app.event_marks  # the app's, handed down: the loader thread reads it here

    def body(self) -> ComposeResult:
        yield Static(id="verdict")
        yield StatusLine(id="status")
        yield self.block
        yield Static(id="panel-tabs")
        yield Static(id="panel-summary")
        yield self.detail

    def on_mount(self) -> None:  # then ViewScreen's: the detail table focused, the breadcrumbs shown
        self._tabs()

    def crumbs(self) -> list[str]:
        return ["Fleet", self.target.label, f"{self.panel} {PANELS[self.panel]}"]

    def geometry(self) -> Geometry:
        width, height = self.block.cells
        return Geometry(width, height) if width else Geometry()

    def load_view(self, reader: Reader, since_ns: int, until_ns: int) -> StackView:
        return load_stack(reader, self.target, since_ns, until_ns, self.panel, self.geometry(),
                          TableState.of(self.detail), self.levels, self.event_marks.shown)

    def show_view(self, view: StackView) -> None:
        self.view = view
        verdict = self._verdict_text(view)
        lines = len(verdict.plain.splitlines())
        self.query_one("#verdict", Static).update(verdict, layout=lines != self._verdict_lines)
        self._verdict_lines = lines
        self.query_one(StatusLine).show(view.collectors, view.markers)
        self.block.show(view.block)
        if view.panel == self.panel:
            self._cached[view.panel] = view.detail
            self.detail.set_model(view.detail)
            self.detail.empty_text = "no rows for this panel in the data"
            self.query_one("#panel-summary", Static).update(runs_text(view.panel_summary), layout=False)
        self.show_crumbs()

    def _verdict_text(self, view: StackView) -> Text:
        t = runs_text(view.verdict)
        if view.findings:
            worst = sorted(view.findings, key=lambda f: severity_rank(f.severity))
            t.append("\n")
            t.append(f"{plural(len(view.findings), 'open finding')}: ", style="bold")
            for f in worst[:3]:
                word, st = SEVERITY_CELL.get(f.severity, (f.severity, ""))
                t.append(f"{word} ", style=st)
                t.append(f"{f.rule}  ")
            more = f"{len(worst) - 3} more; " if len(worst) > 3 else ""
            t.append(f"({more}key 3 lists them all)", style="dim")
        return t

    def _tabs(self) -> None:
        t = Text(no_wrap=True)
        for group in (VMWARE_LETTERS, DB2_LETTERS, EVENT_LETTERS):
            for k in group:
                st = "bold reverse" if k == self.panel else ""
                t.append(f" {k} ", style=st + " bold" if st else "bold")
                t.append(f"{PANELS[k]} ", style=st)
            t.append(" │ ", style="dim")
        self.query_one("#panel-tabs", Static).update(t, layout=False)

    def action_panel(self, letter: str) -> None:
        """Switch at once (with the last data of that panel, if any) and load fresh rows."""
        if letter == self.panel:
            return
        self.panel = letter
        self._tabs()
        self.detail.set_sort(None, False)
        self.detail.set_filter("")
        self.detail.set_model(self._cached.get(letter, TableModel([])))
        self.detail.empty_text = "loading…"
        self.query_one("#panel-summary", Static).update("", layout=False)
        self.show_crumbs()
        self.app.request_reload(now=True)


    def action_culprits(self) -> None:
        """The Fleet, filtered to the VMs the verdict names as culprits (Enter opens one, Esc clears it)."""
        vms = [c.vm for c in self.view.culprits if c.vm] if self.view is not None else []
        if not vms:
            self.app.notify("no culprits: the verdict blames no contention in the window", severity="warning")
            return
        self.app.show_in_fleet(list(dict.fromkeys(vms)))

    def on_grid_table_selected(self, event: GridTable.Selected) -> None:
        if self.panel in ("c", "m") and self.view is not None and event.key != self.view.resolved.vm:
            self.app.open_target(Target.of_vm(event.key))
