"""The TUI's keys and `:` commands, declared once.

The app's key bindings, its help screen, the `:` bar's suggestions, the command palette and the
command parser all read these tables, so a command or key added here is bound, documented and
offered everywhere at once. The parser is a module of its own with its own tests, as k9s keeps
its command parser.
"""

from __future__ import annotations

from dataclasses import dataclass

from textual.binding import Binding

from db2vtop.agent.core.units import format_duration
from db2vtop.tui.screens.base import ViewScreen
from db2vtop.tui.screens.findings import FindingsScreen
from db2vtop.tui.screens.fleet import FleetScreen
from db2vtop.tui.screens.local import LocalScreen
from db2vtop.tui.timecursor import WINDOWS


@dataclass(frozen=True)
class Registered:
    """A screen its number key switches to (back to its root, k9s's `:pod`): adding a screen is one line of
    SCREENS, its class and its loader (tui/loaders/); a `:` verb of its name, in COMMANDS, opens it too."""

    key: str
    name: str  # the app's mode, and the `:` verb that opens it
    title: str  # the key's binding and the help line name it so
    screen: type[ViewScreen] | None  # None: the Stack screen, opened on a target rather than a mode of its own
    about: str = ""  # after its title in the help line


SCREENS: tuple[Registered, ...] = (
    Registered("1", "fleet", "Fleet", FleetScreen),
    Registered("2", "stack", "Stack", None, " (the last one opened)"),
    Registered("3", "findings", "Findings", FindingsScreen),
    Registered("4", "local", "Local", LocalScreen),
)


@dataclass(frozen=True)
class KeyGroup:
    """Keys the help screen explains on one line, with the bindings that make them work
    (none for keys Textual or each screen binds itself)."""

    display: str
    help: str
    bindings: tuple[Binding, ...] = ()


KEYS: tuple[KeyGroup, ...] = (
    KeyGroup("q ctrl+c", "quit", (Binding("q", "quit", "Quit"),
                                  Binding("ctrl+c", "quit", "Quit", show=False, priority=True))),
    KeyGroup("?", "this help", (Binding("question_mark", "help", "Help", key_display="?"),)),
    KeyGroup("space", "pause / resume live; play / pause a replay", (Binding("space", "toggle", "Pause/play"),)),
    KeyGroup("← →", "scrub back / forward a tenth of the window",
             (Binding("left", "scrub(-1)", "Earlier", key_display="←"),
              Binding("right", "scrub(1)", "Later", key_display="→"))),
    KeyGroup("< >", "replay speed: 1×, 10×, 60×",
             (Binding("less_than_sign", "speed(-1)", "Slower", key_display="<", show=False),
              Binding("greater_than_sign", "speed(1)", "Faster", key_display=">", show=False))),
    KeyGroup("+ -", f"zoom the window: {' '.join(format_duration(w) for w in WINDOWS)} (:zoom takes any between)",
             (Binding("plus,equals_sign", "zoom(-1)", "Zoom in", key_display="+"),
              Binding("minus", "zoom(1)", "Zoom out", key_display="-"))),
    KeyGroup("home end", "the store's first sample / back to live (the end of a replay)",
             (Binding("home", "start", "Start", show=False), Binding("end", "live", "Live", show=False))),
    KeyGroup("M", "add a benchmark marker at the cursor's time (not when read-only)",
             (Binding("M", "mark", "Marker"),)),
    KeyGroup("E", "show / hide vCenter's events (◆) on the time axis and charts",
             (Binding("E", "toggle_events", "Events", show=False),)),
    KeyGroup(" ".join(s.key for s in SCREENS), ", ".join(s.title + s.about for s in SCREENS),
             tuple(Binding(s.key, f"screen('{s.name}')", s.title, show=False) for s in SCREENS)),
    KeyGroup(":", "command (tab completes): {commands}",
             (Binding("colon", "command", "Command", key_display=":"),)),
    KeyGroup("ctrl+p", "command palette (the same commands, searchable)"),
    KeyGroup("esc", "clear the filter, else back one screen"),
)


@dataclass(frozen=True)
class Command:
    """A `:` verb. `arg` is its argument's placeholder: bracketed when optional, empty for none;
    `example` replaces it in the help line where a sample says more than a placeholder."""

    verb: str
    help: str
    arg: str = ""
    aliases: tuple[str, ...] = ()
    example: str = ""

    @property
    def optional(self) -> bool:
        return self.arg.startswith("[")

    @property
    def usage(self) -> str:
        return self.example or f"{self.verb} {self.arg}".strip()


COMMANDS: tuple[Command, ...] = (
    Command("fleet", "every stack, VM, host and guest"),
    Command("stack", "open a stack", "NAME", ("st",)),
    Command("vm", "open a VM", "NAME"),
    Command("host", "open a host", "NAME"),
    Command("guest", "open a guest's OS panes", "NAME"),
    Command("findings", "the findings, filtered by the text if one is given", "[FILTER]"),
    Command("local", "a guest's OS panes (this machine's without a name)", "[GUEST]"),
    Command("zoom", "the window every chart shows", "DURATION", example="zoom 1h"),
    Command("goto", "move the cursor to a time, or back from it", "TIME",
            example="goto 14:05 | -10m | 2024-05-01 14:05"),
    Command("live", "back to live (the end of a replay)"),
    Command("speed", "replay speed", "1x|10x|60x", example="speed 10x"),
    Command("start", "the start of the recording"),
    Command("mark", "a benchmark marker at the cursor's time", "[NAME]", example="mark NAME"),
    Command("run", "the window around a benchmark run (its begin and end markers)", "NAME"),
    Command("sort", "sort the Fleet by the column whose name starts so", "COLUMN"),
    Command("filter", "show only the rows that match", "TEXT"),
    Command("help", "the keys and commands"),
    Command("quit", "leave db2vtop", aliases=("q", "exit")),
)
BY_VERB = {name: c for c in COMMANDS for name in (c.verb, *c.aliases)}


def parse(text: str) -> tuple[Command, str]:
    """`:` text -> the command and its argument; a clear ValueError for anything else."""
    verb, _, arg = text.strip().partition(" ")
    arg = arg.strip()
    command = BY_VERB.get(verb.lower())
    if command is None:
        raise ValueError(f"unknown command {text.strip()!r} (press ? for the list)")
    if not command.arg and arg:
        raise ValueError(f"{command.verb} takes no argument")
    if command.arg and not command.optional and not arg:
        raise ValueError(f"{command.verb} needs {command.arg}: {command.usage}")
    return command, arg


def help_line() -> str:
    return ", ".join(c.usage for c in COMMANDS)


def key_help() -> list[tuple[str, str]]:
    """The help screen's "Everywhere" rows."""
    return [(g.display, g.help.format(commands=help_line())) for g in KEYS]


def bindings() -> list[Binding]:
    return [b for g in KEYS for b in g.bindings]


def suggestions(extra: list[str]) -> list[str]:
    """What the `:` bar completes: every verb (with a space when it takes an argument), then `extra`
    (the argument values the app knows, e.g. `stack prod01`, `zoom 1h`)."""
    return [c.verb + (" " if c.arg and not c.optional else "") for c in COMMANDS] + extra
