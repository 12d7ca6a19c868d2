"""The TUI driven by Textual's pilot against real stores: keys, screens, time travel, markers."""

from __future__ import annotations

import gc
import io
import socket
import time
from pathlib import Path

import pytest
from rich.console import Console
from textual.widgets import Input, Static

from db2vtop.agent.config import Config, load_config
from db2vtop.agent.core.config import StackConfig
from db2vtop.agent.core.model import Annotation, Fact, Finding, Sample
from db2vtop.agent.core.runs import BEGIN, END, edge_marker
from db2vtop.agent.core.store import Store, StoreWriter
from db2vtop.agent.core.supervise import Supervisor
from db2vtop.agent.runtime import Runtime
from db2vtop.checks.topology import infer_stacks, resolve
from db2vtop.checks.verdict import StackVerdict
from db2vtop.collectors.base import BaseCollector
from db2vtop.collectors.guest.config import GuestConfig
from db2vtop.collectors.guest.local import LocalGuestCollector
from db2vtop.collectors.markers import MarkerInbox
from db2vtop.collectors.selfmon import SelfCollector
from db2vtop.tui.app import SCREENS, Db2vtopApp
from db2vtop.tui.data import Reader
from db2vtop.tui.loaders import stack as stack_view
from db2vtop.tui.screens.dialogs import CommandBar, HelpScreen, MarkerPrompt
from db2vtop.tui.screens.findings import FindingsScreen
from db2vtop.tui.screens.fleet import FleetScreen
from db2vtop.tui.screens.local import LocalScreen
from db2vtop.tui.screens.stack import StackScreen
from db2vtop.tui.stacks import Target
from db2vtop.tui.table import GridTable, cell_text
from db2vtop.tui.timecursor import TimeCursor
from db2vtop.tui.widgets import FilterBar, StatusLine, StripView
from tests.infra.tui_fixture import T0, Fleet, build_store, write_config


def shown(screen, width: int = 100, of: type[Static] = Static) -> str:
    """The text of a screen's static widgets (those `of` a kind) as a terminal of `width` columns would lay it out."""
    console = Console(width=width, file=io.StringIO(), record=True, color_system=None)
    for w in screen.query(of):
        console.print(w.content)
    return console.export_text()

S = 10**9
INCIDENT = T0 + 8 * 60 * S  # the fixture's stack prod01 is queueing in the host from 12:06 to 12:09


