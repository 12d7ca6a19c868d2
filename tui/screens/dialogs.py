"""Modal dialogs: the key help, the marker prompt and the k9s-style `:` command line."""

from __future__ import annotations

from typing import ClassVar

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.suggester import SuggestFromList
from textual.widgets import Input, SelectionList, Static


class HelpScreen(ModalScreen[None]):
    BINDINGS: ClassVar = [Binding("escape,question_mark,q", "dismiss", "Close")]

    def __init__(self, sections: list[tuple[str, list[tuple[str, str]]]]):
        super().__init__()
        self.sections = sections

    def compose(self) -> ComposeResult:
        # the scroll sits against the dialog's right edge, its track drawn: a thumb on the dialog's own colour,
        # inside its padding, looked like a stray block in the text
        with Vertical(id="help-box", classes="dialog"), VerticalScroll(id="help"):
            yield Static(Text.assemble(("db2vtop keys", "bold"), ("   ↑ ↓ pgup pgdn scroll", "dim")))
            for title, keys in self.sections:
                if not keys:
                    continue
                # a grid, not pre-wrapped text: the help column wraps at word boundaries to whatever
                # width the terminal leaves the dialog, under its own start, never cut mid-word
                grid = Table.grid(padding=(0, 1))
                grid.add_column(style="bold", no_wrap=True, width=15)
                grid.add_column()
                for key, what in keys:
                    grid.add_row(f"  {key}", what)
                yield Static(Text(f"\n{title}", style="bold"))
                yield Static(grid)
            yield Static(Text("\nPress ? or Esc to close.", style="dim"))


class MarkerPrompt(ModalScreen[str | None]):
    """Name a benchmark marker; Enter adds it at the cursor's time, Esc cancels."""

    BINDINGS: ClassVar = [Binding("escape", "cancel", "Cancel")]

    def __init__(self, default: str):
        super().__init__()
        self.default = default

    def compose(self) -> ComposeResult:
        with Vertical(id="marker", classes="dialog"):
            yield Static("Add a benchmark marker (drawn on every chart, sent to the sinks):")
            yield Input(value=self.default, id="marker-name")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.dismiss(event.value.strip() or None)

    def action_cancel(self) -> None:
        self.dismiss(None)


class CommandBar(ModalScreen[str | None]):
    """`:` then a command (`:stack prod`, `:zoom 1h`, `:goto 14:05`); Tab completes (again: the next match, as a
    shell cycles, with the matches listed above the line), Esc cancels."""

    BINDINGS: ClassVar = [Binding("escape", "cancel", "Cancel"),
                          Binding("tab", "complete", "Complete", show=False, priority=True)]
    DEFAULT_CSS = """
    CommandBar { align: left bottom; background: transparent; }
    CommandBar #command-box { dock: bottom; height: auto; width: 100%; }
    CommandBar #matches { width: 100%; height: auto; max-height: 3; background: $surface; color: $text-muted;
                          padding: 0 1; display: none; }
    CommandBar #command-line { height: 3; width: 100%; border: tall $accent; background: $surface; }
    CommandBar #prompt { width: 2; padding: 0 0 0 1; text-style: bold; }
    CommandBar Input, CommandBar Input:focus { width: 1fr; border: none; height: 1; padding: 0; }
    """
    MAX_LISTED = 12

    def __init__(self, suggestions: list[str]):
        super().__init__()
        self.suggestions = list(dict.fromkeys(suggestions))
        self._cycle: tuple[list[str], int] | None = None  # the matches Tab goes through, and the one shown

    def compose(self) -> ComposeResult:
        with Vertical(id="command-box"):
            yield Static(id="matches")
            with Horizontal(id="command-line"):
                yield Static(":", id="prompt")
                yield Input(placeholder="fleet  stack NAME  vm NAME  findings  zoom 1h  goto 14:05  help"
                                        "  (tab completes, ? lists them all)",
                            suggester=SuggestFromList(self.suggestions, case_sensitive=False), id="command")

    def action_complete(self) -> None:
        """Tab: the first completion (the grey one); Tab again, the next, round and round."""
        line = self.query_one(Input)
        if self._cycle is not None and line.value == self._cycle[0][self._cycle[1]]:
            matches, i = self._cycle[0], (self._cycle[1] + 1) % len(self._cycle[0])
        else:
            typed = line.value.lower()
            matches, i = [s for s in self.suggestions if s.lower().startswith(typed) and s.lower() != typed], 0
            if not matches:
                return
        self._cycle = (matches, i)
        line.value = matches[i]
        line.cursor_position = len(line.value)
        listed = self.query_one("#matches", Static)
        listed.display = len(matches) > 1
        if len(matches) > 1:
            verbs = {m.partition(" ")[0] for m in matches}  # a verb they share is said once: vm db2prod01 db2prod02
            head = f"{verbs.pop()} " if len(verbs) == 1 and all(" " in m for m in matches) else ""
            t = Text(head)
            for m in matches[:self.MAX_LISTED]:
                t.append(m[len(head):], style="bold reverse" if m == matches[i] else "")
                t.append("  ")
            if len(matches) > self.MAX_LISTED:
                t.append(f"… {len(matches) - self.MAX_LISTED} more  ")
            t.append("(tab: the next)", style="dim")
            listed.update(t)

    def on_input_changed(self, event: Input.Changed) -> None:
        if self._cycle is not None and event.value != self._cycle[0][self._cycle[1]]:  # typed: a new completion
            self._cycle = None
            self.query_one("#matches", Static).display = False

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.dismiss(event.value.strip().lstrip(":") or None)

    def action_cancel(self) -> None:
        self.dismiss(None)


class FieldChooser(ModalScreen[frozenset[str] | None]):
    """esxtop's `f`: tick the columns to show; Esc or `f` applies (the Fleet remembers the choice)."""

    BINDINGS: ClassVar = [Binding("escape,f,enter", "done", "Done")]

    def __init__(self, columns: list[str], hidden: frozenset[str], keep: set[str]):
        super().__init__()
        self.columns = [c for c in columns if c not in keep]
        self.hidden = hidden

    def compose(self) -> ComposeResult:
        with Vertical(id="fields", classes="dialog"):
            yield Static("Columns shown (space ticks, esc applies):")
            yield SelectionList[str](*((c, c, c not in self.hidden) for c in self.columns), id="field-list")

    def action_done(self) -> None:
        shown = set(self.query_one(SelectionList).selected)
        self.dismiss(frozenset(c for c in self.columns if c not in shown))
