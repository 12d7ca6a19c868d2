"""What esxtop, htop and k9s users press first, one pilot test per habit (issue: "The TUI as people meet it")."""

from __future__ import annotations

import contextlib
import json

import pytest
from textual.widgets import Input, SelectionList

from db2vtop.agent.config import load_config
from db2vtop.agent.core.paths import state_dir
from db2vtop.agent.core.store import Store
from db2vtop.tui.app import Db2vtopApp
from db2vtop.tui.screens.dialogs import CommandBar, FieldChooser
from db2vtop.tui.screens.fleet import FleetScreen
from db2vtop.tui.screens.local import LocalScreen
from db2vtop.tui.screens.stack import StackScreen
from db2vtop.tui.timecursor import TimeCursor
from db2vtop.tui.widgets import KeyBar
from tests.infra.tui_fixture import build_store, write_config
from tests.tui.test_tui import replay, wait_for

S = 10**9


@pytest.fixture(scope="module")
def fleet_store(tmp_path_factory):
    d = tmp_path_factory.mktemp("habits")
    return build_store(d / "fleet.db"), load_config(write_config(d / "stacks.toml")).stack


def key_bar(app) -> str:
    return str(app.screen.query_one(KeyBar).content)


@contextlib.asynccontextmanager
async def on_the_fleet(app, size: tuple[int, int] = (120, 40)):
    """`app` run headless at `size` (columns, rows), its Fleet loaded: (the app, the pilot, the Fleet screen)."""
    async with app.run_test(size=size) as pilot:
        fleet = app.screen
        assert isinstance(fleet, FleetScreen)
        await wait_for(pilot, lambda: fleet.view is not None)
        yield app, pilot, fleet


async def test_ctrl_c_quits_like_q(fleet_store):
    async with on_the_fleet(replay(*fleet_store)) as (app, pilot, _):
        await pilot.press("ctrl+c")
        await pilot.pause()
    assert app.return_code == 0
    async with on_the_fleet(replay(*fleet_store)) as (app, pilot, _):  # also from the `:` bar, where ctrl+c would copy
        await pilot.press("colon", "ctrl+c")
        await pilot.pause()
    assert app.return_code == 0


async def test_tab_completes_in_the_command_bar(fleet_store):
    async with on_the_fleet(replay(*fleet_store)) as (app, pilot, _):
        await pilot.press("colon")
        assert isinstance(app.screen, CommandBar)
        line = app.screen.query_one(Input)
        await pilot.press("z", "o", "tab")
        assert line.value == "zoom "
        await pilot.press("1", "h")  # `zoom 1h`: typed in full, tab leaves it be
        await pilot.press("tab", "enter")
        assert app.cursor.window_s == 3600
        await pilot.press("colon", *"st", "tab")
        assert app.screen.query_one(Input).value == "stack "
        await pilot.press(*"prod02"[:5], "tab")  # a stack's name completes too
        assert app.screen.query_one(Input).value == "stack prod01"
        await pilot.press("escape")


async def test_unknown_vm_host_and_guest_names_are_an_error_with_the_closest_names(fleet_store):
    async with on_the_fleet(replay(*fleet_store)) as (app, pilot, fleet):
        with pytest.raises(ValueError, match=r"no VM 'db2prod1'; did you mean db2prod01, db2prod02\?"):
            app.run_command("vm db2prod1")
        with pytest.raises(ValueError, match=r"no host 'esx0'; did you mean esx01.lab, esx02.lab\?"):
            app.run_command("host esx0")
        with pytest.raises(ValueError, match=r"no guest 'nosuch'; guests: db2prod01, db2prod02"):
            app.run_command("guest nosuch")
        with pytest.raises(ValueError, match=r"no guest 'x'"):
            app.run_command("local x")
        assert app.screen is fleet  # no empty screen was opened
        await pilot.press("colon", *"vm appp0004", "enter")  # typed in the bar: said on the key bar's line
        await pilot.pause()
        assert app.screen is fleet and "no VM 'appp0004'; did you mean app0004" in key_bar(app)
        app.run_command("vm app0004")  # a real one opens; a unique prefix does too
        await pilot.pause()
        assert isinstance(app.screen, StackScreen) and app.screen.target.name == "app0004"
        with pytest.raises(ValueError, match="did you mean db2prod01, db2prod02"):
            app.run_command("guest db2prod0")  # two start so: ambiguous
        app.run_command("guest db2prod02")
        await pilot.pause()
        assert isinstance(app.screen, LocalScreen) and app.screen.guest == "db2prod02"


async def test_home_in_watch_goes_to_the_stores_first_sample(fleet_store):
    path, stacks = fleet_store
    with Store(path) as s:
        first, last = s.time_range()
    # watch: live, no bounds given
    async with on_the_fleet(Db2vtopApp(path, None, clock=lambda: last + 3600 * S, stacks=stacks)) as (app, pilot, _):
        assert app.cursor.live
        await pilot.press("-", "home")  # window 15m, then its start
        assert not app.cursor.live and app.cursor.end_ns == first + 900 * S
        assert "12:15:00 · paused" in app.status_title
        app.run_command("goto 2024-05-01 11:00")  # before the recording: its start, not an empty screen
        assert app.cursor.end_ns == first
        await pilot.press("space")  # watch: space resumes live
        assert app.cursor.live


async def test_esc_clears_a_kept_filter_on_every_table(fleet_store):
    async with on_the_fleet(replay(*fleet_store)) as (app, pilot, _):
        await pilot.press("3")
        findings = app.screen
        await pilot.press("slash", *"cpu", "enter")
        assert findings.table.filter_text == "cpu"
        await pilot.press("escape")
        assert findings.table.filter_text == "" and app.screen is findings
        app.run_command("filter ready")
        assert findings.table.filter_text == "ready"
        await pilot.press("escape")
        assert findings.table.filter_text == ""


