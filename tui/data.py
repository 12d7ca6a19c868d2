"""What the screens show, read from the store (always in the loader thread, never on the main one).

Staleness is judged from the data itself: a series is stale once its source has missed three
of its own sampling periods (the period measured over several of the source's series), and is
shown as such, never as current.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass
from statistics import median
from typing import Any

from db2vtop.agent.core.cadence import MIN_STALE_S, interval_of, is_stale
from db2vtop.agent.core.model import (
    ALERT_MEASUREMENT,
    SELF_MEASUREMENT,
    THREAD_MEASUREMENT,
    Fact,
    FieldValue,
    Finding,
    severity_rank,
)
from db2vtop.agent.core.runs import runs
from db2vtop.agent.core.source import CachedSource, Columns, Row, Series, Source
from db2vtop.checks.scales import NO_LEVEL, Level
from db2vtop.tui.chart import Marks, buckets, merge_max, nice_top, short, spark
from db2vtop.tui.table import TableModel, arrange

PERIOD_SERIES = 8  # series a measurement's sampling period is measured over
# A cached `latest` is brought forward by asking which series have newer samples (at most
# CATCH_UP ahead), looking LATE back for samples stamped in the past (vCenter's arrive 20-60 s
# after their time); every FULL_READ_S the series whose rows are older than that are read again
# (an outage's backfill reaches further).
CATCH_UP_NS = 600 * 10**9
LATE_NS = 180 * 10**9
RUN_LOOKBACK_NS = 24 * 3600 * 10**9
FULL_READ_S = 60.0
RECHECK_S = 1.0  # the same moment read again within this is not asked again what moved


def numbers(points: Iterable[tuple[int, FieldValue]]) -> list[tuple[int, float]]:
    return [(t, float(v)) for t, v in points if isinstance(v, int | float) and not isinstance(v, bool)]


class LoadCancelledError(Exception):
    """The load's screen is no longer wanted (another screen's load is waiting): it stops between reads."""


class Reader(CachedSource):
    """The loader thread's view of the source (a CachedSource: series lists until the source adds a
    series, facts for a minute), with the newest rows of whole measurements kept between loads and
    slow-changing reads memoised; every read is timed."""

    def __init__(self, source: Source, clock: Callable[[], float] = time.monotonic):
        super().__init__(source, facts_ttl_s=60.0, clock=clock)
        self._ids: dict[str, dict[tuple, int]] = {}
        self._seen: dict[int, tuple[dict[str, str], int]] = {}  # id(tags) -> (those tags, series id)
        # by (measurement, fields read): until, read at, rows by series id, last asked what moved
        self._latest: dict[tuple[str, tuple[str, ...] | None], tuple[int, float, dict[int, Row], float]] = {}
        self._columns: dict[tuple[str, tuple[str, ...]], tuple[int, float, Columns, float]] = {}  # the same, columns
        self._memo: dict[Any, tuple[float, Any]] = {}
        #: a view's table rows by key, with what each was made from: a row whose inputs did not change since the
        #: last load is not formatted again (a 10,000-VM Fleet moves a twentieth of its rows a second)
        self.made_rows: dict[str, Any] = {}
        self.made_targets: dict[tuple, Any] = {}  # what a Fleet row opens, by how it is made
        #: what a screen's load made last, with what it was made from (reused while that is the same)
        self.views: dict[str, tuple[Any, Any]] = {}
        #: counts the changes to the newest rows kept (a load that saw none made nothing new from them), and the
        #: facts read again
        self.changes = 0
        self.facts_changes = 0
        #: set by the loader: whether the load under way is no longer wanted (checked between whole reads)
        self.cancelled: Callable[[], bool] = lambda: False

    def begin(self) -> None:
        """Once per load: drop cached series lists if the source gained or lost series."""
        if self.refresh():
            self._ids.clear()
            self._seen.clear()
            self._latest.clear()
            self._columns.clear()
            self.made_rows.clear()
            self.made_targets.clear()
            self.views.clear()

    def find(self, measurement: str, pred: Callable[[dict[str, str]], bool]) -> list[Series]:
        return [s for s in self.series(measurement) if pred(s.tags)]

    def latest_at(self, measurement: str, until_ns: int, pred: Callable[[dict[str, str]], bool] | None = None,
                  since_ns: int = 0, fields: tuple[str, ...] | None = None) -> list[Row]:
        """Newest sample per series at the cursor; with a predicate, only those series are read;
        with `fields`, only those fields (the source keeps them decoded for the next moment).

        A whole measurement is cached (k9s's watch cache): while the cursor moves forward,
        only the samples that arrived since the last read are fetched and decoded.
        """
        if self.cancelled():
            raise LoadCancelledError
        if pred is not None:
            return CachedSource.latest_of(self, self.find(measurement, pred), since_ns, until_ns, fields)
        cached = self._latest.get((measurement, fields))
        now = self.clock()
        if cached is not None and cached[0] == until_ns and now - cached[3] < RECHECK_S:
            # a key's reload at a paused cursor (scrolling, typing a filter): read a moment ago
            return [r for r in cached[2].values() if r.ts >= since_ns]
        if cached is not None and cached[0] <= until_ns <= cached[0] + CATCH_UP_NS:
            rows = cached[2]
            moved, read_at = self._moved(measurement, cached[0], until_ns, cached[1], now,
                                         {sid: r.ts for sid, r in rows.items()})
            if len(moved) > len(rows) // 4:  # a vCenter's whole cycle, all of its VMs at one time: one bulk read
                rows = self._by_id(measurement, self.latest(measurement, 0, until_ns, fields))
            else:
                for sid, row in self._rows_of(measurement, moved, until_ns, fields):
                    rows[sid] = row
        else:
            read_at = now
            rows = self._by_id(measurement, self.latest(measurement, 0, until_ns, fields))
            self.changes += 1
        self._latest[(measurement, fields)] = (until_ns, read_at, rows, now)
        return [r for r in rows.values() if r.ts >= since_ns]

    def columns_at(self, measurement: str, until_ns: int, fields: tuple[str, ...]) -> Columns:
        """`latest_at` of a whole measurement's few fields, column-shaped (no row object per series: a 10,000-VM
        Fleet at a moment it has not shown joins its figures on these), kept and brought forward the same way."""
        if self.cancelled():
            raise LoadCancelledError
        cached = self._columns.get((measurement, fields))
        now = self.clock()
        if cached is not None and cached[0] == until_ns and now - cached[3] < RECHECK_S:
            return cached[2]
        if cached is not None and cached[0] <= until_ns <= cached[0] + CATCH_UP_NS:
            cols = cached[2]
            moved, read_at = self._moved(measurement, cached[0], until_ns, cached[1], now,
                                         dict(zip(cols.ids, cols.ts, strict=True)))
            if len(moved) > len(cols.ids) // 4:
                cols = self._columns_read(measurement, until_ns, fields)
            else:
                for sid, row in self._rows_of(measurement, moved, until_ns, fields):
                    cols.put(sid, row)
        else:
            read_at = now
            cols = self._columns_read(measurement, until_ns, fields)
            self.changes += 1
        self._columns[(measurement, fields)] = (until_ns, read_at, cols, now)
        return cols

    def columns_known(self, measurement: str, until_ns: int,
                      fields: tuple[str, ...]) -> tuple[Columns, set[int]] | None:
        """Before a whole measurement's first read (`columns_at`, which decodes a chunk of each of 10,000 series at
        a past moment): its series with a sample at or before `until`, from the source's index alone, their
        figures not read (the set of their ids: `read_into` reads a few). None once that read was made, or if the
        source cannot tell."""
        present = getattr(self.source, "present_at", None)
        if present is None or (measurement, fields) in self._columns:
            return None
        if self.cancelled():
            raise LoadCancelledError
        times = present(measurement, until_ns)
        series = [s for s in self.series(measurement) if s.id in times]
        ids = [s.id for s in series]
        return Columns(measurement, ids, [s.tags for s in series], [times[sid] for sid in ids],
                       {name: [None] * len(ids) for name in fields}), set(ids)

    def read_into(self, cols: Columns, unread: set[int], ids: Iterable[int], until_ns: int,
                  fields: tuple[str, ...]) -> None:
        """The newest rows of these of `cols`' unread series, read now (an index probe and a chunk each)."""
        wanted = unread.intersection(ids)
        for sid, row in self._rows_of(cols.measurement, wanted, until_ns, fields):
            cols.put(sid, row)
        unread -= wanted

    def _columns_read(self, measurement: str, until_ns: int, fields: tuple[str, ...]) -> Columns:
        """The source's own column-shaped read if it has one that answers (the store, from a span's plan), else its
        rows (the store's whole read that makes the plan for the next moments)."""
        own = getattr(self.source, "latest_columns", None)
        cols = own(measurement, until_ns, fields) if own is not None else None
        return cols if cols is not None else Columns.of(
            measurement, fields, self._by_id(measurement, self.latest(measurement, 0, until_ns, fields)))

    def _moved(self, measurement: str, since_ns: int, until_ns: int, read_at: float, now: float,
               kept: dict[int, int]) -> tuple[set[int], float]:
        """The series with rows newer than those kept (time by series id) from `since` (the last read) to `until`:
        the store says which moved. Every FULL_READ_S also those whose row is older than the catch-up window: a
        backfill (a source back from an outage) may reach further back than LATE, and only they can have missed one
        (a full read would decode a chunk for each of 10,000 VMs' series at a past cursor)."""
        moved = {sid for sid, ts in self.source.newest(measurement, since_ns - LATE_NS, until_ns)
                 if ts > kept.get(sid, -1)}
        if now - read_at >= FULL_READ_S:
            read_at = now
            moved |= {sid for sid, ts in kept.items() if ts < since_ns - LATE_NS}
        if moved:
            self.changes += 1
        return moved, read_at

    def _rows_of(self, measurement: str, moved: set[int], until_ns: int,
                 fields: tuple[str, ...] | None) -> list[tuple[int, Row]]:
        """The newest rows of a few series, by series id."""
        if not moved:
            return []
        by_id = {s.id: s for s in self.series(measurement)}
        return [(self._series_id(measurement, row.tags), row) for row in CachedSource.latest_of(
            self, [by_id[sid] for sid in moved if sid in by_id], 0, until_ns, fields)]

    def latest_of(self, series: Iterable[Series], since_ns: int = 0, until_ns: int | None = None,
                  fields: Collection[str] | None = None) -> list[Row]:
        """From the whole measurement's newest rows when they were read for this very cursor (the Fleet reads
        every VM's; each stack's entities then come from them), else from the source."""
        chosen = list(series)
        cached = self._latest.get((chosen[0].measurement, None)) if chosen and until_ns is not None else None
        if cached is not None and cached[0] == until_ns and all(s.measurement == chosen[0].measurement
                                                                  for s in chosen):
            rows = cached[2]
            return [rows[s.id] for s in chosen if s.id in rows and rows[s.id].ts >= since_ns]
        return super().latest_of(chosen, since_ns, until_ns, fields)

    def _by_id(self, measurement: str, rows: list[Row]) -> dict[int, Row]:
        """Rows by series id: `_series_id`'s lookup by identity inlined (30,000 rows at a 10,000-VM Fleet's moment)."""
        seen, out = self._seen, {}
        for r in rows:
            hit = seen.get(id(r.tags))
            out[hit[1] if hit is not None and hit[0] is r.tags else self._series_id(measurement, r.tags)] = r
        return out

    def _series_id(self, measurement: str, tags: dict[str, str]) -> int:
        # a source hands the same tags object for a series again and again (the store's kept series lists):
        # known by identity, its tags need not be sorted each time
        seen = self._seen.get(id(tags))
        if seen is not None and seen[0] is tags:
            return seen[1]
        ids = self._ids.get(measurement)
        if ids is None:
            ids = self._ids[measurement] = {tuple(sorted(s.tags.items())): s.id for s in self.series(measurement)}
        sid = ids.get(tuple(sorted(tags.items())), -1)
        if len(self._seen) > 200_000:  # a source that parses tags anew each time: start over rather than grow
            self._seen.clear()
        self._seen[id(tags)] = (tags, sid)
        return sid

    def facts(self, kind: str | None = None) -> list[Fact]:
        kept = self._facts.get(kind)
        found = super().facts(kind)
        if kept is not None and kept[1] is not found:
            self.facts_changes += 1  # read again (every minute): what was made from the last answer may change
        return found

    def period(self, measurement: str, rows: list[Row] | Callable[[], list[Row]], key: Any = None) -> float | None:
        """The sampling period these rows' source keeps, as the median over its freshest series:
        any one series may be new (a single sample) or have gaps. An unknown period is asked
        again at the next load, a known one is kept for a while (`rows` may be a function making them then)."""
        def estimate() -> float | None:
            freshest = sorted(rows() if callable(rows) else rows, key=lambda r: r.ts, reverse=True)[:PERIOD_SERIES]
            periods = [p for r in freshest if r.fields and (p := interval_of(self.window(
                self._series_id(measurement, r.tags), next(iter(r.fields)), r.ts - 3600 * 10**9, r.ts)))]
            return median(periods) if periods else None
        key = ("period", measurement, key)
        value = self.memo(key, 300, estimate)
        if value is None:
            del self._memo[key]
        return value

    def points(self, series: Series, field_name: str, since_ns: int, until_ns: int) -> list[tuple[int, float]]:
        return numbers(self.window(series.id, field_name, since_ns, until_ns))

    def run_spans(self, since_ns: int, until_ns: int) -> list[tuple[int, int]]:
        """(begin, end) of the benchmark runs overlapping [since, until] (begun up to a day before it),
        an open run ending at `until`: the time axes draw them as spans."""
        found = runs(self.annotations(since_ns - RUN_LOOKBACK_NS, until_ns))
        return [(r.begin_ns, r.until(until_ns)) for r in found if r.until(until_ns) >= since_ns]

    def every_finding(self, ttl_s: float = 5.0) -> list[Finding]:
        """Every finding, open or resolved (time travel filters them); re-read every few seconds."""
        return self.memo("findings", ttl_s, lambda: self.source.findings(open_only=False))

    def memo(self, key: Any, ttl_s: float, fn: Callable[[], Any]) -> Any:
        now = self.clock()
        if len(self._memo) > 5000:  # long scrubbing sessions: start over rather than grow
            self._memo.clear()
        hit = self._memo.get(key)
        if hit is not None and now - hit[0] < ttl_s:
            return hit[1]
        value = fn()
        self._memo[key] = (now, value)
        return value


