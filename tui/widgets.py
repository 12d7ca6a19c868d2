"""Widgets shared by the screens."""

from __future__ import annotations

from datetime import datetime

from rich.text import Text
from textual.widgets import Static

from agent.model import Annotation
from tui.data import Status
from tui.format import ago

STATUS_STYLE = {"ok": "green", "error": "bold red", "timeout": "bold red", "skipped": "yellow"}


class StatusLine(Static):
    """One entry per collector (status, cycle time, age, error), then the markers in view."""

    def show(self, collectors: list[Status], markers: list[Annotation]) -> None:
        t = Text()
        for s in sorted(collectors, key=lambda s: s.collector):
            t.append("● ", style=STATUS_STYLE.get(s.status, "yellow"))
            t.append(f"{s.collector} {s.status} ", style="bold")
            t.append(f"{s.duration_ms:.1f}ms {ago(s.age_s)}")
            if s.status != "ok" and s.last_error:
                t.append(f" ({s.last_error[:80]})", style="red")
            if s.skipped:
                t.append(f" skipped {s.skipped}", style="yellow")
            t.append("   ")
        if not collectors:
            t.append("no collector has reported yet", style="yellow")
        for m in markers[-3:]:
            when = datetime.fromtimestamp(m.ts / 1e9).strftime("%H:%M:%S")
            t.append(f"▼ {m.name} {when}  ", style="bold magenta")
        self.update(t)
