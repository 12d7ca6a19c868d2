"""The TUI's last step before the terminal: no control character from what it shows reaches it.

Names, texts and errors from sources (a VM's name, a marker's, a finding's evidence, a DB2 or SSH
error) are shown by many widgets; one of them passing a string on raw let an escape sequence
retitle the operator's terminal, clear it or hide text. So every line every widget renders goes
through this filter (Textual applies the app's line filters to each widget's lines): the
characters agent/core/text.py escapes everywhere else (C0 and C1 controls, DEL, the bidirectional
overrides) are dropped here, where the line is already laid out and they take no cell.
"""

from __future__ import annotations

from rich.segment import Segment
from textual.color import Color
from textual.filter import LineFilter

from db2vtop.agent.core.text import has_controls, without_controls


class NoControls(LineFilter):
    def apply(self, segments: list[Segment], background: Color) -> list[Segment]:
        if not any(has_controls(s.text) for s in segments if not s.control):
            return segments
        return [s if s.control else Segment(without_controls(s.text), s.style) for s in segments]


#: the one instance the app adds to its line filters
NO_CONTROLS = NoControls()