async def test_esxtop_sort_letters_on_the_fleet(fleet_store):
    async with on_the_fleet(replay(*fleet_store), (160, 45)) as (_, pilot, fleet):
        names = [c.name.split(" ≤")[0] for c in fleet.table.model.columns]
        for letter, column in (("R", "rdy%"), ("U", "cpu%"), ("B", "balloon"), ("L", "I/O ms"), ("N", "name")):
            await pilot.press(letter)
            assert fleet.table.sort_col == names.index(column), letter
        await pilot.press("R")
        assert fleet.table.sort_reverse and fleet.table.shown[0].key == "vm:app0004"  # the VM waiting for CPU
        await pilot.press("R")  # again: the other way round
        assert not fleet.table.sort_reverse and fleet.table.shown[0].key != "vm:app0004"


async def test_the_field_chooser_hides_columns_and_remembers_them(fleet_store):
    async with on_the_fleet(replay(*fleet_store)) as (app, pilot, fleet):
        await pilot.press("f")
        assert isinstance(app.screen, FieldChooser)
        chooser = app.screen.query_one(SelectionList)
        for value in ("TPS", "log ms"):
            chooser.deselect(value)
        await pilot.press("escape")
        assert fleet.table.hidden == {"TPS", "log ms"}
        header = "".join(s.text for s in fleet.table.render_line(0))
        assert "TPS" not in header and "log ms" not in header and "cpu%" in header
    assert set(json.loads((state_dir() / "tui.json").read_text())["fleet"]["hidden"]) == {"TPS", "log ms"}
    async with on_the_fleet(replay(*fleet_store)) as (app, pilot, fleet):  # another day, another run: the same columns
        assert fleet.table.hidden == {"TPS", "log ms"}


async def test_one_message_at_a_time_on_the_key_bar_never_over_the_table(fleet_store):
    async with on_the_fleet(replay(*fleet_store, read_only=True)) as (app, pilot, _):
        app.notify("first message", timeout=60)
        app.notify("second message", severity="error", timeout=60)
        await pilot.pause()
        assert not app._notifications  # no toast drawn over the screen
        assert "second message" in key_bar(app) and "first message" not in key_bar(app)
        app.notify("a short one", timeout=0.3)
        await wait_for(pilot, lambda: "Quit" in key_bar(app))  # the keys come back once it is over
        await pilot.press("M")  # read-only: said on the same line
        assert "read-only: markers are off" in key_bar(app)


async def test_replay_speeds_and_play_stops_at_the_end(fleet_store):
    path, stacks = fleet_store
    with Store(path) as s:
        first, last = s.time_range()
    async with on_the_fleet(Db2vtopApp(path, None, cursor=TimeCursor.replay(first, last), stacks=stacks,
                                       read_only=True, refresh_s=0.05)) as (app, pilot, _):
        await pilot.press("greater_than_sign", "greater_than_sign")
        assert app.cursor.speed == 60 and "replay at 60×" in key_bar(app)
        await pilot.press("end", "space")  # at the end: plays again from the start
        assert app.cursor.playing and app.cursor.end_ns < first + 600 * S
        await wait_for(pilot, lambda: "playing 60×" in app.status_title)
        await wait_for(pilot, lambda: not app.cursor.playing, timeout=20)  # 15 minutes at 60x: 15 s at most
        assert app.cursor.end_ns == last and not app.cursor.live and "paused" in app.status_title
        await pilot.press("less_than_sign", "less_than_sign")
        assert app.cursor.speed == 1
        app.run_command("speed 10x")
        assert app.cursor.speed == 10
        with pytest.raises(ValueError, match="speed is one of 1x, 10x, 60x"):
            app.run_command("speed 3x")
    for timer in (app._tick, app._prefetch, app._settle):  # one that fires while the app tears its screens down
        timer()  # does nothing (the tick's title crashed a CI run)



async def test_stack_charts_take_the_terminals_height_and_layers_without_data_fold(fleet_store):
    async with on_the_fleet(replay(*fleet_store), (160, 45)) as (app, pilot, _):
        app.run_command("stack prod01")
        await wait_for(pilot, lambda: isinstance(app.screen, StackScreen) and app.screen.view is not None)
        stack = app.screen
        # the block grew to what the screen has, and the view drawn for that size is shown (a resize
        # asks for a fresh load, so a view of an earlier layout can be up for a moment)
        await wait_for(pilot, lambda: stack.geometry().height > 21
                       and len(stack.view.block) == stack.geometry().height)
        lines = ["".join(s.text for s in strip) for strip in stack.view.block]
        assert stack.geometry().chart_rows(5, False) >= 4
        assert not any("no data in the window" in line for line in lines)
        app.run_command("vm app0003")  # a VM without DB2, guest or array data
        await wait_for(pilot, lambda: app.screen is not stack and getattr(app.screen, "view", None) is not None)
        vm = app.screen
        await wait_for(pilot, lambda: any("no data in the window" in "".join(s.text for s in strip)
                                          for strip in vm.view.block))
        lines = ["".join(s.text for s in strip) for strip in vm.view.block]
        folded = [line.strip() for line in lines if "in the window" in line]
        assert folded == ["DB2 · Guest · Storage  no data in the window"]
        titles = [line for line in lines if line.startswith(" VM ") or line.startswith(" Host ")]
        assert len(titles) == 2 and vm.geometry().chart_rows(2, True) >= 8  # two layers share the height