async def wait_for(pilot, predicate, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached"
        await pilot.pause(0.05)


def local(app) -> LocalScreen:
    assert isinstance(app.screen, LocalScreen)
    return app.screen


def text(app, selector: str) -> str:
    return str(app.screen.query_one(selector, Static).render())


def rows(table: GridTable) -> list[list[str]]:
    return [[cell_text(c) for c in r.cells] for r in table.shown]


def history(path, now, minutes=10, guest="db2prod01", step_s=5):
    with Store(path, writer=True) as w:
        n = minutes * 60 // step_s
        w.write([Sample("guest_cpu", {"guest": guest, "cpu": "total"},
                        {"busy_pct": float(i % 100), "idle_pct": 100.0 - i % 100, "load1": 1.5},
                        now - (n - i) * step_s * S) for i in range(n)]
                + [Sample("guest_disk", {"guest": guest, "device": "sdb", "type": "disk"},
                          {"util_pct": 99.0, "write_await_ms": 12.5}, now - (n - i) * step_s * S) for i in range(n)])


@pytest.fixture(scope="module")
def fleet_store(tmp_path_factory) -> tuple[Path, list[StackConfig]]:
    """The recorded fleet: 2 DB2 stacks, 6 VMs on 2 hosts, an array, 15 minutes from 12:00 UTC."""
    d = tmp_path_factory.mktemp("fleet")
    path = build_store(d / "fleet.db")
    return path, load_config(write_config(d / "stacks.toml")).stack


def replay(path: Path, stacks=None, at: int = INCIDENT, **kw) -> Db2vtopApp:
    with Store(path) as s:
        first, last = s.time_range()
    cursor = TimeCursor(window_s=300.0, live=False, end_ns=at, first_ns=first, last_ns=last)
    return Db2vtopApp(path, None, cursor=cursor, clock=lambda: last, stacks=stacks, refresh_s=0.2,
                      store_label=path.name, **kw)


# --- Local: this machine, live -------------------------------------------------------------


class _FarFuture(BaseCollector):
    """A source whose clock is off by centuries: every sample it gives is set aside at the boundary."""

    async def collect(self) -> list:
        return [Sample("guest_cpu", {"guest": "clocky", "cpu": "total"}, {"busy_pct": 1.0}, 10**30)]


async def test_the_agents_threads_in_trouble_show_in_the_status_line(store_path):
    """Set-aside records and a thread retrying (db2vtop_thread, written by the self collector) are in the
    status line, next to the collectors' cycles."""
    sup = Supervisor()
    writer = StoreWriter(store_path, 86400, supervisor=sup)
    rt = Runtime([SelfCollector(0.5), _FarFuture("clocky", 0.5)], [writer], supervisor=sup)
    sup.retrying("influx-spool", "cannot write the spool /var/lib/db2vtop/spool: No space left on device")
    app = Db2vtopApp(store_path, rt, refresh_s=0.2)
    def status() -> str:  # the line, and under it a line for each thread in trouble
        shown = app.screen.query_one("#status", Static).content
        return "\n".join(str(r) for r in getattr(shown, "renderables", [shown]))

    async with app.run_test(size=(200, 45)) as pilot:
        await wait_for(pilot, lambda: "set aside" in status() and "influx-spool" in status())
        status = status()
        assert "clocky ok" in status and "set aside" in status.split("clocky", 1)[1]
        assert "influx-spool retrying: cannot write the spool" in status  # its reason on a line of its own
        await pilot.press("q")
    writer.close()
    with Store(store_path) as s:
        assert not [r for r in s.rows("guest_cpu", 0) if r.tags.get("guest") == "clocky"]


async def test_collects_in_process_and_every_key_works(store_path):
    writer = StoreWriter(store_path, 86400)
    rt = Runtime([SelfCollector(1.0), LocalGuestCollector(GuestConfig(interval=0.5))], [writer])
    app = Db2vtopApp(store_path, rt, refresh_s=0.2)
    async with app.run_test(size=(140, 45)) as pilot:
        await wait_for(pilot, lambda: local(app).view is not None and local(app).view.cpu and local(app).view.nets)
        view = local(app).view
        assert view.guest == socket.gethostname()
        assert "busy" in text(app, "#cpu-summary")
        assert app.screen.query_one("#net-table", GridTable).model.rows
        status = text(app, "#status")
        assert "guest ok" in status and "self ok" in status
        assert "collecting" in app.status_title and "live" in app.status_title

        await pilot.press("space")
        assert not app.cursor.live and "paused" in app.status_title
        await pilot.press("left")
        assert "paused" in app.status_title and app.cursor.end_ns < time.time_ns() - 20 * S
        await pilot.press("end")
        assert app.cursor.live and " live " in app.status_title
        await pilot.press("minus")
        assert app.cursor.window_s == 900.0 and "window 15m" in app.status_title
        await pilot.press("plus", "plus")
        assert app.cursor.window_s == 60.0
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        await pilot.press("escape")
        await pilot.press("3")
        assert isinstance(app.screen, FindingsScreen)
        await pilot.press("4")
        assert isinstance(app.screen, LocalScreen)
        await pilot.press("M")
        assert isinstance(app.screen, MarkerPrompt)
        app.screen.query_one(Input).value = "run 1 start"
        await pilot.press("enter")
        writer.flush()
        await wait_for(pilot, lambda: any(m.name == "run 1 start" for m in (local(app).view.markers or [])))
        assert "▼ run 1 start" in text(app, "#status")
        await pilot.press("q")
    assert rt.stats["guest"].cycles >= 1
    writer.close()
    with Store(store_path) as s:
        assert [(a.event, a.name, a.tags) for a in s.annotations()] == [("marker", "run 1 start", {"by": "tui"})]


async def test_attached_to_an_agent_shows_its_data_and_queues_markers_for_it(store_path):
    now = time.time_ns()
    history(store_path, now, minutes=1)
    writer = StoreWriter(store_path, 86400)  # the agent
    inbox = MarkerInbox(store_path)
    app = Db2vtopApp(store_path, None, refresh_s=0.2)
    async with app.run_test(size=(140, 45)) as pilot:
        await wait_for(pilot, lambda: local(app).view is not None and local(app).view.disks)
        assert local(app).view.guest == "db2prod01" and "attached" in app.status_title
        (row,) = rows(app.screen.query_one("#disk-table", GridTable))
        assert row[0] == "sdb" and row[9] == "99.0"
        assert local(app).view.interval_s == 5.0 and not local(app).view.stale
        await pilot.press("M")
        app.screen.query_one(Input).value = "attached marker"
        await pilot.press("enter")
        await pilot.press("q")
    (queued,) = await inbox.collect()  # what the agent's inbox collector picks up
    assert isinstance(queued, Annotation) and queued.name == "attached marker"
    assert await inbox.collect() == []
    writer.close()


async def test_a_benchmark_run_is_a_span_on_the_local_time_axis(store_path):
    now = time.time_ns()
    history(store_path, now)
    with Store(store_path, writer=True) as w:
        w.write(annotations=[edge_marker("tpcc", BEGIN, ts=now - 200 * S), edge_marker("tpcc", END, ts=now - 80 * S)])
    app = Db2vtopApp(store_path, None, refresh_s=0.2)
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(pilot, lambda: local(app).view is not None and local(app).view.cpu)
        assert local(app).view.runs == [(now - 200 * S, now - 80 * S)]
        axis = app.screen.query_one("#cpu-axis", StripView).strips[0].text
        assert axis.count("▼") == 2 and axis.count("━") >= 5
        assert axis.index("▼") < axis.index("━") < axis.rindex("━") < axis.rindex("▼")
        await pilot.press("q")


async def test_old_data_is_shown_as_stale(store_path):
    history(store_path, time.time_ns() - 600 * S, minutes=1)
    app = Db2vtopApp(store_path, None, refresh_s=0.2)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("minus")  # 15 minutes: the old samples are in the window
        await wait_for(pilot, lambda: local(app).view is not None and local(app).view.cpu)
        assert local(app).view.stale
        assert "STALE" in str(app.screen.query_one("#cpu").border_title)
        await pilot.press("q")


async def test_a_missing_store_is_reported_on_screen(tmp_path):
    app = Db2vtopApp(tmp_path / "nowhere.db", None, refresh_s=0.2)
    async with app.run_test() as pilot:
        await wait_for(pilot, lambda: "no store at" in text(app, "#status"))
        await pilot.press("q")


# --- replay and time travel ----------------------------------------------------------------


async def test_replay_opens_at_the_start_and_plays_scrubs_and_marks(store_path):
    now = time.time_ns()
    history(store_path, now, minutes=30)
    with Store(store_path) as s:
        first, last = s.time_range()
    app = Db2vtopApp(store_path, None, cursor=TimeCursor.replay(first, last), refresh_s=0.2)
    async with app.run_test(size=(140, 45)) as pilot:
        await wait_for(pilot, lambda: local(app).view is not None and local(app).view.cpu)
        assert "replay" in app.status_title and "paused" in app.status_title
        assert app.cursor.end(now) == first + 300 * S
        assert len(local(app).view.cpu_history) == 61  # the first five minutes
        await pilot.press("right")
        assert app.cursor.end(now) == first + 330 * S
        await pilot.press("space")
        assert app.cursor.playing
        await pilot.pause(0.5)
        assert app.cursor.end(now) > first + 330 * S
        await pilot.press("space")
        await pilot.press("end")
        assert app.cursor.end(now) == last and not app.cursor.live  # a replay's end, not the wall clock
        await pilot.press("home")
        assert app.cursor.end(now) == first + 300 * S
        await pilot.press("M")
        app.screen.query_one(Input).value = "replay note"
        await pilot.press("enter")
        await pilot.press("q")
    with Store(store_path) as s:  # nobody writes this store: the marker went straight in
        (m,) = s.annotations()
    assert (m.name, m.ts) == ("replay note", first + 300 * S)


async def test_read_only_refuses_markers(store_path):
    history(store_path, time.time_ns(), minutes=1)
    app = replay(store_path, at=time.time_ns(), read_only=True)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("M")
        assert not isinstance(app.screen, MarkerPrompt) and "read-only" in app.status_title
        app.run_command("mark sneaky")
        await pilot.press("q")
    with Store(store_path) as s:
        assert s.annotations() == []


# --- Fleet, Stack, panels, navigation --------------------------------------------------------


async def test_fleet_is_the_start_with_several_stacks_sorts_filters_and_drills_down(fleet_store, utc):
    path, stacks = fleet_store
    app = replay(path, stacks)
    async with app.run_test(size=(170, 50)) as pilot:
        fleet = app.screen
        assert isinstance(fleet, FleetScreen)
        await wait_for(pilot, lambda: fleet.view is not None)
        table = fleet.table
        assert len(table.shown) == 2 + 6 + 2  # stacks, VMs, hosts
        first = rows(table)[0]  # worst first: the host with a critical finding or the noisy VM
        names = [c.name for c in table.model.columns]
        assert names[:8] == ["kind", "name", "cpu%", "rdy%", "balloon", "I/O ms", "log ms", "TPS"]  # numbers first
        assert first[names.index("worst open finding")].startswith("CRIT")
        prod01 = next(r for r in rows(table) if r[:2] == ["stack", "prod01"])
        assert prod01[-1] == "db2prod01/esx01.lab" and float(prod01[6]) > 10  # log write ms in the incident
        assert "2 stacks · 6 vms · 2 hosts" in text(app, "#fleet-summary")
        assert "Fleet" in text(app, "#crumbs")

        await pilot.press("s")  # the next column after the finding: where
        assert table.sort_col == names.index("where")
        await pilot.press("S")
        assert table.sort_reverse
        await pilot.press("slash")
        assert isinstance(app.focused, FilterBar)
        await pilot.press(*"esx01")
        assert {r.key for r in table.shown} == {"stack:prod01", "vm:db2prod01", "vm:app0003", "vm:app0005",
                                                "host:esx01.lab"}
        assert "filter /esx01" in text(app, "#crumbs")
        await pilot.press("enter")  # keep the filter, back to the table
        assert app.focused is table and table.filter_text == "esx01"
        await pilot.press("escape")  # Esc clears a kept filter (k9s), before it would go back
        assert table.filter_text == "" and len(table.shown) == 10 and "filter" not in text(app, "#crumbs")
        await pilot.press("escape")  # Esc on the Fleet: nothing to clear, nowhere to go back to
        assert app.screen is fleet
        await pilot.press("slash", *"esx", "escape")  # Esc in the filter clears it
        assert table.filter_text == "" and len(table.shown) == 10

        table.move_cursor(next(i for i, r in enumerate(table.shown) if r.key == "stack:prod01"))
        await pilot.press("enter")
        stack = app.screen
        assert isinstance(stack, StackScreen) and stack.target.name == "prod01"
        await wait_for(pilot, lambda: stack.view is not None)
        assert text(app, "#crumbs").startswith("Fleet › stack prod01 › c CPU")
        await pilot.press("escape")
        assert app.screen is fleet
        await pilot.press("q")


async def test_other_screens_are_composed_ahead_and_switched_to_without_holding_frames(fleet_store, utc):
    """Once the first view is up the app composes the other screens; a switch then shows the screen
    at once (Textual would hold every frame for 50 ms), and it loads only once it is shown. Until that load its
    status line is the one the last screen showed at this moment, not a blank line."""
    path, stacks = fleet_store
    app = replay(path, stacks)
    async with app.run_test(size=(170, 50)) as pilot:
        await wait_for(pilot, lambda: app.screen.view is not None)
        await wait_for(pilot, lambda: gc.get_freeze_count() > 0)  # settled: everything composed, then frozen
        for key, screen in (("4", LocalScreen), ("3", FindingsScreen), ("1", FleetScreen)):
            status = shown(app.screen, 170, StatusLine)
            assert "collectors: " in status
            assert app._load_lock.acquire(timeout=10)  # the screen's load waits
            try:
                app.action_screen(SCREENS[key])
                assert isinstance(app.screen, screen) and app.screen.is_mounted
                assert app._batch_count == 0  # the next frame goes to the terminal
                await pilot.pause()
                assert shown(app.screen, 170, StatusLine) == status
            finally:
                app._load_lock.release()
            await wait_for(pilot, lambda: app.screen.view is not None)
        await pilot.press("q")
    assert gc.get_freeze_count() == 0  # handed back to the collector on exit


PANEL_EXPECTATIONS = {
    "c": ("db2prod01", "app0003"),  # the VMs on the stack's host, this one marked
    "m": ("db2prod01", "16.0GiB", "4.0GiB"),  # consumed and active: the VM's quickStats
    "d": ("ds-data01",),
    "u": ("naa.600a0980383030", "netapp1:/vol/db2v0/lun0"),  # host and array views of the LUN, joined on NAA
    "v": ("scsi0:1", "sdb"),  # the VMDK and the guest's disk
    "n": ("Network adapter 1", "ens192"),  # the vNIC by its label (the VM's fact), not its device key
    "b": ("IBMDEFAULTBP", "BP_DATA"),
    "l": ("0",),
    "w": ("log disk", "pool read"),
    "t": ("DATA_TS", "/db2/data1/data_ts"),
}


async def test_stack_layers_panels_and_every_letter(fleet_store, utc):
    path, stacks = fleet_store
    app = replay(path, stacks)
    async with app.run_test(size=(170, 50)) as pilot:
        app.run_command("stack prod01")
        await pilot.pause()
        stack = app.screen
        assert isinstance(stack, StackScreen)
        await wait_for(pilot, lambda: stack.view is not None)
        view = stack.view
        assert view.resolved.host == "esx01.lab" and view.resolved.guest == "db2prod01"
        assert list(view.resolved.luns) == ["naa.600a09803830300000000000"]
        titles = [layer.title for layer in view.layers]
        assert titles == ["DB2 prod01/PROD", "Guest db2prod01", "VM db2prod01 on esx01.lab", "Host esx01.lab (1 LUN)",
                          "Storage netapp1 (1 lun)"]
        figures = {layer.key: "".join(t for t, _ in layer.figures) for layer in view.layers}
        assert "KAVG 9.05 ms" in figures["host"] and "QUED 14" in figures["host"]
        assert "latency 1.50 ms" in figures["storage"] and "log write 12.28 ms" in figures["db2"]
        block = "\n".join(s.text for s in view.block)
        assert "log write ms (one scale for all layers)" in block and "└12:05" in block
        verdict = text(app, "#verdict")  # the checks' verdict on the recording: the hypervisor queues
        assert verdict.startswith("VERDICT  host since 12:06, ") and "host esx01.lab KAVG" in verdict  # its onset
        assert "array LUN 1.5 ms" in verdict
        assert "CRIT disk-queue-saturation" in text(app, "#verdict")

        for letter, expected in PANEL_EXPECTATIONS.items():
            await pilot.press(letter)
            assert stack.panel == letter and f"› {letter} " in text(app, "#crumbs")
            await wait_for(pilot, lambda letter=letter: stack.view.panel == letter and stack.detail.model.rows)
            shown = " ".join(" ".join(r) for r in rows(stack.detail))
            for word in expected:
                assert word in shown, (letter, word, shown)
            # the trend column says what it draws (the LUNs' was read as the array's, beside it, drawn when it was —)
            trend = stack.detail.model.columns[-1].name.split(" ≤")[0]  # its scale follows: GAVG trend ≤20
            assert trend.endswith(" trend"), (letter, trend)

        await pilot.press("c")
        await wait_for(pilot, lambda: stack.view.panel == "c")
        stack.detail.move_cursor(next(i for i, r in enumerate(stack.detail.shown) if r.key == "app0003"))
        await pilot.press("enter")  # a neighbour on the same host: its own stack screen
        assert isinstance(app.screen, StackScreen) and app.screen.target == Target.of_vm("app0003")
        assert "Fleet › vm app0003" in text(app, "#crumbs")
        await pilot.press("escape", "escape")
        assert isinstance(app.screen, FleetScreen)
        await pilot.press("2")  # the last stack opened
        assert isinstance(app.screen, StackScreen) and app.screen.target.name == "app0003"
        await pilot.press("q")


async def test_the_verdict_is_shown_and_its_failure_too(fleet_store, utc, monkeypatch):
    path, stacks = fleet_store

    seen = []

    def verdict(source, stack, since, until, overrides=None, entities=None):
        seen.append((stack.name, since, until))
        return StackVerdict("prod01", "host", "log write 12 ms/IO ← VMDK write 11 ms ← host KAVG 9 ms, QUED 14 ← "
                            "array LUN 1.5 ms", "high", samples=9)

    monkeypatch.setattr(stack_view, "stack_verdict", verdict)
    app = replay(path, stacks)
    async with app.run_test(size=(170, 50)) as pilot:
        app.run_command("stack prod01")
        await wait_for(pilot, lambda: isinstance(app.screen, StackScreen) and app.screen.view is not None)
        line = text(app, "#verdict")
        assert "VERDICT" in line and "host: log write 12 ms/IO ← VMDK" in line
        assert "[high confidence, 9 samples]" in line
        assert seen[-1] == ("prod01", INCIDENT - 300 * S, INCIDENT)  # the cursor's window

        def broken(*_a):
            raise RuntimeError("no LUN map")

        monkeypatch.setattr(stack_view, "stack_verdict", broken)
        await pilot.press("left")
        await wait_for(pilot, lambda: "verdict failed: no LUN map" in text(app, "#verdict"))
        await pilot.press("q")


async def test_run_command_centres_a_benchmark_run(tmp_path, utc):
    from db2vtop.agent.core.runs import BEGIN, END, edge_marker

    path = build_store(tmp_path / "runs.db")
    with Store(path, writer=True) as w:  # a 4-minute run from 12:02 (db2vtop run, mark --begin/--end)
        w.write(annotations=[edge_marker("oltp", BEGIN, ts=T0 + 120 * S), edge_marker("oltp", END, ts=T0 + 360 * S)])
    app = replay(path, read_only=True)
    async with app.run_test(size=(170, 50)) as pilot:
        app.run_command("zoom 1h")
        app.run_command("run oltp")
        assert app.cursor.window_s == 300 and app.cursor.end_ns == T0 + 390 * S  # 12:01:30 to 12:06:30
        assert not app.cursor.live and "run oltp" in app._suggestions()
        with pytest.raises(ValueError, match="no run named 'nope'; runs: oltp"):
            app.run_command("run nope")
        await pilot.press("q")


async def test_commands_time_travel_and_the_palette(fleet_store, utc):
    path, stacks = fleet_store
    app = replay(path, stacks, read_only=True)  # as `db2vtop replay` opens a recording
    async with app.run_test(size=(170, 50)) as pilot:
        await pilot.press("colon")
        assert isinstance(app.screen, CommandBar)
        await pilot.press(*"zoom 15m", "enter")
        assert app.cursor.window_s == 900
        app.run_command("goto 12:03:20")
        assert app.cursor.end_ns == T0 + 200 * S and "12:03:20" in app.status_title
        app.run_command("goto -1m")
        assert app.cursor.end_ns == T0 + 140 * S
        app.run_command("goto 2024-05-01 12:10")
        assert app.cursor.end_ns == T0 + 600 * S
        app.run_command("zoom 5m")
        app.run_command("start")
        assert app.cursor.end_ns == app.cursor.first_ns + 300 * S
        app.run_command("live")  # in a replay: its end
        assert app.cursor.end_ns == app.cursor.last_ns
        app.run_command("sort rdy")
        assert app.screen.table.sort_col == 3
        app.run_command("filter app")
        assert {r.key for r in app.screen.table.shown} == {f"vm:app{i:04d}" for i in range(3, 7)}
        app.run_command("host esx02.lab")
        await pilot.pause()
        assert isinstance(app.screen, StackScreen) and app.screen.target == Target.of_host("esx02.lab")
        app.run_command("vm app0004")
        await pilot.pause()
        assert app.screen.target == Target.of_vm("app0004")
        app.run_command("guest db2prod02")
        await pilot.pause()
        assert isinstance(app.screen, LocalScreen) and app.screen.guest == "db2prod02"
        app.run_command("findings cpu")
        await pilot.pause()
        assert isinstance(app.screen, FindingsScreen) and app.screen.table.filter_text == "cpu"
        app.run_command("fleet")
        await pilot.pause()
        assert isinstance(app.screen, FleetScreen)
        app.run_command("help")
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)
        help_text = shown(app.screen)
        for key in ("space", "← →", "+ -", "home end", "M", "1 2 3 4", "ctrl+p", "esc", "enter", "s S",
                    "[FILTER]", "[GUEST]"):
            assert key in help_text
        await pilot.press("escape")
        with pytest.raises(ValueError, match="unknown command"):
            app.run_command("frobnicate")
        with pytest.raises(ValueError, match="no stack 'nope'"):
            app.run_command("stack nope")
        with pytest.raises(ValueError, match="not a time"):
            app.run_command("goto teatime")
        titles = [c.title for c in app.get_system_commands(app.screen)]
        assert {":stack prod01", ":stack prod02", ":zoom 1h", ":findings", ":live", "pause / play"} <= set(titles)
        assert ":mark" not in titles  # read-only replay
        await pilot.press("q")