# --- trends ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Trend:
    """One plotted quantity: fields of series (per measurement), combined per time bucket."""

    parts: tuple[tuple[tuple[Series, ...], tuple[str, ...]], ...]
    how: str = "max"  # across series and fields: "max" (the worst) or "sum" (a total)
    floor: float = 1.0  # the y axis reaches at least this (keeps noise from looking like a crisis)
    top: float | None = None  # a fixed top (percent of CPU)
    level: Level = NO_LEVEL

    @classmethod
    def of(cls, series: Iterable[Series], *fields: str, **kw: Any) -> Trend:
        return cls(((tuple(series), fields),), **kw)

    def __bool__(self) -> bool:
        return any(series for series, _ in self.parts)


def trend_values(reader: Reader, trend: Trend, since: int, until: int, n: int) -> list[float | None]:
    lists = [buckets(reader.points(s, f, since, until), since, until, n)
             for series, fields in trend.parts for s in series for f in fields]
    if trend.how == "sum":
        return _merge_sum(lists, n)
    return merge_max(lists) if lists else [None] * n


def _merge_sum(lists: list[list[float | None]], n: int) -> list[float | None]:
    out: list[float | None] = [None] * n
    for values in lists:
        for i, v in enumerate(values):
            if v is not None:
                out[i] = v + (out[i] or 0.0)
    return out


