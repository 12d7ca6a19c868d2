"""A tmux server of a test's own, to drive the real program in a terminal and read the screen back."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path


class Tmux:
    """One tmux server of our own (its own socket), killed at the end whatever happens."""

    def __init__(self, tmp: Path):
        self.socket = str(tmp / "tmux.sock")

    def run(self, *args: str) -> str:
        return subprocess.run(["tmux", "-S", self.socket, *args], capture_output=True, text=True, check=True,
                              timeout=10).stdout

    def screen(self) -> str:
        return self.run("capture-pane", "-p", "-t", "tui")

    def keys(self, *keys: str) -> None:
        self.run("send-keys", "-t", "tui", *keys)

    def wait_for(self, text: str, timeout: float = 15.0) -> str:
        """The screen once it shows `text` and has stopped changing (a capture can catch a frame half drawn)."""
        deadline = time.monotonic() + timeout
        last = None
        while True:
            screen = self.screen()
            if text in screen and screen == last:
                return screen
            assert time.monotonic() < deadline, f"{text!r} never appeared; the screen:\n{screen}"
            last = screen
            time.sleep(0.1)

    def kill(self) -> None:
        subprocess.run(["tmux", "-S", self.socket, "kill-server"], capture_output=True, timeout=10)
