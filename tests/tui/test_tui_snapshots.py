"""SVG snapshots of every screen from the recorded fleet (tests/infra/tui_fixture.py), with a frozen clock.

The cursor is fixed (a paused replay, 15 minutes ending 12:14 UTC: both benchmark
markers, the 12:03 guest gap, the 12:06-12:09 incident and the 12:10 DB2 reset are in
view), the time zone is UTC and the verdict is a fixed one (the cross-layer verdict is
the checks' code, tested there). Snapshots change with Textual's rendering: after a
deliberate Textual upgrade, regenerate them with `make snapshots` and review the diff.
"""

from __future__ import annotations

import asyncio

import pytest

from db2vtop.agent.config import load_config
from db2vtop.agent.core.store import Store
from db2vtop.checks.verdict import StackVerdict
from db2vtop.tui.app import Db2vtopApp
from db2vtop.tui.loaders import stack as stack_view
from db2vtop.tui.timecursor import TimeCursor
from tests.infra.tui_fixture import T0, build_store, write_config

S = 10**9
SIZE = (170, 50)


def _verdict(*_a) -> StackVerdict:
    return StackVerdict("prod01", "host", "log write 12 ms/IO ← VMDK write 11 ms ← host KAVG 9 ms, QUED 14 ← array "
                        "LUN 1.5 ms ⇒ queueing in the hypervisor", "high", samples=27)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    d = tmp_path_factory.mktemp("snap")
    return build_store(d / "fleet.db"), load_config(write_config(d / "stacks.toml")).stack


@pytest.fixture(autouse=True)
def frozen(utc, monkeypatch):
    monkeypatch.setattr(stack_view, "stack_verdict", _verdict)


def app_at(recorded, theme: str | None = None) -> Db2vtopApp:
    path, stacks = recorded
    with Store(path) as s:
        first, last = s.time_range()
    cursor = TimeCursor(window_s=900.0, live=False, end_ns=T0 + 14 * 60 * S, first_ns=first, last_ns=last)
    app = Db2vtopApp(path, None, cursor=cursor, clock=lambda: last, stacks=stacks, read_only=True,
                     store_label="fleet.db")
    if theme:
        app.theme = theme
    return app


def settled(*commands: str):
    """Run commands, then wait until the loader is idle and the screen shows its data."""
    async def run(pilot) -> None:
        app = pilot.app
        for command in commands:
            app.run_command(command)
            await pilot.pause()
        for _ in range(200):
            await pilot.pause(0.05)
            idle = all(w.is_finished for w in app.workers if w.group == "load")
            view = getattr(app.screen, "view", None)
            if idle and view is not None and getattr(view, "panel", None) in (None, getattr(app.screen, "panel", None)):
                await asyncio.sleep(0.1)
                if all(w.is_finished for w in app.workers if w.group == "load"):
                    return
        raise AssertionError("the screen did not settle")
    return run


def test_fleet(snap_compare, recorded):
    assert snap_compare(app_at(recorded), terminal_size=SIZE, run_before=settled())


def test_stack_cpu_panel(snap_compare, recorded):
    assert snap_compare(app_at(recorded), terminal_size=SIZE, run_before=settled("stack prod01"))


def panel(letter: str):
    async def run(pilot) -> None:
        await settled("stack prod01")(pilot)
        await pilot.press(letter)
        await settled()(pilot)
    return run


def test_stack_lun_waterfall(snap_compare, recorded):
    assert snap_compare(app_at(recorded), terminal_size=SIZE, run_before=panel("u"))


def test_stack_tablespaces_16_colours(snap_compare, recorded):
    assert snap_compare(app_at(recorded, theme="ansi-dark"), terminal_size=SIZE, run_before=panel("t"))


def test_findings(snap_compare, recorded):
    assert snap_compare(app_at(recorded), terminal_size=SIZE, run_before=settled("findings"))


def test_local(snap_compare, recorded):
    assert snap_compare(app_at(recorded), terminal_size=SIZE, run_before=settled("local"))


def test_help(snap_compare, recorded):
    async def run(pilot) -> None:
        await settled("stack prod01")(pilot)
        await pilot.press("question_mark")
        await pilot.pause(0.2)
    assert snap_compare(app_at(recorded), terminal_size=SIZE, run_before=run)