def top_of(trend: Trend, values: list[float | None]) -> float:
    if trend.top is not None:
        return trend.top
    return nice_top(max((v for v in values if v is not None), default=0.0), trend.floor)


# --- tables with trends for their visible rows -----------------------------------------


@dataclass(frozen=True)
class TableState:
    """What the table on screen shows, read by the loader so it draws trends for those rows only."""

    filter_text: str = ""
    sort_col: int | None = None
    sort_reverse: bool = False
    visible: tuple[int, int] = (0, 60)

    @classmethod
    def of(cls, table: Any) -> TableState:
        if table is None:
            return cls()
        return cls(table.filter_text, table.sort_col, table.sort_reverse, table.visible_range())


def fill_trends(reader: Reader, model: TableModel, trend_of: Callable[[str], Trend | None], column: int,
                state: TableState, since: int, until: int, width: int, markers: list[int]) -> None:
    """Draw the trend cell of the rows the table will show on screen, on one scale for the column
    (rows are compared with each other; the header names the top)."""
    arranged = (state.filter_text, state.sort_col, state.sort_reverse)
    if model.arranged is None or model.arranged[0] != arranged:
        model.arranged = (arranged, arrange(model.rows, *arranged))
    shown = model.arranged[1]
    lo, hi = state.visible
    marks = Marks.at(since, until, width, markers)
    drawn = [(row, t, trend_values(reader, t, since, until, width)) for row in shown[lo:hi]
             if (t := trend_of(row.key))]
    now_drawn = {id(row) for row, _, _ in drawn}
    for row in model.rows:  # a row kept from an earlier load shows no trend of another moment once off screen
        if row.made and id(row) not in now_drawn and row.cells[column]:
            row.cells[column] = ""
    if not drawn:
        return
    top = max(top_of(t, values) for _, t, values in drawn)
    for row, t, values in drawn:
        row.cells[column] = spark(values, top, marks, level=t.level)
    col = model.columns[column]
    model.columns[column] = dataclasses.replace(col, name=f"{col.name.split(' ≤')[0]} ≤{short(top)}")


