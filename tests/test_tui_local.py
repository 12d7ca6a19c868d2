"""The first watch screen, driven by Textual's pilot against a real store."""

from __future__ import annotations

import asyncio
import socket
import time

from textual.widgets import DataTable, Static

from agent.config import GuestConfig
from agent.model import Sample
from agent.runtime import Runtime
from agent.store import Store, StoreWriter
from collectors.guest.local import LocalGuestCollector
from collectors.selfmon import SelfCollector
from tui.app import WatchApp


async def wait_for(pilot, predicate, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached"
        await pilot.pause(0.1)


async def test_collects_in_process_and_shows_guest_panes(store_path):
    writer = StoreWriter(store_path, 86400)
    rt = Runtime([SelfCollector(1.0), LocalGuestCollector(GuestConfig(interval=0.5))], [writer])
    app = WatchApp(store_path, rt, refresh_s=0.2)
    async with app.run_test(size=(140, 45)) as pilot:
        await wait_for(pilot, lambda: app.view is not None and app.view.cpu and app.view.nets)
        assert app.view.guest == socket.gethostname()
        assert "busy" in str(app.query_one("#cpu-summary", Static).render())
        assert "used" in str(app.query_one("#mem-summary", Static).render())
        assert app.query_one("#net-table", DataTable).row_count == len(app.view.nets) > 0
        status = str(app.query_one("#status", Static).render())
        assert "guest ok" in status and "self ok" in status
        assert "collecting" in app.sub_title and "live" in app.sub_title

        await pilot.press("space")
        assert app.paused and "PAUSED" in app.sub_title
        await pilot.press("space")
        assert not app.paused
        await pilot.press("minus")
        assert app.window_s == 900.0 and "window 15m" in app.sub_title
        await pilot.press("plus")
        await pilot.press("plus")
        assert app.window_s == 60.0
        await pilot.press("q")
    assert rt.stats["guest"].cycles >= 1
    writer.close()


async def test_attaches_read_only_to_a_store_an_agent_writes(store_path):
    writer = StoreWriter(store_path, 86400)  # stands in for the agent process
    now = time.time_ns()
    writer.submit([Sample("guest_cpu", {"guest": "db2prod01", "cpu": "total"},
                          {"busy_pct": 42.0, "idle_pct": 58.0, "load1": 1.5}, now - i * 5 * 10**9) for i in range(5)]
                  + [Sample("guest_disk", {"guest": "db2prod01", "device": "sdb", "type": "disk"},
                            {"util_pct": 99.0, "write_await_ms": 12.5}, now)])
    writer.flush()
    app = WatchApp(store_path, None, refresh_s=0.2)
    async with app.run_test(size=(140, 45)) as pilot:
        await wait_for(pilot, lambda: app.view is not None and app.view.disks)
        assert app.view.guest == "db2prod01"
        assert "busy 42.0%" in str(app.query_one("#cpu-summary", Static).render())
        table = app.query_one("#disk-table", DataTable)
        assert table.get_row_at(0)[0] == "sdb" and str(table.get_row_at(0)[9]) == "99.0"
        assert "attached" in app.sub_title
        assert app.view.interval_s == 5.0 and not app.view.stale
        await pilot.press("q")
    writer.close()


async def test_old_data_is_shown_as_stale(store_path):
    with Store(store_path, writer=True) as w:
        t = time.time_ns() - 600 * 10**9
        w.write([Sample("guest_cpu", {"guest": "g", "cpu": "total"}, {"busy_pct": 1.0}, t - i * 10**9)
                 for i in range(5)])
    app = WatchApp(store_path, None, refresh_s=0.2)
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(pilot, lambda: app.view is not None and app.view.cpu)
        assert app.view.stale
        assert "STALE" in str(app.query_one("#cpu").border_title)
        await pilot.press("q")


async def test_a_missing_store_is_reported_on_screen(tmp_path):
    app = WatchApp(tmp_path / "nowhere.db", None, refresh_s=0.2)
    async with app.run_test() as pilot:
        await wait_for(pilot, lambda: "no store at" in str(app.query_one("#status", Static).render()))
        await pilot.press("q")
    await asyncio.sleep(0)
