"""The Local screen: one guest's CPU, memory, disks and network (what `make run` shows)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import ClassVar

from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.strip import Strip
from textual.widgets import Static

from db2vtop.agent.core.units import format_duration
from db2vtop.checks.scales import Level
from db2vtop.tui.chart import Marks, braille, buckets, level_style, nice_top, spark, time_axis
from db2vtop.tui.data import Reader
from db2vtop.tui.format import NONE, ago, bar, num, rate, size, value
from db2vtop.tui.loaders.local import LocalView, load_local, pick_guest
from db2vtop.tui.screens.base import ViewScreen
from db2vtop.tui.table import Column, GridTable, TableModel, TableRow
from db2vtop.tui.widgets import StatusLine, StripView, packed

SPARK = 20
GUTTER = 5
# iostat -x's names (its awaits are in ms): at 80 columns every figure fits, %util too; a figure or a trend that
# does not fit whole is left out (at 60 columns a header cut to `w_awai` named nothing)
DISK_COLUMNS = [Column("device", max_width=24, min_width=8), Column("type"), Column("r/s", right=True),
                Column("w/s", right=True), Column("read", right=True), Column("write", right=True),
                Column("r_await", right=True, whole=True), Column("w_await", right=True, whole=True),
                Column("aqu-sz", right=True, whole=True), Column("%util", right=True, whole=True),
                Column("%util trend", width=SPARK, sortable=False, whole=True)]
NET_COLUMNS = [Column("interface", max_width=24, min_width=8), Column("rx", right=True), Column("tx", right=True),
               Column("rx pkt/s", right=True), Column("tx pkt/s", right=True), Column("drops/s", right=True),
               Column("errors/s", right=True), Column("rx+tx trend", width=SPARK, sortable=False, whole=True)]


@dataclass
class LocalFrame:
    """The data and everything drawn from it in the loader thread."""

    view: LocalView
    cpu_chart: list[Strip]
    mem_chart: list[Strip]
    cpu_axis: Strip
    mem_axis: Strip
    disks: TableModel
    nets: TableModel


def _chart(points: list[tuple[int, float]], since: int, until: int, cells: tuple[int, int],
           marks: list[int], runs: list[tuple[int, int]], busy: Level) -> tuple[list[Strip], Strip]:
    cols = max(cells[0] - GUTTER, 4)
    values = buckets(points, since, until, 2 * cols)
    m = Marks.at(since, until, cols, marks, runs=runs)
    return (braille(values, max(cells[1], 1), 100.0, m, level=busy, gutter=GUTTER),
            time_axis(since, until, cols, m, GUTTER))


def _disks(view: LocalView, marks: Marks, busy: Level) -> TableModel:
    rows = []
    for d in view.disks:
        f = d.fields
        vals = [value(f, k) for k in ("read_iops", "write_iops", "read_bytes_per_s", "write_bytes_per_s",
                                      "read_await_ms", "write_await_ms", "queue_size", "util_pct")]
        dev = d.tags.get("device", "?")
        util = vals[7]
        rows.append(TableRow(dev, [dev, d.tags.get("type", ""), num(vals[0]), num(vals[1]), rate(vals[2]),
                                   rate(vals[3]), num(vals[4], 2), num(vals[5], 2), num(vals[6], 2),
                                   (num(util), level_style(busy, util, "")),
                                   spark(d.history, 100.0, marks, level=busy)],
                             (dev, d.tags.get("type", ""), *vals, None)))
    return TableModel(DISK_COLUMNS, rows)


def _nets(view: LocalView, marks: Marks) -> TableModel:
    rows = []
    for n in view.nets:
        f = n.fields
        drops = (value(f, "rx_drops_per_s") or 0.0) + (value(f, "tx_drops_per_s") or 0.0)
        errors = (value(f, "rx_errors_per_s") or 0.0) + (value(f, "tx_errors_per_s") or 0.0)
        vals = [value(f, k) for k in ("rx_bytes_per_s", "tx_bytes_per_s", "rx_packets_per_s", "tx_packets_per_s")]
        nic = n.tags.get("interface", "?")
        top = nice_top(max((v for v in n.history if v is not None), default=0.0), 1024.0)
        rows.append(TableRow(nic, [nic, rate(vals[0]), rate(vals[1]), num(vals[2]), num(vals[3]),
                                   (num(drops), "bold red" if drops > 0 else ""),
                                   (num(errors), "bold red" if errors > 0 else ""), spark(n.history, top, marks)],
                             (nic, *vals, drops, errors, None)))
    return TableModel(NET_COLUMNS, rows)


def _pane(name: str, title: str) -> Vertical:
    """A titled pane, its title set as it is composed (a screen composed ahead of its first visit
    can be taken down before its mount handler could look its panes up)."""
    pane = Vertical(id=name, classes="pane")
    pane.border_title = title
    return pane


class LocalScreen(ViewScreen):
    HELP: ClassVar = [("/", "filter the disks and interfaces"), ("esc", "back (when opened from the Fleet)")]
    FOCUS_TABLE: ClassVar = False  # its tables only show: no cursor

    def __init__(self, guest: str | None = None) -> None:
        super().__init__()
        self.guest = guest
        self.view: LocalView | None = None
        self.cpu_chart = StripView(id="cpu-chart", classes="chart")
        self.mem_chart = StripView(id="mem-chart", classes="chart")

    def body(self) -> ComposeResult:
        yield StatusLine(id="status")
        with Horizontal(id="top"):
            with _pane("cpu", "CPU busy %"):
                yield Static("waiting for the first samples…", id="cpu-summary")
                yield self.cpu_chart
                yield StripView(id="cpu-axis", classes="axis")
                yield Static(id="cpu-bars")
            with _pane("mem", "Memory used %"):
                yield Static(id="mem-summary")
                yield self.mem_chart
                yield StripView(id="mem-axis", classes="axis")
        with _pane("disk", "Disks"):
            yield GridTable(DISK_COLUMNS, id="disk-table", cursor=False)
        with _pane("net", "Network"):
            yield GridTable(NET_COLUMNS, id="net-table", cursor=False)

    def crumbs(self) -> list[str]:
        return ["Local", f"guest {self.guest}" if self.guest else "this machine"]

    def filter_tables(self) -> list[GridTable]:
        """`/` filters what is on screen: the disks and the interfaces."""
        return list(self.query(GridTable))

    def load_view(self, reader: Reader, since_ns: int, until_ns: int) -> LocalFrame:
        if self.guest is None:
            self.guest = pick_guest(reader)
        view = load_local(reader, self.guest, since_ns, until_ns, SPARK)
        marks = [m.ts for m in view.markers if m.event == "marker"]
        busy = self.levels["cpu_busy"]
        cpu, cpu_axis = _chart(view.cpu_history, since_ns, until_ns, self.cpu_chart.cells, marks, view.runs, busy)
        mem, mem_axis = _chart(view.mem_history, since_ns, until_ns, self.mem_chart.cells, marks, view.runs, busy)
        spark_marks = Marks.at(since_ns, until_ns, SPARK, marks)
        return LocalFrame(view, cpu, mem, cpu_axis, mem_axis, _disks(view, spark_marks, busy), _nets(view, spark_marks))

    def show_view(self, frame: LocalFrame) -> None:
        view = self.view = frame.view
        self.query_one(StatusLine).show(view.collectors, [m for m in view.markers if m.event == "marker"])
        self.cpu_chart.show(frame.cpu_chart)
        self.mem_chart.show(frame.mem_chart)
        self.query_one("#cpu-axis", StripView).show([frame.cpu_axis])
        self.query_one("#mem-axis", StripView).show([frame.mem_axis])
        self._show_cpu(view)
        self._show_mem(view)
        self.query_one("#disk-table", GridTable).set_model(frame.disks)
        self.query_one("#net-table", GridTable).set_model(frame.nets)
        for pane, title in (("#cpu", "CPU busy %"), ("#mem", "Memory used %"), ("#disk", "Disks"),
                            ("#net", "Network")):
            self._stale_title(pane, title, view)
        self.show_crumbs()

    def _stale_title(self, pane: str, title: str, view: LocalView) -> None:
        widget = self.query_one(pane)
        if view.guest is not None and view.age_s is None:  # the cursor is before the guest's first sample
            at = datetime.fromtimestamp(view.now_ns / 1e9).strftime("%H:%M:%S")
            widget.border_title = f"{title} — no sample at {at}"
            widget.add_class("stale")
        elif view.stale and view.age_s is not None:
            widget.border_title = f"{title} — STALE, last sample {ago(view.age_s)}"
            widget.add_class("stale")
        else:
            widget.border_title = f"{title} — {format_duration(view.window_s)}" if pane in ("#cpu", "#mem") else title
            widget.remove_class("stale")

    def _show_cpu(self, view: LocalView) -> None:
        """The guest's CPU at the cursor; without a sample then, every figure "—" (never the last ones shown)."""
        c = view.cpu
        steal = value(c, "steal_pct")
        box = self.query_one("#cpu-summary", Static)
        box.update(packed([
            [[(f"busy {num(value(c, 'busy_pct'))}%", "bold")], [(f"usr {num(value(c, 'user_pct'))}", None)],
             [(f"sys {num(value(c, 'system_pct'))}", None)], [(f"iowait {num(value(c, 'iowait_pct'))}", None)],
             [(f"steal {num(steal)}", level_style(self.levels["steal"], steal, ""))],
             [(f"idle {num(value(c, 'idle_pct'))}", None)]],
            [[(f"load {num(value(c, 'load1'), 2)} {num(value(c, 'load5'), 2)} {num(value(c, 'load15'), 2)}", None)],
             [(f"runnable {num(value(c, 'procs_running'), 0)}", None)],
             [(f"blocked {num(value(c, 'procs_blocked'), 0)}", None)]]], box.size.width))
        cells = [f"{name:>3} {bar(busy, 8)} {busy:5.1f}%" for name, busy in view.cpus]
        bars = self.query_one("#cpu-bars", Static)
        fits = (bars.size.width + 2) // (max(map(len, cells)) + 2) if cells and bars.size.width else 4
        per_line = max(1, min(4, fits, len(cells)))  # a CPU's bar is never split over two lines
        lines = ["  ".join(cells[i:i + per_line]) for i in range(0, len(cells), per_line)]
        bars.update("\n".join(lines))

    def _show_mem(self, view: LocalView) -> None:
        m = view.mem
        swapping = (value(m, "swap_in_bytes_per_s") or 0) > 0 or (value(m, "swap_out_bytes_per_s") or 0) > 0
        swap = "bold red" if swapping else None
        box = self.query_one("#mem-summary", Static)
        used, total, pct = size(value(m, 'used_bytes')), size(value(m, 'total_bytes')), num(value(m, 'used_pct'))
        whole = f"used {used} of {total} ({pct}%)"
        # a pane too narrow for the figure whole (60 columns) has it as two phrases, each kept whole
        figure = [[(whole, "bold")]] if not box.size.width or len(whole) <= box.size.width else \
            [[(f"used {used} ({pct}%)", "bold")], [(f"total {total}", None)]]
        box.update(packed([
            [*figure, [(f"available {size(value(m, 'available_bytes'))}", None)],
             [(f"cache {size(value(m, 'page_cache_bytes'))}", None)]],
            [[(f"swap used {size(value(m, 'swap_used_bytes'))}", swap)],
             [(f"in {rate(value(m, 'swap_in_bytes_per_s'))}", swap)],
             [(f"out {rate(value(m, 'swap_out_bytes_per_s'))}", swap)],
             [(f"major faults {num(value(m, 'major_faults_per_s'))}/s", None)]],
            [[(f"huge pages {num(value(m, 'hugepages_total'), 0)} total, {num(value(m, 'hugepages_free'), 0)} free",
               None)], [(f"reserved {num(value(m, 'hugepages_rsvd'), 0)}", None)],
             [(f"THP {m.get('thp_mode') or NONE}", None)]]],
            box.size.width))
