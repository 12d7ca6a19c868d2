"""The Local screen: one guest's CPU, memory, disks and network (what `make run` shows)."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Header, Sparkline, Static

from agent.store import Store
from agent.units import format_bytes, format_duration
from tui.data import LocalView, load_local, pick_guest
from tui.format import ago, bar, num, rate, spark
from tui.widgets import StatusLine

DISK_COLUMNS = ("device", "type", "r/s", "w/s", "read", "write", "r_await ms", "w_await ms", "aqu-sz", "%util",
                "util")
NET_COLUMNS = ("interface", "rx", "tx", "rx pkt/s", "tx pkt/s", "drops/s", "errors/s", "rx+tx")


def _display_table(id: str, columns: tuple[str, ...]) -> DataTable:
    """A table that only shows: it never takes focus, so home/end/arrows stay the app's time keys."""
    table = DataTable(id=id, cursor_type="none", zebra_stripes=True)
    table.add_columns(*columns)
    table.can_focus = False
    return table


class LocalScreen(Screen):
    def __init__(self) -> None:
        super().__init__()
        self.guest: str | None = None
        self.view: LocalView | None = None

    def compose(self) -> ComposeResult:
        yield Header()
        yield StatusLine(id="status")
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
            yield _display_table("disk-table", DISK_COLUMNS)
        with Vertical(id="net", classes="pane"):
            yield _display_table("net-table", NET_COLUMNS)
        yield Footer()

    def on_mount(self) -> None:
        for pane, title in (("#cpu", "CPU"), ("#mem", "Memory"), ("#disk", "Disks"), ("#net", "Network")):
            self.query_one(pane).border_title = title

    def load_view(self, store: Store, since_ns: int, until_ns: int) -> LocalView:
        """Runs in a worker thread."""
        if self.guest is None:
            self.guest = pick_guest(store)
        return load_local(store, self.guest, since_ns, until_ns)

    def show_view(self, view: LocalView) -> None:
        self.view = view
        self.query_one(StatusLine).show(view.collectors, view.markers)
        self._show_cpu(view)
        self._show_mem(view)
        self._show_disks(view)
        self._show_nets(view)

    def _stale_title(self, pane: str, title: str, view: LocalView) -> None:
        widget = self.query_one(pane)
        if view.stale and view.age_s is not None:
            widget.border_title = f"{title} — STALE, last sample {ago(view.age_s)}"
            widget.add_class("stale")
        else:
            widget.border_title = title
            widget.remove_class("stale")

    def _chart(self, pane: str, what: str, history: list[float], view: LocalView) -> None:
        """Sparklines scale to the window's own min..max, so the caption gives that range."""
        self.query_one(f"#{pane}-spark", Sparkline).data = history or [0.0]
        caption = (f"{what} % over {format_duration(view.window_s)}: min {min(history):.1f} · "
                   f"max {max(history):.1f} · {len(history)} samples") if history else ""
        self.query_one(f"#{pane}-range", Static).update(caption)

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
