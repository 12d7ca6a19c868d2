"""The db2vtop TUI: live (`watch`), attached to an agent's store, or replaying a recording.

All screens read the store through one loader thread on a shared time cursor, so every
pane looks at the same window; the main thread only turns finished views into widget
updates. With a runtime the app collects in-process; otherwise it only reads. It never
acts on what it watches: the only thing it writes is a benchmark marker, on request,
and not even that when read-only (the default for `replay`).

Keys: lowercase letters belong to the current screen (esxtop's and db2top's panel
letters on the Stack screen); screens are reached with 1-4, k9s `:` commands, the
command palette, Enter (drill down) and Esc (back).
"""

from __future__ import annotations

import asyncio
import contextlib
import difflib
import gc
import re
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, ClassVar, Protocol

from rich.text import Text
from textual import work
from textual.app import App, SystemCommand
from textual.filter import LineFilter
from textual.screen import Screen
from textual.timer import Timer
from textual.widget import AwaitMount
from textual.worker import WorkerState, get_current_worker

from db2vtop.agent.config import Config
from db2vtop.agent.core.config import StackConfig
from db2vtop.agent.core.markers import deliver_marker
from db2vtop.agent.core.model import Annotation, Output
from db2vtop.agent.core.runs import find_run, runs
from db2vtop.agent.core.source import Source
from db2vtop.agent.core.store import Store, StoreError, store_writer
from db2vtop.agent.core.units import format_duration, parse_duration
from db2vtop.checks.scales import Levels
from db2vtop.checks.thresholds import levels
from db2vtop.tui import commands
from db2vtop.tui.data import LoadCancelledError, Reader, Status
from db2vtop.tui.loaders.stack import EventMarks
from db2vtop.tui.safe import NO_CONTROLS
from db2vtop.tui.screens.base import ViewScreen
from db2vtop.tui.screens.dialogs import CommandBar, HelpScreen, MarkerPrompt
from db2vtop.tui.screens.findings import FindingsScreen
from db2vtop.tui.screens.fleet import FleetScreen
from db2vtop.tui.screens.local import LocalScreen
from db2vtop.tui.screens.stack import StackScreen
from db2vtop.tui.stacks import HOST_MEASUREMENTS, Stacks, Target, view_stacks
from db2vtop.tui.timecursor import SPEEDS, WINDOWS, TimeCursor
from db2vtop.tui.widgets import Flash, KeyBar, StatusLine, TitleBar


class Collecting(Protocol):
    """What `watch` hands the app to collect in-process (the agent's runtime): the TUI only starts,
    stops and marks through it, so it does not depend on how collection is wired."""

    outputs: list[Output]

    async def run(self) -> None: ...

    def stop(self) -> None: ...


SCREENS = {s.key: s.name for s in commands.SCREENS}  # a number key -> the screen it shows
NAMED_BY = {"vm": ("vsphere_vm", "esxtop_vm"), "host": (*HOST_MEASUREMENTS, "esxtop_vm"),
            "guest": ("guest_cpu",)}  # the measurements whose tag names the VMs, hosts and guests
MAX_DEPTH = 8
FLASH_S = 5.0  # how long a message stays on the key bar's line
FULL_GC_EVERY = 10  # the loader's middle-generation passes between two full ones (Python's own default)
FULL_GC_IDLE_S = 0.3  # a full collection that is due waits for this long without a view shown
PREFETCH_AFTER_S = 0.5  # a paused cursor left alone this long: the screen under the current one is loaded too
AGENT_CHECK_S = 2.0  # attached to an agent's store: how often whether it still writes it is looked at


@dataclass
class Timings:
    """Where the time goes (bench/tui.py reads these): loader thread vs main thread, per load."""

    load_ms: deque
    show_ms: deque

    @classmethod
    def new(cls) -> Timings:
        return cls(deque(maxlen=1000), deque(maxlen=1000))


