"""A screen is registered once (tui/commands.py SCREENS): its number key, its mode and its `:` verb follow."""

from __future__ import annotations

from db2vtop.tui import commands
from db2vtop.tui.app import SCREENS, Db2vtopApp
from db2vtop.tui.screens.fleet import FleetScreen
from db2vtop.tui.screens.local import LocalScreen


def test_the_modes_keys_and_help_are_the_registry():
    assert {s.name: s.screen for s in commands.SCREENS if s.screen is not None} == Db2vtopApp.MODES
    assert {s.key: s.name for s in commands.SCREENS} == SCREENS
    bound = {b.key: b.action for b in commands.bindings()}
    assert all(bound[s.key] == f"screen('{s.name}')" for s in commands.SCREENS)
    assert dict(commands.key_help())["1 2 3 4"] == "Fleet, Stack (the last one opened), Findings, Local"


async def test_a_screens_verb_needs_no_method_of_its_own(tmp_path):
    assert not hasattr(Db2vtopApp, "_cmd_fleet")  # `:fleet` is the registry's
    app = Db2vtopApp(tmp_path / "empty.db", None)
    async with app.run_test() as pilot:
        assert isinstance(app.screen, LocalScreen)
        app.run_command("fleet")
        await pilot.pause()
        assert isinstance(app.screen, FleetScreen)
        await pilot.press("q")