# --- collectors ------------------------------------------------------------------------


@dataclass
class Status:
    collector: str
    status: str
    last_error: str
    duration_ms: float
    age_s: float
    errors: int
    skipped: int
    interval_s: float | None = None
    set_aside: int = 0  # records the agent's thread for it set aside (db2vtop_thread)
    thread: bool = False  # an agent thread (store writer, spool, checks) or alert receiver, not a collector's cycle
    clock_ms: float | None = None  # a vCenter's clock minus the agent's, while its timekeeping finding is open
    detail: str = ""  # shown after its status (an alert receiver's firing alerts and waiting changes)

    @property
    def stale(self) -> bool:
        return is_stale(self.age_s, self.interval_s)


def load_status(reader: Reader, until_ns: int, names: set[str] | None = None) -> list[Status]:
    """Each collector's last cycle at the cursor's time (of those `names`: a stack's sources), and whether it has
    gone quiet."""
    out = []
    series = reader.series(SELF_MEASUREMENT)
    if names is not None:  # a guest no `guest:NAME` collector feeds is this machine's: the local `guest` collector
        present = {s.tags.get("collector") for s in series}
        names = names | ({"guest"} if any(n.startswith("guest:") and n not in present for n in names) else set())
    wanted = [s for s in series if names is None or s.tags.get("collector", "?") in names]
    # one read for all (a collector's name is not its series: an InfluxDB sink's global tags can repeat it)
    newest = {frozenset(row.tags.items()): row for row in reader.latest_of(wanted, 0, until_ns)}
    for s in wanted:
        name = s.tags.get("collector", "?")
        row = newest.get(frozenset(s.tags.items()))
        if row is None:
            continue
        age = (until_ns - row.ts) / 1e9
        # its period, read from its last hour: only where it could be stale (a younger cycle never is: 200
        # collectors' hours took a Fleet's first load a second)
        interval = None if age <= MIN_STALE_S else reader.memo(
            ("interval", s.id, until_ns // 3_600_000_000_000), 300, lambda s=s, row=row: interval_of(
                reader.window(s.id, "duration_ms", row.ts - 3600 * 10**9, row.ts)))
        f = row.fields
        out.append(Status(name, str(f.get("status", "?")), str(f.get("last_error", "")),
                          float(f.get("duration_ms", 0.0)), age, int(f.get("errors", 0)),
                          int(f.get("skipped", 0)), interval))
    _with_clocks(reader, until_ns, out)
    return _with_alerts(reader, until_ns, _with_threads(reader, until_ns, out))