async def test_findings_screen_shows_evidence_why_fix_reference_and_opens_the_subject(store_path):
    now = time.time_ns()
    with Store(store_path, writer=True) as w:
        w.write([Sample("guest_cpu", {"guest": "g", "cpu": "total"}, {"busy_pct": 1.0}, now)], findings=[
            Finding("guest-swap-zero", "critical", {"layer": "guest", "guest": "g"}, "guest swapping: in 8.0MiB/s",
                    {"values": {"swap_in_bytes_per_s": 8388608}, "samples": 7,
                     "window": {"from_ns": now - 60 * S, "to_ns": now}}, "Guest OS must not page/swap.",
                    "Find what pushes DB2 memory out.", ["000_e991ec30bbd9209f.txt §5.4"], now - 60 * S, now),
            Finding("partition-alignment", "warning", {"layer": "guest", "guest": "g", "partition": "sdb1"},
                    "sdb1 starts at sector 63", {"values": {"start_sector": 63}}, "why", "fix", ["ref"],
                    now - 30 * S, now)])
    app = Db2vtopApp(store_path, None, refresh_s=0.2)
    async with app.run_test(size=(140, 45)) as pilot:
        await pilot.press("3")
        screen = app.screen
        await wait_for(pilot, lambda: screen.view is not None)
        assert [r[0] for r in rows(screen.table)] == ["CRIT", "WARN"]
        assert "guest 1 CRIT 1 WARN" in text(app, "#score")
        detail = text(app, "#detail")
        assert "swap in 8.0MiB/s" in detail and "7 samples" in detail  # in its unit, not a raw float
        assert "why" in detail and "fix" in detail
        assert "NetApp WP-7109, Best Practices for Virtualizing IBM DB2" in detail and "§5.4" in detail  # its title
        assert "000_e991ec30bbd9209f.txt" not in detail
        await pilot.press("down")
        assert "sector 63" in text(app, "#detail")
        await pilot.press("enter")  # the subject: guest g, its Local screen
        assert isinstance(app.screen, LocalScreen) and app.screen.guest == "g"
        await pilot.press("q")


