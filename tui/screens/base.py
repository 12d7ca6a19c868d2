"""What every db2vtop screen shares: a loader-thread read, a main-thread show, breadcrumbs, `/`."""

from __future__ import annotations

from typing import Any, ClassVar

from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import Input

from db2vtop.checks.scales import Levels
from db2vtop.tui.data import Reader
from db2vtop.tui.table import GridTable
from db2vtop.tui.widgets import Breadcrumbs, FilterBar, KeyBar, StatusLine, TitleBar


class ViewScreen(Screen):
    """`load_view` runs in the loader thread (store reads only, never `self.app`: the app may be taking the
    screen down); `show_view` on the main thread (widget updates only). HELP lists the screen's own keys for `?`."""

    HELP: ClassVar[list[tuple[str, str]]] = []
    WHOLE_STATUS: ClassVar[bool] = True  # its status line names every source (the Stack screen's, its stack's own)
    FOCUS_TABLE: ClassVar[bool] = True  # its first table has the keys when it is mounted
    BINDINGS: ClassVar = [Binding("slash", "filter", "Filter", key_display="/"),
                          Binding("escape", "back", "Back", show=False)]

    def __init__(self) -> None:
        super().__init__()
        # Textual restyles a screen from scratch (a full CSS reparse, ~20 ms of main thread) each
        # time it is shown while its CSS generation is behind the app's, and a mode's screen only
        # catches up if it happens to be mounted during such a restyle. Ours are styled as their
        # widgets mount, with the stylesheet as it is now: behind only after a theme change. Not the
        # screens built while the app starts (the first one, a stack opened from the command line):
        # the theme's variables are applied after them, and skipping that restyle left their
        # "auto" text colours resolved against defaults, i.e. equal to their background.
        if self.app._mounted_event.is_set():
            self._css_update_count = self.app._css_update_count
        self.levels: Levels = self.app.levels  # the app's, handed down: the loader thread reads them here
        self.loaded_at: tuple[int, int] | None = None  # (since, until) of its last load

    def compose(self) -> ComposeResult:
        """The frame every screen has: the title and breadcrumbs, its own widgets (`body`), the `/` bar, the keys."""
        yield TitleBar()
        yield Breadcrumbs(id="crumbs")
        yield from self.body()
        yield FilterBar(id="filter")
        yield KeyBar()

    def body(self) -> ComposeResult:
        """The screen's own widgets, between its breadcrumbs and its `/` bar."""
        return iter(())

    def load_view(self, reader: Reader, since_ns: int, until_ns: int) -> Any:
        raise NotImplementedError

    def show_view(self, view: Any) -> None:
        raise NotImplementedError

    def on_mount(self) -> None:
        """Mounted: its table focused (the keys move its cursor), its breadcrumbs shown."""
        table = self.filter_table() if self.FOCUS_TABLE else None
        if table is not None:
            table.focus()
        self.show_crumbs()

    def crumbs(self) -> list[str]:
        return []

    def on_screen_resume(self) -> None:
        """Shown (again): load right after the first frame, whatever the time cursor is doing
        (started before, the loader thread would compete with that frame for the GIL)."""
        if self.is_current:  # not when the app composes it ahead of its first visit
            self.app.call_after_refresh(self.app.request_reload, True)
            # until its first load (a 10,000-VM Fleet's takes a second), not a blank status line
            last = self.app.status_until_loaded() if self.WHOLE_STATUS else None
            for status in self.query(StatusLine) if last is not None else ():
                if not status.loaded:
                    status.show(*last, loaded=False)
            for bar in self.query(KeyBar):  # the app's message, if it is still up, follows to this screen
                if hasattr(bar, "keys"):
                    bar.show_flash()

    def show_crumbs(self) -> None:
        extra = []
        table = self.filter_table()
        if table is not None and table.filter_text:
            extra.append(f"filter /{table.filter_text}")
        for crumbs in self.query(Breadcrumbs):
            crumbs.show(self.crumbs(), "  ".join(extra))

    # --- k9s `/` ------------------------------------------------------------------------

    def filter_tables(self) -> list[GridTable]:
        """The tables `/` filters: the screen's main one (Local: each of its tables)."""
        tables = self.query(GridTable)
        return [tables.first()] if tables else []

    def filter_table(self) -> GridTable | None:
        """The first table `/` filters: its filter is the screen's."""
        tables = self.filter_tables()
        return tables[0] if tables else None

    def set_filter(self, text: str) -> None:
        for table in self.filter_tables():
            table.set_filter(text)
        self.show_crumbs()
        self.app.request_reload()  # trends are drawn for the rows now on screen

    def action_filter(self) -> None:
        table = self.filter_table()
        if table is not None:
            self.query_one(FilterBar).open(table.filter_text)

    def on_input_changed(self, event: Input.Changed) -> None:
        if isinstance(event.input, FilterBar) and event.input.display and self.filter_tables():
            self.set_filter(event.value)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if isinstance(event.input, FilterBar):
            self.close_filter(keep=True)

    def close_filter(self, keep: bool) -> bool:
        """Esc: clear and close an open filter (True), or say there was none (False)."""
        bars = self.query(FilterBar)
        if not bars or not bars.first().display:
            return False
        bars.first().close()
        table = self.filter_table()
        if table is not None:
            if not keep:
                self.set_filter("")
            table.focus()
        self.show_crumbs()
        return True

    def action_back(self) -> None:
        """Esc: close an open filter first, then clear a kept one, then go back one screen (k9s)."""
        if self.close_filter(keep=False):
            return
        table = self.filter_table()
        if table is not None and table.filter_text:
            self.set_filter("")
            return
        self.app.back()

    def on_grid_table_scrolled(self, _event: GridTable.Scrolled) -> None:
        self.app.request_reload()