def _with_alerts(reader: Reader, until_ns: int, out: list[Status]) -> list[Status]:
    """Each alert receiver (db2vtop_alert) as an entry: its delivery state, the alerts it was told firing and the
    changes waiting in its spool."""
    series = reader.series(ALERT_MEASUREMENT)
    for row in reader.latest_of(series, 0, until_ns) if series else []:
        f = row.fields
        firing, pending = int(f.get("firing", 0)), int(f.get("pending", 0))
        detail = f"{firing} firing" + (f", {pending} waiting" if pending else "")
        out.append(Status(f"alerts→{row.tags.get('receiver', '?')}", str(f.get("state", "?")),
                          str(f.get("last_error", "")), 0.0, (until_ns - row.ts) / 1e9, 0, 0, thread=True,
                          detail=detail))
    return out


def _with_clocks(reader: Reader, until_ns: int, out: list[Status]) -> None:
    """A vCenter's clock beside its collector while a finding says it is off (the timekeeping rule judges
    the offset the collector reads each cycle): its samples are dated by that clock."""
    by_name = {s.collector: s for s in out}
    for f in open_at(reader.every_finding(), until_ns):
        offset = (f.evidence.get("values") or {}).get("vcenter_offset_ms")
        mine = by_name.get(f"vsphere:{f.subject.get('vcenter')}")
        if mine is not None and f.subject.get("layer") == "vcenter" and isinstance(offset, int | float):
            mine.clock_ms = float(offset)


