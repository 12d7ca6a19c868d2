"""The read side's one interface: what every view (verdict, check engine, triage, report, TUI) reads.

Three things implement `Source`: the embedded store (agent/core/store/), InfluxDB
(agent/core/influx_source.py) and samples held in memory (`MemorySource`: what triage gathered).
Readers never re-implement it: they wrap one in `CachedSource`, which keeps the series listing, a
measurement's series by tag value, the rows read for a window and the facts, and answers the same
interface from them. docs/architecture.md draws the whole read model.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from db2vtop.agent.core.model import Annotation, Fact, FieldValue, Finding

_END = 2**63 - 1


@dataclass(slots=True)
class Row:
    """One sample as read. Not frozen, though never changed once made: a 10,000-VM Fleet at a new moment makes
    30,000 of them, and a frozen dataclass's `__init__` (object.__setattr__ per field) costs five times as much."""

    ts: int
    measurement: str
    tags: dict[str, str]
    fields: dict[str, FieldValue]

    def to_json(self) -> dict[str, Any]:
        return {"ts": self.ts, "measurement": self.measurement, "tags": self.tags, "fields": self.fields}


@dataclass(slots=True)
class Columns:
    """The newest row of each series of a measurement at a moment, column-shaped: `values[name][i]` is series
    `ids[i]`'s value of a field (None where its row has none). A 10,000-VM Fleet joins its few figures on these
    lists, with no row object per series; `put` brings one series' row in (a reader keeping them moves forward)."""

    measurement: str
    ids: list[int]
    tags: list[dict[str, str]]
    ts: list[int]
    values: dict[str, list[FieldValue | None]]
    at: dict[int, int] = field(default_factory=dict)  # position by series id

    def __post_init__(self) -> None:
        if not self.at:
            self.at = {sid: i for i, sid in enumerate(self.ids)}

    @classmethod
    def of(cls, measurement: str, fields: Iterable[str], rows: dict[int, Row]) -> Columns:
        """From rows by series id."""
        got = list(rows.values())
        return cls(measurement, list(rows), [r.tags for r in got], [r.ts for r in got],
                   {n: [r.fields.get(n) for r in got] for n in fields})

    def put(self, sid: int, row: Row) -> None:
        i = self.at.get(sid)
        if i is None:
            self.at[sid] = len(self.ids)
            self.ids.append(sid)
            self.tags.append(row.tags)
            self.ts.append(row.ts)
            for name, column in self.values.items():
                column.append(row.fields.get(name))
            return
        self.tags[i], self.ts[i] = row.tags, row.ts
        for name, column in self.values.items():
            column[i] = row.fields.get(name)

    def row(self, i: int) -> Row:
        return Row(self.ts[i], self.measurement, self.tags[i],
                   {name: v for name, column in self.values.items() if (v := column[i]) is not None})


@dataclass(frozen=True, slots=True)
class Series:
    id: int
    measurement: str
    tags: dict[str, str]


@runtime_checkable
class Source(Protocol):
    """Samples by measurement and series, facts, findings and annotations, read back as they were written."""

    def measurements(self) -> list[str]: ...

    def series(self, measurement: str | None = None) -> list[Series]: ...

    def series_version(self) -> int:
        """Changes whenever a series is added or removed: readers cache `series()` until it does."""
        ...

    def rows(self, measurement: str, since_ns: int = 0, until_ns: int | None = None) -> Iterable[Row]: ...

    def rows_of(self, series: Iterable[Series], since_ns: int = 0, until_ns: int | None = None) -> Iterable[Row]: ...

    def latest(self, measurement: str, since_ns: int = 0, until_ns: int | None = None,
               fields: Collection[str] | None = None) -> list[Row]:
        """The newest row of each series in [since, until]. `fields`: the reader needs only these (a row
        holds at least those of them its sample has; a source may hand over the others too)."""
        ...

    def latest_of(self, series: Iterable[Series], since_ns: int = 0, until_ns: int | None = None,
                  fields: Collection[str] | None = None) -> list[Row]: ...

    def newest(self, measurement: str, since_ns: int, until_ns: int) -> list[tuple[int, int]]:
        """(series id, newest ts) of the series with samples in [since, until]."""
        ...

    def window(self, series_id: int, field_name: str, since_ns: int,
               until_ns: int | None = None) -> list[tuple[int, FieldValue]]: ...

    def time_range(self) -> tuple[int, int] | None: ...

    def facts(self, kind: str | None = None) -> list[Fact]: ...

    def fact_history(self, kind: str, tags: dict[str, str]) -> list[Fact]: ...

    def annotations(self, since_ns: int = 0, until_ns: int | None = None) -> list[Annotation]: ...

    def findings(self, open_only: bool = True) -> list[Finding]: ...


