"""Samples kept as typed columns as they arrive: what a whole-fleet triage gathers (vCenter's realtime
hour of every VM, millions of samples) without a Sample object and a fields dict for each.

Only the fields a reader declares it needs are kept (the live rules' reads, the verdict's figures); each
series' times are kept whole, so its rows, windows and newest times read back as they came. Read back two
ways: in time order a slice at a time (`in_time_order`, what the check engine is fed: the order a sort
of every sample by time would give, arrivals breaking ties), and as a Source (the verdicts' windows).
"""

from __future__ import annotations

from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Collection, Iterable, Iterator, Mapping
from typing import Any

from db2vtop.agent.core.model import INT64_MAX, INT64_MIN, Fact, FieldValue, storable
from db2vtop.agent.core.source import MemorySource, Row, Series

#: one arrival rank's share of the sequence numbers (a source's samples keep its rank's order among ties)
_RANK = 1 << 44
_MISSING = object()
#: the engine is fed a minute of samples at a time: a 10,000-VM hour is ~60 slices of ~120,000 rows
SLICE_NS = 60 * 10**9


class _Column:
    """One field of one series: int64 or float64 while every value is one of those, else a list; the
    rows that lack the field are marked (`missing`, made at the first such row)."""

    __slots__ = ("missing", "vals")

    def __init__(self, before: int):
        self.vals: Any = None  # made at the first value, typed by it
        self.missing: bytearray | None = bytearray(b"\1" * before) if before else None

    def put(self, v: FieldValue, n: int) -> None:
        """The value of the row at index n (the column's length); one no store could hold (NaN, an
        infinity, None, an int beyond 64 bits, anything but a number, bool or text) is left out, as
        clean_fields would."""
        if not storable(v):
            self.skip(n)
            return
        vals = self.vals
        t = type(v)
        if vals is None:
            vals = self.vals = array("q") if t is int else array("d") if t is float else []
            vals.extend([0 if type(vals) is array else None] * (len(self.missing) if self.missing else 0))
        if type(vals) is array:
            if (t is int and vals.typecode == "q") or (t is float and vals.typecode == "d"):
                vals.append(v)  # type: ignore[arg-type]
            else:  # another type: every value kept as it came
                self.vals = vals = vals.tolist()
                vals.append(v)
        else:
            vals.append(v)
        if self.missing is not None:
            self.missing.append(0)

    def skip(self, n: int) -> None:
        """The row at index n (the column's length) has no value of this field."""
        if self.missing is None:
            self.missing = bytearray(n)
        self.missing.append(1)
        if self.vals is not None:
            self.vals.append(0 if type(self.vals) is array else None)

    def permute(self, order: list[int]) -> None:
        vals = self.vals
        if vals is not None:
            picked = [vals[i] for i in order]
            self.vals = array(vals.typecode, picked) if type(vals) is array else picked
        if self.missing is not None:
            self.missing = bytearray(self.missing[i] for i in order)


class _Points:
    __slots__ = ("cols", "known", "seq", "ts")

    def __init__(self) -> None:
        self.ts = array("q")
        self.seq = array("q")  # arrival: breaks ties of time as one sort of every sample would
        self.cols: dict[str, _Column] = {}
        self.known: set[str] = set()  # every field name seen, kept or not


