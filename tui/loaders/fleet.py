"""The Fleet screen's data: one row per stack, VM, host and lone guest.

Everything comes from one `latest` read per measurement (2,000 VMs are one query, not
2,000) of the few fields a row shows, joined in memory; trends are drawn only for the rows on
screen, and a row's cells are made when it is first drawn.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from db2vtop.agent.core.cadence import stale_age_s
from db2vtop.agent.core.config import StackConfig
from db2vtop.agent.core.model import AGENT_MEASUREMENT, SINK_MEASUREMENT, Annotation, Finding, severity_rank
from db2vtop.agent.core.source import Columns, Row
from db2vtop.agent.core.text import plural
from db2vtop.checks.figures import TABLE, Figure
from db2vtop.checks.scales import Level, Levels
from db2vtop.checks.topology import resolve, short_name
from db2vtop.tui.chart import level_style
from db2vtop.tui.data import (
    LoadCancelledError,
    Reader,
    Status,
    TableState,
    Trend,
    fill_trends,
    load_status,
    open_at,
    worst,
)
from db2vtop.tui.format import NUMBERS, ago, num, value
from db2vtop.tui.layers import header_of, number_of
from db2vtop.tui.stacks import Target
from db2vtop.tui.table import Cell, Column, TableModel, TableRow, arrange, cell_text, fitted_widths

#: the Fleet's figure columns in order, and their widths: each shows the figure table's figures (checks/figures.py)
#: of that `fleet` name, the first of which gives its header, unit, level, decimals and its trend's floor
FIGURE_COLUMNS = (("cpu", 5), ("rdy", 5), ("balloon", 8), ("I/O", 6), ("log", 6), ("TPS", 7))
FLEET_FIGURES: dict[str, tuple[Figure, ...]] = {n: tuple(f for f in TABLE if f.fleet == n) for n, _ in FIGURE_COLUMNS}
CPU, READY, BALLOON, IO, LOG, TPS = (FLEET_FIGURES[n][0] for n, _ in FIGURE_COLUMNS)
#: what fills a column on the rows the figure table (a stack's layers) has no figure of: a host's ready and balloon,
#: esxtop's %USED of a VM vCenter does not report, an agent's own CPU
NOT_FIGURES = {"cpu": (("esxtop_vm", "used_pct"), (AGENT_MEASUREMENT, "cpu_pct")),
               "rdy": (("vsphere_host", "cpu_ready_pct"),), "balloon": (("vsphere_host", "mem_balloon_bytes"),)}


def _by_measurement(fields: list[tuple[str, str]]) -> dict[str, tuple[str, ...]]:
    out: dict[str, tuple[str, ...]] = {}
    for measurement, name in fields:
        out[measurement] = (*out.get(measurement, ()), name)
    return out


#: each figure column's fields, by measurement
COLUMN_FIELDS = {n: _by_measurement([(f.measurement, f.field) for f in FLEET_FIGURES[n]] + list(NOT_FIGURES.get(n, ())))
                 for n, _ in FIGURE_COLUMNS}
SEVERITY_CELL = {"critical": ("CRIT", "bold red"), "warning": ("WARN", "bold yellow"), "info": ("info", "cyan")}
# Numbers first, as esxtop and htop keep them: at 80 columns the figures show and the finding's
# text shrinks (a trend that does not fit whole is left out, what is past the edge is cut: `where`); on a wide
# terminal the finding's text takes the room there is. Fixed widths but for the names and the findings,
# measured as the rows are made: measuring 2,000 rows' cells every second is not free.
COLUMNS = [
    Column("kind", width=5), Column("name", max_width=30),
    *(Column(header_of(FLEET_FIGURES[n][0], n), width=width, right=True, descending=True)
      for n, width in FIGURE_COLUMNS),
    Column("worst open finding", max_width=100, min_width=16, keep=5),
    Column("rdy% trend", width=16, sortable=False, whole=True),
    Column("I/O ms trend", width=16, sortable=False, whole=True), Column("where", max_width=24),
]
NAME_COL, FINDING_COL, READY_TREND, IO_TREND, WHERE_COL = 1, 8, 9, 10, 11
KIND_ORDER = {"stack": 0, "vm": 1, "host": 2, "guest": 3, "agent": 4}
END = 2**63 - 1
# a figure of a row whose series are not read yet (a 10,000-VM Fleet's first load reads the rows on screen first)
PENDING = type("Pending", (), {"__repr__": lambda self: "PENDING", "__slots__": ()})()
# the sorts that order the rows without their figures: by kind, name or worst finding (the Fleet's own), or none
FIGURE_FREE = {None, 0, NAME_COL, FINDING_COL}
# series of vsphere_vm from which the first load shows the rows on screen before reading the others' figures
STAGED_FROM = 2000
# the fields each measurement's rows are read for (its columns' fields, in the columns' order): a 10,000-VM Fleet at a
# moment it has not shown before decodes these of each series, not every field, and the source keeps them decoded
# for the next moment
FIELDS = _by_measurement([(m, name) for by in COLUMN_FIELDS.values() for m, names in by.items() for name in names])
# a row's figures by kind, in the columns' order (cpu, rdy, balloon): a VM's, a host's, esxtop's, a guest's, an agent's
VM_CPU, VM_READY, VM_BALLOON = FIELDS["vsphere_vm"]
HOST_CPU, HOST_READY, HOST_BALLOON = FIELDS["vsphere_host"]
ESX_CPU, ESX_BALLOON = FIELDS["esxtop_vm"]
(GUEST_CPU,), (AGENT_CPU,) = FIELDS["guest_cpu"], FIELDS[AGENT_MEASUREMENT]


class Targets(dict):
    """What Enter opens on each row, by row key: a target, or how to make it (made when first asked for, and kept
    in `made`: most of 10,000 VMs' are never opened)."""

    def __init__(self, made: dict):
        super().__init__()
        self.made = made

    def __getitem__(self, key: str) -> Target:
        found = super().__getitem__(key)
        if isinstance(found, tuple):
            found = self.made.get(found) or self.made.setdefault(found, found[0](*found[1:]))
            self[key] = found
        return found

    def get(self, key: str, default: Any = None) -> Any:
        try:
            return self[key]
        except KeyError:
            return default


@dataclass
class FleetView:
    now_ns: int
    since_ns: int
    model: TableModel
    targets: Targets
    counts: dict[str, int]
    collectors: list[Status]
    markers: list[Annotation]
    findings: int = 0
    stale: int = 0
    notes: list[str] = field(default_factory=list)
    #: the rows on screen are shown first: the others' figures are read by this, in the loader thread, afterwards
    rest: Callable[[], FleetView] | None = None


def _newest_by(rows: list[Row], tag: str) -> dict[str, Row]:
    out: dict[str, Row] = {}
    for r in rows:
        key = r.tags.get(tag)
        if key and (key not in out or r.ts > out[key].ts):
            out[key] = r
    return out


def _keys(rd: Reader, cols: Columns, tag: str) -> list:
    """Each series' row key, in the columns' order: a VM's is (vCenter, name) (names repeat across vCenters), else
    the tag's value; None without one. Kept by series id: the same 10,000 at every moment."""
    known = rd.views.setdefault(("fleet-keys", cols.measurement, tag), {})
    try:
        return [known[sid] for sid in cols.ids]
    except KeyError:
        for sid, tags in zip(cols.ids, cols.tags, strict=True):
            if sid not in known:
                known[sid] = ((tags.get("vcenter"), tags["vm"]) if tags.get("vm") else None) if tag == "vm" else \
                    tags.get(tag) or None
        return [known[sid] for sid in cols.ids]


def _newest_at(cols: Columns, keys: list) -> dict[Any, int]:
    """The position of each key's newest row (a VM that moved host has a series for each)."""
    out = dict(zip(keys, range(len(keys)), strict=True))
    out.pop(None, None)
    if len(out) + keys.count(None) < len(keys):  # a key with several series: the newest (the first of equal times)
        out, ts = {}, cols.ts
        for i, key in enumerate(keys):
            if key is not None and (key not in out or ts[i] > ts[out[key]]):
                out[key] = i
    return out


def _worst_at(cols: Columns, keys: list, *names: str) -> dict[Any, float]:
    """`_worst_by` of columns: each key's highest value of the fields."""
    out: dict[Any, float] = {}
    columns = [cols.values[n] for n in names]
    for i, key in enumerate(keys):
        if key is None:
            continue
        for column in columns:
            v = column[i]
            if type(v) not in NUMBERS:
                continue
            v = float(v)
            if key not in out or v > out[key]:
                out[key] = v
    return out


def _worst_by(rows: list[Row], tag: str, *names: str, how: str = "max") -> dict[Any, float]:
    out: dict[Any, float] = {}
    for r in rows:
        key = r.tags.get(tag)
        if not key:
            continue
        for n in names:
            v = value(r.fields, n)
            if v is None:
                continue
            if how == "sum":
                out[key] = out.get(key, 0.0) + v
            elif key not in out or v > out[key]:
                out[key] = v
    return out


class _FindingIndex:
    def __init__(self, findings: list[Finding]):
        self.by: dict[tuple[str, str], list[Finding]] = defaultdict(list)
        for f in findings:
            for k, v in f.subject.items():
                if k != "layer" and v:
                    self.by[(k, v)].append(f)

    def worst_of(self, *pairs: tuple[str, str | None], exclude: str | None = None,
           vcenter: str | None = None) -> Finding | None:
        """The worst finding of these subjects (of `vcenter`'s, for those a vCenter names)."""
        if len(pairs) == 1:  # a VM's or host's row: most of a large fleet's rows have none
            if pairs[0] not in self.by:
                return None
        elif not any(v and (k, v) in self.by for k, v in pairs):
            return None
        found = [f for k, v in pairs if v for f in self.by.get((k, v), ()) if not (exclude and exclude in f.subject)
                 and (not vcenter or f.subject.get("vcenter", vcenter) == vcenter)]
        return worst(found)


def _finding_cell(f: Finding | None) -> Cell:
    """The value first (the row already names the subject), the rule after it: `CRIT CPU ready 12.9% · cpu-ready`."""
    if f is None:
        return ("ok", "green")
    word, st = SEVERITY_CELL.get(f.severity, (f.severity, ""))
    return [(word + " ", st), (f"{without_subject(f)} · {f.rule}", None)]


def without_subject(f: Finding) -> str:
    """A finding's summary less the subject names it starts with (`db2prod01: `, `esx01 naa.…: `)."""
    head, sep, rest = f.summary.partition(": ")
    names = {v for k, v in f.subject.items() if k != "layer"}
    if sep and rest and all(w in names or "=" in w for w in head.split()):
        return rest
    return f.summary


def _cells(kind: str, name: str, where: str, finding: Finding | None, tps_v: float | None, cpu: float | None,
           ready: float | None, balloon: float | None, log: float | None, io: float | None, status: Cell | None,
           stale: bool, levels: tuple[Level, Level, Level, Level]) -> list[Cell]:
    """A Fleet row's cells (made when first drawn): `stale` styles the whole row, not a cell."""
    busy, ready_level, log_level, io_level = levels
    cell = status if status is not None else _finding_cell(finding)  # an agent's delivery error, or a finding
    return [kind, name, _cell(CPU, cpu, busy), _cell(READY, ready, ready_level),
            _cell(BALLOON, balloon) if balloon is PENDING else
            (number_of(BALLOON, balloon), "bold red" if balloon else "") if balloon is not None else "—",
            _cell(IO, io, io_level), _cell(LOG, log, log_level), _cell(TPS, tps_v), cell, "", "", where]


def _cell(f: Figure, v: float | None, level: Level | None = None) -> Cell:
    if v is PENDING:
        return ("…", "dim")
    return (number_of(f, v), level_style(level, v, "") if level else "")


Source = tuple[str, str, str | None]  # whose trends a row draws: ("vm" | "host" | "guest", name, vCenter)


def _of_vcenter(series: list, vcenter: str | None) -> list:
    return [s for s in series if not vcenter or s.tags.get("vcenter", vcenter) == vcenter]


def _ready_trend(rd: Reader, source: Source | None, levels: Levels) -> Trend | None:
    if source is None or source[0] == "guest":
        return None
    kind, name, vcenter = source
    measurement = "vsphere_vm" if kind == "vm" else "vsphere_host"
    return Trend.of(_of_vcenter(rd.by_tag(measurement, kind).get(name, []), vcenter),
                    *COLUMN_FIELDS["rdy"][measurement], floor=_floor(READY), level=levels.of(READY.level))


def _floor(f: Figure) -> float:
    """A trend's floor: its figure's chart's."""
    assert f.chart is not None, f.id
    return f.chart.floor


def _io(measurement: str) -> tuple[tuple[str, ...], float]:
    """The I/O column's fields of `measurement`, and their trend's floor."""
    figure = next(f for f in FLEET_FIGURES["I/O"] if f.measurement == measurement)
    return COLUMN_FIELDS["I/O"][measurement], _floor(figure)


def _io_trend(rd: Reader, source: Source | None, levels: Levels) -> Trend | None:
    """What the VM sees (VMDK latency), the host's worst LUN (GAVG), or the guest's await."""
    if source is None:
        return None
    kind, name, vcenter = source
    level = levels.of(IO.level)
    if kind == "vm":
        fields, floor = _io("vsphere_vm_disk")
        return Trend.of(_of_vcenter(rd.by_tag("vsphere_vm_disk", "vm").get(name, []), vcenter), *fields, floor=floor,
                        level=level)
    if kind == "host":
        fields, floor = _io("vsphere_host_lun")
        return Trend.of(rd.by_tag("vsphere_host_lun", "host").get(name, ()), *fields, floor=floor, level=level)
    disks = [s for s in rd.by_tag("guest_disk", "guest").get(name, ()) if s.tags.get("type", "disk") == "disk"]
    fields, floor = _io("guest_disk")
    return Trend.of(disks, *fields, floor=floor, level=level)


class _Unread:
    """A first load's figures not read yet (`load_fleet`'s `stage`): vsphere_vm's series, and the VMs' disks and
    the hosts' LUNs, read for the rows on screen only."""

    def __init__(self, rd: Reader, vm_ids: set[int]):
        self.vm_ids = vm_ids  # of vsphere_vm's series
        self.vms: set[tuple[str | None, str]] = set()  # the VMs whose disks were read
        self.hosts: set[str] = set()  # the hosts whose LUNs were read
        self.vmdk: dict[tuple[str | None, str], float] = {}
        self.gavg: dict[str, float] = {}
        self.disks_of = rd.by_tag("vsphere_vm_disk", "vm")
        self.luns_of = rd.by_tag("vsphere_host_lun", "host")

    def read(self, rd: Reader, vm: Columns, until: int, vms: set[tuple[str | None, str]], hosts: set[str]) -> None:
        """These VMs' figures and disks, these hosts' LUNs (`_worst_at` of what the whole read would have)."""
        rd.read_into(vm, self.vm_ids, [sid for sid, key in zip(vm.ids, _keys(rd, vm, "vm"), strict=True)
                                       if key in vms], until, FIELDS["vsphere_vm"])
        new = vms - self.vms
        series = [s for vcenter, name in new for s in self.disks_of.get(name, ()) if s.tags.get("vcenter") == vcenter]
        for r in rd.latest_of(series, 0, until, FIELDS["vsphere_vm_disk"]) if series else ():
            _worst_into(self.vmdk, (r.tags.get("vcenter"), r.tags["vm"]), r.fields, FIELDS["vsphere_vm_disk"])
        self.vms |= new
        series = [s for name in hosts - self.hosts for s in self.luns_of.get(name, ())]
        for r in rd.latest_of(series, 0, until, FIELDS["vsphere_host_lun"]) if series else ():
            _worst_into(self.gavg, r.tags["host"], r.fields, FIELDS["vsphere_host_lun"])
        self.hosts |= hosts

    def io_of_vm(self, key: tuple[str | None, str]) -> Any:
        return self.vmdk.get(key) if key in self.vms or key[1] not in self.disks_of else PENDING

    def io_of_host(self, name: str, gavg: dict[str, float]) -> Any:
        return gavg.get(name) if name in self.hosts or name not in self.luns_of else PENDING


def _worst_into(out: dict, key: Any, fields: dict, names: tuple[str, ...]) -> None:
    for n in names:
        v = fields.get(n)
        if type(v) in NUMBERS and (key not in out or float(v) > out[key]):
            out[key] = float(v)


def load_fleet(rd: Reader, stacks: list[StackConfig], since: int, until: int, state: TableState,
               spark_cols: int, levels: Levels, stage: bool = True) -> FleetView:
    """The Fleet at `until`. `stage`: before the first whole read of the VMs (a chunk of each of 10,000 series
    decoded at a past moment takes seconds), the rows are all made, from the index, but only those on screen
    (and the stacks') with their figures; the others show `…`, and the view's `rest` makes the whole view."""
    def latest(measurement: str, pred: Callable[[dict[str, str]], bool] | None = None) -> list[Row]:
        return rd.latest_at(measurement, until, pred, fields=FIELDS.get(measurement))

    # the three measurements with a series per VM (or per LUN), column-shaped: no row object for each
    known = rd.columns_known("vsphere_vm", until, FIELDS["vsphere_vm"]) if stage and \
        state.sort_col in FIGURE_FREE and not state.filter_text and len(rd.series("vsphere_vm")) >= STAGED_FROM \
        else None
    unread: _Unread | None = None
    if known is not None:
        vm, ids = known
        unread = _Unread(rd, ids)
        names = {st.vm for st in stacks if st.vm}  # the stacks' rows come first
        unread.read(rd, vm, until, {k for k in _keys(rd, vm, "vm") if k and k[1] in names}, set())
        vmdk, luns_gavg = unread.vmdk, unread.gavg
    else:
        vm = rd.columns_at("vsphere_vm", until, FIELDS["vsphere_vm"])
        disks = rd.columns_at("vsphere_vm_disk", until, FIELDS["vsphere_vm_disk"])
        luns = rd.columns_at("vsphere_host_lun", until, FIELDS["vsphere_host_lun"])
        vmdk = _worst_at(disks, _keys(rd, disks, "vm"), *FIELDS["vsphere_vm_disk"])
        luns_gavg = _worst_at(luns, _keys(rd, luns, "host"), *FIELDS["vsphere_host_lun"])
    vm_at = _newest_at(vm, _keys(rd, vm, "vm"))
    esx_vms = _newest_by(latest("esxtop_vm"), "vm")
    hosts = _newest_by(latest("vsphere_host"), "host")
    esx_gavg = _worst_by(latest("esxtop_device"), "host", *FIELDS["esxtop_device"])
    gavg = {**esx_gavg, **luns_gavg}
    db = latest("db2_database")
    tps = _worst_by(db, "db2", *FIELDS["db2_database"], how="sum")
    log_ms = _worst_by(latest("db2_log"), "db2", *FIELDS["db2_log"])
    guest_cpu = _newest_by(latest("guest_cpu", lambda t: t.get("cpu") == "total"), "guest")
    guest_await = _worst_by(latest("guest_disk", lambda t: t.get("type", "disk") == "disk"), "guest",
                            *FIELDS["guest_disk"])
    agent_cpu = _newest_by(latest(AGENT_MEASUREMENT), "agent")
    sinks = _newest_by(rd.latest_at(SINK_MEASUREMENT, until), "agent")
    findings = open_at(rd.every_finding(), until)
    # the rows are made from these alone: with nothing new read (a key's reload at a paused cursor, the Fleet shown
    # again; live, until a row goes stale) they are the last load's, and only the trends of the rows on screen are
    # drawn again
    made_from = (rd.changes, stacks, levels, findings, guest_cpu, guest_await, rd.facts_changes)
    last = rd.views.get("fleet") if unread is None else None
    if last is not None and last[0] == made_from and last[3][0] <= until <= last[3][1]:
        rows, targets, sources, stale_rows, longest = last[1]
        valid = last[3]
    else:
        last = None
        rows, targets, sources, stale_rows, longest, valid_until = _fleet_rows(
            rd, stacks, until, levels, vm, vm_at, esx_vms, vmdk, hosts, gavg, db, tps, log_ms, guest_cpu, guest_await,
            agent_cpu, sinks, findings, unread)
        if unread is not None:  # the rows on screen: their figures read, and they are made again with them
            lo, hi = state.visible
            on_screen = [sources.get(r.key) for r in arrange(rows, state.filter_text, state.sort_col,
                                                              state.sort_reverse)[lo:hi]]
            unread.read(rd, vm, until, {(s[2], s[1]) for s in on_screen if s and s[0] == "vm"},
                        {s[1] for s in on_screen if s and s[0] == "host"})
            gavg = {**esx_gavg, **unread.gavg}
            rows, targets, sources, stale_rows, longest, valid_until = _fleet_rows(
                rd, stacks, until, levels, vm, vm_at, esx_vms, vmdk, hosts, gavg, db, tps, log_ms, guest_cpu,
                guest_await, agent_cpu, sinks, findings, unread)
        valid = (until, valid_until)
    model = TableModel(COLUMNS, rows, fitted_widths(COLUMNS, longest))
    markers = [a for a in rd.annotations(since, until) if a.event == "marker"]
    drawn = (since, until, state, spark_cols, tuple(m.ts for m in markers))
    if last is not None and last[2][0] == drawn:
        # the same rows' trends, drawn last time (their scales in the headers), arranged as they were
        model.columns, model.arranged = list(last[2][1]), last[2][2]
    else:
        marker_ts = list(drawn[4])
        fill_trends(rd, model, lambda key: _ready_trend(rd, sources.get(key), levels), READY_TREND, state, since,
                    until, spark_cols, marker_ts)
        fill_trends(rd, model, lambda key: _io_trend(rd, sources.get(key), levels), IO_TREND, state, since, until,
                    spark_cols, marker_ts)
    if unread is None:
        rd.views["fleet"] = (made_from, (rows, targets, sources, stale_rows, longest),
                             (drawn, tuple(model.columns), model.arranged), valid)
    counts: dict[str, int] = defaultdict(int)
    for r in rows:
        counts[r.key.partition(":")[0]] += 1
    view = FleetView(until, since, model, targets, dict(counts), load_status(rd, until), markers,
                     len(findings), stale_rows)
    if unread is not None:
        view.rest = lambda: load_fleet(rd, stacks, since, until, state, spark_cols, levels, stage=False)
    return view


def _fleet_rows(rd: Reader, stacks: list[StackConfig], until: int, levels: Levels, vm: Columns, vm_at: dict,
                esx_vms: dict, vmdk: dict, hosts: dict, gavg: dict, db: list[Row], tps: dict, log_ms: dict,
                guest_cpu: dict, guest_await: dict, agent_cpu: dict, sinks: dict, findings: list[Finding],
                unread: _Unread | None = None) -> tuple:
    """The Fleet's rows at `until` from what was read: (rows, targets, trend sources, stale rows, text widths, the
    last moment they hold for). `unread`: the figures not read yet (`PENDING`)."""
    fx = _FindingIndex(findings)
    stale_after = {m: rd.period(m, lambda by=by: list(by.values())) for m, by in  # one period per source
                   (("vsphere_host", hosts), ("guest_cpu", guest_cpu))}
    stale_after["vsphere_vm"] = rd.period("vsphere_vm", lambda: [vm.row(i) for i in vm_at.values()
                                                                 if unread is None or vm.ids[i] not in unread.vm_ids])
    stale_after["db2_database"] = rd.period("db2_database", db)

    rows: list[TableRow] = []
    targets = Targets(rd.made_targets)
    sources: dict[str, Source] = {}  # row key -> whose trends
    stale_rows = 0

    valid_until = END  # the rows stay as they are made until a row goes stale, or a stale row's age moves

    stale_age = {m: stale_age_s(p) for m, p in stale_after.items() if p}  # `is_stale` of each source's period

    def age_note(ts: int | None, measurement: str) -> tuple[str, bool]:
        """A row's note (` STALE 2m ago`) and whether it is stale, from its newest sample's time."""
        nonlocal valid_until
        if ts is None:
            return "", False
        age = (until - ts) / 1e9
        most = stale_age.get(measurement)
        if most is None:
            return "", False
        if age > most:
            valid_until = until
            return f" STALE {ago(age)}", True
        valid_until = min(valid_until, ts + int(most * 1e9))
        return "", False

    made = rd.made_rows
    levels_now = tuple(levels.of(f.level) for f in (CPU, READY, LOG, IO))  # what cells use
    made_targets = rd.made_targets

    def target(make: Callable[..., Target], *args: str | None) -> Target | tuple:
        """A VM's or host's target, made once, when it is first opened (`Targets`; 10,000 at the first load
        otherwise)."""
        return made_targets.get((make, *args)) or (make, *args)

    longest = {NAME_COL: 0, WHERE_COL: 0, FINDING_COL: 0}  # the columns as wide as their text: measured here

    def add(kind: str, name: str, where: str, finding: Finding | None, figures: tuple, target: Target,
            stale: bool, status: Cell | None = None, key: str | None = None, lower: str | None = None) -> None:
        """A row; `key` and `lower` (its name lowercased, the sort key) when known already (a VM's, kept). Made
        again only if what its cells are made from changed."""
        nonlocal stale_rows
        if key is None:
            key = f"{kind}:{name}"
        args = (kind, name, where, finding, *figures, status, stale, levels_now)  # flat: one object kept, not two
        hit = made.get(key)
        if hit is not None and hit.args == args:
            rows.append(hit)
        else:
            rank = (0, "") if status is not None else (severity_rank(finding.severity), finding.rule) if finding \
                else None
            tps_v, cpu, ready, balloon, log, io = figures if unread is None else (  # figures not read: sorted last
                None if v is PENDING else v for v in figures)
            # the cells are made when the row is first drawn: at a moment all figures moved, only the rows on screen
            row = made[key] = TableRow(key, None, (KIND_ORDER[kind], lower or name.lower(), cpu, ready, balloon, io,
                                                   log, tps_v, rank, None, None, where),
                                       f"{kind} {name} {where} {finding.rule if finding else ''}",
                                       "dim" if stale else None, _cells, args)
            rows.append(row)
        targets[key] = target
        if stale:
            stale_rows += 1
        if len(name) > longest[NAME_COL]:
            longest[NAME_COL] = len(name)
        if len(where) > longest[WHERE_COL]:
            longest[WHERE_COL] = len(where)
        if status is not None or finding is not None:  # most rows have none: "ok"
            longest[FINDING_COL] = max(longest[FINDING_COL], len(cell_text(status or _finding_cell(finding))))

    guests_in_use: set[str] = set()
    for st in stacks:  # each stack's entities at the cursor (checks/topology.py), as its Stack screen has them
        ent = resolve(rd, st, until, until)
        at = vm_at.get((ent.vcenter, st.vm)) if st.vm else None
        vm_row = vm.row(at) if at is not None else None
        guest, host = ent.guest, ent.host
        guests_in_use.add(guest or "")
        f = vm_row.fields if vm_row else {}
        cpu = value(guest_cpu[guest].fields, GUEST_CPU) if guest in guest_cpu else None
        io = vmdk.get((ent.vcenter, st.vm)) if st.vm else guest_await.get(guest or "")
        db_row = next((r for r in db if r.tags.get("db2") == st.db2), None) if st.db2 else None
        note, stale = age_note(vm_row.ts, "vsphere_vm") if vm_row else \
            age_note(db_row.ts if db_row else None, "db2_database")
        where = "/".join(x for x in (st.vm or guest, host) if x) + note
        finding = fx.worst_of(("db2", st.db2), ("vm", st.vm), ("guest", guest), ("host", host),
                        *(("storage", s) for s in ent.arrays), vcenter=ent.vcenter)
        key = f"stack:{st.name}"
        add("stack", st.name, where, finding, (tps.get(st.db2 or ""), cpu, value(f, VM_READY),
                                               value(f, VM_BALLOON), log_ms.get(st.db2 or ""), io),
            Target.of_stack(st), stale)
        if st.vm or guest:
            sources[key] = ("vm", st.vm, ent.vcenter) if st.vm else ("guest", guest or "", None)

    named = {name for _, name in vm_at}
    keys = set(vm_at) | {(None, name) for name in esx_vms if name not in named}
    order = rd.views.get("fleet-vm-order")  # the VMs in name order, with what each one's row keeps: the same
    if order is None or order[0] != keys:  # 10,000 at most moments
        repeated = {name for name, n in Counter(name for _, name in keys).items() if n > 1}
        made_vms = []
        for vm_key in sorted(keys, key=lambda k: (k[1], k[0] or "")):
            vcenter, name = vm_key
            shown = f"{vcenter}/{name}" if name in repeated and vcenter else name  # the vCenter tells them apart
            made_vms.append((vm_key, name, shown, f"vm:{shown}", shown.lower(), ("vm", name, vcenter),
                             target(Target.of_vm, name, vcenter)))
        order = rd.views["fleet-vm-order"] = (keys, made_vms, {short_name(name) for _, name in keys})
    with_findings = fx.by
    cpus, readies, balloons = (vm.values[n] for n in FIELDS["vsphere_vm"])
    vm_most = stale_age.get("vsphere_vm")
    vm_oldest = END  # the oldest fresh VM row's time (its row goes stale first): `age_note` inlined
    for i, (vm_key, name, shown, key, lower, source, vm_target) in enumerate(order[1]):
        if i % 2000 == 1999 and rd.cancelled():  # a load no longer wanted stops within a few milliseconds
            raise LoadCancelledError
        at = vm_at.get(vm_key)
        if at is not None and unread is not None and vm.ids[at] in unread.vm_ids:
            figures, ts, tags = (None, PENDING, PENDING, PENDING, None, PENDING), None, vm.tags[at]
        elif at is not None:  # `value` inlined: 10,000 VMs at each new moment
            cpu, ready, balloon = cpus[at], readies[at], balloons[at]
            figures = (None, float(cpu) if type(cpu) in NUMBERS else None,
                       float(ready) if type(ready) in NUMBERS else None,
                       float(balloon) if type(balloon) in NUMBERS else None, None,
                       vmdk.get(vm_key) if unread is None else unread.io_of_vm(vm_key))
            ts, tags = vm.ts[at], vm.tags[at]
        else:
            row = esx_vms[name]
            figures = (None, value(row.fields, ESX_CPU), None, value(row.fields, ESX_BALLOON), None,
                       vmdk.get(vm_key))
            ts, tags = row.ts, row.tags
        if vm_most is None or ts is None:
            note, stale = "", False
        elif (until - ts) / 1e9 > vm_most:
            note, stale = age_note(ts, "vsphere_vm")
        else:
            note, stale = "", False
            if ts < vm_oldest:
                vm_oldest = ts
        add("vm", shown, (tags.get("host") or "") + note,
            fx.worst_of(("vm", name), vcenter=vm_key[0]) if ("vm", name) in with_findings else None, figures,
            vm_target, stale, key=key, lower=lower)
        sources[key] = source

    if vm_most is not None and vm_oldest < END:
        valid_until = min(valid_until, vm_oldest + int(vm_most * 1e9))

    vms_on: dict[str, int] = defaultdict(int)
    for at in vm_at.values():
        vms_on[vm.tags[at].get("host", "")] += 1
    for name in sorted(set(hosts) | {r.tags.get("host", "") for r in esx_vms.values()} - {""}):
        row = hosts.get(name)
        f = row.fields if row else {}
        note, stale = age_note(row.ts if row else None, "vsphere_host")
        where = (row.tags.get("cluster", "") if row else "") + f" {plural(vms_on.get(name, 0), 'VM')}" + note
        add("host", name, where.strip(), fx.worst_of(("host", name), exclude="vm"),
            (None, value(f, HOST_CPU), value(f, HOST_READY), value(f, HOST_BALLOON), None,
             gavg.get(name) if unread is None else unread.io_of_host(name, gavg)), target(Target.of_host, name), stale)
        sources[f"host:{name}"] = ("host", name, None)

    vmshort_name = order[2]  # the VMs' short names (of vCenter's VMs and esxtop's)
    for name, row in sorted(guest_cpu.items()):
        if name in guests_in_use or short_name(name) in vmshort_name:
            continue
        note, stale = age_note(row.ts, "guest_cpu")
        add("guest", name, ("guest OS" + note).strip(), fx.worst_of(("guest", name)),
            (None, value(row.fields, GUEST_CPU), None, None, None, guest_await.get(name)), Target.of_guest(name),
            stale)
        sources[f"guest:{name}"] = ("guest", name, None)

    # the agents themselves (one per machine feeding the store or InfluxDB): delivery, backlog, own CPU
    for name, row in sorted(sinks.items()):
        valid_until = until  # "wrote 5s ago": an agent's row moves with the cursor
        f = row.fields
        last = f.get("last_success_ns")
        wrote = f"wrote {ago((until - last) / 1e9)}" if isinstance(last, int) and last else "nothing delivered yet"
        note, stale = age_note(row.ts, SINK_MEASUREMENT)
        error = str(f.get("last_error") or "")
        add("agent", name, f"sink {f.get('state', '?')} · {wrote} · backlog {num(value(f, 'pending'), 0)}{note}",
            None, (None, value(agent_cpu[name].fields, AGENT_CPU) if name in agent_cpu else None, None, None, None,
                   None), Target.of_guest(name), stale, [("ERR ", "bold red"), (error, None)] if error else None)
    return rows, targets, sources, stale_rows, longest, valid_until
