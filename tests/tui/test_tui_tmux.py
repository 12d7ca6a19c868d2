"""Smoke test of the real program: `db2vtop replay` in tmux, keys in, the screen read back."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

from tests.infra.tui_fixture import build_store, write_config

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is installed by make test-deps")
ROOT = Path(__file__).resolve().parents[2]


def test_replay_in_a_terminal(tmux, tmp_path):
    store = build_store(tmp_path / "fleet.db")
    config = write_config(tmp_path / "stacks.toml")
    command = (f"cd {ROOT} && env -u COLUMNS -u LINES TZ=UTC {sys.executable} -m db2vtop.agent replay --store {store} "
               f"-c {config}; echo EXITED $?; sleep 30")  # COLUMNS/LINES from pytest would fix the size at 80x24
    tmux.run("new-session", "-d", "-s", "tui", "-x", "170", "-y", "50", "-e", f"HOME={os.environ['HOME']}", command)

    screen = tmux.wait_for("2 stacks · 6 vms · 2 hosts")
    assert "db2vtop — 2024-05-01 12:05:00 · paused · window 5m · replay · read-only" in screen
    tmux.keys(":")
    tmux.wait_for("stack NAME  vm NAME")  # the command line's placeholder
    tmux.keys("stack prod01", "Enter")
    screen = tmux.wait_for("VM db2prod01 on esx01.lab")
    assert "Fleet › stack prod01 › c CPU" in screen and "DB2 prod01/PROD" in screen
    tmux.keys(":")
    tmux.wait_for("stack NAME  vm NAME")
    tmux.keys("goto 12:08", "Enter")
    tmux.wait_for("2024-05-01 12:08:00")
    tmux.wait_for("KAVG 9.05 ms")
    tmux.keys("u")
    screen = tmux.wait_for("netapp1:/vol/db2v0/lun0")
    assert "Fleet › stack prod01 › u LUNs" in screen
    tmux.keys("-")
    tmux.wait_for("window 15m")
    tmux.keys("Left")
    tmux.wait_for("2024-05-01 12:06:30")
    tmux.keys("Escape")
    tmux.wait_for("2 stacks · 6 vms · 2 hosts")
    tmux.keys("3")
    tmux.wait_for("disk-queue-saturation")
    tmux.keys("M")
    tmux.wait_for("read-only: markers are off")
    tmux.keys("q")
    tmux.wait_for("EXITED 0")
