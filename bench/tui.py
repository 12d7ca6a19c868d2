"""TUI benchmark (issue 5). Prints JSON.

Store: 2,000 VMs on 50 hosts (`--vms N`: N VMs, 40 a host), 100 DB2 stacks (guest, DB2, array LUN
each), an hour at 20 s (tests/infra/tui_fixture.py builds it; kept in bench/results/, rebuilt with
--rebuild; 10,000 VMs take ~10 minutes to build).

- first_frame: the real `db2vtop replay` started in tmux, capture-pane polled every
  10 ms: time to the first drawn frame, and to the Fleet's rows (data read and shown). In process,
  also to every row's figures (a large fleet's first load shows the rows on screen first).
- tick: the app on Textual's pilot, live on the recording (its clock runs inside it),
  refreshing every second; main-thread CPU time per refresh (time.thread_time of the
  event loop's thread over the run, divided by the refreshes: everything the main
  thread did, rendering included) and the loader thread's wall time per load.
- keys: time from a key press to the screen reflecting it (the first frame drawn after the
  key changed the app's state), and to the new data being on screen when the key needs a
  load (loader_ms: the loader thread's wall time for the last load). A frame counts when
  Textual hands it to the terminal: frames drawn inside a batch (Textual holds them during
  a screen switch) are dropped, not shown. Whether a frame shows
  the key's effect is checked as it is drawn; polling for the effect first, then taking the
  next frame, would add the poll's own delay whenever the main thread is busy. A screen's
  first visit finds it composed once the app has settled (it composes the other screens
  after showing its first view); "again" = later visits.
- charts: one braille chart (bucketing plus rendering) and one table trend cell.
Targets: first frame <= 1 s, tick <= 50 ms of main thread, keypress reflected <= 50 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from textual import events

from db2vtop.agent.config import load_config
from db2vtop.agent.core.store import Store, StoreError
from db2vtop.tui.app import Db2vtopApp
from db2vtop.tui.chart import Marks, braille, buckets, spark
from db2vtop.tui.loaders.fleet import COLUMNS
from db2vtop.tui.screens.fleet import FleetScreen
from db2vtop.tui.screens.stack import StackScreen
from db2vtop.tui.widgets import FilterBar
from tests.infra.tui_fixture import STEP_S, T0, Fleet, build_store, write_config

READY = next(i for i, c in enumerate(COLUMNS) if c.name == "rdy%")

S = 10**9
FLEET = Fleet(vms=2000, hosts=50, stacks=100, minutes=60)  # --vms replaces it
SIZE = (200, 60)


def _pct(values: list[float], p: float) -> float:
    values = sorted(values)
    return round(values[min(len(values) - 1, int(len(values) * p))], 2) if values else 0.0


def _summary(values: list[float]) -> dict:
    return {"n": len(values), "median": round(statistics.median(values), 2) if values else 0.0,
            "p95": _pct(values, 0.95), "max": round(max(values), 2) if values else 0.0}


def sized(vms: int) -> Fleet:
    return Fleet(vms=vms, hosts=max(vms // 40, 1), stacks=min(100, vms), minutes=60)


def build(path: Path, rebuild: bool) -> float | None:
    if path.exists() and not rebuild:
        try:
            Store(path).close()
            return None
        except StoreError:  # an older store schema: build it again
            pass
    for suffix in ("", "-wal", "-shm", "-writer.lock"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    t = time.perf_counter()
    build_store(path, FLEET)
    return round(time.perf_counter() - t, 1)


# --- first frame of the real program ------------------------------------------------------


def first_frame(store: Path, config: Path, runs: int) -> dict:
    tmux = shutil.which("tmux")
    if tmux is None:
        return {"skipped": "tmux is not installed (make test-deps)"}
    exe = Path(sys.executable).with_name("db2vtop")
    frames, rows = [], []
    for i in range(runs):
        sock = f"db2vtop-bench-{os.getpid()}-{i}"
        t0 = time.perf_counter()
        subprocess.run([tmux, "-L", sock, "new-session", "-d", "-x", str(SIZE[0]), "-y", str(SIZE[1]),
                        f"{exe} replay --store {store} -c {config}"], check=True)
        frame = data = None
        try:
            while time.perf_counter() - t0 < 20:
                screen = subprocess.run([tmux, "-L", sock, "capture-pane", "-p"], capture_output=True,
                                        text=True).stdout
                now = time.perf_counter() - t0
                if frame is None and "db2vtop" in screen:
                    frame = now
                # the Fleet's rows drawn (its summary is shown with them): not the first frame, nor a loading table
                if f"{FLEET.vms} vms" in screen and re.search(r"^(stack|vm) +\S", screen, re.MULTILINE):
                    data = now
                    break
                time.sleep(0.01)
        finally:
            subprocess.run([tmux, "-L", sock, "kill-server"], capture_output=True)
        frames.append((frame or 99) * 1000)
        rows.append((data or 99) * 1000)
    return {"runs": runs, "first_frame_ms": _summary(frames), "fleet_rows_shown_ms": _summary(rows),
            "target_ms": 1000}


# --- in-process: ticks and keys -------------------------------------------------------------


async def _until(pilot, predicate, timeout: float = 60.0) -> float:
    """Until `predicate` holds (60 s at most: a machine at load 15 took more than 10 s for a 10,000-VM step)."""
    t0 = time.perf_counter()
    while not predicate():
        if time.perf_counter() - t0 > timeout:
            raise TimeoutError("condition not reached")
        await asyncio.sleep(0.001)
    return time.perf_counter() - t0


def _app(store: Path, stacks: list, start: float) -> Db2vtopApp:
    """Live on the recording: the clock starts 15 minutes before its end and runs at wall speed."""
    origin = FLEET.end_ns - 15 * 60 * S
    return Db2vtopApp(store, None, clock=lambda: origin + int((time.monotonic() - start) * 1e9), stacks=stacks,
                      refresh_s=1.0, store_label="bench")


async def _tick_cost(app: Db2vtopApp, pilot, seconds: float) -> dict:
    shown = len(app.timings.show_ms)
    loads = len(app.timings.load_ms)
    cpu0, wall0 = time.thread_time(), time.perf_counter()
    await asyncio.sleep(seconds)
    cpu = time.thread_time() - cpu0
    wall = time.perf_counter() - wall0
    ticks = len(app.timings.show_ms) - shown
    show = list(app.timings.show_ms)[-ticks:] if ticks else []
    load = list(app.timings.load_ms)[-(len(app.timings.load_ms) - loads):] if len(app.timings.load_ms) > loads \
        else []
    return {"seconds": round(wall, 1), "refreshes": ticks,
            "main_thread_cpu_ms_per_refresh": round(cpu * 1000 / max(ticks, 1), 2),
            "show_view_ms": _summary(show), "loader_thread_ms": _summary(load), "target_main_ms": 50}


async def in_process(store: Path, config: Path, seconds: float) -> dict:
    stacks = load_config(config).stack
    out: dict = {}
    keys: dict = {}
    start = time.monotonic()
    t0 = time.perf_counter()
    app = _app(store, stacks, start)
    async with app.run_test(size=SIZE) as pilot:
        out["pilot_ready_ms"] = round((time.perf_counter() - t0) * 1000, 1)
        fleet = app.screen
        assert isinstance(fleet, FleetScreen)
        await _until(pilot, lambda: fleet.view is not None)
        out["fleet_data_shown_ms"] = round((time.perf_counter() - t0) * 1000, 1)
        out["fleet_rows"] = len(fleet.table.model.rows)
        # a large fleet's first load shows the rows on screen first, then every row's figures (`FleetView.rest`)
        await _until(pilot, lambda: fleet.view is not None and getattr(fleet.view, "rest", None) is None)
        out["fleet_every_figure_shown_ms"] = round((time.perf_counter() - t0) * 1000, 1)
        out["tick_fleet"] = await _tick_cost(app, pilot, seconds)

        watched: list[tuple[Callable[[], bool], list[float]]] = []  # (condition, when a frame first showed it)
        display = app._display

        def recorded(screen, renderable) -> None:
            """Every frame handed to the terminal (Textual drops those drawn inside a batch); the
            conditions are checked as it is drawn, so it is known to show what they test."""
            shown = renderable is not None and not app._batch_count and screen is app.screen
            display(screen, renderable)
            if shown:
                now = time.perf_counter()
                for holds, at in watched:
                    if not at and holds():
                        at.append(now)

        app._display = recorded

        async def key(name: str, *press: str, reflected, data=None) -> None:
            """Send the keys as the terminal would; reflected = the first frame drawn once the key
            changed the state, data = the first one drawn once the load it needed was shown."""
            before = len(app.timings.show_ms)
            loads = len(app.timings.load_ms)
            reflected_at: list[float] = []
            data_at: list[float] = []
            watched[:] = [(reflected, reflected_at)]
            if data is not None:
                watched.append((lambda: len(app.timings.show_ms) > before and data(), data_at))
            t = time.perf_counter()
            for k in press:
                event = events.Key(k, k if len(k) == 1 else {"space": " ", "slash": "/"}.get(k))
                event.set_sender(app)
                app._driver.send_message(event)
            try:
                await _until(pilot, lambda: reflected_at and (data is None or data_at))
            except TimeoutError:  # which key, and whether its data was there but never drawn in a frame of its own
                shows = len(app.timings.show_ms) - before
                print(f"bench/tui.py: no frame after {name!r} showed it: key reflected {bool(reflected_at)}, "
                      f"{shows} views shown, {len(app.timings.load_ms) - loads} loads, data there now "
                      f"{bool(data is not None and shows and data())}, workers {[w.state for w in app.workers]}",
                      file=sys.stderr)
                raise
            watched.clear()
            r = (reflected_at[0] - t) * 1000
            d = (data_at[0] - t) * 1000 if data_at else r
            keys[name] = {"reflected_ms": round(r, 1), "data_shown_ms": round(d, 1)}
            if data is not None and len(app.timings.load_ms) > loads:  # the loader's part of it (its last load)
                keys[name]["loader_ms"] = round(app.timings.load_ms[-1], 1)

        await key("fleet down (cursor)", "down", reflected=lambda: fleet.table.cursor == 1)
        await key("fleet R (sort by rdy%)", "R", reflected=lambda: fleet.table.sort_col == READY, data=lambda: True)
        await key("fleet / (filter bar)", "slash", reflected=lambda: isinstance(app.focused, FilterBar))
        await key("type 'db2prod0' (8 keys, filter as you type)", *"db2prod0",
                  reflected=lambda: fleet.table.filter_text == "db2prod0", data=lambda: True)
        await key("fleet esc (clear filter)", "escape", reflected=lambda: fleet.table.filter_text == "")
        app.run_command("sort TPS")  # the stacks first (only they have TPS)
        await _until(pilot, lambda: fleet.table.shown[0].key.startswith("stack:"))
        fleet.table.move_cursor(0)
        await key("fleet enter (open a stack)", "enter", reflected=lambda: isinstance(app.screen, StackScreen),
                  data=lambda: isinstance(app.screen, StackScreen) and app.screen.view is not None)
        stack = app.screen
        assert isinstance(stack, StackScreen)
        out["tick_stack_c"] = await _tick_cost(app, pilot, seconds)
        await key("stack u (LUN panel)", "u", reflected=lambda: stack.panel == "u",
                  data=lambda: stack.view is not None and stack.view.panel == "u")
        out["tick_stack_u"] = await _tick_cost(app, pilot, seconds)
        await key("stack t (tablespaces)", "t", reflected=lambda: stack.panel == "t",
                  data=lambda: stack.view is not None and stack.view.panel == "t")
        await key("space (pause)", "space", reflected=lambda: not app.cursor.live)
        end = app.cursor.end_ns
        await key("← (scrub)", "left", reflected=lambda: app.cursor.end_ns < end,
                  data=lambda: stack.view is not None and stack.view.now_ns < end)
        await key("- (zoom out to 15m)", "minus", reflected=lambda: app.cursor.window_s == 900,
                  data=lambda: stack.view is not None and stack.view.now_ns - stack.view.since_ns == 900 * S)
        await key("esc (back to Fleet)", "escape", reflected=lambda: app.screen is fleet,
                  data=lambda: fleet.view is not None)
        await key("3 (Findings)", "3", reflected=lambda: app.current_mode == "findings",
                  data=lambda: getattr(app.screen, "view", None) is not None)
        await key("4 (Local)", "4", reflected=lambda: app.current_mode == "local",
                  data=lambda: getattr(app.screen, "view", None) is not None)
        await key("1 (Fleet again)", "1", reflected=lambda: app.screen is fleet, data=lambda: True)
        await key("3 (Findings again)", "3", reflected=lambda: app.current_mode == "findings", data=lambda: True)
        await key("4 (Local again)", "4", reflected=lambda: app.current_mode == "local", data=lambda: True)
        await pilot.press("q")
    out["keys"] = keys
    return out


def charts(repeat: int = 200) -> dict:
    since, until = T0, T0 + 3600 * S
    points = [(T0 + k * STEP_S * S, float(k % 37)) for k in range(180)]
    day = [(T0 + k * STEP_S * S, float(k % 37)) for k in range(4320)]
    marks = Marks.at(since, until, 80, [T0 + 600 * S])
    out = {}
    for name, pts, end in (("1h_of_20s_samples", points, until), ("24h_of_20s_samples", day, T0 + 86400 * S)):
        t = time.perf_counter()
        for _ in range(repeat):
            braille(buckets(pts, since, end, 160), 3, 40.0, marks, gutter=6)
        out[f"braille_80x3_{name}_ms"] = round((time.perf_counter() - t) * 1000 / repeat, 3)
    t = time.perf_counter()
    for _ in range(repeat):
        spark(buckets(points, since, until, 16), 40.0, marks)
    out["trend_cell_16_ms"] = round((time.perf_counter() - t) * 1000 / repeat, 3)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rebuild", action="store_true", help="rebuild the store")
    ap.add_argument("--vms", type=int, default=2000, help="VMs in the store (40 a host)")
    ap.add_argument("--seconds", type=float, default=10.0, help="how long to measure each refresh loop")
    ap.add_argument("--runs", type=int, default=5, help="program starts to time")
    args = ap.parse_args()
    global FLEET
    FLEET = sized(args.vms)
    os.environ.setdefault("TZ", "UTC")
    results = Path(__file__).resolve().parent / "results"
    results.mkdir(exist_ok=True)
    store = results / ("tui-fleet.db" if FLEET.vms == 2000 else f"tui-fleet-{FLEET.vms}.db")
    out: dict = {"benchmark": "tui", "store": {"vms": FLEET.vms, "hosts": FLEET.hosts, "stacks": FLEET.stacks,
                                               "minutes": FLEET.minutes, "step_s": STEP_S}}
    built = build(store, args.rebuild)
    if built is not None:
        out["store"]["build_seconds"] = built
    out["store"]["bytes"] = store.stat().st_size
    with tempfile.TemporaryDirectory() as d:
        config = write_config(Path(d) / "stacks.toml", FLEET)
        out["first_frame"] = first_frame(store, config, args.runs)
        out["in_process"] = asyncio.run(in_process(store, config, args.seconds))
    out["charts"] = charts()
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
