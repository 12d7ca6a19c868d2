"""Widgets shared by the screens: pre-rendered strips, the collector status line, breadcrumbs, the filter."""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime

from rich.console import Group
from rich.style import Style
from rich.text import Text
from textual.events import Resize
from textual.geometry import Region
from textual.strip import Strip
from textual.widget import Widget
from textual.widgets import Input, Static

from db2vtop.agent.core.model import Annotation
from db2vtop.agent.core.units import format_duration
from db2vtop.tui.chart import MARKER_STYLE
from db2vtop.tui.data import Status
from db2vtop.tui.format import ago
from db2vtop.tui.table import Run

STATUS_STYLE = {"ok": "green", "error": "bold red", "timeout": "bold red", "skipped": "yellow", "failed": "bold red",
                "retrying": "bold yellow", "failing": "bold red"}
FAILED = ("error", "timeout", "failed")
MAX_LISTED = 6


def runs_text(runs: list[Run]) -> Text:
    t = Text(no_wrap=False)
    for text, st in runs:
        t.append(text, style=st or "")
    return t


def packed(lines: list[list[list[Run]]], width: int, gap: int = 2) -> Text:
    """Lines of phrases (each a list of runs), laid out `width` cells wide: a line that does not fit goes on
    below, between two phrases, never in the middle of one ("major faults 0.8/s" stays whole)."""
    t = Text(no_wrap=False)
    first = True
    for phrases in lines:
        used = 0
        for phrase in phrases:
            size = sum(len(text) for text, _ in phrase)
            if used and width and used + gap + size > width:
                t.append("\n")
                used = 0
            elif used:
                t.append(" " * gap)
                used += gap
            elif not first:
                t.append("\n")
            first = False
            for text, st in phrase:
                t.append(text, style=st or "")
            used += size
    return t


class StripView(Widget):
    """Shows strips drawn by the loader thread (charts, axes): the main thread only copies them.

    The loader reads `cells` (this widget's size, kept here on the main thread) to know
    how wide to draw; a resize asks the app for a fresh load at the new size.
    """

    DEFAULT_CSS = "StripView { height: 4; }"

    def __init__(self, *, id: str | None = None, classes: str | None = None):
        super().__init__(id=id, classes=classes)
        self.strips: list[Strip] = []
        self.cells = (0, 0)
        self._lines: dict[tuple, Strip] = {}
        self._base = Style()

    def on_resize(self, event: Resize) -> None:
        cells = (event.size.width, event.size.height)
        if cells != self.cells:
            self.cells = cells
            request = getattr(self.app, "request_reload", None)
            if request is not None and self.screen.is_current:  # a screen composed ahead loads when shown
                request()

    def show(self, strips: list[Strip]) -> None:
        self.strips = strips
        self._lines.clear()
        self.refresh()

    def render_lines(self, crop: Region) -> list[Strip]:
        self._base = self.rich_style  # a computed property: once per paint, not once per line
        return super().render_lines(crop)

    def render_line(self, y: int) -> Strip:
        width, base = self.size.width, self._base
        key = (y, width, base)
        line = self._lines.get(key)
        if line is None:
            line = self.strips[y].crop_extend(0, width, base).apply_style(base) if y < len(self.strips) \
                else Strip.blank(width, base)
            self._lines[key] = line
        return line


class TitleBar(Static):
    """db2vtop — the cursor's time, live/paused/playing, the window, the mode, the store.

    Textual's Header follows App.sub_title, and any change of an App reactive repaints the
    whole screen (every second here); this bar of fixed height repaints only itself.
    """

    DEFAULT_CSS = "TitleBar { dock: top; height: 1; background: $panel; text-style: bold; padding: 0 1; }"

    text = ""  # what it shows: each screen has its own bar, and one under another misses the cursor's moves

    def on_mount(self) -> None:
        self.show(getattr(self.app, "status_title", ""))

    def show(self, text: str) -> None:
        self.text = text
        self.update(Text(f"{self.app.title} — {text}", no_wrap=True, overflow="ellipsis"), layout=False)


@dataclass(frozen=True)
class Flash:
    """A message for the key bar's line (k9s's flash): the newest replaces the last, until `until`."""

    text: str
    severity: str
    until: float

    @property
    def live(self) -> bool:
        return time.monotonic() < self.until


FIRST_KEYS = ("?", "q", ":", "1-4", "/", "space")
# colours of their own, not the theme's "white" and "red": those came out light grey on a light red in 256
# colours, 2:1; these are 7:1 in 256 colours and in truecolor
FLASH_STYLE = {"error": "bold #ffffff on #af0000", "warning": "bold #000000 on #ffd700", "information": "bold"}


class KeyBar(Static):
    """The shown keys of the screen and the app on one line, or the app's latest message.

    Textual's Footer is a widget per key, restyled and recomposed on every screen switch;
    one line of text keeps a switch cheap. `?` lists every key. Messages take this line
    instead of toasts: one at a time, never over a table.
    """

    DEFAULT_CSS = "KeyBar { dock: bottom; height: 1; background: $panel; padding: 0 1; }"

    def on_mount(self) -> None:
        entries: list[tuple[str, str]] = []
        seen = set()
        for active in self.screen.active_bindings.values():
            b = active.binding
            if not b.show or b.action in seen:
                continue
            seen.add(b.action)
            entries.append((self.app.get_key_display(b), b.description))
        entries += [("1-4", "Screens"), ("^p", "palette")]
        # what a newcomer needs first, so that 80 columns still show it: help, quit, commands, screens
        entries.sort(key=lambda e: FIRST_KEYS.index(e[0]) if e[0] in FIRST_KEYS else len(FIRST_KEYS))
        t = Text(no_wrap=True, overflow="ellipsis")
        for key, what in entries:
            t.append(f" {key} ", style="bold reverse")
            t.append(f" {what}  ")
        self.keys = t
        self.show_flash()

    def show_flash(self) -> None:
        flash: Flash | None = getattr(self.app, "flash", None)
        if flash is not None and flash.live:
            t = Text(no_wrap=True, overflow="ellipsis")
            t.append(f" {flash.text} ", style=FLASH_STYLE.get(flash.severity, "bold"))
            self.update(t, layout=False)
        else:
            self.update(self.keys, layout=False)