def _with_threads(reader: Reader, until_ns: int, out: list[Status]) -> list[Status]:
    """The agent's threads (db2vtop_thread) joined in: a collector's count of records set aside, and each
    other thread that is not clean (retrying, failed, records set aside) as an entry of its own."""
    by_name = {s.collector: s for s in out}
    series = reader.series(THREAD_MEASUREMENT)
    for row in reader.latest_of(series, 0, until_ns) if series else []:
        f, thread = row.fields, row.tags.get("thread", "?")
        state, set_aside = str(f.get("state", "ok")), int(f.get("set_aside", 0))
        mine = by_name.get(thread.removeprefix("collector:"))
        if thread.startswith("collector:") and mine is not None:
            mine.set_aside = set_aside
            if state == "failed":  # its loop ended: whatever its last cycle said
                mine.status, mine.last_error = state, str(f.get("last_error", ""))
        elif state != "ok" or set_aside:
            out.append(Status(thread, state, str(f.get("last_error", "")), 0.0, (until_ns - row.ts) / 1e9, 0, 0,
                              set_aside=set_aside, thread=True))
    return out


# --- findings --------------------------------------------------------------------------


def open_at(findings: Iterable[Finding], until_ns: int) -> list[Finding]:
    return [f for f in findings if f.first_seen <= until_ns and (f.resolved_at is None or f.resolved_at > until_ns)]


def worst(findings: Iterable[Finding]) -> Finding | None:
    return min(findings, key=lambda f: (severity_rank(f.severity), -f.last_seen), default=None)
