"""`db2vtop watch`: live guest panes read from the store.

Store reads run in a worker thread once a second; the main thread only turns a finished
LocalView into widget updates. With a runtime the app collects in-process; without one
it is attached to a store another process (an agent) writes.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from pathlib import Path
from typing import ClassVar

from rich.text import Text
from textual import work
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.widgets import DataTable, Footer, Header, Sparkline, Static

from agent.runtime import Runtime
from agent.store import Store, StoreError
from agent.units import format_bytes, format_duration
from tui.data import LocalView, load_local, pick_guest
from tui.format import ago, bar, num, rate, spark

WINDOWS = (60.0, 300.0, 900.0, 3600.0, 4 * 3600.0, 24 * 3600.0)
STATUS_STYLE = {"ok": "green", "error": "bold red", "timeout": "bold red", "skipped": "yellow"}

DISK_COLUMNS = ("device", "type", "r/s", "w/s", "read", "write", "r_await ms", "w_await ms", "aqu-sz", "%util",
                "util")
NET_COLUMNS = ("interface", "rx", "tx", "rx pkt/s", "tx pkt/s", "drops/s", "errors/s", "rx+tx")


class WatchApp(App):
    CSS_PATH = "app.tcss"
    TITLE = "db2vtop"
    BINDINGS: ClassVar = [
        Binding("q", "quit", "Quit"),
        Binding("space", "pause", "Pause"),
        Binding("plus,equals_sign", "zoom(-1)", "Zoom in", key_display="+"),
        Binding("minus", "zoom(1)", "Zoom out", key_display="-"),
    ]

    def __init__(self, store_path: Path, runtime: Runtime | None = None,
                 clock: Callable[[], int] = time.time_ns, refresh_s: float = 1.0):
        super().__init__()
        self.store_path = store_path
        self.runtime = runtime
        self.clock = clock
        self.refresh_s = refresh_s
        self.window_s = 300.0
        self.paused = False
        self.view: LocalView | None = None
        self._reader: Store | None = None
        self._guest: str | None = None
        self._collecting = None

    def compose(self) -> ComposeResult:
        yield Header(show_clock=True)
        yield Static(id="status")
        with Horizontal(id="top"):
            with Vertical(id="cpu", classes="pane"):
                yield Static("waiting for the first samples…", id="cpu-summary")
                yield Sparkline([], id="cpu-spark")
                yield Static(id="cpu-range", classes="range")
                yield Static(id="cpu-bars")
            with Vertical(id="mem", classes="pane"):
                yield Static(id="mem-summary")
                yield Sparkline([], id="mem-spark")
                yield Static(id="mem-range", classes="range")
        with Vertical(id="disk", classes="pane"):
            yield DataTable(id="disk-table", cursor_type="none", zebra_stripes=True)
        with Vertical(id="net", classes="pane"):
            yield DataTable(id="net-table", cursor_type="none", zebra_stripes=True)
        yield Footer()

    def on_mount(self) -> None:
        for pane, title in (("#cpu", "CPU"), ("#mem", "Memory"), ("#disk", "Disks"), ("#net", "Network")):
            self.query_one(pane).border_title = title
        self.query_one("#disk-table", DataTable).add_columns(*DISK_COLUMNS)
        self.query_one("#net-table", DataTable).add_columns(*NET_COLUMNS)
        if self.runtime is not None:
            self._collecting = self.run_worker(self.runtime.run(), group="runtime", exit_on_error=False)
        self._update_subtitle()
        self.load_view()
        self.set_interval(self.refresh_s, self.load_view)

    async def action_quit(self) -> None:
        if self.runtime is not None and self._collecting is not None:
            self.runtime.stop()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._collecting.wait(), 10)
        self.exit()

    def action_pause(self) -> None:
        self.paused = not self.paused
        self._update_subtitle()
        if not self.paused:
            self.load_view()

    def action_zoom(self, step: int) -> None:
        i = WINDOWS.index(self.window_s) if self.window_s in WINDOWS else 1
        self.window_s = WINDOWS[max(0, min(len(WINDOWS) - 1, i + step))]
        self._update_subtitle()
        self.load_view()

    def _update_subtitle(self) -> None:
        mode = "collecting" if self.runtime else "attached to the agent writing this store"
        state = "PAUSED" if self.paused else "live"
        guest = self._guest or "…"
        self.sub_title = f"{guest} · {state} · window {format_duration(self.window_s)} · {mode} · {self.store_path}"

    @work(thread=True, exclusive=True, group="load")
    def load_view(self) -> None:
        if self.paused:
            return
        try:
            if self._reader is None:
                self._reader = Store(self.store_path)
            if self._guest is None:
                self._guest = pick_guest(self._reader)
            view = load_local(self._reader, self._guest, self.window_s, self.clock())
        except StoreError as e:
            self.call_from_thread(self._show_error, str(e))
            return
        self.call_from_thread(self.show_view, view)

    def _show_error(self, message: str) -> None:
        self.query_one("#status", Static).update(Text(f"store: {message}", style="bold red"))

    def show_view(self, view: LocalView) -> None:
        self.view = view
        self._update_subtitle()
        self.query_one("#status", Static).update(self._status_text(view))
        self._show_cpu(view)
        self._show_mem(view)
        self._show_disks(view)
        self._show_nets(view)

    def _status_text(self, view: LocalView) -> Text:
        t = Text()
        for s in sorted(view.collectors, key=lambda s: s.collector):
            t.append("● ", style=STATUS_STYLE.get(s.status, "yellow"))
            t.append(f"{s.collector} {s.status} ", style="bold")
            t.append(f"{s.duration_ms:.1f}ms {ago(s.age_s)}")
            if s.status != "ok" and s.last_error:
                t.append(f" ({s.last_error[:80]})", style="red")
            if s.skipped:
                t.append(f" skipped {s.skipped}", style="yellow")
            t.append("   ")
        if not view.collectors:
            t.append("no collector has reported yet", style="yellow")
        return t

    def _stale_title(self, pane: str, title: str, view: LocalView) -> None:
        widget = self.query_one(pane)
        if view.stale and view.age_s is not None:
            widget.border_title = f"{title} — STALE, last sample {ago(view.age_s)}"
            widget.add_class("stale")
        else:
            widget.border_title = title
            widget.remove_class("stale")

    def _show_cpu(self, view: LocalView) -> None:
        self._stale_title("#cpu", "CPU", view)
        c = view.cpu
        if not c:
            return
        summary = Text()
        summary.append(f"busy {num(c.get('busy_pct', 0))}%", style="bold")
        summary.append(f"  usr {num(c.get('user_pct', 0))}  sys {num(c.get('system_pct', 0))}"
                       f"  iowait {num(c.get('iowait_pct', 0))}  ")
        summary.append(f"steal {num(c.get('steal_pct', 0))}", style="bold red" if c.get("steal_pct", 0) >= 5 else "")
        summary.append(f"  idle {num(c.get('idle_pct', 0))}\n")
        summary.append(f"load {c.get('load1', 0):.2f} {c.get('load5', 0):.2f} {c.get('load15', 0):.2f}"
                       f"   runnable {c.get('procs_running', 0)}  blocked {c.get('procs_blocked', 0)}")
        self.query_one("#cpu-summary", Static).update(summary)
        self._chart("cpu", "busy", view.cpu_history, view)
        per_line = 4 if len(view.cpus) > 4 else max(1, len(view.cpus))
        cells = [f"{name:>3} {bar(busy, 8)} {busy:5.1f}%" for name, busy in view.cpus]
        lines = ["  ".join(cells[i:i + per_line]) for i in range(0, len(cells), per_line)]
        self.query_one("#cpu-bars", Static).update("\n".join(lines))

    def _show_mem(self, view: LocalView) -> None:
        self._stale_title("#mem", "Memory", view)
        m = view.mem
        if not m:
            return
        t = Text()
        t.append(f"used {format_bytes(m.get('used_bytes', 0))} of {format_bytes(m.get('total_bytes', 0))}"
                 f" ({num(m.get('used_pct', 0))}%)", style="bold")
        t.append(f"  available {format_bytes(m.get('available_bytes', 0))}"
                 f"  cache {format_bytes(m.get('page_cache_bytes', 0))}\n")
        swapping = (m.get("swap_in_bytes_per_s", 0) or 0) > 0 or (m.get("swap_out_bytes_per_s", 0) or 0) > 0
        t.append(f"swap used {format_bytes(m.get('swap_used_bytes', 0))}"
                 f"  in {rate(m.get('swap_in_bytes_per_s', 0))}  out {rate(m.get('swap_out_bytes_per_s', 0))}",
                 style="bold red" if swapping else "")
        t.append(f"  major faults {num(m.get('major_faults_per_s', 0))}/s\n")
        t.append(f"huge pages {m.get('hugepages_total', 0)} total, {m.get('hugepages_free', 0)} free,"
                 f" {m.get('hugepages_rsvd', 0)} reserved  THP {m.get('thp_mode', '?')}")
        self.query_one("#mem-summary", Static).update(t)
        self._chart("mem", "used", view.mem_history, view)

    def _chart(self, pane: str, what: str, history: list[float], view: LocalView) -> None:
        """Sparklines scale to the window's own min..max, so the caption gives that range."""
        self.query_one(f"#{pane}-spark", Sparkline).data = history or [0.0]
        caption = (f"{what} % over {format_duration(view.window_s)}: min {min(history):.1f} · "
                   f"max {max(history):.1f} · {len(history)} samples") if history else ""
        self.query_one(f"#{pane}-range", Static).update(caption)

    def _show_disks(self, view: LocalView) -> None:
        self._stale_title("#disk", "Disks", view)
        table = self.query_one("#disk-table", DataTable)
        table.clear()
        for d in view.disks:
            f = d.fields
            util = float(f.get("util_pct", 0))
            table.add_row(
                d.tags.get("device", "?"), d.tags.get("type", ""), num(f.get("read_iops", 0)),
                num(f.get("write_iops", 0)), rate(f.get("read_bytes_per_s", 0)), rate(f.get("write_bytes_per_s", 0)),
                num(f.get("read_await_ms", 0), 2), num(f.get("write_await_ms", 0), 2), num(f.get("queue_size", 0), 2),
                Text(num(util), style="bold red" if util >= 90 else ""), spark(d.history, 20, 100.0))

    def _show_nets(self, view: LocalView) -> None:
        self._stale_title("#net", "Network", view)
        table = self.query_one("#net-table", DataTable)
        table.clear()
        for n in view.nets:
            f = n.fields
            drops = float(f.get("rx_drops_per_s", 0)) + float(f.get("tx_drops_per_s", 0))
            errors = float(f.get("rx_errors_per_s", 0)) + float(f.get("tx_errors_per_s", 0))
            table.add_row(
                n.tags.get("interface", "?"), rate(f.get("rx_bytes_per_s", 0)), rate(f.get("tx_bytes_per_s", 0)),
                num(f.get("rx_packets_per_s", 0)), num(f.get("tx_packets_per_s", 0)),
                Text(num(drops), style="bold red" if drops > 0 else ""),
                Text(num(errors), style="bold red" if errors > 0 else ""), spark(n.history, 20))
