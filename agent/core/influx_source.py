"""The fleet read back from InfluxDB: the embedded store's reader interface over InfluxQL.

InfluxQL, not Flux: it is the one query language InfluxDB 1.8 (`/query`), 2.x (`/query`, the
v1 compatibility API, through a DBRP mapping of the bucket) and 3.x (`/query`) all answer;
InfluxDB 3 dropped Flux. Every query is bounded by time and, where the view names series, by
their tags; the newest row of each series comes from `ORDER BY time DESC LIMIT 1` per series
(`last(*)` would give each field its own time). What the agents write (agent/sinks/lineproto.py)
is read back as it was stored: samples by measurement and tags, annotations, findings and facts
from their own measurements. A failed request raises SourceError, a StoreError, so every view
handles an unreachable InfluxDB as it handles an unreadable store file.

An answer is input from outside like any source's: each request is one whole-call deadline of
`[influxdb] timeout`, its answer at most `max_response_bytes` once inflated (agent/core/httpclient.py),
and its shape checked before use (`_checked`): an answer this reader cannot use is a SourceError that
says so, never a traceback.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Collection, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

from db2vtop.agent.core import tls
from db2vtop.agent.core.config import InfluxConfig
from db2vtop.agent.core.httpclient import AnswerTooLargeError, CallError, HttpClient
from db2vtop.agent.core.model import Annotation, Fact, FieldValue, Finding
from db2vtop.agent.core.source import Row, Series
from db2vtop.agent.core.store import StoreError
from db2vtop.agent.core.text import printable

ANNOTATION_MEASUREMENT = "db2vtop_annotation"
FINDING_MEASUREMENT = "db2vtop_finding"
FACT_MEASUREMENT = "db2vtop_fact"
RECORD_MEASUREMENTS = (ANNOTATION_MEASUREMENT, FINDING_MEASUREMENT, FACT_MEASUREMENT)
_END = 2**63 - 1
_SERIES_TTL_S = 30.0  # how long a listing of the series is trusted before it is read again
# "the newest value of each series" looks back this far at most: an unbounded last-row query
# would make InfluxDB open every shard of the retention period
LATEST_HORIZON_NS = 3600 * 10**9
# the caches that keep a 1 s refresh cheap. A cursor moving forward by up to CATCH_UP_NS reads the last
# LATE_NS again, GROUP BY series, newest first: a point written late (a guest's a flush interval after its
# time, vCenter's 20-60 s) is seen at the next refresh, as over the embedded store. InfluxDB spends a
# cursor per series and field on it whatever the time range, and answers a row per series: a measurement
# of more than PROBE_SERIES series is looked at by one field's newest time first (a cursor and a number a
# series), then only the series that moved are read. One of more than LARGE_SERIES (a 10,000-VM
# vCenter's: about half a second a look on a busy machine) is looked at one a refresh, and such looks
# take at most a 1/(1 + LARGE_DUTY) share of the time: its rows may be seconds behind the others' (about
# 10 s at 10,000 VMs, where vCenter's samples are 20 s apart). A jump, back in time, or FULL_READ_S
# (LARGE_FULL_READ_S) after the last whole read (an outage's backfill reaches further than LATE_NS) reads
# all again.
CATCH_UP_NS = 600 * 10**9
LATE_NS = 180 * 10**9
FULL_READ_S = 120.0
PROBE_SERIES = 500
LARGE_SERIES = 2000
LARGE_DUTY = 2.0
LARGE_FULL_READ_S = 600.0
RECHECK_S = 10.0  # a view's load asks each measurement in turn: at one cursor, InfluxDB is asked again after this long
WINDOW_SERIES = 100  # tag sets OR'ed in one statement
WINDOW_MARGIN_NS = 600 * 10**9
PREFETCH_SERIES = 300


@dataclass
class _Cache:
    """One field's points of the series a view asked for, over a window: brought forward by reading the
    last LATE_NS of those series again (late points included); a series not asked for between two catch-ups
    is forgotten (a Fleet scrolled through 10,000 VMs keeps only what it shows)."""

    since: int
    until: int
    read_at: float
    data: dict[tuple, dict[int, FieldValue]]  # by _key(tags): {ts: value}
    asked: set[tuple] = field(default_factory=set)

    def fresh_for(self, since_ns: int, until_ns: int, now: float) -> bool:
        """The cache answers [since, until] as it is or after a catch-up read (it also answers a range inside
        it: each collector's interval asks for the hour before its last row)."""
        return (self.since <= since_ns and self.since <= until_ns <= self.until + CATCH_UP_NS
                and now - self.read_at < FULL_READ_S)


@dataclass
class _Latest:
    """The newest row of every series of a measurement at `until`."""

    until: int
    read_at: float  # when it was read whole
    checked_at: float  # when InfluxDB was last asked for what moved
    rows: dict[tuple, Row]  # by _key(tags)
    probe: str | None = None  # a field every row has, of a measurement with many series: its newest time tells
    large: bool = False  # what moved; looked at one a refresh, within a share of the time


class SourceError(StoreError):
    """InfluxDB could not be read: says which server and what went wrong (never the token)."""


def ident(name: str) -> str:
    """An InfluxQL identifier, quoted."""
    return '"' + name.replace("\\", "\\\\").replace('"', '\\"') + '"'


def literal(value: str) -> str:
    """An InfluxQL string literal."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _where(since_ns: int, until_ns: int, tags: dict[str, str] | None = None) -> str:
    parts = [f"time >= {int(since_ns)}", f"time <= {int(min(until_ns, _END))}"]
    parts += [f"{ident(k)} = {literal(v)}" for k, v in sorted((tags or {}).items())]
    return " WHERE " + " AND ".join(parts)


def _key(tags: dict[str, str]) -> tuple[tuple[str, str], ...]:
    """A tag set's identity, cheaper than its canonical text (10,000 lookups a refresh)."""
    return tuple(sorted(tags.items()))


def parse_series_key(key: str) -> tuple[str, dict[str, str]]:
    """(measurement, tags) of a `SHOW SERIES` key such as `m,a=1,b=x\\,y`: split at unescaped
    commas, each tag at its first unescaped `=`, escapes removed."""
    items: list[tuple[str, int | None]] = []
    buf: list[str] = []
    eq: int | None = None
    i = 0
    while i < len(key):
        c = key[i]
        if c == "\\" and i + 1 < len(key):
            buf.append(key[i + 1])
            i += 2
            continue
        if c == ",":
            items.append(("".join(buf), eq))
            buf, eq = [], None
        elif c == "=" and eq is None and items:  # the measurement (first item) may hold a "="
            eq = len(buf)
        else:
            buf.append(c)
        i += 1
    items.append(("".join(buf), eq))
    (measurement, _), *pairs = items
    return measurement, {text[:at]: text[at:] for text, at in pairs if at is not None}


class InfluxSource:
    """A read-only connection to the `[influxdb]` the agents write; same methods as Store's readers."""

    def __init__(self, cfg: InfluxConfig):
        self.cfg = cfg
        self.path = cfg.url  # what messages name, as a Store names its file
        self.db, _, self.rp = cfg.bucket.partition("/")
        ref = cfg.token()
        try:
            token = ref.resolve() if ref else ""
        except Exception as e:
            raise SourceError(f"influxdb at {cfg.url}: token: {e}") from None
        self._headers = {"Accept": "application/json"}
        if token:
            self._headers["Authorization"] = f"Token {token}"
        try:
            context = tls.context(cfg.verify_tls, cfg.ca_file, "influxdb") if cfg.url.startswith("https:") else None
        except tls.TLSError as e:
            raise SourceError(str(e)) from None
        self._http = HttpClient(cfg.url, timeout=cfg.timeout, max_bytes=cfg.max_response_bytes, tls=context)
        self._lock = threading.Lock()
        self._series: dict[tuple, Series] = {}
        self._by_id: dict[int, Series] = {}
        self._listed_at = -_SERIES_TTL_S
        self._parsed: set[str] = set()  # the series keys of SHOW SERIES seen
        self._grouped: tuple[int, dict[str, list[Series]]] = (-1, {})
        self._version = 0
        self._types: dict[str, dict[str, str]] = {}
        self._latest: dict[str, _Latest] = {}
        self._asked: dict[str, float] = {}  # measurement -> when its newest rows were last asked for
        self._window_checked = -1e9
        self._large_at = (-1, -1e9)  # the cursor a large measurement was last looked at for, and when
        self._large_next = -1e9  # no large measurement is looked at before this (monotonic) time
        self._ids: dict[str, dict[tuple, int]] = {}  # measurement -> _key(tags) -> series id
        self._windows: dict[tuple[str, str], _Cache] = {}

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> InfluxSource:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- the wire -------------------------------------------------------------------

    def query(self, q: str) -> list[dict[str, Any]]:
        """The series of one InfluxQL statement's result."""
        return self.query_many([q])[0]

    def query_many(self, statements: list[str]) -> list[list[dict[str, Any]]]:
        """The series of each statement's result, all in one request."""
        fields = {"db": self.db, "q": ";".join(statements), "epoch": "ns"}
        if self.rp:
            fields["rp"] = self.rp
        headers = {**self._headers, "Content-Type": "application/x-www-form-urlencoded", "Accept-Encoding": "gzip"}
        try:
            r = self._http.request("POST", "/query", urlencode(fields).encode(), headers)
        except AnswerTooLargeError:
            raise SourceError(f"influxdb at {self.cfg.url} answered more than {self.cfg.max_response_bytes} bytes "
                              "(max_response_bytes); stopped reading") from None
        except CallError as e:
            why = str(e).removeprefix(self._http.where + ": ")
            raise SourceError(f"influxdb at {self.cfg.url} did not answer: {why}") from None
        try:
            doc = json.loads(r.body or b"{}")
        except (ValueError, RecursionError):
            doc = None
        if not isinstance(doc, dict):
            if r.status == 200:
                raise SourceError(f"influxdb at {self.cfg.url} answered something that is not a JSON object: "
                                  f"{printable(r.text(200))}")
            doc = {}
        results = doc.get("results")
        error = doc.get("error")
        if not error and isinstance(results, list):
            error = next((x.get("error") for x in results if isinstance(x, dict) and x.get("error")), None)
        if r.status != 200 or error:
            raise SourceError(f"influxdb at {self.cfg.url} answered {r.status}: "
                              f"{printable(str(error or r.text(200)), 500)}")
        return _checked(results, len(statements), self.cfg.url)

    # --- series ---------------------------------------------------------------------

    def _list_series(self) -> None:
        with self._lock:
            if time.monotonic() - self._listed_at < _SERIES_TTL_S:
                return
            known = dict(self._series)
            parsed = self._parsed
            for s in self.query("SHOW SERIES"):
                for (key,) in s.get("values") or []:
                    if key in parsed:  # parsed at an earlier listing (10,000 VMs are 60,000 keys)
                        continue
                    parsed.add(key)
                    m, tags = parse_series_key(key)
                    if m in RECORD_MEASUREMENTS:
                        continue
                    k = (m, _key(tags))
                    if k not in known:
                        known[k] = Series(len(known) + 1, m, tags)
            if len(known) != len(self._series):
                self._series = known
                self._by_id = {x.id: x for x in known.values()}
                self._version += 1
            self._listed_at = time.monotonic()

    def _series_of(self, measurement: str, tags: dict[str, str]) -> Series:
        k = (measurement, _key(tags))
        s = self._series.get(k)
        if s is None:  # written since the last listing
            with self._lock:
                s = self._series.setdefault(k, Series(len(self._series) + 1, measurement, tags))
                self._by_id[s.id] = s
                self._version += 1
        return s

    def measurements(self) -> list[str]:
        names = [v[0] for s in self.query("SHOW MEASUREMENTS") for v in s.get("values") or []]
        return sorted(n for n in names if n not in RECORD_MEASUREMENTS)

    def series(self, measurement: str | None = None) -> list[Series]:
        self._list_series()
        if measurement is None:
            return list(self._series.values())
        if self._grouped[0] != self._version:  # by measurement, once per listing (60,000 series at 10,000 VMs)
            grouped: dict[str, list[Series]] = {}
            for x in self._series.values():
                grouped.setdefault(x.measurement, []).append(x)
            self._grouped = (self._version, grouped)
        return list(self._grouped[1].get(measurement, ()))

    def series_version(self) -> int:
        self._list_series()
        return self._version

    # --- samples --------------------------------------------------------------------

    def _field_types(self, measurement: str) -> dict[str, str]:
        types = self._types.get(measurement)
        if types is None:
            types = {}
            for s in self.query(f"SHOW FIELD KEYS FROM {ident(measurement)}"):
                types.update({name: type_ for name, type_ in s.get("values") or []})
            self._types[measurement] = types
        return types

    def _rows(self, measurement: str, q: str) -> list[Row]:
        return self._to_rows(measurement, self.query(q))

    def _to_rows(self, measurement: str, found: list[dict[str, Any]]) -> list[Row]:
        """Rows of a `... GROUP BY *` result; a float field that JSON gave back as an integer is a float."""
        types = self._field_types(measurement)
        out = []
        for s in found:
            tags = {k: v for k, v in (s.get("tags") or {}).items() if v != ""}
            columns = s["columns"]
            floats = [i for i, c in enumerate(columns) if types.get(c) == "float"]
            for values in s.get("values") or []:
                for i in floats:
                    if isinstance(values[i], int):
                        values[i] = float(values[i])
                fields = {c: v for c, v in zip(columns[1:], values[1:], strict=True) if v is not None}
                if fields:
                    out.append(Row(values[0], s.get("name", measurement), tags, fields))
        return out

    def rows(self, measurement: str, since_ns: int = 0, until_ns: int | None = None) -> Iterator[Row]:
        """Every sample of one measurement in [since, until], oldest first."""
        found = self._rows(measurement, f"SELECT * FROM {ident(measurement)}"
                                        f"{_where(since_ns, until_ns or _END)} GROUP BY *")
        order = {_key(s.tags): s.id for s in self.series(measurement)}
        found.sort(key=lambda r: (r.ts, order.get(_key(r.tags), 0)))
        yield from found

    def _of(self, series: Iterable[Series], select: str, since_ns: int, until_ns: int, tail: str = "") -> list[Row]:
        """Rows of chosen series: one query per measurement, the series' tag sets OR'ed."""
        by_m: dict[str, list[Series]] = {}
        for s in series:
            by_m.setdefault(s.measurement, []).append(s)
        out = []
        for m, chosen in by_m.items():
            wanted = {_key(s.tags) for s in chosen}
            alts = " OR ".join("(" + " AND ".join(f"{ident(k)} = {literal(v)}" for k, v in sorted(s.tags.items()))
                               + ")" for s in chosen if s.tags)
            where = _where(since_ns, until_ns) + (f" AND ({alts})" if alts else "")
            out += [r for r in self._rows(m, f"SELECT {select} FROM {ident(m)}{where} GROUP BY *{tail}")
                    if _key(r.tags) in wanted]
        return out

    def rows_of(self, series: Iterable[Series], since_ns: int = 0, until_ns: int | None = None) -> Iterator[Row]:
        chosen = list(series)
        rows = self._of(chosen, "*", since_ns, until_ns or _END)
        order = {(s.measurement, _key(s.tags)): i for i, s in enumerate(chosen)}
        rows.sort(key=lambda r: (order[r.measurement, _key(r.tags)], r.ts))
        yield from rows

    def _latest_rows(self, measurement: str, until_ns: int, check: bool = False) -> dict[tuple, Row]:
        """The newest row of every series of a measurement at `until`, by _key(tags): read whole the first
        time, after a jump, back in time and every FULL_READ_S; else brought forward (see _Latest) together
        with the other measurements asked for lately, in one request. `check` asks InfluxDB again at the
        cursor the rows were read for (a reader's question of what moved: late points)."""
        now = time.monotonic()
        self._asked[measurement] = now
        c = self._latest.get(measurement)
        if c is not None and c.until == until_ns and not (check and now - c.checked_at >= RECHECK_S):
            return c.rows  # read at this cursor already (every collector's row asks in turn)
        if c is None or not c.until <= until_ns <= c.until + CATCH_UP_NS or now - c.read_at >= (
                LARGE_FULL_READ_S if c.large else FULL_READ_S):
            self._latest[measurement] = c = self._read_latest(measurement, until_ns)
            return c.rows
        due: dict[str, _Latest] = {}
        large: list[tuple[float, str]] = []
        for m, x in self._latest.items():
            if (now - self._asked.get(m, -1e9) >= FULL_READ_S or not x.until <= until_ns <= x.until + CATCH_UP_NS
                    or (m != measurement and x.until == until_ns and now - x.checked_at < RECHECK_S)):
                continue
            if x.large:
                if now >= self._large_next:
                    large.append((x.checked_at, m))
            else:
                due[m] = x
        if large and (self._large_at[0] != until_ns or now - self._large_at[1] >= RECHECK_S):
            self._large_at = (until_ns, now)  # one large measurement a cursor, the one looked at longest ago
            m = min(large)[1]
            due[m] = self._latest[m]
        if not due:
            return c.rows
        t = time.perf_counter()
        names = list(due)
        statements = []
        for m in names:
            x = due[m]
            where = _where(x.until - LATE_NS, until_ns)
            statements.append(f"SELECT last({ident(x.probe)}) FROM {ident(m)}{where} GROUP BY *" if x.probe else
                              f"SELECT * FROM {ident(m)}{where} GROUP BY * ORDER BY time DESC LIMIT 1")
        reads: list[tuple[str, str]] = []
        for m, found in zip(names, self.query_many(statements), strict=True):
            x = due[m]
            if x.probe:  # which series moved, by the newest time of one field all of them have
                moved = []
                for s in found:
                    tags = {k: v for k, v in (s.get("tags") or {}).items() if v != ""}
                    old = x.rows.get(_key(tags))
                    for ts, _ in s.get("values") or []:
                        if old is None or ts > old.ts:
                            moved.append((ts, tags))
                if moved:
                    alts = " OR ".join("(" + " AND ".join(f"{ident(k)} = {literal(v)}" for k, v in sorted(t.items()))
                                       + ")" for _, t in moved if t) if len(moved) <= WINDOW_SERIES else ""
                    reads.append((m, f"SELECT * FROM {ident(m)}{_where(min(ts for ts, _ in moved), until_ns)}"
                                     f"{f' AND ({alts})' if alts else ''} GROUP BY * ORDER BY time DESC LIMIT 1"))
            else:
                self._merge(x, self._to_rows(m, found))
            x.until = until_ns
        if reads:
            for (m, _), found in zip(reads, self.query_many([q for _, q in reads]), strict=True):
                self._merge(due[m], self._to_rows(m, found))
        done = time.monotonic()
        for x in due.values():
            x.checked_at = done
            if x.large:  # the next large look waits LARGE_DUTY times as long as this one took
                self._large_next = done + LARGE_DUTY * (time.perf_counter() - t)
        return c.rows

    @staticmethod
    def _merge(x: _Latest, rows: list[Row]) -> None:
        for r in rows:
            key = _key(r.tags)
            old = x.rows.get(key)
            if old is None or old.ts <= r.ts:
                x.rows[key] = r

    def _read_latest(self, measurement: str, until_ns: int) -> _Latest:
        """A measurement's newest rows over the whole horizon."""
        found = self._to_rows(measurement, self.query(
            f"SELECT * FROM {ident(measurement)}{_where(until_ns - LATEST_HORIZON_NS, until_ns)}"
            " GROUP BY * ORDER BY time DESC LIMIT 1"))
        now = time.monotonic()
        x = _Latest(until_ns, now, now, {_key(r.tags): r for r in found})
        if len(x.rows) > PROBE_SERIES:
            common = set.intersection(*(set(r.fields) for r in x.rows.values()))
            x.probe = min(common) if common else None
            x.large = x.probe is not None and len(x.rows) > LARGE_SERIES
        return x

    def latest(self, measurement: str, since_ns: int = 0, until_ns: int | None = None,
               fields: Collection[str] | None = None) -> list[Row]:
        """The newest sample of each series of a measurement in [since, until] (at most an hour back)."""
        until = until_ns if until_ns is not None else time.time_ns()
        return [r for r in self._latest_rows(measurement, until).values() if r.ts >= since_ns]

    def latest_of(self, series: Iterable[Series], since_ns: int = 0, until_ns: int | None = None,
                  fields: Collection[str] | None = None) -> list[Row]:
        until = until_ns if until_ns is not None else time.time_ns()
        out = []
        rows: dict[str, dict[tuple, Row]] = {}  # each measurement's asked for once
        for s in series:
            found = rows.get(s.measurement)
            if found is None:
                found = rows[s.measurement] = self._latest_rows(s.measurement, until)
            r = found.get(_key(s.tags))
            if r is not None and r.ts >= since_ns:
                out.append(r)
        return out

    def newest(self, measurement: str, since_ns: int, until_ns: int) -> list[tuple[int, int]]:
        """(series id, newest ts) of the series with samples in [since, until] (a reader's question of what
        moved, asked every refresh for every measurement on screen: InfluxDB is asked again, the ids are
        looked up once per series)."""
        ids = self._ids.setdefault(measurement, {})
        out = []
        for key, r in self._latest_rows(measurement, until_ns, check=True).items():
            if since_ns <= r.ts <= until_ns:
                sid = ids.get(key)
                if sid is None:
                    sid = ids[key] = self._series_of(measurement, r.tags).id
                out.append((sid, r.ts))
        return sorted(out)

    def window(self, series_id: int, field_name: str, since_ns: int,
               until_ns: int | None = None) -> list[tuple[int, FieldValue]]:
        """One field of one series, from a cache per field that starts WINDOW_MARGIN_NS before the window
        first asked for (each collector's interval asks for the hour before its own last row). A series
        not cached yet is read alone, or with every other series of its measurement when it has few (200
        collectors' intervals are one request, not 200); the series asked for since are brought up to
        date together, the last LATE_NS of each field's in one statement of one request (trend columns
        of 60 rows cost one request a refresh, not 120)."""
        s = self._by_id.get(series_id)
        if s is None:
            return []
        until = until_ns if until_ns is not None else time.time_ns()
        now = time.monotonic()
        cached = self._windows.get((s.measurement, field_name))
        if not (cached and cached.fresh_for(since_ns, until, now)):
            old = cached
            cached = self._windows[s.measurement, field_name] = _Cache(since_ns - WINDOW_MARGIN_NS, until, now, {})
            if old is not None and old.asked:  # the series on screen, read again together
                cached.data = {k: {} for k in old.asked}
                self._read_windows([(s.measurement, field_name, cached, cached.since, until,
                                     [dict(k) for k in old.asked])])
        elif until > cached.until or now - self._window_checked >= RECHECK_S:
            due = {k: c for k, c in self._windows.items() if c.fresh_for(c.since, max(until, c.until), now)}
            for k in [k for k in self._windows if k not in due]:
                del self._windows[k]
            for c in due.values():
                if c is cached:
                    c.since = max(c.since, since_ns - WINDOW_MARGIN_NS)
                for gone in [k for k in c.data if k not in c.asked]:  # not drawn since the last catch-up
                    del c.data[gone]
                c.asked = set()
            self._read_windows([(*k, c, c.until - LATE_NS, max(until, c.until), None) for k, c in due.items()])
            self._window_checked = time.monotonic()
        key = _key(s.tags)
        cached.asked.add(key)
        if key not in cached.data:
            others = self.series(s.measurement)
            chosen = [s.tags] if len(others) > PREFETCH_SERIES else [
                x.tags for x in others if _key(x.tags) not in cached.data]
            for tags in chosen:
                cached.data[_key(tags)] = {}
            cached.data.setdefault(key, {})
            self._read_windows([(s.measurement, field_name, cached, cached.since, cached.until, chosen or [s.tags])])
        return sorted((ts, v) for ts, v in cached.data[key].items() if since_ns <= ts <= until)

    def _read_windows(self, reads: list[tuple[str, str, _Cache, int, int, list[dict[str, str]] | None]]) -> None:
        """Points into window caches, in one request: each cache's series (or the tag sets given) by their
        tags, WINDOW_SERIES a statement. Points that fell out of a cache's window are forgotten."""
        reads = [r for r in reads if r[2].data]
        statements: list[str] = []
        targets: list[tuple[str, str, _Cache]] = []
        for measurement, field_name, cached, since_ns, until_ns, tag_sets in reads:
            for points in cached.data.values():
                for ts in [t for t in points if t < cached.since]:
                    del points[ts]
            sets = [t for t in (tag_sets if tag_sets is not None else [dict(k) for k in cached.data]) if t]
            for i in range(0, max(len(sets), 1), WINDOW_SERIES):
                alts = " OR ".join("(" + " AND ".join(f"{ident(k)} = {literal(v)}" for k, v in sorted(t.items()))
                                   + ")" for t in sets[i:i + WINDOW_SERIES])
                where = _where(max(since_ns, cached.since), until_ns) + (f" AND ({alts})" if alts else "")
                statements.append(f"SELECT {ident(field_name)} FROM {ident(measurement)}{where} GROUP BY *")
                targets.append((measurement, field_name, cached))
            cached.until = max(cached.until, until_ns)
        if not statements:
            return
        for (measurement, field_name, cached), found in zip(targets, self.query_many(statements), strict=True):
            for r in self._to_rows(measurement, found):
                points = cached.data.get(_key(r.tags))
                if points is not None:
                    points[r.ts] = r.fields[field_name]

    def time_range(self) -> tuple[int, int] | None:
        """First and last sample time over every measurement (two queries)."""
        ends = []
        for order in ("ASC", "DESC"):
            found = self.query(f"SELECT * FROM /.*/ ORDER BY time {order} LIMIT 1")
            stamps = [s["values"][0][0] for s in found
                      if s.get("values") and s.get("name") not in RECORD_MEASUREMENTS]
            if not stamps:
                return None
            ends.append(min(stamps) if order == "ASC" else max(stamps))
        return ends[0], ends[1]

    # --- records --------------------------------------------------------------------

    def facts(self, kind: str | None = None) -> list[Fact]:
        """The newest version of every entity's facts the agents wrote (of one kind, or all)."""
        where = f" WHERE {ident('fact')} = {literal(kind)}" if kind else ""
        out = []
        for s in self.query(f"SELECT last({ident('data')}) FROM {FACT_MEASUREMENT}{where} GROUP BY *"):
            tags = {k: v for k, v in (s.get("tags") or {}).items() if v != ""}
            fact_kind = tags.pop("fact", "")
            for ts, data in s.get("values") or []:
                fact = Fact(fact_kind, tags, self._fact_data(data), ts)
                if not fact.removed:
                    out.append(fact)
        out.sort(key=lambda f: (f.kind, _key(f.tags)))
        return out

    def fact_history(self, kind: str, tags: dict[str, str]) -> list[Fact]:
        """Each version of one entity's facts, oldest first."""
        out: list[Fact] = []
        for s in self.query(f"SELECT {ident('data')} FROM {FACT_MEASUREMENT}"
                            f"{_where(0, _END, {**tags, 'fact': kind})} GROUP BY *"):
            if {k: v for k, v in (s.get("tags") or {}).items() if v != "" and k != "fact"} != tags:
                continue
            for ts, data in s.get("values") or []:
                doc = self._fact_data(data)
                if not out or out[-1].data != doc:
                    out.append(Fact(kind, dict(tags), doc, ts))
        return out

    def _fact_data(self, data: Any) -> dict[str, Any]:
        doc = _doc(data, None)
        if not isinstance(doc, dict):
            raise SourceError(f"influxdb at {self.cfg.url}: a fact whose data is not a JSON object: "
                              f"{printable(str(data)[:80])}")
        return doc

    def annotations(self, since_ns: int = 0, until_ns: int | None = None) -> list[Annotation]:
        out = []
        for s in self.query(f"SELECT {ident('text')} FROM {ANNOTATION_MEASUREMENT}"
                            f"{_where(since_ns, until_ns or _END)} GROUP BY *"):
            tags = {k: v for k, v in (s.get("tags") or {}).items() if v != ""}
            event, name = tags.pop("kind", ""), tags.pop("name", "")
            out += [Annotation(event, name, dict(tags), text or "", ts) for ts, text in s.get("values") or []]
        out.sort(key=lambda a: a.ts)
        return out

    def findings(self, open_only: bool = True) -> list[Finding]:
        """Each finding's newest state as its agent recorded it; open ones only by default."""
        newest: dict[str, Finding] = {}
        for s in self.query(f"SELECT * FROM {FINDING_MEASUREMENT} GROUP BY * ORDER BY time DESC LIMIT 1"):
            subject = {k: v for k, v in (s.get("tags") or {}).items() if v != ""}
            rule, severity = subject.pop("rule", ""), subject.pop("severity", "info")
            row = dict(zip(s["columns"], s["values"][0], strict=True))
            ts = row["time"]
            resolved = row.get("state") == "resolved"
            f = Finding(rule, severity, subject, row.get("summary") or "", _doc(row.get("evidence"), {}),
                        row.get("why") or "", row.get("fix") or "", _doc(row.get("refs"), []),
                        int(row.get("first_seen_ns") or ts), ts, ts if resolved else None)
            if f.key not in newest or newest[f.key].last_seen < ts:  # a severity change is a new series
                newest[f.key] = f
        found = [f for f in newest.values() if not open_only or f.resolved_at is None]
        return sorted(found, key=lambda f: f.first_seen)


def _doc(text: Any, default: Any) -> Any:
    try:
        return json.loads(text) if text else default
    except (TypeError, ValueError, RecursionError):
        return default


_SCALARS = frozenset({str, int, float, bool, type(None)})
#: the columns of SHOW statements, which hold names
_NAMES = frozenset({"name", "key", "fieldKey", "fieldType"})


def _checked(results: Any, statements: int, url: str) -> list[list[dict[str, Any]]]:
    """Each statement's series, once the answer has the shape InfluxDB's /query gives (results of series,
    each with string columns, rows as long as the columns of scalar values, an integer time first);
    SourceError naming what is wrong otherwise."""
    def bad(what: str) -> SourceError:
        return SourceError(f"influxdb at {url} answered a query result that is not InfluxDB's: {what}")

    if not isinstance(results, list):
        raise bad("no results list")
    out: dict[int, list[dict[str, Any]]] = {}
    for i, x in enumerate(results):
        if not isinstance(x, dict):
            raise bad(f"result {i} is not an object")
        sid = x.get("statement_id", i)
        series = x.get("series") or []
        if type(sid) is not int or not isinstance(series, list):
            raise bad(f"result {i} has no statement id or series list")
        for s in series:
            if not isinstance(s, dict):
                raise bad("a series that is not an object")
            name, tags, columns, rows = s.get("name", ""), s.get("tags") or {}, s.get("columns"), s.get("values") or []
            if not (isinstance(name, str) and isinstance(tags, dict) and isinstance(columns, list) and columns
                    and isinstance(rows, list)):
                raise bad("a series without a name, tags, columns and values")
            if not all(type(k) is str and type(v) is str for k, v in tags.items()):
                raise bad("a tag that is not a string")
            if not all(type(c) is str for c in columns):
                raise bad("a column name that is not a string")
            width, timed = len(columns), columns[0] == "time"
            names = [j for j, c in enumerate(columns) if c in _NAMES]
            for row in rows:
                if type(row) is not list or len(row) != width or not all(type(v) in _SCALARS for v in row):
                    raise bad(f"a row of {printable(str(row)[:80])} for columns {printable(str(columns)[:80])}")
                if (timed and type(row[0]) is not int) or any(type(row[j]) is not str for j in names):
                    raise bad(f"a time or name that is not one in {printable(str(row)[:80])}")
        out[sid] = series
    return [out.get(i, []) for i in range(statements)]
