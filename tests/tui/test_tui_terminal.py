"""The TUI as a terminal shows it: the real `db2vtop` in a pty, its bytes through a VT emulator (pyte).

`make run` (`db2vtop watch`, this machine, no config) and `db2vtop replay` of the recorded fleet
(tests/infra/tui_fixture.py) are started at 80x24, 120x40 and 160x45, with 256 colours and with
truecolor. On the first screen, after every screen switch and in every dialog: no visible
character is drawn in its own background colour, boxes are whole and nothing is drawn past a
box that spans the line, and the title, the status line and the key bar are there.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import socket
import sys
from pathlib import Path

import pytest

from db2vtop.agent.core.model import SELF_MEASUREMENT, Annotation, Sample
from tests.infra.pty_term import Terminal, broken_boxes, invisible, outside_boxes
from tests.infra.tui_fixture import STEP_S, T0, Fleet, S, build_store, write_config

ROOT = Path(__file__).resolve().parents[2]
SIZES = [(80, 24), (120, 40), (160, 45)]
COLOURS = ["256", "truecolor"]
ESC = "\x1b"


def db2vtop() -> list[str]:
    """The installed program, as `make run` starts it (the module when no script is installed)."""
    script = Path(sys.executable).parent / "db2vtop"
    return [str(script)] if script.exists() else [sys.executable, "-m", "db2vtop.agent"]


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    d = tmp_path_factory.mktemp("fleet")
    return build_store(d / "fleet.db"), write_config(d / "stacks.toml")


def env_for(home: Path) -> dict[str, str]:
    return {"HOME": str(home), "XDG_CONFIG_HOME": str(home / "config"), "XDG_DATA_HOME": str(home / "data"),
            "XDG_STATE_HOME": str(home / "state"), "TZ": "UTC"}


def missing_chrome(lines: list[str], message: str = "", flashes: set[str] | frozenset[str] = frozenset()) -> str:
    """What of the title bar, the key bar (or for a few seconds the `message` a key gave, on the same line) and the
    collector status line a screen does not show yet ("" when all are there)."""
    if not lines[0].startswith(" db2vtop — "):
        return "no title bar"
    if not (("Quit" in lines[-1] and "Help" in lines[-1]) or (message and message in lines[-1])
            or lines[-1].strip() in flashes):
        return "no key bar"
    if not any("●" in line or " collectors: " in line or "no collector" in line for line in lines[1:-1]):
        return "no collector status line"
    return ""


def check(term: Terminal, where: str, *, chrome: bool = True, message: str = "",
          flashes: set[str] | frozenset[str] = frozenset()) -> None:
    """What every screen owes its reader (the key bar's line may hold the `message` a key gave)."""
    lines = term.lines()
    hidden = invisible(term)
    assert not hidden, (f"{where}: {len(hidden)} characters in their own background colour, e.g. line "
                        f"{hidden[0].y}: {lines[hidden[0].y]!r} ({hidden[0].fg} on {hidden[0].bg})")
    problems = broken_boxes(term) + outside_boxes(term)
    assert not problems, f"{where}: " + "\n".join(problems) + "\n" + term.text()
    if chrome:
        missing = missing_chrome(lines, message, flashes)
        assert not missing, f"{where}: {missing}:\n{term.text()}"


def visit(term: Terminal, label: str, keys: list[tuple[str, str]]) -> None:
    """Press each key, wait for the screen it opens (its breadcrumb or text) and, on a screen, for its title, key
    bar and status line (a screen is drawn in more than one frame: its breadcrumb can come before its status
    line), check it."""
    flashes: set[str] = set()  # the messages keys gave: one may still be up on the next screen
    for key, shows in keys:
        term.send(key)
        dialog = key in ("?", ":", "\x10", "M")
        term.wait(lambda s, shows=shows, dialog=dialog: shows in s and (
            dialog or not missing_chrome(s.splitlines(), shows, flashes)), what=repr(shows))
        check(term, f"{label}, after {key!r} ({shows})", chrome=not dialog, message=shows, flashes=flashes)
        flashes.add(term.lines()[-1].strip())
        if dialog:
            term.send(ESC)
            term.wait(lambda s, shows=shows: shows not in s, what=f"{shows!r} closed")


@pytest.mark.parametrize("colours", COLOURS)
@pytest.mark.parametrize(("cols", "rows"), SIZES, ids=[f"{c}x{r}" for c, r in SIZES])
def test_make_run_in_a_real_terminal(tmp_path, cols, rows, colours):
    """`db2vtop watch` with no config: Local first, then every screen and the dialogs."""
    home = tmp_path / "home"
    term = Terminal([*db2vtop(), "watch", "--store", str(tmp_path / "metrics.db")], cols, rows,
                    truecolor=colours == "truecolor", env=env_for(home), cwd=ROOT)
    label = f"watch {cols}x{rows} {colours}"
    try:
        term.wait(lambda s: "Local ›" in s and "busy" in s and "●" in s, 30, "the Local screen with data")
        check(term, f"{label}, first screen")
        visit(term, label, [("1", " Fleet "), ("3", " Findings "), ("4", "Local ›"),
                            ("2", "Fleet › stack "), ("?", "db2vtop keys"),
                            (":", "stack NAME  vm NAME"), ("M", "Add a benchmark marker"), ("1", " Fleet ")])
        term.send("\x03")  # ctrl+c, as the terminal sends it: quits like q
        assert term.exited(15) == 0
    finally:
        term.close()


@pytest.mark.parametrize("colours", COLOURS)
@pytest.mark.parametrize(("cols", "rows"), SIZES, ids=[f"{c}x{r}" for c, r in SIZES])
def test_replay_in_a_real_terminal(tmp_path, fleet, cols, rows, colours):
    """`db2vtop replay` of a recorded fleet: the Fleet first, then every screen and the dialogs."""
    store, config = fleet
    term = Terminal([*db2vtop(), "replay", "--store", str(store), "-c", str(config)], cols, rows,
                    truecolor=colours == "truecolor", env=env_for(tmp_path / "home"), cwd=ROOT)
    label = f"replay {cols}x{rows} {colours}"
    try:
        term.wait(lambda s: " Fleet " in s and "prod01" in s, 30, "the Fleet with data")
        check(term, f"{label}, first screen")
        visit(term, label, [("2", "stack prod01"), ("u", "u LUNs"), ("3", " Findings "), ("4", "Local ›"),
                            ("1", " Fleet "), ("?", "db2vtop keys"), (":", "stack NAME  vm NAME"),
                            ("\x10", "Search for commands"), ("2", "stack prod01"), ("1", " Fleet ")])
        term.send("q")
        assert term.exited(15) == 0
    finally:
        term.close()


# what a source could plant: an OSC title, clear screen, conceal, a C1 CSI (SGR red), a bidi override
EVIL = "\x1b]0;PWNED\x07\x1b[2JCLEARED\x1b[8mHIDDEN\u009b31mCONE\u202eBIDI"
PLANTED = [p.encode() for p in ("\x1b]0;PWNED", "\x1b[2JCLEARED", "\x1b[8mHIDDEN", "\u009b31mCONE", "\u202eBIDI")]


@dataclasses.dataclass(frozen=True)
class HostileFleet(Fleet):
    """The fleet, one VM's name (and so its findings' texts) carrying escape sequences."""

    def vm(self, i: int) -> str:
        return super().vm(i) + (EVIL if i == 3 else "")


def test_escapes_from_sources_never_reach_the_terminal(tmp_path):
    """A VM's name in a recorded store, a marker's name, a finding's evidence and a DB2 error text, each with
    escape sequences: the TUI's raw output holds none of them (before: the status line's marker name reached
    the terminal as it was, retitling it, clearing it and hiding text)."""
    fleet = HostileFleet()
    failed = [Sample(SELF_MEASUREMENT, {"collector": "prod03"}, {
        "duration_ms": 40.0, "samples": 0, "errors": 1, "skipped": 0, "status": "error",
        "last_error": "SQL30081N A communication error" + EVIL}, T0 + k * STEP_S * S)
        for k in range(fleet.steps)]  # a third DB2 collector, every cycle of it failed
    store = build_store(tmp_path / "fleet.db", fleet, failed,
                        [Annotation("marker", "r1" + EVIL, {"by": "cli"}, "", T0 + 5 * 60 * S)])
    term = Terminal([*db2vtop(), "replay", "--store", str(store), "-c", str(write_config(tmp_path / "stacks.toml"))],
                    160, 45, truecolor=True, env=env_for(tmp_path / "home"), cwd=ROOT)
    try:
        term.wait(lambda s: " Fleet " in s and "PWNED" in s, 30, "the Fleet with the planted names")
        for key, shows in (("3", " Findings "), ("2", "stack prod01"), ("1", " Fleet ")):
            term.send(key)
            term.wait_for(shows)
        term.send("q")
        assert term.exited(15) == 0
    finally:
        term.close()
    raw = bytes(term.raw)
    assert b"SQL30081N" in raw and b"CLEARED" in raw  # they were shown
    assert not [p for p in PLANTED if p in raw], [p for p in PLANTED if p in raw]


@pytest.mark.skipif(not hasattr(os, "openpty") or shutil.which("stty") is None, reason="needs a pty")
def test_the_harness_sees_text_in_its_own_background(tmp_path):
    """The check itself can fail: a line printed fg = bg is found, a normal one is not."""
    term = Terminal(["printf", "ok \\033[38;5;17;48;5;17mhidden\\033[0m \\033[38;2;1;2;3;48;2;1;2;3mtoo\\033[0m\\n"],
                    40, 5, truecolor=True)
    try:
        term.wait_for("too")
        assert "".join(c.char for c in invisible(term)) == "hiddentoo"
    finally:
        term.close()


def test_an_unreachable_vcenter_is_in_sight_with_its_reason_at_80x24(tmp_path):
    """A source that fails is a line of its own with the whole reason, and the Fleet counts it."""
    with socket.socket() as s:  # a port nothing listens on: the connection is refused
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config = tmp_path / "vc.toml"
    config.write_text(f'[[vcenter]]\nname = "vc1"\nurl = "https://127.0.0.1:{port}/sdk"\nuser = "monitor"\n'
                      'password_env = "VC1_PASSWORD"\nverify_tls = false\ninterval = "20s"\n')
    term = Terminal([*db2vtop(), "watch", "-c", str(config), "--store", str(tmp_path / "m.db")], 80, 24,
                    truecolor=False, env={**env_for(tmp_path / "home"), "VC1_PASSWORD": "secret"}, cwd=ROOT)
    try:
        screen = term.wait(lambda s: "1 source failing" in s and "✖ vsphere:vc1" in s, 40, "the failing vCenter")
        check(term, "watch with an unreachable vCenter")
        flat = " ".join(line.strip() for line in screen.splitlines())
        assert f"cannot reach https://127.0.0.1:{port}/sdk" in flat and "refused" in flat, screen
        term.send("4")  # Local shows it too
        screen = term.wait_for("Local ›")
        assert "✖ vsphere:vc1 error" in screen
    finally:
        term.close()