# --- start screen and stack inference ---------------------------------------------------------


async def test_one_stack_opens_on_it_and_an_empty_store_on_local(tmp_path, utc):
    one = build_store(tmp_path / "one.db", Fleet(vms=1, hosts=1, stacks=1, minutes=3))
    app = replay(one, at=T0 + 120 * S)
    async with app.run_test(size=(170, 50)) as pilot:
        await pilot.pause()
        assert isinstance(app.screen, StackScreen) and app.screen.target.name == "prod01"  # inferred from the data
        await pilot.press("escape")
        assert isinstance(app.screen, FleetScreen)
        await pilot.press("q")
    app = Db2vtopApp(tmp_path / "empty.db", None)
    async with app.run_test() as pilot:
        assert isinstance(app.screen, LocalScreen)
        await pilot.press("2")  # no stack to open: said so, nothing breaks
        assert isinstance(app.screen, LocalScreen)
        await pilot.press("q")


def test_stacks_are_inferred_per_db2_database_and_joined_by_name(fleet_store, tmp_path):
    path, _ = fleet_store
    with Store(path) as store:
        inferred = [i.stack for i in infer_stacks(Config(), store) if i.rule == "db2"]
    assert [(s.name, s.db2, s.guest, s.vm) for s in inferred] == [("prod01", "prod01", None, None),
                                                                 ("prod02", "prod02", None, None)]
    named = tmp_path / "named.db"
    with Store(named, writer=True) as w:  # the guest reports the DB2 name as its host name
        w.write([Sample("db2_database", {"db2": "prod", "database": "PROD", "member": "0"}, {"commits_per_s": 1.0},
                        T0),
                 Sample("guest_cpu", {"guest": "db2host", "cpu": "total"}, {"busy_pct": 1.0}, T0),
                 Sample("guest_cpu", {"guest": "other", "cpu": "total"}, {"busy_pct": 1.0}, T0),
                 Sample("vsphere_vm", {"vcenter": "vc1", "vm": "DB2HOST.lab", "host": "esx1"}, {"cpu_ready_pct": 1.0},
                        T0)],
                facts=[__import__("db2vtop.agent.core.model", fromlist=["Fact"]).Fact("guest", {"guest": "db2host"},
                                                                        {"hostname": "prod.example.com"}, T0)])
    with Store(named) as store:
        (st,) = [i.stack for i in infer_stacks(Config(), store) if i.rule == "db2"]
        assert (st.db2, st.guest, st.vm, st.vcenter) == ("prod", "db2host", "DB2HOST.lab", "vc1")
        r = resolve(Reader(store), st, T0, T0)
        assert r.host == "esx1"


