"""The TUI driven by Textual's pilot against real stores: keys, screens, time travel, markers."""

from __future__ import annotations

import socket
import time

from textual.widgets import DataTable, Input, Static

from agent.config import GuestConfig
from agent.model import Annotation, Finding, Sample
from agent.runtime import Runtime
from agent.store import Store, StoreWriter
from collectors.guest.local import LocalGuestCollector
from collectors.markers import MarkerInbox
from collectors.selfmon import SelfCollector
from tui.app import Db2vtopApp
from tui.screens.dialogs import HelpScreen, MarkerPrompt
from tui.screens.findings import FindingsScreen
from tui.screens.local import LocalScreen
from tui.timecursor import TimeCursor

S = 10**9


async def wait_for(pilot, predicate, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached"
        await pilot.pause(0.1)


def local(app) -> LocalScreen:
    assert isinstance(app.screen, LocalScreen)
    return app.screen


def history(path, now, minutes=10, guest="db2prod01", step_s=5):
    with Store(path, writer=True) as w:
        n = minutes * 60 // step_s
        w.write([Sample("guest_cpu", {"guest": guest, "cpu": "total"},
                        {"busy_pct": float(i % 100), "idle_pct": 100.0 - i % 100, "load1": 1.5},
                        now - (n - i) * step_s * S) for i in range(n)]
                + [Sample("guest_disk", {"guest": guest, "device": "sdb", "type": "disk"},
                          {"util_pct": 99.0, "write_await_ms": 12.5}, now - (n - i) * step_s * S) for i in range(n)])


async def test_collects_in_process_and_every_key_works(store_path):
    writer = StoreWriter(store_path, 86400)
    rt = Runtime([SelfCollector(1.0), LocalGuestCollector(GuestConfig(interval=0.5))], [writer])
    app = Db2vtopApp(store_path, rt, refresh_s=0.2)
    async with app.run_test(size=(140, 45)) as pilot:
        await wait_for(pilot, lambda: local(app).view is not None and local(app).view.cpu and local(app).view.nets)
        view = local(app).view
        assert view.guest == socket.gethostname()
        assert "busy" in str(app.screen.query_one("#cpu-summary", Static).render())
        assert app.screen.query_one("#net-table", DataTable).row_count == len(view.nets) > 0
        status = str(app.screen.query_one("#status", Static).render())
        assert "guest ok" in status and "self ok" in status
        assert "collecting" in app.sub_title and "live" in app.sub_title

        await pilot.press("space")
        assert not app.cursor.live and "paused" in app.sub_title
        await pilot.press("left")
        assert "paused" in app.sub_title and app.cursor.end_ns < time.time_ns() - 20 * S
        await pilot.press("end")
        assert app.cursor.live and " live " in app.sub_title
        await pilot.press("minus")
        assert app.cursor.window_s == 900.0 and "window 15m" in app.sub_title
        await pilot.press("plus", "plus")
        assert app.cursor.window_s == 60.0
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        await pilot.press("escape")
        await pilot.press("f")
        assert isinstance(app.screen, FindingsScreen)
        await pilot.press("l")
        assert isinstance(app.screen, LocalScreen)
        await pilot.press("M")
        assert isinstance(app.screen, MarkerPrompt)
        app.screen.query_one(Input).value = "run 1 start"
        await pilot.press("enter")
        writer.flush()
        await wait_for(pilot, lambda: any(m.name == "run 1 start" for m in (local(app).view.markers or [])))
        assert "▼ run 1 start" in str(app.screen.query_one("#status", Static).render())
        await pilot.press("q")
    assert rt.stats["guest"].cycles >= 1
    writer.close()
    with Store(store_path) as s:
        assert [(a.kind, a.name, a.tags) for a in s.annotations()] == [("marker", "run 1 start", {"by": "tui"})]


async def test_attached_to_an_agent_shows_its_data_and_queues_markers_for_it(store_path):
    now = time.time_ns()
    history(store_path, now, minutes=1)
    writer = StoreWriter(store_path, 86400)  # the agent
    inbox = MarkerInbox(store_path)
    app = Db2vtopApp(store_path, None, refresh_s=0.2)
    async with app.run_test(size=(140, 45)) as pilot:
        await wait_for(pilot, lambda: local(app).view is not None and local(app).view.disks)
        assert local(app).view.guest == "db2prod01" and "attached" in app.sub_title
        table = app.screen.query_one("#disk-table", DataTable)
        assert table.get_row_at(0)[0] == "sdb" and str(table.get_row_at(0)[9]) == "99.0"
        assert local(app).view.interval_s == 5.0 and not local(app).view.stale
        await pilot.press("M")
        app.screen.query_one(Input).value = "attached marker"
        await pilot.press("enter")
        await pilot.press("q")
    (queued,) = await inbox.collect()  # what the agent's inbox collector picks up
    assert isinstance(queued, Annotation) and queued.name == "attached marker"
    assert await inbox.collect() == []
    writer.close()


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
        await wait_for(pilot, lambda: "no store at" in str(app.screen.query_one("#status", Static).render()))
        await pilot.press("q")


async def test_replay_opens_at_the_start_and_plays_scrubs_and_marks(store_path):
    now = time.time_ns()
    history(store_path, now, minutes=30)
    with Store(store_path) as s:
        first, last = s.time_range()
    app = Db2vtopApp(store_path, None, cursor=TimeCursor.replay(first, last), refresh_s=0.2)
    async with app.run_test(size=(140, 45)) as pilot:
        await wait_for(pilot, lambda: local(app).view is not None and local(app).view.cpu)
        assert "replay" in app.sub_title and "paused" in app.sub_title
        assert app.cursor.end(now) == first + 300 * S
        assert len(local(app).view.cpu_history) == 61  # the first five minutes
        await pilot.press("right")
        assert app.cursor.end(now) == first + 330 * S
        await pilot.press("space")
        assert app.cursor.playing
        await pilot.pause(0.5)
        assert app.cursor.end(now) > first + 330 * S
        await pilot.press("space")
        await pilot.press("home")
        assert app.cursor.end(now) == first + 300 * S
        await pilot.press("M")
        app.screen.query_one(Input).value = "replay note"
        await pilot.press("enter")
        await pilot.press("q")
    with Store(store_path) as s:  # nobody writes this store: the marker went straight in
        (m,) = s.annotations()
    assert (m.name, m.ts) == ("replay note", first + 300 * S)


async def test_findings_screen_shows_evidence_why_fix_and_reference(store_path):
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
        await pilot.press("f")
        screen = app.screen
        await wait_for(pilot, lambda: screen.view is not None)
        table = screen.query_one("#findings-table", DataTable)
        assert table.row_count == 2 and str(table.get_row_at(0)[0]) == "CRITICAL"
        detail = str(screen.query_one("#detail", Static).render())
        assert "swap_in_bytes_per_s=8388608" in detail and "7 samples" in detail
        assert "why" in detail and "fix" in detail and "000_e991ec30bbd9209f.txt §5.4" in detail
        await pilot.press("down")
        assert "sector 63" in str(screen.query_one("#detail", Static).render())
        await pilot.press("q")