def failing(collectors: list[Status]) -> list[Status]:
    """The sources whose last cycle failed (error, timeout, its loop ended): what a screen must not hide."""
    return sorted((s for s in collectors if s.status in FAILED and not s.thread), key=lambda s: s.collector)


class StatusLine(Static):
    """Collectors (all of them when few, else a count and the ones in trouble), then markers; under
    that, the app's news (the agent it was attached to stopped) and one line per failing source with its
    reason in full (wrapped, never cut off).

    A collector whose last cycle is older than three of its intervals is STALE: its
    data is not current, whatever its last status said. The agent's own threads (store writer,
    spool, checks) show only when they are retrying, have failed or have set records aside.
    """

    _shown_lines = 1
    loaded = False  # shown a load of its own screen

    def show(self, collectors: list[Status], markers: list[Annotation], loaded: bool = True) -> None:
        """`loaded`: its screen's own load (the app keeps a whole one, for screens shown before their first load)."""
        t = Text(no_wrap=True, overflow="ellipsis")
        trouble = [s for s in collectors if s.status != "ok" or s.stale]
        listed = sorted(collectors, key=lambda s: s.collector) if len(collectors) <= MAX_LISTED else \
            sorted(trouble, key=lambda s: (s.status == "ok", s.collector))
        if len(collectors) > MAX_LISTED:
            t.append(f"{len(collectors)} collectors: ", style="bold")
            t.append(f"{len(collectors) - len(trouble)} ok", style="green")
            t.append(f", {len(trouble)} in trouble: " if trouble else "   ", style="bold red")
        for s in listed:
            if s.stale:
                t.append("● ", style="bold yellow")
                t.append(f"{s.collector} STALE ", style="bold yellow")
                t.append(f"last cycle {ago(s.age_s)}")
            else:
                t.append("● ", style=STATUS_STYLE.get(s.status, "yellow"))
                t.append(f"{s.collector} {s.status}" + ("" if s.thread else " "), style="bold")
                if s.detail:
                    t.append(f" {s.detail}")
                if not s.thread:
                    t.append(f"{s.duration_ms:.0f}ms {ago(s.age_s)}")
            if s.skipped:
                t.append(f" skipped {s.skipped}", style="yellow")
            if s.set_aside:
                t.append(f" {s.set_aside} set aside", style="yellow")
            if s.clock_ms is not None:
                way = "ahead" if s.clock_ms > 0 else "behind"
                t.append(f" clock {format_duration(abs(s.clock_ms) / 1000)} {way}", style="bold yellow")
            t.append("   ")
        if not collectors:
            t.append("no collector has reported yet", style="yellow")
        for m in markers[-3:]:
            when = datetime.fromtimestamp(m.ts / 1e9).strftime("%H:%M:%S")
            t.append(f"▼ {m.name} {when}  ", style=MARKER_STYLE)
        lines: list[Text] = [t]
        # the app's own news (the agent it was attached to stopped); none for a line not in an app
        note = getattr(self.app, "status_note", "") if self.is_attached else ""
        if note:
            lines.append(Text(f"● {note}", style="bold yellow", overflow="fold"))
        for s in failing(collectors):
            line = Text(overflow="fold")
            line.append(f"✖ {s.collector} {s.status}", style="bold red")
            line.append(f" {ago(s.age_s)}: {s.last_error or 'no reason given'}", style="red")
            lines.append(line)
        for s in sorted((s for s in collectors if s.thread and s.status != "ok"), key=lambda s: s.collector):
            line = Text(overflow="fold")  # the agent's own thread: what the stored history may be missing
            style = "red" if s.status == "failed" else "yellow"
            line.append(f"✖ {s.collector} {s.status}" + (f" ({s.detail})" if s.detail else ""), style="bold " + style)
            line.append(f": {s.last_error or 'no reason given'}", style=style)
            lines.append(line)
        self.update(Group(*lines) if len(lines) > 1 else t, layout=len(lines) != self._shown_lines)
        self._shown_lines = len(lines)
        if loaded:
            self.loaded = True
            if self.is_attached and getattr(self.screen, "WHOLE_STATUS", False):
                self.app.last_status = (self.screen.loaded_at, collectors, markers)


class Breadcrumbs(Static):
    """Where you are, k9s style: Fleet › stack prod › u LUNs (Esc goes back one step)."""

    def show(self, parts: list[str], extra: str = "") -> None:
        t = Text(no_wrap=True)
        for i, p in enumerate(parts):
            if i:
                t.append(" › ", style="dim")
            t.append(p, style="bold" if i == len(parts) - 1 else "")
        if extra:
            t.append("   " + extra, style="dim")
        self.update(t, layout=False)


class FilterBar(Input):
    """k9s's `/`: a regex over the rows (`!` inverts); Enter keeps it, Esc clears it."""

    DEFAULT_CSS = "FilterBar { dock: bottom; display: none; height: 3; }"

    def __init__(self, *, id: str | None = None):
        super().__init__(placeholder="filter: regex, !regex inverts; Enter keeps, Esc clears", id=id)

    def open(self, text: str) -> None:
        self.value = text
        self.display = True
        self.focus()

    def close(self) -> None:
        self.display = False
