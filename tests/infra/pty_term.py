"""A real terminal for the TUI's tests: the program runs in a pty, its bytes go through a VT emulator (pyte).

What a user sees is what the program wrote to the terminal, in the colours it asked for, after the
terminal applied every cursor move: Textual's headless pilot and its SVG snapshots render through a
different path (they never see the first frame's escape codes), so this is where colours equal to
their background, glyphs drawn past a border and text cut off are caught.
"""

from __future__ import annotations

import fcntl
import os
import signal
import struct
import subprocess
import termios
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import pyte
from pyte.graphics import FG_BG_256

# What the terminal shows for "default" and the 16 named colours (xterm's defaults).
DEFAULT_FG, DEFAULT_BG = "e5e5e5", "000000"
NAMED = {name: FG_BG_256[i] for i, name in enumerate(
    ("black", "red", "green", "brown", "blue", "magenta", "cyan", "white",
     "brightblack", "brightred", "brightgreen", "brightbrown", "brightblue", "brightmagenta", "brightcyan",
     "brightwhite"))}
NAMED["yellow"], NAMED["brightyellow"] = NAMED["brown"], NAMED["brightbrown"]
BLANK = {" ", "", "\u2800"}  # a space, the right half of a wide glyph, an empty braille cell


def colour(name: str, default: str) -> str:
    if name == "default":
        return default
    return NAMED.get(name, name).lower()


@dataclass(frozen=True)
class Cell:
    x: int
    y: int
    char: str
    fg: str
    bg: str


def _take_terminal() -> None:
    """In the child, after setsid(): its stdin, the pty, becomes the session's controlling terminal."""
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


class Terminal:
    """One program in a pty of `cols` x `rows`, its output kept on a pyte screen (read with `lines()`)."""

    def __init__(self, argv: Sequence[str], cols: int, rows: int, *, truecolor: bool, env: dict[str, str] | None = None,
                 cwd: Path | None = None):
        self.screen = pyte.Screen(cols, rows)
        self.stream = pyte.ByteStream(self.screen)
        self.lock = threading.Lock()
        self.raw = bytearray()
        master, slave = os.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
        base = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES", "COLORTERM", "NO_COLOR")}
        base.update(TERM="xterm-256color", **({"COLORTERM": "truecolor"} if truecolor else {}))
        # a session of its own whose controlling terminal is the pty, as a shell's foreground job: ^C, ^Z and ^\\
        # reach it as signals (unless the program turned them off, as a full-screen UI does)
        self.proc = subprocess.Popen(list(argv), stdin=slave, stdout=slave, stderr=slave, cwd=cwd,
                                     env={**base, **(env or {})}, start_new_session=True, close_fds=True,
                                     preexec_fn=_take_terminal)
        os.close(slave)
        self.master = master
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        while True:
            try:
                data = os.read(self.master, 65536)
            except OSError:
                return
            if not data:
                return
            with self.lock:
                self.raw += data
                self.stream.feed(data)

    def send(self, keys: str | bytes) -> None:
        os.write(self.master, keys.encode() if isinstance(keys, str) else keys)

    def resize(self, cols: int, rows: int) -> None:
        with self.lock:
            self.screen.resize(rows, cols)
        fcntl.ioctl(self.master, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
        os.killpg(self.proc.pid, signal.SIGWINCH)

    # --- reading the screen ----------------------------------------------------------------

    def lines(self) -> list[str]:
        with self.lock:
            return list(self.screen.display)

    def text(self) -> str:
        return "\n".join(self.lines())

    def cells(self) -> list[Cell]:
        """Every cell as the eye sees it: reverse video applied, "default" resolved."""
        out = []
        with self.lock:
            for y in range(self.screen.lines):
                row = self.screen.buffer[y]
                for x in range(self.screen.columns):
                    c = row[x]
                    fg, bg = colour(c.fg, DEFAULT_FG), colour(c.bg, DEFAULT_BG)
                    if c.reverse:
                        fg, bg = bg, fg
                    out.append(Cell(x, y, c.data, fg, bg))
        return out

    def wait(self, ready: Callable[[str], bool], timeout: float = 20.0, what: str = "") -> str:
        """The screen once `ready(text)` holds and the screen stopped changing for a moment."""
        deadline = time.monotonic() + timeout
        last, stable_since = None, time.monotonic()
        while True:
            text = self.text()
            if text != last:
                last, stable_since = text, time.monotonic()
            elif ready(text) and time.monotonic() - stable_since >= 0.3:
                return text
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what or ready}; the screen:\n{text}")
            if self.proc.poll() is not None and not self.reader.is_alive() and not ready(self.text()):
                raise AssertionError(f"the program exited ({self.proc.returncode}); the screen:\n{self.text()}")
            time.sleep(0.05)

    def wait_for(self, text: str, timeout: float = 20.0) -> str:
        return self.wait(lambda s: text in s, timeout, repr(text))

    def close(self, timeout: float = 10.0) -> int | None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout)
        self.reader.join(2)
        os.close(self.master)
        return self.proc.returncode

    def exited(self, timeout: float = 10.0) -> int:
        """Wait for the program to end by itself (a quit key)."""
        return self.proc.wait(timeout)

    def ended(self, timeout: float = 10.0) -> tuple[int, str]:
        """Wait for the program to end by itself and for the last of its output: its exit status and the screen."""
        status = self.exited(timeout)
        self.reader.join(5)
        return status, self.text()