def _key(tags: dict[str, str]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(tags.items()))


class MemorySource:
    """Samples (and facts, findings, annotations) held in memory, read like the store: what triage
    gathered from the store, InfluxDB and the sources it looked at now."""

    def __init__(self, rows: Iterable[Any] = (), facts: Iterable[Fact] = (), findings: Iterable[Finding] = (),
                 annotations: Iterable[Annotation] = ()):
        self._ids: dict[tuple, int] = {}
        self._series: list[Series] = []
        self._points: dict[int, list[tuple[int, dict[str, FieldValue]]]] = defaultdict(list)
        for r in rows:  # Samples or Rows
            key = (r.measurement, *_key(r.tags))
            sid = self._ids.get(key)
            if sid is None:
                sid = self._ids[key] = len(self._series)
                self._series.append(Series(sid, r.measurement, dict(r.tags)))
            self._points[sid].append((r.ts, r.fields))
        for points in self._points.values():
            points.sort(key=lambda p: p[0])
        current: dict[tuple, Fact] = {}
        self._history: dict[tuple, list[Fact]] = defaultdict(list)
        for f in sorted(facts, key=lambda f: f.ts):
            key = (f.kind, *_key(f.tags))
            self._history[key].append(f)
            if f.removed:
                current.pop(key, None)
            else:
                current[key] = f
        self._facts = list(current.values())
        self._findings = list(findings)
        self._annotations = sorted(annotations, key=lambda a: a.ts)
        self._unsorted = False

    def measurements(self) -> list[str]:
        return sorted({s.measurement for s in self._series})

    def series(self, measurement: str | None = None) -> list[Series]:
        return [s for s in self._series if measurement is None or s.measurement == measurement]

    def series_version(self) -> int:
        return len(self._series)

    def _in(self, series_id: int, since_ns: int, until_ns: int | None) -> Iterator[tuple[int, dict[str, FieldValue]]]:
        high = until_ns if until_ns is not None else _END
        return ((ts, f) for ts, f in self._points[series_id] if since_ns <= ts <= high)

    def rows(self, measurement: str, since_ns: int = 0, until_ns: int | None = None) -> Iterator[Row]:
        found = [Row(ts, s.measurement, s.tags, f) for s in self.series(measurement)
                 for ts, f in self._in(s.id, since_ns, until_ns)]
        return iter(sorted(found, key=lambda r: r.ts))

    def rows_of(self, series: Iterable[Series], since_ns: int = 0, until_ns: int | None = None) -> Iterator[Row]:
        for s in series:
            for ts, f in self._in(s.id, since_ns, until_ns):
                yield Row(ts, s.measurement, s.tags, f)

    def latest_of(self, series: Iterable[Series], since_ns: int = 0, until_ns: int | None = None,
                  fields: Collection[str] | None = None) -> list[Row]:
        out = []
        for s in series:
            points = list(self._in(s.id, 0, until_ns))
            if points and points[-1][0] >= since_ns:
                out.append(Row(points[-1][0], s.measurement, s.tags, points[-1][1]))
        return out

    def latest(self, measurement: str, since_ns: int = 0, until_ns: int | None = None,
               fields: Collection[str] | None = None) -> list[Row]:
        return self.latest_of(self.series(measurement), since_ns, until_ns)

    def newest(self, measurement: str, since_ns: int, until_ns: int) -> list[tuple[int, int]]:
        out = []
        for s in self.series(measurement):
            found = [ts for ts, _ in self._in(s.id, since_ns, until_ns)]
            if found:
                out.append((s.id, found[-1]))
        return out

    def window(self, series_id: int, field_name: str, since_ns: int,
               until_ns: int | None = None) -> list[tuple[int, FieldValue]]:
        return [(ts, f[field_name]) for ts, f in self._in(series_id, since_ns, until_ns) if field_name in f]

    def time_range(self) -> tuple[int, int] | None:
        ends = [(p[0][0], p[-1][0]) for p in self._points.values() if p]
        return (min(a for a, _ in ends), max(b for _, b in ends)) if ends else None

    def facts(self, kind: str | None = None) -> list[Fact]:
        return [f for f in self._facts if kind is None or f.kind == kind]

    def fact_history(self, kind: str, tags: dict[str, str]) -> list[Fact]:
        return list(self._history.get((kind, *_key(tags)), ()))

    def annotations(self, since_ns: int = 0, until_ns: int | None = None) -> list[Annotation]:
        if self._unsorted:
            self._annotations.sort(key=lambda a: a.ts)
            self._unsorted = False
        high = until_ns if until_ns is not None else _END
        return [a for a in self._annotations if since_ns <= a.ts <= high]

    def add_annotations(self, annotations: Iterable[Annotation]) -> None:
        """Annotations gathered besides the ones it was made with (triage: the store's, then vCenter's events
        page by page): kept in time order once read."""
        self._annotations.extend(annotations)
        self._unsorted = True

    def findings(self, open_only: bool = True) -> list[Finding]:
        return [f for f in self._findings if not open_only or f.resolved_at is None]


