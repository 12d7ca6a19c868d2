"""The db2vtop TUI: live (`watch`), attached to an agent's store, or replaying a recording.

All screens read the store through one worker thread on a shared time cursor, so every
pane looks at the same window; the main thread only turns finished views into widget
updates. With a runtime the app collects in-process; otherwise it only reads.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import ClassVar

from textual import work
from textual.app import App
from textual.binding import Binding

from agent.markers import deliver_marker
from agent.model import Annotation
from agent.runtime import Runtime
from agent.store import Store, StoreError
from agent.units import format_duration
from tui.screens.dialogs import HelpScreen, MarkerPrompt
from tui.screens.findings import FindingsScreen
from tui.screens.local import LocalScreen
from tui.timecursor import TimeCursor
from tui.widgets import StatusLine


class Db2vtopApp(App):
    CSS_PATH = "app.tcss"
    TITLE = "db2vtop"
    MODES: ClassVar = {"local": LocalScreen, "findings": FindingsScreen}
    DEFAULT_MODE = "local"
    BINDINGS: ClassVar = [
        Binding("q", "quit", "Quit"),
        Binding("question_mark", "help", "Help", key_display="?"),
        Binding("space", "toggle", "Pause/play"),
        Binding("left", "scrub(-1)", "Back", key_display="←"),
        Binding("right", "scrub(1)", "Forward", key_display="→"),
        Binding("plus,equals_sign", "zoom(-1)", "Zoom in", key_display="+"),
        Binding("minus", "zoom(1)", "Zoom out", key_display="-"),
        Binding("home", "start", "Start", show=False),
        Binding("end", "live", "Live", show=False),
        Binding("M", "mark", "Marker"),
        Binding("l", "switch_mode('local')", "Local"),
        Binding("f", "switch_mode('findings')", "Findings"),
    ]
    HELP: ClassVar = [("q", "quit"), ("?", "this help"), ("space", "pause / resume live; play / pause a replay"),
                      ("← →", "scrub back / forward a tenth of the window"),
                      ("+ -", "zoom the window: 1m 5m 15m 1h 4h 24h"), ("home end", "start of the recording / live"),
                      ("M", "add a benchmark marker at the cursor's time"), ("l", "Local: this guest's panes"),
                      ("f", "Findings: evidence, why, fix, reference")]

    def __init__(self, store_path: Path, runtime: Runtime | None = None, *, cursor: TimeCursor | None = None,
                 clock: Callable[[], int] = time.time_ns, refresh_s: float = 1.0):
        super().__init__()
        self.store_path = store_path
        self.runtime = runtime
        self.cursor = cursor or TimeCursor()
        self.clock = clock
        self.refresh_s = refresh_s
        self.replaying = cursor is not None and not cursor.live
        self._reader: Store | None = None
        self._collecting = None
        self._last_tick = time.monotonic()

    def on_mount(self) -> None:
        if self.console.color_system in ("standard", "windows"):
            self.theme = "ansi-dark"  # 16 colours: stay within the terminal's own palette
        if self.runtime is not None:
            self._collecting = self.run_worker(self.runtime.run(), group="runtime", exit_on_error=False)
        self._title()
        self.set_interval(self.refresh_s, self._tick)
        self.call_after_refresh(self.reload)

    def _tick(self) -> None:
        now = time.monotonic()
        self.cursor.advance(now - self._last_tick, self.clock())
        self._last_tick = now
        if self.cursor.live or self.cursor.playing:
            self.reload()

    def _title(self) -> None:
        end = datetime.fromtimestamp(self.cursor.end(self.clock()) / 1e9).strftime("%Y-%m-%d %H:%M:%S")
        if self.replaying:
            mode = "replay"
        elif self.runtime is not None:
            mode = "collecting"
        else:
            mode = "attached to the agent writing this store"
        self.sub_title = (f"{end} · {self.cursor.describe()} · window {format_duration(self.cursor.window_s)} · "
                          f"{mode} · {self.store_path}")

    def reload(self) -> None:
        self._title()
        self._load(self.screen)

    @work(thread=True, exclusive=True, group="load")
    def _load(self, screen: object) -> None:
        if not hasattr(screen, "load_view"):
            return
        now = self.clock()
        until, since = self.cursor.end(now), self.cursor.since(now)
        try:
            if self._reader is None:
                self._reader = Store(self.store_path)
            view = screen.load_view(self._reader, since, until)
        except StoreError as e:
            self.call_from_thread(self._store_error, screen, str(e))
            return
        self.call_from_thread(screen.show_view, view)

    def _store_error(self, screen: object, message: str) -> None:
        for status in screen.query(StatusLine):  # type: ignore[attr-defined]
            status.update(f"store: {message}")

    def on_screen_resume(self) -> None:
        self.reload()

    # --- actions ----------------------------------------------------------------------

    async def action_quit(self) -> None:
        if self.runtime is not None and self._collecting is not None:
            self.runtime.stop()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._collecting.wait(), 10)
        self.exit()

    def action_help(self) -> None:
        self.push_screen(HelpScreen(self.HELP))

    def action_toggle(self) -> None:
        self.cursor.toggle(self.clock())
        self.reload()

    def action_scrub(self, steps: int) -> None:
        self.cursor.scrub(steps, self.clock())
        self.reload()

    def action_zoom(self, step: int) -> None:
        self.cursor.zoom(step)
        self.reload()

    def action_start(self) -> None:
        self.cursor.jump_start(self.clock())
        self.reload()

    def action_live(self) -> None:
        if not self.replaying:
            self.cursor.go_live()
            self.reload()

    def action_mark(self) -> None:
        at = self.cursor.end(self.clock())

        def add(name: str | None) -> None:
            if name:
                self.add_marker(Annotation("marker", name, {"by": "tui"}, "", at))
                self.notify(f"marker “{name}” added")

        self.push_screen(MarkerPrompt(), add)

    def add_marker(self, marker: Annotation) -> None:
        """Through our own pipeline when collecting, else into the store or its writer's inbox."""
        if self.runtime is not None:
            for out in self.runtime.outputs:
                out.submit(annotations=[marker])
        else:
            deliver_marker(self.store_path, marker)
        self.reload()