# --- what a reader of the screen can check ------------------------------------------------------

def invisible(term: Terminal) -> list[Cell]:
    """Visible characters drawn in their own background colour."""
    return [c for c in term.cells() if c.char not in BLANK and c.fg == c.bg]


BOX = {"╭": "╮", "┌": "┐", "┏": "┓", "╔": "╗"}
SIDES = set("│┃║▎▊▌")


def broken_boxes(term: Terminal) -> list[str]:
    """Boxes whose sides are not where their corners are, and text drawn past a box's right side.

    A glyph the program counts one cell wide and the terminal two (or a line written past its
    widget) shifts the rest of the line: the box's right side moves or something appears after it.
    """
    lines = term.lines()
    problems = []
    for y, line in enumerate(lines):
        x = 0
        while x < len(line):
            corner = line[x]
            if corner not in BOX:
                x += 1
                continue
            right = line.find(BOX[corner], x + 1)
            if right < 0:
                problems.append(f"line {y}: box at column {x} has no top-right corner: {line!r}")
                break
            for yy in range(y + 1, len(lines)):
                row = lines[yy]
                if row[x] in "╰└┗╚":
                    if row[right] not in "╯┘┛╝" and any(row[c] in "╯┘┛╝" for c in range(right - 3, right + 4)
                                                        if 0 <= c < len(row)):
                        problems.append(f"line {yy}: the box from ({x},{y}) ends at a wrong column: {row!r}")
                    break
                if row[x] not in SIDES:
                    break  # something covers the box (a dialog, a toast): not this check's business
                moved = [c for c in range(max(x + 1, right - 3), min(len(row), right + 4))
                         if c != right and row[c] in SIDES]
                if row[right] not in SIDES and moved:  # (not there at all: a dialog or a toast covers it)
                    problems.append(f"line {yy}: the right side of the box from ({x},{y}) moved from column "
                                    f"{right} to {moved[0]}: {row!r}")
            x = right + 1
    return problems


def outside_boxes(term: Terminal) -> list[str]:
    """Text to the right of a box that spans the rest of the line (only a scrollbar may be there)."""
    problems = []
    lines = term.lines()
    for y, line in enumerate(lines):
        right = max(line.rfind("│"), line.rfind("╮"), line.rfind("╯"))
        if right < 0:
            continue
        rest = line[right + 1:]
        if rest.strip() and not set(rest.strip()) <= set("▁▂▃▄▅▆▇█▔ "):
            continue  # another widget beside the box
        if rest.strip() and right >= len(line) - 4:
            problems.append(f"line {y}: {rest.strip()!r} drawn past the box's right side: {line!r}")
    return problems


def contrast(fg: str, bg: str) -> float:
    """WCAG's contrast ratio of two colours as `cells()` gives them (hex): 1 (none) to 21 (black on white)."""
    def luminance(hex_colour: str) -> float:
        channels = [int(hex_colour[i:i + 2], 16) / 255 for i in (0, 2, 4)]
        r, g, b = (c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in channels)
        return 0.2126 * r + 0.7152 * g + 0.0722 * b

    high, low = sorted((luminance(fg), luminance(bg)), reverse=True)
    return (high + 0.05) / (low + 0.05)
