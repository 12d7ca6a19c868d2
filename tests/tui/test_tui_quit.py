"""Quitting while the TUI is busy: the loader thread, the timers and the workers leave the app alone once it is
closing (Textual may be taking its screens down, and a screen taken down has no app).

A 400-VM Fleet's first load takes a while, so a quit right after it began lands in its middle; the quit is a key
(`q`), `exit()`, or the app torn down by whoever runs it without a quit (as the test harness does), with a second
load queued behind the first on some rounds and the cursor live (a tick loading every 50 ms) on others.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from db2vtop.agent.core.store import Store
from db2vtop.tui.app import Db2vtopApp
from db2vtop.tui.timecursor import TimeCursor
from tests.infra.tui_fixture import Fleet, build_store

ROUNDS = 50


@pytest.fixture(scope="module")
def big_store(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("quit")
    return build_store(d / "fleet.db", Fleet(vms=400, hosts=10, stacks=4, minutes=10))


class LoaderWatch:
    """What escaped the loader thread's reads (the real `_read`, watched): nothing may."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch):
        self.errors: list[str] = []
        self.running = 0
        self.lock = threading.Lock()
        real = Db2vtopApp._read

        def read(app, *args):
            with self.lock:
                self.running += 1
            try:
                return real(app, *args)
            except BaseException as e:
                self.errors.append(repr(e))
                raise
            finally:
                with self.lock:
                    self.running -= 1

        monkeypatch.setattr(Db2vtopApp, "_read", read)

    def idle(self, timeout: float = 20.0) -> None:
        """Wait until the loader threads of the apps closed so far have ended their reads (bounded)."""
        deadline = time.monotonic() + timeout
        while self.running:
            assert time.monotonic() < deadline, "a loader thread still reads after its app closed"
            time.sleep(0.01)


async def test_quitting_in_the_middle_of_a_fleet_load(big_store, monkeypatch):
    watch = LoaderWatch(monkeypatch)
    with Store(big_store) as s:
        first, last = s.time_range()
    mid_load = 0
    for i in range(ROUNDS):
        live = i % 5 == 4
        cursor = None if live else TimeCursor(window_s=300.0, live=False, end_ns=last, first_ns=first, last_ns=last)
        app = Db2vtopApp(big_store, None, cursor=cursor, clock=lambda: last, refresh_s=0.05, prefer_fleet=True)
        async with app.run_test(size=(120, 40)) as pilot:
            deadline = time.monotonic() + 20
            while not app._load_lock.locked():  # the Fleet's first load under way
                assert time.monotonic() < deadline, "no load began"
                await pilot.pause(0.002)
            if i % 2:
                app.reload()  # a second load queued behind it
            mid_load += app._load_lock.locked()
            how = i % 3
            if how == 0:
                await pilot.press("q")
            elif how == 1:
                app.exit()
            # else: torn down by run_test without a quit
        watch.idle()
        assert not watch.errors, f"round {i}: the loader raised {watch.errors}"
    assert mid_load >= ROUNDS // 2  # most quits came while a load was under way