async def test_a_threshold_override_recolours_the_fleet(fleet_store, utc):
    """[checks.cpu-ready] moves the ready column's colours with the rule: the levels are the rule's."""
    path, stacks = fleet_store

    async def ready_styles(**kw) -> dict[str, str]:
        app = replay(path, stacks, **kw)
        async with app.run_test(size=(170, 50)) as pilot:
            await wait_for(pilot, lambda: app.screen.view is not None)
            model = app.screen.view.model
            col = next(i for i, c in enumerate(model.columns) if c.name.startswith("rdy"))
            styles = {r.key: r.cells[col][1] for r in model.rows if isinstance(r.cells[col], tuple)}
            await pilot.press("q")
        return styles

    default = await ready_styles()
    tuned = await ready_styles(overrides={"cpu-ready": {"warn_pct": 0.1, "crit_pct": 0.2}})
    calm = [k for k, st in default.items() if k.startswith("vm:") and "red" not in st]
    assert calm, default  # most VMs are below the default 10 % critical level
    assert all("red" in tuned[k] for k in calm), tuned


async def test_the_fleet_has_a_stack_for_every_db2_vm_without_configuration(store_path, tmp_path):
    """No [[stack]]: the VM whose guest IP is an [[ssh]] target running a [[db2]] gets its stack row."""
    now = time.time_ns()
    with Store(store_path, writer=True) as w:
        vms = [("db2prod07", ["10.0.0.7"]), ("web01", ["10.0.0.9"])]
        w.write([Sample("vsphere_vm", {"vcenter": "vc1", "vm": vm, "host": "esx01"}, {"cpu_ready_pct": 1.0},
                        now - k * 20 * S) for vm, _ in vms for k in range(3)],
                facts=[Fact("vsphere_vm", {"vcenter": "vc1", "vm": vm}, {"host": "esx01", "ip_addresses": ips,
                                                                          "guest_hostname": vm, "disks": []}, now)
                       for vm, ips in vms])
    cfg = tmp_path / "c.toml"
    cfg.write_text('[[ssh]]\nname = "prod07"\nhost = "10.0.0.7"\nuser = "db2inst1"\npassword_env = "PW"\n'
                   '[[db2]]\nname = "prod07"\ndatabase = "PROD"\nssh = "prod07"\n')
    app = Db2vtopApp(store_path, None, refresh_s=0.2, config=load_config(cfg), prefer_fleet=True)
    async with app.run_test(size=(170, 40)) as pilot:
        await wait_for(pilot, lambda: isinstance(app.screen, FleetScreen) and app.screen.view is not None)
        keys = {r.key for r in app.screen.view.model.rows}
        assert "stack:db2prod07" in keys and "stack:web01" not in keys and {"vm:db2prod07", "vm:web01"} <= keys
        assert [s.db2 for s in app.stacks.shown] == ["prod07"]
        await pilot.press("q")