class CachedSource:
    """A Source with what readers ask again and again kept: the series of each measurement (until the
    source's series version moves), their index by a tag's value (a VM's series among 2,000 VMs at
    once), the rows read for a window (the window reads inside it are answered from them), and the
    facts (for `facts_ttl_s`, or until `refresh`). Every view reads through one."""

    def __init__(self, source: Source, facts_ttl_s: float | None = None,
                 clock: Callable[[], float] = time.monotonic):
        self.source = source
        self.facts_ttl_s = facts_ttl_s
        self.clock = clock
        self._version: int | None = None
        self._series: dict[str | None, list[Series]] = {}
        self._index: dict[tuple[str, str], dict[str, list[Series]]] = {}
        self._loaded: dict[tuple[int, int], dict[int, list[Row]]] = {}
        self._facts: dict[str | None, tuple[float, list[Fact]]] = {}
        self._annotations: dict[tuple[int, int | None], list[Annotation]] = {}
        #: what readers build from this cache's answers (an index of facts), kept with the answers it came from
        self.derived: dict[str, tuple[tuple, Any]] = {}

    def refresh(self) -> bool:
        """Once per view load: forget the rows and annotations read, and the series lists if the source gained
        or lost series (then True)."""
        self._loaded.clear()
        self._annotations.clear()
        version = self.source.series_version()
        if version == self._version:
            return False
        self._version = version
        self._series.clear()
        self._index.clear()
        return True

    # --- series --------------------------------------------------------------------------

    def measurements(self) -> list[str]:
        return self.source.measurements()

    def series(self, measurement: str | None = None) -> list[Series]:
        cached = self._series.get(measurement)
        if cached is None:
            cached = self._series[measurement] = self.source.series(measurement)
        return cached

    def series_version(self) -> int:
        return self.source.series_version()

    def by_tag(self, measurement: str, tag: str) -> dict[str, list[Series]]:
        """A measurement's series grouped by one tag's value."""
        index = self._index.get((measurement, tag))
        if index is None:
            index = self._index[(measurement, tag)] = {}
            for s in self.series(measurement):
                value = s.tags.get(tag)
                if value is not None:
                    index.setdefault(value, []).append(s)
        return index

    # --- samples -------------------------------------------------------------------------

    def load(self, series: Iterable[Series], since_ns: int, until_ns: int) -> dict[int, list[Row]]:
        """The rows of `series` in [since, until], read once per window and kept (by series id)."""
        loaded = self._loaded.setdefault((since_ns, until_ns), {})
        for s in series:
            if s.id not in loaded:  # one range scan each (Store.rows_of reads series by series anyway)
                loaded[s.id] = list(self.source.rows_of([s], since_ns, until_ns))
        return loaded

    def rows(self, measurement: str, since_ns: int = 0, until_ns: int | None = None) -> Iterable[Row]:
        return self.source.rows(measurement, since_ns, until_ns)

    def rows_of(self, series: Iterable[Series], since_ns: int = 0, until_ns: int | None = None) -> Iterable[Row]:
        return self.source.rows_of(series, since_ns, until_ns)

    def latest(self, measurement: str, since_ns: int = 0, until_ns: int | None = None,
               fields: Collection[str] | None = None) -> list[Row]:
        if fields is None:
            return self.source.latest(measurement, since_ns, until_ns)
        return self.source.latest(measurement, since_ns, until_ns, fields=fields)

    def latest_of(self, series: Iterable[Series], since_ns: int = 0, until_ns: int | None = None,
                  fields: Collection[str] | None = None) -> list[Row]:
        if fields is None:
            return self.source.latest_of(series, since_ns, until_ns)
        return self.source.latest_of(series, since_ns, until_ns, fields=fields)

    def newest(self, measurement: str, since_ns: int, until_ns: int) -> list[tuple[int, int]]:
        return self.source.newest(measurement, since_ns, until_ns)

    def window(self, series_id: int, field_name: str, since_ns: int,
               until_ns: int | None = None) -> list[tuple[int, FieldValue]]:
        """From the rows loaded for a window that covers this one, else from the source."""
        until = until_ns if until_ns is not None else _END
        for (lo, hi), loaded in self._loaded.items():
            rows = loaded.get(series_id)
            if rows is not None and lo <= since_ns and until <= hi:
                return [(r.ts, r.fields[field_name]) for r in rows
                        if since_ns <= r.ts <= until and field_name in r.fields]
        return self.source.window(series_id, field_name, since_ns, until_ns)

    def time_range(self) -> tuple[int, int] | None:
        return self.source.time_range()

    # --- facts and records -----------------------------------------------------------------

    def facts(self, kind: str | None = None) -> list[Fact]:
        hit = self._facts.get(kind)
        now = self.clock()
        if hit is not None and (self.facts_ttl_s is None or now - hit[0] < self.facts_ttl_s):
            return hit[1]
        found = self.source.facts(kind)
        self._facts[kind] = (now, found)
        return found

    def fact_history(self, kind: str, tags: dict[str, str]) -> list[Fact]:
        return self.source.fact_history(kind, tags)

    def annotations(self, since_ns: int = 0, until_ns: int | None = None) -> list[Annotation]:
        """Read once per window (every stack of a fleet asks for the same one), until `refresh`."""
        found = self._annotations.get((since_ns, until_ns))
        if found is None:
            found = self._annotations[(since_ns, until_ns)] = self.source.annotations(since_ns, until_ns)
        return found

    def findings(self, open_only: bool = True) -> list[Finding]:
        return self.source.findings(open_only)


def derive(view: CachedSource, key: str, inputs: tuple, build: Callable[[], Any]) -> Any:
    """`build()`, kept while `inputs` (objects `view` handed out: facts, an index) are the very same objects."""
    hit = view.derived.get(key)
    if hit is not None and len(hit[0]) == len(inputs) and all(a is b for a, b in zip(hit[0], inputs, strict=True)):
        return hit[1]
    value = build()
    view.derived[key] = (inputs, value)
    return value


def cached(source: Source) -> CachedSource:
    """`source` itself when it is a CachedSource already, else one over it."""
    return source if isinstance(source, CachedSource) else CachedSource(source)


def tag_values(source: Source, measurements: Sequence[str], tag: str) -> list[str]:
    """Every value of `tag` among the series of `measurements`, sorted."""
    return sorted({s.tags[tag] for m in measurements for s in source.series(m) if s.tags.get(tag)})