class Db2vtopApp(App):
    CSS_PATH = "app.tcss"
    TITLE = "db2vtop"
    MODES: ClassVar = {s.name: s.screen for s in commands.SCREENS if s.screen is not None}
    BINDINGS: ClassVar = commands.bindings()
    HELP: ClassVar = commands.key_help()

    def get_line_filters(self) -> Sequence[LineFilter]:
        """Textual's filters, and last the one that keeps control characters off the terminal (tui/safe.py)."""
        return [*super().get_line_filters(), NO_CONTROLS]

    def __init__(self, store_path: Path, runtime: Collecting | None = None, *, cursor: TimeCursor | None = None,
                 clock: Callable[[], int] = time.time_ns, refresh_s: float = 1.0,
                 stacks: list[StackConfig] | None = None, read_only: bool = False, store_label: str | None = None,
                 prefer_fleet: bool = False, overrides: dict[str, dict] | None = None, config: Config | None = None,
                 source: Callable[[], Source] | None = None):
        # [checks.RULE]: the colours and the Stack screen's verdict follow the rules the user tuned
        self.levels: Levels = levels(overrides)
        self.config = config  # its [[ssh]]/[[db2]] sections infer the DB2 VMs' stacks
        self.store_path = Path(store_path)
        # what the screens read: the store file, or InfluxDB (`--source influxdb`), same interface
        self._open = source or (lambda: Store(self.store_path))
        self._source_name = "source" if source else "store"
        self.runtime = runtime
        self.cursor = cursor or TimeCursor()
        self.clock = clock
        self.refresh_s = refresh_s
        self.configured = list(stacks or [])
        self.stacks = Stacks.configured(self.configured)  # for the main thread; the loader refreshes it
        self.read_only = read_only
        self.event_marks = EventMarks()  # vCenter's events on the Stack screen (the `E` key)
        self.store_label = store_label or str(store_path)
        self.replaying = cursor is not None and not cursor.live
        # `watch` on a store an agent writes: that agent's pid while it writes it, and when it was found stopped
        self.attached = runtime is None and not self.replaying and source is None
        self.agent_pid: int | None = None
        self.agent_stopped: str | None = None
        self._agent_checked = 0.0
        self.status_note = ""  # said first on every screen's status line (the agent stopped)
        # the whole status line a screen showed last, with the moment it was loaded at (`status_until_loaded`)
        self.last_status: tuple[tuple[int, int] | None, list[Status], list[Annotation]] | None = None
        self.timings = Timings.new()
        self.status_title = ""  # the title bar's text (not App.sub_title: that repaints every widget)
        self.last_target: Target | None = None
        self._reader: Reader | None = None
        self._load_lock = threading.Lock()
        self._collecting = None
        self._last_tick = time.monotonic()
        self._reload_timer = None
        self._prefetch_timer: Timer | None = None
        self._gc_threshold: tuple[int, ...] | None = None  # Python's, while the app runs the full passes
        self._gc_timer: Timer | None = None
        self._start_target: Target | None = None
        self._switching = False
        self._settled = False
        self._quitting = False  # exit() was called
        self._ran = False  # the app has been running (Textual's is_running is False before as after)
        self.flash: Flash | None = None
        self.DEFAULT_MODE = self._start_mode(prefer_fleet)  # read by App.__init__
        super().__init__()

    # --- start ----------------------------------------------------------------------------

    def _start_mode(self, prefer_fleet: bool) -> str:
        """Fleet when there is more than one stack or host, a stack's screen when there is one, else Local."""
        try:
            with self._open() as store:
                hosts: set[str | None] = set()
                for m in (*HOST_MEASUREMENTS, "esxtop_vm"):  # until two are found (a 10,000-VM store's LUNs: 80 ms)
                    hosts |= {s.tags.get("host") for s in store.series(m)}
                    hosts.discard(None)
                    if len(hosts) > 1:
                        break
                if not self.configured:  # (else the Fleet's first load infers the others)
                    self.stacks = self._infer(store)
        except StoreError:
            hosts = set()
        stacks = self.stacks.shown
        if prefer_fleet or len(stacks) > 1 or len(hosts) > 1:
            return "fleet"
        if len(stacks) == 1:
            self._start_target = Target.of_stack(stacks[0])
            return "fleet"
        return "local"

    def on_mount(self) -> None:
        # The loader thread decodes rows in Python: let the event loop take the GIL back within
        # 1 ms (the default is 5) so keys and frames are not held up behind a load.
        sys.setswitchinterval(0.001)
        if self.console.color_system in ("standard", "windows"):
            self.theme = "ansi-dark"  # 16 colours: stay within the terminal's own palette
        if self.runtime is not None:
            self._collecting = self.run_worker(self.runtime.run(), group="runtime", exit_on_error=False)
        self._watch_agent()
        self._title()
        self.set_interval(self.refresh_s, self._tick)
        if self._start_target is not None:
            self.open_target(self._start_target)
        else:
            self.call_after_refresh(self.reload)

    def _infer(self, source: Source) -> Stacks:
        cfg = self.config or (Config(stack=self.configured) if self.configured else None)
        return view_stacks(cfg, source)

    def stacks_for(self, reader: Reader) -> list[StackConfig]:
        """The stacks the Fleet shows (all of them looked at again every minute)."""
        self.stacks = reader.memo("stacks", 60, lambda: self._infer(reader))
        return list(self.stacks.shown)

    def _stacks_now(self) -> Stacks:
        """The stacks inferred again now, on the main thread: the loader's may be a minute old, and a name the user
        typed may be a stack found since."""
        try:
            with self._open() as store:
                if not self.configured:  # (else the Fleet's first load infers the others)
                    self.stacks = self._infer(store)
        except StoreError:
            pass
        return self.stacks

    # --- the time cursor and the loader -------------------------------------------------------

    @property
    def closing(self) -> bool:
        """Whether the app has begun to close (a quit, or whoever runs it tearing it down): from then on the
        loader, the timers and the workers leave it alone. Its timers may still fire and the loader thread may be
        in the middle of a read while Textual takes the screens down, and a screen taken down has no app."""
        if self.is_running:
            self._ran = True
            return self._quitting
        return self._ran or self._quitting

    def exit(self, *args: Any, **kwargs: Any) -> None:
        self._quitting = True
        super().exit(*args, **kwargs)

    def _top(self) -> Screen | None:
        """The screen shown (safe from the loader thread, and while the screens are taken down)."""
        stack = self._screen_stacks.get(self._current_mode)
        return stack[-1] if stack else None

    def _tick(self) -> None:
        if self.closing:
            return
        now = time.monotonic()
        playing = self.cursor.playing
        self.cursor.advance(now - self._last_tick, self.clock())
        self._last_tick = now
        ended = playing and not self.cursor.playing  # a replay reached its end: said, and its last frame drawn
        if ended:
            at = datetime.fromtimestamp(self.cursor.end(self.clock()) / 1e9).strftime("%H:%M:%S")
            self.notify(f"end of the recording at {at}: space plays it again from the start")
        news = now - self._agent_checked >= AGENT_CHECK_S and self._watch_agent()  # shown by a load
        if news or ended or self.cursor.live or self.cursor.playing:
            self.reload()
        else:
            self._title()

    def _watch_agent(self) -> bool:
        """Attached: whether the agent still writes the store (a new one may have started since); True when that
        changed (the title and the status lines say it)."""
        if not self.attached:
            return False
        self._agent_checked = time.monotonic()
        pid = store_writer(self.store_path)
        if pid is not None:
            changed = (pid, None) != (self.agent_pid, self.agent_stopped)
            self.agent_pid, self.agent_stopped, self.status_note = pid, None, ""
        elif self.agent_stopped is None:
            changed = True
            self.agent_stopped = datetime.fromtimestamp(self.clock() / 1e9).strftime("%H:%M:%S")
            who = f"agent (pid {self.agent_pid})" if self.agent_pid else "the agent writing this store"
            self.status_note = f"{who} stopped at {self.agent_stopped}: nothing new is collected"
        else:
            changed = False
        return changed

    def _title(self) -> None:
        end = datetime.fromtimestamp(self.cursor.end(self.clock()) / 1e9).strftime("%Y-%m-%d %H:%M:%S")
        if self.replaying:
            mode = "replay"
        elif self.runtime is not None:
            mode = "collecting"
        elif self.agent_stopped is not None:
            mode = f"agent {self.agent_pid or ''} stopped {self.agent_stopped}".replace("  ", " ")
        elif self.agent_pid is not None:
            mode = f"attached to agent {self.agent_pid}"
        else:
            mode = "attached"
        ro = " · read-only" if self.read_only else ""
        text = (f"{end} · {self.cursor.describe()} · window {format_duration(self.cursor.window_s)} · "
                f"{mode}{ro} · {self.store_label}")
        self.status_title = text
        for bar in self.screen.query(TitleBar):  # the screen's own bar: one shown again may hold an older moment
            if bar.text != text:
                bar.show(text)

    def reload(self) -> None:
        self._reload_timer = None
        if self.closing:
            return
        self._title()
        if self._prefetch_timer is not None:
            self._prefetch_timer.stop()
            self._prefetch_timer = None
        if isinstance(self.screen, ViewScreen):
            self._load(self.screen)

    def status_until_loaded(self) -> tuple[list[Status], list[Annotation]] | None:
        """What a screen shown before its first load says on its status line until that load: the whole status line
        another screen showed last, if it is of the moment this one loads (or the cursor moves on its own and this
        load is only its next moment); else nothing (a blank line, never another moment's figures)."""
        if self.last_status is None:
            return None
        at, collectors, markers = self.last_status
        now = self.clock()
        if self.cursor.live or self.cursor.playing or at == (self.cursor.since(now), self.cursor.end(now)):
            return collectors, markers
        return None

    def request_reload(self, now: bool = False) -> None:
        """Coalesce reloads asked for by resizes, scrolling and typing into one, 50 ms later. While the cursor moves
        on its own that load is of the moment already shown (`_redraw`): what the key changed (a sort, a filter, the
        rows scrolled to) is drawn from what was read, at once, and the next tick reads the next moment (a 10,000-VM
        Fleet read at a new moment after each key would take the loader away from the keys that follow; waiting for
        the tick instead showed a sort's trends up to a second late)."""
        if self.closing:
            return
        if now:
            self.reload()
        elif self._reload_timer is None:
            moving = self.cursor.live or self.cursor.playing
            self._reload_timer = self.set_timer(0.05, self._redraw if moving else self.reload)

    def _redraw(self) -> None:
        self._reload_timer = None
        if not self.closing and isinstance(self.screen, ViewScreen):
            self._load(self.screen, again=True)

    @work(thread=True, exclusive=True, group="load")
    def _load(self, screen: ViewScreen, again: bool = False) -> None:
        """The screen's view at the cursor (`again`: at the moment it shows, read when the load begins)."""
        now = self.clock()
        until, since = self.cursor.end(now), self.cursor.since(now)
        worker = get_current_worker()
        with self._load_lock:  # one store connection, one reader at a time
            if worker.is_cancelled or self.closing:
                return  # a newer load is queued behind this one, or the app is closing
            if again and screen.loaded_at is not None:
                since, until = screen.loaded_at
            t0 = time.perf_counter()
            view = self._read(screen, worker, since, until)
            if view is None:
                return
            self.timings.load_ms.append((time.perf_counter() - t0) * 1000)
        self._on_main(self._show, screen, view)
        # the rows on screen were shown first (a 10,000-VM Fleet's first load): the rest of the view now, even if a
        # newer load was asked for meanwhile (a live cursor's next tick would be shown first again, and the rest
        # never); it stops if the screen is left (`_read`: the reader's `cancelled`)
        while getattr(view, "rest", None) is not None:
            with self._load_lock:
                if self.closing:
                    return
                t0 = time.perf_counter()
                view = self._read(screen, worker, since, until, view.rest)
                if view is None:
                    return
                self.timings.load_ms.append((time.perf_counter() - t0) * 1000)
            self._on_main(self._show, screen, view)

    def _on_main(self, callback: Callable[..., None], *args: Any) -> None:
        """From the loader thread: run `callback` on the main thread and wait for it, unless the app closes first
        (then it is dropped, not waited for: the loop may never run it)."""
        done = threading.Event()

        def run() -> None:
            try:
                if not self.closing:
                    callback(*args)
            finally:
                done.set()

        try:
            if self.closing or not self.call_later(run):  # a message to the app: thread-safe
                return
        except RuntimeError:  # its loop has closed
            return
        while not done.wait(0.05):
            if self.closing:
                return

    def _read(self, screen: ViewScreen, worker: Any, since: int, until: int,
              load: Callable[..., Any] | None = None) -> Any:
        """`screen.load_view` (or `load`: the rest of a view shown first) in the loader thread: None if it was
        cancelled or the source failed (said on screen)."""
        try:
            if self._reader is None:
                self._reader = Reader(self._open())
            # a 10,000-VM Fleet's load takes a good part of a second: another screen's, after a key, does
            # not wait for it to finish (the next tick's load of this one does: it would never finish); none
            # goes on once the app is closing
            self._reader.cancelled = lambda: self.closing or (worker.is_cancelled and self._top() is not screen)
            self._reader.begin()
            # no cyclic garbage collection during a load: a 10,000-VM Fleet at a new moment makes some 100,000
            # objects that live on (rows, their figures), and the collector's passes over them while they were made
            # (full ones among them) took a third of the load. The young and middle generations' passes over them
            # follow here, not on the main thread (a young pass alone left them for the main thread's next middle
            # pass, 25-35 ms at 10,000 VMs, often in the frame that shows this load); the full passes (15-70 ms) wait
            # for a quiet moment (`_full_gc`), unless loads have left none for long
            gc.disable()
            try:
                view = load() if load is not None else screen.load_view(self._reader, since, until)
            finally:
                gc.enable()
                gc.collect(2 if gc.get_count()[2] >= 3 * FULL_GC_EVERY else 1)
        except LoadCancelledError:
            return None
        except StoreError as e:
            self._on_main(self._store_error, screen, str(e))
            return None
        screen.loaded_at = (since, until)
        return view

    def _show(self, screen: ViewScreen, view: Any) -> None:
        # a screen left (Esc) while its load ran is being taken down: its widgets may be gone already; it
        # loads again when it is shown again
        if not screen.is_attached or self._top() is not screen:
            return
        t0 = time.perf_counter()
        screen.show_view(view)
        self.timings.show_ms.append((time.perf_counter() - t0) * 1000)
        base = self.screen_stack[0]
        if base is not screen and isinstance(base, ViewScreen) and not self.cursor.live and not self.cursor.playing:
            if self._prefetch_timer is not None:
                self._prefetch_timer.stop()
            self._prefetch_timer = self.set_timer(PREFETCH_AFTER_S, self._prefetch)
        if not self._settled:
            self._settled = True
            self.set_timer(0.1, self._settle)
        if self._gc_threshold is not None and gc.get_count()[2] >= FULL_GC_EVERY:
            if self._gc_timer is not None:
                self._gc_timer.stop()
            self._gc_timer = self.set_timer(FULL_GC_IDLE_S, self._full_gc)

    def _full_gc(self) -> None:
        """A full garbage collection once due (`_settle` put Python's own off), when no view has been shown for a
        moment and no load is under way: between keys, or between two ticks, not in a key's frame or load."""
        self._gc_timer = None
        if self.closing:
            return
        if self._reload_timer is not None or any(
                w.group == "load" and w.state in (WorkerState.PENDING, WorkerState.RUNNING) for w in self.workers):
            self._gc_timer = self.set_timer(FULL_GC_IDLE_S, self._full_gc)
            return
        gc.collect(2)

    def _prefetch(self) -> None:
        """The cursor paused and moved on a screen opened from another (a Stack screen over the Fleet): once the
        user stops there, the screen under it is loaded at that moment too, and going back shows it at once (a
        10,000-VM Fleet at a moment it has not read takes a good part of a second). Any key's load comes first."""
        self._prefetch_timer = None
        if self.closing:
            return
        base = self.screen_stack[0]
        now = self.clock()
        busy = self._reload_timer is not None or any(
            w.group == "load" and w.state in (WorkerState.PENDING, WorkerState.RUNNING) for w in self.workers)
        if isinstance(base, ViewScreen) and base is not self.screen and not self.cursor.live and not busy and \
                base.loaded_at != (self.cursor.since(now), self.cursor.end(now)):
            self._load(base)  # a load of the current screen asked for later cancels it (one group, exclusive)

    def _settle(self) -> None:
        """Once the first view is up: compose the other screens, one per idle moment, so that a first
        visit costs no more than any later one; then take everything built so far (modules, widgets,
        the loader's series lists) out of the garbage collector's full passes, which otherwise
        stop both threads for ~100 ms every few seconds, typically in the middle of a keypress. The full passes
        that remain (15-70 ms at 10,000 VMs) are the app's from then on, at a quiet moment (`_full_gc`): Python's
        own came in the middle of screen switches."""
        if self.closing:
            return
        waiting = [m for m in self.MODES if m not in self._screen_stacks]
        if waiting:
            self._init_mode(waiting[0])  # Textual's own first step of switch_mode, without the switch
            self.set_timer(0.1, self._settle)
        else:
            gc.freeze()
            self._gc_threshold = gc.get_threshold()
            gc.set_threshold(self._gc_threshold[0], self._gc_threshold[1], 1_000_000)

    def on_unmount(self) -> None:
        gc.unfreeze()  # hand what _settle froze back to the collector, and its full passes
        if self._gc_threshold is not None:
            gc.set_threshold(*self._gc_threshold)

    def _store_error(self, screen: Screen, message: str) -> None:
        if screen.is_attached and not self.closing:
            for status in screen.query(StatusLine):
                status.update(Text(f"{self._source_name}: {message}", style="bold red"))

    # --- navigation ---------------------------------------------------------------------------

    def open_target(self, target: Target) -> None:
        """Drill down: a guest opens its Local screen, anything else a Stack screen, over the Fleet."""
        if self.current_mode != "fleet":
            self.switch_mode("fleet")
        if len(self.screen_stack) > MAX_DEPTH:  # Esc walks back through the last few, not all of them
            self.pop_screen()
        if target.scope == "guest":
            self.push_screen(LocalScreen(target.name))
            return
        self.last_target = target
        self.push_screen(StackScreen(target))

    def show_in_fleet(self, vms: list[str]) -> None:
        """The Fleet with only these VMs' rows (its filter: Esc clears it): where a Stack screen's culprits are."""
        self.action_screen("fleet")
        screen = self.screen
        if isinstance(screen, FleetScreen):
            names = "|".join(re.escape(vm) for vm in vms)
            screen.table.set_filter(f"^vm (?:[^ ]*/)?(?:{names}) ")  # a VM named vcenter/vm where names repeat
            screen.show_crumbs()
            self.request_reload()

    def open_subject(self, subject: dict[str, str]) -> None:
        """A finding's subject: the stack holding its DB2 or storage, else its VM, host or guest."""
        for st in self.stacks.every:
            if (subject.get("db2") and subject["db2"] == st.db2) or \
                    (subject.get("storage") and subject["storage"] in st.storage):
                self.open_target(Target.of_stack(st))
                return
        if subject.get("vm"):  # of its vCenter: VM names repeat across vCenters
            self.open_target(Target.of_vm(subject["vm"], subject.get("vcenter")))
            return
        for key, make in (("host", Target.of_host), ("guest", Target.of_guest)):
            if subject.get(key):
                self.open_target(make(subject[key]))
                return
        self.notify("this finding's subject has no screen of its own", severity="warning")

    def switch_mode(self, mode: str) -> AwaitMount:
        """Show the other screen at once. Textual holds every frame for a fixed 50 ms on a mode
        switch (`delay_update`) to hide a screen still composing its widgets; hold them only until
        the screen is mounted instead, which a screen seen before already is."""
        self._begin_batch()
        self._switching = True
        try:
            mounted = super().switch_mode(mode)
        except BaseException:
            self._end_batch()
            raise
        finally:
            self._switching = False
        if self.screen.is_mounted:
            self._end_batch()
        else:
            self.run_worker(self._show_when(mounted), group="switch")
        return mounted

    async def _show_when(self, mounted: AwaitMount) -> None:
        try:
            await mounted
        finally:
            self._end_batch()
            if not self.closing:
                self.screen.refresh()

    def delay_update(self, delay: float = 0.05) -> None:
        if not self._switching:  # switch_mode holds the frames itself
            super().delay_update(delay)

    def back(self) -> None:
        if len(self.screen_stack) > 1:
            self.pop_screen()

    def action_screen(self, name: str) -> None:
        if name == "stack":
            target = self.last_target or self._first_stack()
            if target is None:
                self.notify(f"no stack: the {self._source_name} has no vCenter VM, DB2 database or guest yet, and "
                            "no [[stack]] is configured", severity="warning")
                return
            if isinstance(self.screen, StackScreen) and self.screen.target == target:
                return
            self.open_target(target)
            return
        if self.current_mode != name:
            self.switch_mode(name)
        while len(self.screen_stack) > 1:  # a screen key goes to that screen's root, k9s's `:pod`
            self.pop_screen()

    def _first_stack(self) -> Target | None:
        """The Fleet's first stack, else the first of those `db2vtop stacks` lists."""
        stacks = self.stacks if self.stacks.every else self._stacks_now()
        first = (stacks.shown or stacks.every)[:1]
        return Target.of_stack(first[0]) if first else None

    # --- time ---------------------------------------------------------------------------------

    async def action_quit(self) -> None:
        if self.runtime is not None and self._collecting is not None:
            self.runtime.stop()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._collecting.wait(), 10)
        self.exit()

    def action_help(self) -> None:
        screen = self.screen
        own = getattr(screen, "HELP", [])
        name = type(screen).__name__.removesuffix("Screen")
        self.push_screen(HelpScreen([("Everywhere", self.HELP), (f"On the {name} screen", own)]))

    def action_toggle_events(self) -> None:
        self.event_marks.shown = not self.event_marks.shown
        self.notify("vCenter events " + ("shown" if self.event_marks.shown else "hidden"))
        self.request_reload(now=True)

    def action_toggle(self) -> None:
        self.cursor.toggle(self.clock())
        self.reload()

    def action_scrub(self, steps: int) -> None:
        self.cursor.scrub(steps, self.clock())
        self.reload()

    def action_zoom(self, step: int) -> None:
        self.cursor.zoom(step)
        self.reload()

    def action_start(self) -> None:
        if not self._learn_start():
            self.notify(f"the {self._source_name} holds no samples yet", severity="warning")
            return
        self.cursor.jump_start(self.clock())
        self.reload()

    def _learn_start(self) -> bool:
        """The store's first sample (a replay knows it; `watch` asks the store when it matters)."""
        if self.cursor.first_ns is None:
            try:
                with self._open() as store:
                    span = store.time_range()
            except StoreError:
                span = None
            if span is not None:
                self.cursor.first_ns = span[0]
        return self.cursor.first_ns is not None

    def action_speed(self, step: int) -> None:
        if not self.cursor.recording:
            self.notify("replay speed: only a replay plays (db2vtop replay)", severity="warning")
            return
        self.notify(f"replay at {self.cursor.set_speed(step):g}×")
        self._title()

    def action_live(self) -> None:
        if self.replaying:
            self.cursor.jump_end(self.clock())
        else:
            self.cursor.go_live()
        self.reload()

    # --- markers ------------------------------------------------------------------------------

    def action_mark(self, name: str | None = None) -> None:
        if self.read_only:
            self.notify("read-only: markers are off (replay with --annotate to add them)", severity="warning")
            return
        at = self.cursor.end(self.clock())

        def add(text: str | None) -> None:
            if text:
                self.add_marker(Annotation("marker", text, {"by": "tui"}, "", at))
                self.notify(f"marker “{text}” added")

        if name:
            add(name)
        else:
            self.push_screen(MarkerPrompt("marker " + datetime.fromtimestamp(at / 1e9).strftime("%H:%M:%S")), add)

    def add_marker(self, marker: Annotation) -> None:
        """Through our own pipeline when collecting, else into the store or its writer's inbox."""
        if self.runtime is not None:
            for out in self.runtime.outputs:
                out.submit(annotations=[marker])
        else:
            deliver_marker(self.store_path, marker)
        self.request_reload()

    # --- messages -------------------------------------------------------------------------------

    def notify(self, message: str, *, title: str = "", severity: str = "information",  # type: ignore[override]
               timeout: float | None = None, markup: bool = True) -> None:
        """One message at a time, on the key bar's line (k9s's flash) instead of a pile of toasts
        over the tables; the newest replaces the last."""
        text = f"{title}: {message}" if title else message  # as written: `[[stack]]` is not markup
        self.flash = Flash(text, severity, time.monotonic() + (timeout or FLASH_S))
        self._show_flash()
        self.set_timer((timeout or FLASH_S) + 0.05, self._show_flash)

    def _show_flash(self) -> None:
        if self.closing:
            return
        for screen in self.screen_stack:
            for bar in screen.query(KeyBar):
                bar.show_flash()

    # --- commands -------------------------------------------------------------------------------

    def action_command(self) -> None:
        self.push_screen(CommandBar(self._suggestions()), self._run_command)

    def _suggestions(self) -> list[str]:
        try:
            with Store(self.store_path) as store:
                names = list(dict.fromkeys(r.name for r in reversed(runs(store.annotations()))))
        except StoreError:
            names = []
        return commands.suggestions([f"zoom {format_duration(w)}" for w in WINDOWS]
                                    + [f"stack {s.name}" for s in self.stacks.every] + [f"run {n}" for n in names]
                                    + [f"{kind} {n}" for kind in NAMED_BY for n in self.names(kind)]
                                    + [f"speed {v:g}x" for v in SPEEDS])

    def _run_command(self, text: str | None) -> None:
        if not text:
            return
        try:
            self.run_command(text)
        except ValueError as e:
            self.notify(str(e), severity="error")

    def run_command(self, text: str) -> None:
        """k9s-style `:` commands (also what the command palette runs): tui/commands.py parses,
        one `_cmd_<verb>` method acts (a registered screen's verb without one shows that screen)."""
        command, arg = commands.parse(text)
        act = getattr(self, f"_cmd_{command.verb}", None)
        if act is None and command.verb in self.MODES:  # a screen's verb: that screen
            self.action_screen(command.verb)
            return
        assert act is not None, command.verb
        act(arg)

    def _cmd_quit(self, _arg: str) -> None:
        self.call_later(self.action_quit)

    def _cmd_findings(self, arg: str) -> None:
        if not arg:
            self.action_screen("findings")
            return
        self.switch_mode("findings")
        self.call_after_refresh(self._filter_findings, arg)

    def _cmd_local(self, arg: str) -> None:
        if arg:
            self.open_target(Target.of_guest(self._known("guest", arg)))
        else:
            self.action_screen("local")

    def _cmd_stack(self, arg: str) -> None:
        self._open_named_stack(arg)

    def _cmd_vm(self, arg: str) -> None:
        self.open_target(Target.of_vm(self._known("vm", arg)))

    def _cmd_host(self, arg: str) -> None:
        self.open_target(Target.of_host(self._known("host", arg)))

    def _cmd_guest(self, arg: str) -> None:
        self.open_target(Target.of_guest(self._known("guest", arg)))

    def names(self, kind: str) -> list[str]:
        """The VMs, hosts or guests the store has samples of (what `:vm`, `:host`, `:guest` accept)."""
        try:
            with self._open() as store:
                found = {sr.tags.get(kind) for m in NAMED_BY[kind] for sr in store.series(m)}
        except StoreError:
            return []
        found.discard(None)
        return sorted(found)  # type: ignore[arg-type]

    def _known(self, kind: str, name: str) -> str:
        """`name` itself, else the one name it starts, else a ValueError naming the closest ones:
        a typo is said at once, not shown as a screen that waits for samples that never come."""
        names = self.names(kind)
        if name in names:
            return name
        starting = [n for n in names if n.lower().startswith(name.lower())]
        if len(starting) == 1:
            return starting[0]
        close = starting or difflib.get_close_matches(name, names, n=5, cutoff=0.5) or \
            difflib.get_close_matches(name.lower(), [n.lower() for n in names], n=5, cutoff=0.3)
        word = {"vm": "VM", "host": "host", "guest": "guest"}[kind]
        if close:
            hint = f"did you mean {', '.join(close[:5])}?"
        elif names:
            hint = f"{word}s: {', '.join(names[:8])}{', …' if len(names) > 8 else ''}"
        else:
            hint = f"the {self._source_name} has no {word} yet"
        raise ValueError(f"no {word} {name!r}; {hint}")

    def _cmd_zoom(self, arg: str) -> None:
        self.cursor.set_window(parse_duration(arg))
        self.reload()

    def _cmd_goto(self, arg: str) -> None:
        self._learn_start()  # a time before the recording lands on its start
        wanted = self._parse_time(arg)
        self.cursor.goto(wanted, self.clock())
        landed = self.cursor.end(self.clock())
        if landed != wanted:  # said, not silent: `:goto 23:59` at 20:06 landed on now without a word
            at = datetime.fromtimestamp(landed / 1e9).strftime("%H:%M:%S")
            self.notify(f"{arg} is after the newest sample: at {at}" if wanted > landed else
                        f"{arg} is before the first sample: at {at}, the start", severity="warning")
        self.reload()

    def _cmd_speed(self, arg: str) -> None:
        if not self.cursor.recording:
            raise ValueError("replay speed: only a replay plays (db2vtop replay)")
        wanted = arg.lower().rstrip("x×")
        if wanted not in {f"{v:g}" for v in SPEEDS}:
            raise ValueError(f"speed is one of {', '.join(f'{v:g}x' for v in SPEEDS)}")
        self.cursor.speed = float(wanted)
        self._title()

    def _cmd_live(self, _arg: str) -> None:
        self.action_live()

    def _cmd_start(self, _arg: str) -> None:
        self.action_start()

    def _cmd_mark(self, arg: str) -> None:
        self.action_mark(arg or None)

    def _cmd_run(self, arg: str) -> None:
        """The run's span, centred in the smallest zoom step that holds it (`db2vtop run`, `mark --begin`)."""
        try:
            with Store(self.store_path) as store:
                run = find_run(store.annotations(), arg)  # RunNotFoundError is a ValueError: notified
        except StoreError as e:
            raise ValueError(str(e)) from None
        now = self.clock()
        span = run.until(now) - run.begin_ns
        self.cursor.window_s = next((w for w in WINDOWS if w * 1e9 >= span * 1.1), WINDOWS[-1])
        self.cursor.goto(run.until(now) + max(0, int(self.cursor.window_s * 1e9) - span) // 2, now)
        self.notify(f"run {run.name}: {span / 1e9:,.0f} s" + (", still running" if run.open else ""))
        self.reload()

    def _cmd_help(self, _arg: str) -> None:
        self.action_help()

    def _cmd_sort(self, arg: str) -> None:
        if not isinstance(self.screen, FleetScreen):
            raise ValueError("sort works on the Fleet")
        if not self.screen.sort_by(arg):
            raise ValueError(f"no column starting with {arg!r}")

    def _cmd_filter(self, arg: str) -> None:
        if not isinstance(self.screen, ViewScreen) or self.screen.filter_table() is None:
            raise ValueError("this screen has no table to filter")
        self.screen.set_filter(arg)

    def _filter_findings(self, text: str) -> None:
        if isinstance(self.screen, FindingsScreen):
            self.screen.table.set_filter(text)
            self.screen.show_crumbs()

    def _open_named_stack(self, name: str) -> None:
        """Any stack `db2vtop stacks` lists: by its name, else the one name it starts, else an error naming the
        closest ones."""
        def matching(stacks: Stacks) -> list[StackConfig]:
            exact = [s for s in stacks.every if s.name == name]
            return exact or [s for s in stacks.every if s.name.startswith(name)]

        match = matching(self.stacks) or matching(self._stacks_now())  # one found since the last look
        if len(match) != 1 and not (match and match[0].name == name):
            names = [s.name for s in self.stacks.every]
            close = [s.name for s in match] or difflib.get_close_matches(name, names, n=5, cutoff=0.5)
            hint = (f"did you mean {', '.join(close[:5])}?" if close else
                    f"stacks: {', '.join(names[:8])}{', …' if len(names) > 8 else ''}" if names else
                    "no stack yet: no [[stack]] is configured and no vCenter VM, DB2 database or guest is recorded")
            raise ValueError(f"no stack {name!r}; {hint}")
        self.open_target(Target.of_stack(match[0]))

    def _parse_time(self, text: str) -> int:
        """`14:05`, `14:05:30`, `2024-05-01 14:05` (local time) or `-10m` (before the cursor)."""
        if text.startswith("-"):
            return self.cursor.end(self.clock()) - int(parse_duration(text[1:]) * 1e9)
        base = datetime.fromtimestamp(self.cursor.end(self.clock()) / 1e9)
        for fmt in ("%Y-%m-%d %H:%M:%S", "%Y-%m-%d %H:%M", "%H:%M:%S", "%H:%M"):
            try:
                t = datetime.strptime(text, fmt)
            except ValueError:
                continue
            if not fmt.startswith("%Y"):
                t = base.replace(hour=t.hour, minute=t.minute, second=t.second, microsecond=0)
            return int(t.timestamp() * 1e9)
        raise ValueError(f"not a time: {text!r} (14:05, 14:05:30, 2024-05-01 14:05 or -10m)")

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        for c in commands.COMMANDS:  # every `:` command that needs no argument, as it is typed
            if (not c.arg or c.optional) and not (c.verb == "mark" and self.read_only):
                yield SystemCommand(f":{c.verb}", c.help, lambda v=c.verb: self.run_command(v))
        yield SystemCommand("pause / play", "key space", self.action_toggle)
        for st in self.stacks.shown:
            yield SystemCommand(f":stack {st.name}", f"DB2 {st.db2 or '—'}, VM {st.vm or '—'}",
                                lambda s=st: self.open_target(Target.of_stack(s)))
        for w in WINDOWS:
            yield SystemCommand(f":zoom {format_duration(w)}", "the window every chart shows",
                                lambda w=w: self.run_command(f"zoom {w}"))
        if isinstance(screen, StackScreen):
            from db2vtop.tui.panels import PANELS

            for k, name in PANELS.items():
                yield SystemCommand(f"Panel: {name}", f"key {k}", lambda k=k: screen.action_panel(k))
