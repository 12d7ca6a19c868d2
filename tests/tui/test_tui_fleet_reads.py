"""The Fleet's reads at scale (a few fields per series, kept between moments, rows reused while nothing they were
made from changed, the screen under a Stack screen loaded at a paused moment) show what a fresh read shows."""

from __future__ import annotations

import gc
import shutil
import time
from datetime import datetime

import pytest

from db2vtop.agent.config import load_config
from db2vtop.agent.core.model import Sample
from db2vtop.agent.core.store import Store
from db2vtop.checks.thresholds import levels
from db2vtop.tui.app import Db2vtopApp
from db2vtop.tui.data import RECHECK_S, Reader, TableState
from db2vtop.tui.loaders import fleet as fleet_view
from db2vtop.tui.loaders.fleet import FINDING_COL, NAME_COL, FleetView, load_fleet
from db2vtop.tui.screens.fleet import FleetScreen
from db2vtop.tui.screens.stack import StackScreen
from db2vtop.tui.table import arrange, cell_text
from db2vtop.tui.timecursor import TimeCursor
from db2vtop.tui.widgets import TitleBar
from tests.infra.tui_fixture import STEP_S, T0, Fleet, build_store, write_config

S = 10**9
FLEET = Fleet(vms=12, hosts=3, stacks=2, minutes=40)  # chunks of two spans: moments in each, and across


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    d = tmp_path_factory.mktemp("fleet-reads")
    return build_store(d / "fleet.db", FLEET), load_config(write_config(d / "stacks.toml", FLEET)).stack


def table(view: FleetView, state: TableState) -> list[list[str]]:
    shown = arrange(view.model.rows, state.filter_text, state.sort_col, state.sort_reverse)
    return [[c.name for c in view.model.columns]] + [[cell_text(c) for c in r.cells] for r in shown]


def fresh(path, stacks, since: int, until: int, state: TableState) -> list[list[str]]:
    with Store(path) as store:
        return table(load_fleet(Reader(store), stacks, since, until, state, 16, levels(None)), state)


def test_every_moment_reads_as_a_fresh_reader_would(recorded, utc):
    """Forward a second at a time (a tick), across a sampling step and a chunk's span, back (a scrub), wider (a
    zoom), the same moment again, another sort, past the recording's end as its rows go stale: the one long-lived
    reader shows what a new one shows."""
    path, stacks = recorded
    clock = [0.0]
    rd = Reader(Store(path), clock=lambda: clock[0])
    end = FLEET.end_ns
    moments = [(end - 700 * S, 300), (end - 699 * S, 300), (end - 680 * S, 300), (end - 680 * S, 300),
               (T0 + 30 * 60 * S - 5 * S, 300), (T0 + 30 * 60 * S + 25 * S, 300), (end - 730 * S, 300),
               (end - 730 * S, 900), (end - 730 * S, 900), (end - 3 * STEP_S * S, 60),
               (end + 30 * S, 300), (end + 60 * S, 300), (end + 85 * S, 300), (end + 95 * S, 300)]  # going stale
    states = [TableState(), TableState(sort_col=3, sort_reverse=True, visible=(0, 8)), TableState(filter_text="app")]
    for k, (until, window) in enumerate(moments):
        state = states[k % len(states)] if k % 4 else states[0]
        rd.begin()
        view = load_fleet(rd, stacks, until - window * S, until, state, 16, levels(None))
        assert table(view, state) == fresh(path, stacks, until - window * S, until, state), (k, until - T0)
        clock[0] += 0.4 if k % 2 else RECHECK_S
    rd.source.close()


def test_a_row_written_late_at_a_paused_moment_is_shown_once_asked_again(recorded, tmp_path, utc):
    """Rows kept for a moment are not kept past a change: a late sample at the paused cursor replaces the VM's
    figures at the next load after RECHECK_S (the store says what moved), as a fresh reader has them."""
    src, stacks = recorded
    path = tmp_path / "copy.db"
    shutil.copyfile(src, path)  # the fixture's store was checkpointed whole into its file
    clock = [0.0]
    rd = Reader(Store(path), clock=lambda: clock[0])
    until = FLEET.end_ns - 300 * S + 10 * S  # between two samples: the late one comes after the last
    state = TableState()
    rd.begin()
    before = table(load_fleet(rd, stacks, until - 300 * S, until, state, 16, levels(None)), state)
    app5 = next(r for r in before if r[:2] == ["vm", "app0005"])
    with Store(path, writer=True) as w:
        w.write([Sample("vsphere_vm", {"vcenter": "vc1", "vm": "app0005", "host": FLEET.host(4), "cluster": "prod-cl"},
                        {"cpu_usage_pct": 99.5, "cpu_ready_pct": 42.5, "mem_balloon_bytes": 0}, until - S)])
    clock[0] += RECHECK_S
    rd.begin()
    after = table(load_fleet(rd, stacks, until - 300 * S, until, state, 16, levels(None)), state)
    assert after == fresh(path, stacks, until - 300 * S, until, state)
    row = next(r for r in after if r[:2] == ["vm", "app0005"])
    assert row != app5 and row[2:4] == ["99.5", "42.5"]
    rd.source.close()


@pytest.mark.parametrize(("sort", "at"), [(FINDING_COL, -700), (NAME_COL, -700), (FINDING_COL, 30),
                                         (NAME_COL, 95)])
