"""Modal dialogs: the key help and the marker prompt."""

from __future__ import annotations

from datetime import datetime
from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Static


class HelpScreen(ModalScreen[None]):
    BINDINGS: ClassVar = [Binding("escape,question_mark,q", "dismiss", "Close")]

    def __init__(self, bindings: list[tuple[str, str]]):
        super().__init__()
        self.keys = bindings

    def compose(self) -> ComposeResult:
        lines = [f"  {key:<12} {what}" for key, what in self.keys]
        lines += ["", "  ctrl+p       command palette", "", "  Press ? or Esc to close."]
        with Vertical(id="help", classes="dialog"):
            yield Static("db2vtop keys\n\n" + "\n".join(lines))


class MarkerPrompt(ModalScreen[str | None]):
    """Name a benchmark marker; Enter adds it at the cursor's time, Esc cancels."""

    BINDINGS: ClassVar = [Binding("escape", "cancel", "Cancel")]

    def compose(self) -> ComposeResult:
        default = "marker " + datetime.now().strftime("%H:%M:%S")
        with Vertical(id="marker", classes="dialog"):
            yield Static("Add a benchmark marker (drawn on every chart, sent to the sinks):")
            yield Input(value=default, id="marker-name")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.dismiss(event.value.strip() or None)

    def action_cancel(self) -> None:
        self.dismiss(None)