class ColumnSource(MemorySource):
    """Samples (Samples or Rows) added as they come, kept as columns of the fields `keep` names per
    measurement (None: every field; a measurement not named: its times only)."""

    def __init__(self, keep: Mapping[str, frozenset[str] | None], facts: Iterable[Fact] = ()):
        super().__init__(facts=facts)
        self._keep = dict(keep)
        self._pts: list[_Points] = []
        self._count: list[int] = []  # samples added per rank
        self._sealed = True

    def add(self, samples: Iterable[Any], rank: int = 0) -> int:
        """Keep these samples; `rank` orders them among samples of the same time from other ranks (the
        store's history first, then each source in turn). Returns how many were added."""
        if rank >= len(self._count):
            self._count += [0] * (rank + 1 - len(self._count))
        seq = rank * _RANK + self._count[rank]
        ids, keep, n = self._ids, self._keep, 0
        known: dict[tuple[int, str], tuple[dict, int]] = {}  # a series' samples share one tags dict (held here)
        last_tags, last_m, p = None, None, None  # a series' samples mostly come one after another
        for r in samples:
            tags = r.tags
            if tags is not last_tags or r.measurement != last_m:
                hit = known.get((id(tags), r.measurement))
                if hit is not None and hit[0] is tags:
                    sid = hit[1]
                else:
                    key = (r.measurement, *sorted(tags.items()))
                    sid = ids.get(key)
                    if sid is None:
                        sid = ids[key] = len(self._series)
                        self._series.append(Series(sid, r.measurement, dict(tags)))
                        self._pts.append(_Points())
                    known[(id(tags), r.measurement)] = (tags, sid)
                p = self._pts[sid]
                last_tags, last_m = tags, r.measurement
            i = len(p.ts)
            p.ts.append(r.ts)
            p.seq.append(seq + n)
            n += 1
            fields = r.fields
            cols = p.cols
            for name, col in cols.items():
                v = fields.get(name, _MISSING)
                if v is _MISSING:
                    col.skip(i)
                    continue
                # a finite float or a 64-bit int to a column of its type with no row missing (nearly every value
                # of a vCenter hour): appended here, not through put's checks (a call each: a third of the time)
                vals, t = col.vals, v.__class__
                if col.missing is None and vals.__class__ is array and (
                        (t is float and v - v == 0.0 and vals.typecode == "d")
                        or (t is int and INT64_MIN <= v <= INT64_MAX and vals.typecode == "q")):
                    vals.append(v)
                else:
                    col.put(v, i)
            if not p.known.issuperset(fields.keys()):
                wanted = keep.get(r.measurement, frozenset())
                for name, v in fields.items():
                    if name not in p.known and (wanted is None or name in wanted):
                        col = cols[name] = _Column(i)
                        col.put(v, i)
                p.known.update(fields.keys())
        self._count[rank] += n
        self._sealed = False
        return n

    def seal(self) -> None:
        """Each series' points in (time, arrival) order: a sample sent again (vCenter's newest, once by
        the look now and once with the hour) or history older than what came first."""
        if self._sealed:
            return
        for p in self._pts:
            ts, seq = p.ts, p.seq
            if all(ts[i] <= ts[i + 1] for i in range(len(ts) - 1)):
                continue  # arrivals only grow: in time order already, ties in arrival order
            order = sorted(range(len(ts)), key=lambda i: (ts[i], seq[i]))
            p.ts = array("q", [ts[i] for i in order])
            p.seq = array("q", [seq[i] for i in order])
            for col in p.cols.values():
                col.permute(order)
        self._sealed = True

    def __len__(self) -> int:
        return sum(len(p.ts) for p in self._pts)

    def count(self, measurements: Collection[str]) -> int:
        """How many samples of these measurements were added."""
        return sum(len(self._pts[s.id].ts) for s in self._series if s.measurement in measurements)

    @staticmethod
    def _fields(p: _Points, i: int) -> dict[str, FieldValue]:
        return {name: col.vals[i] for name, col in p.cols.items()
                if col.vals is not None and (col.missing is None or not col.missing[i])}

    @property
    def kept(self) -> dict[str, frozenset[str] | None]:
        """Measurement -> the fields kept of it (None: all); a measurement not named: its times only."""
        return self._keep

    def column(self, series_id: int, field_name: str) -> Any:
        """A series' values of one field as kept (an array, or a list): a row without the field holds 0 or None
        in its place."""
        col = self._pts[series_id].cols.get(field_name)
        return col.vals if col is not None and col.vals is not None else ()

    def newest_ts(self, series_id: int) -> int:
        """The time of a series' newest row."""
        self.seal()
        ts = self._pts[series_id].ts
        return ts[-1] if ts else 0

    def in_time_order(self, measurements: Collection[str], step_ns: int = SLICE_NS,
                      skip: Collection[int] = ()) -> Iterator[list[Row]]:
        """Every row of these measurements (but the series in `skip`) in (time, arrival) order, `step_ns` of
        time at a time: the order of one sort of every sample by time, without every row made at once."""
        self.seal()
        live = [s for s in self._series if s.measurement in measurements and len(self._pts[s.id].ts)
                and s.id not in skip]
        at = dict.fromkeys((s.id for s in live), 0)
        while True:
            start = min((self._pts[sid].ts[i] for sid, i in at.items() if i < len(self._pts[sid].ts)), default=None)
            if start is None:
                return
            high = start + step_ns
            batch = []
            for s in live:
                p, i = self._pts[s.id], at[s.id]
                j = bisect_left(p.ts, high, i)
                if j > i:
                    ts, seq = p.ts, p.seq
                    batch += [(ts[k], seq[k], s.id, k) for k in range(i, j)]
                    at[s.id] = j
            batch.sort()
            yield [Row(ts, self._series[sid].measurement, self._series[sid].tags, self._fields(self._pts[sid], k))
                   for ts, _, sid, k in batch]

    # --- read as a Source ---------------------------------------------------------------------------

    def _range(self, series_id: int, since_ns: int, until_ns: int | None) -> tuple[_Points, int, int]:
        self.seal()
        p = self._pts[series_id]
        return p, bisect_left(p.ts, since_ns), bisect_right(p.ts, until_ns if until_ns is not None else INT64_MAX)

    def _in(self, series_id: int, since_ns: int, until_ns: int | None) -> Iterator[tuple[int, dict[str, FieldValue]]]:
        p, lo, hi = self._range(series_id, since_ns, until_ns)
        return ((p.ts[i], self._fields(p, i)) for i in range(lo, hi))

    def window(self, series_id: int, field_name: str, since_ns: int,
               until_ns: int | None = None) -> list[tuple[int, FieldValue]]:
        p, lo, hi = self._range(series_id, since_ns, until_ns)
        col = p.cols.get(field_name)
        if col is None or col.vals is None:
            return []
        ts, vals, missing = p.ts, col.vals, col.missing
        if missing is None:
            return list(zip(ts[lo:hi], vals[lo:hi], strict=True))
        return [(ts[i], vals[i]) for i in range(lo, hi) if not missing[i]]

    def time_range(self) -> tuple[int, int] | None:
        self.seal()
        ends = [(p.ts[0], p.ts[-1]) for p in self._pts if p.ts]
        return (min(a for a, _ in ends), max(b for _, b in ends)) if ends else None

    def set_facts(self, facts: Iterable[Fact]) -> None:
        """The facts gathered: known once every source has answered."""
        held = MemorySource(facts=facts)
        self._facts, self._history = held._facts, held._history