def test_a_large_fleets_first_load_reads_the_rows_on_screen_first(recorded, monkeypatch, utc, sort, at):
    """Before the VMs' first whole read (a chunk of each of 10,000 series at a past moment), the rows on screen and
    the stacks' VMs alone are read: every row is there, the others' figures show `…`; the view's rest is the
    whole view, and the rows on screen were the same in both. In the chunks, in the head (after the recording's
    last sample), and once its rows are stale."""
    path, stacks = recorded
    large = fleet_view.STAGED_FROM
    monkeypatch.setattr(fleet_view, "STAGED_FROM", 1)  # the fixture's 12 VMs as a large fleet
    until, state = FLEET.end_ns + at * S, TableState(sort_col=sort, visible=(0, 6))
    rd = Reader(Store(path))
    asked: list[int] = []
    real = rd.source.latest_of

    def latest_of(series, *args, **kwargs):
        chosen = list(series)
        asked.extend(s.id for s in chosen if s.measurement == "vsphere_vm")
        return real(chosen, *args, **kwargs)

    rd.source.latest_of = latest_of
    rd.begin()
    first = load_fleet(rd, stacks, until - 300 * S, until, state, 16, levels(None))
    shown = table(first, state)
    assert first.rest is not None and first.counts == {"stack": 2, "vm": 12, "host": 3}
    on_screen = {row[1] for row in shown[1:7] if row[0] == "vm"} | {s.vm for s in stacks}
    assert {s.tags["vm"] for s in rd.series("vsphere_vm") if s.id in asked} == on_screen, \
        "the first load read other VMs than those on screen and the stacks'"
    assert not any("…" in cell for row in shown[1:7] for cell in row)
    assert all(row[2] == "…" for row in shown[7:] if row[0] == "vm" and row[1] not in on_screen)
    assert sum(row[2] == "…" for row in shown) == 12 - len(on_screen)
    rest = first.rest()
    monkeypatch.setattr(fleet_view, "STAGED_FROM", large)
    whole = fresh(path, stacks, until - 300 * S, until, state)
    assert rest.rest is None and table(rest, state) == whole
    assert shown[1:7] == whole[1:7]
    rd.source.close()


async def test_a_live_fleet_shown_first_on_screen_gets_its_whole_view(recorded, monkeypatch, utc):
    """The rows on screen first, then the whole view, though the live cursor's ticks ask for loads meanwhile (each
    would otherwise show the rows on screen first again, and the rest never)."""
    path, stacks = recorded
    monkeypatch.setattr(fleet_view, "STAGED_FROM", 1)
    shown: list[bool] = []  # whether each view shown had a rest to come
    real = FleetScreen.show_view
    monkeypatch.setattr(FleetScreen, "show_view", lambda screen, view: (shown.append(view.rest is not None),
                                                                          real(screen, view))[1])
    read_into = Reader.read_into  # a first load as slow as a large fleet's: the next tick comes during it
    monkeypatch.setattr(Reader, "read_into", lambda *args: (time.sleep(0.1), read_into(*args))[1])
    start = time.monotonic()
    app = Db2vtopApp(path, None, clock=lambda: FLEET.end_ns - 600 * S + int((time.monotonic() - start) * 1e9),
                     stacks=stacks, refresh_s=0.05)
    async with app.run_test(size=(170, 50)) as pilot:
        deadline = time.monotonic() + 20
        while False not in shown:
            assert time.monotonic() < deadline, f"no whole view of the Fleet: {shown}"
            await pilot.pause(0.02)
        assert shown[0]
        await pilot.press("q")


async def test_back_to_the_fleet_after_a_paused_stack_was_moved_shows_that_moment(recorded, utc):
    """A Stack screen paused and scrubbed, left alone: the Fleet under it is loaded at that moment meanwhile, and
    Esc shows it, as a fresh reader has it. (The garbage collector's thresholds, the app's while it runs, are
    Python's again after it.)"""
    path, stacks = recorded
    with Store(path) as s:
        first, last = s.time_range()
    cursor = TimeCursor(window_s=300.0, live=False, end_ns=last - 600 * S, first_ns=first, last_ns=last)
    app = Db2vtopApp(path, None, cursor=cursor, clock=lambda: last, stacks=stacks, refresh_s=0.2)
    threshold = gc.get_threshold()
    async with app.run_test(size=(170, 50)) as pilot:
        fleet = app.screen
        assert isinstance(fleet, FleetScreen)
        deadline = time.monotonic() + 20
        while fleet.view is None:
            assert time.monotonic() < deadline
            await pilot.pause(0.05)
        app.open_target(fleet.view.targets["stack:prod01"])
        await pilot.pause(0.1)
        stack = app.screen
        assert isinstance(stack, StackScreen)
        await pilot.press("left", "left")
        moment = (cursor.since(last), cursor.end(last))
        while not (stack.view is not None and stack.view.now_ns == moment[1] and fleet.loaded_at == moment):
            assert time.monotonic() < deadline, "the Fleet under the Stack screen was not loaded at its moment"
            await pilot.pause(0.05)
        await pilot.press("escape")
        assert app.screen is fleet
        while fleet.view.now_ns != moment[1]:
            assert time.monotonic() < deadline
            await pilot.pause(0.05)
        state = TableState.of(fleet.table)
        assert table(fleet.view, state) == fresh(path, stacks, *moment, state)
        shown = datetime.fromtimestamp(moment[1] / 1e9).strftime("%Y-%m-%d %H:%M:%S")
        assert fleet.query_one(TitleBar).text.startswith(shown), "the Fleet's title bar names another moment"
        while app._gc_threshold is None:  # settled: the loader runs the full garbage collections
            assert time.monotonic() < deadline
            await pilot.pause(0.05)
        assert gc.get_threshold()[2] > threshold[2]
        await pilot.press("q")
    assert gc.get_threshold() == threshold  # Python's own again once the app is gone