async def test_a_long_load_of_a_screen_left_stops_for_the_next_screens(fleet_store, utc, monkeypatch):
    """A 10,000-VM Fleet's load takes a good part of a second: once the user has switched to another screen
    it stops at its next read, and the new screen's load does not wait for it."""
    import threading

    from db2vtop.tui.loaders import fleet as fleet_view
    path, stacks = fleet_store
    app = replay(path, stacks)
    slow, stopped = threading.Event(), []
    real = fleet_view.load_fleet

    def slow_fleet(rd, *a, **kw):
        if slow.is_set():
            for _ in range(200):  # a load that would run 10 s, read by read
                time.sleep(0.05)
                try:
                    rd.latest_at("vsphere_vm", a[2])
                except Exception as e:
                    stopped.append(type(e).__name__)
                    raise
        return real(rd, *a, **kw)

    monkeypatch.setattr("db2vtop.tui.screens.fleet.load_fleet", slow_fleet)
    async with app.run_test(size=(170, 50)) as pilot:
        await wait_for(pilot, lambda: isinstance(app.screen, FleetScreen) and app.screen.view is not None)
        slow.set()
        app.request_reload(True)
        await pilot.pause(0.3)
        app.action_screen(SCREENS["3"])
        await wait_for(pilot, lambda: isinstance(app.screen, FindingsScreen) and app.screen.view is not None)
        assert stopped == ["LoadCancelledError"]  # the Fleet's load gave way at its next read
        await pilot.press("q")
