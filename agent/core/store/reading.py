"""Reading: what the Source protocol (agent/core/source.py) asks, answered from the head and the sealed chunks
inside one read transaction, so a reader never sees a row twice or misses one while the writer moves it. Decoded
chunks, their timestamps and chosen columns are kept per connection: the TUI moves a cursor back and forth over
a 10,000-VM vCenter's past and reads a few figures of every series at each moment."""

from __future__ import annotations

import json
import sys
from array import array
from bisect import bisect_left, bisect_right
from collections import OrderedDict
from collections.abc import Collection, Iterable, Iterator, Sequence
from contextlib import contextmanager
from operator import itemgetter
from typing import Any

from db2vtop.agent.core import chunks
from db2vtop.agent.core.model import REMOVED, SHORT_TEXT, Annotation, Fact, FieldValue, Finding, canonical_tags
from db2vtop.agent.core.source import Columns, Row, Series
from db2vtop.agent.core.store.encoding import Fieldsets, doc, row_at
from db2vtop.agent.core.store.files import CHUNK_SPAN_NS, END, StoreError, StoreFile

_CACHED_CHUNKS = 4096  # decoded chunks kept per connection (replay scrubs back and forth)
#: chunks' timestamps kept per connection (~0.8 KB each): a 10,000-VM Fleet's catch-up at a past cursor asks
#: which of some 40,000 chunks hold a newer row, every second
_CACHED_TIMES = 65536
#: chunks whose chosen fields are kept decoded (`latest(..., fields=)`, ~0.8 KB a field): the Fleet of a 10,000-VM
#: vCenter reads a few figures of some 30,000 series at each moment the user moves to
_CACHED_FIELDS = 40000


class Reading:
    """The reading room of one connection (a writer's too: the agent reads its own store)."""

    def __init__(self, file: StoreFile, fieldsets: Fieldsets):
        self.file = file
        self.db = file.db
        self.fieldsets = fieldsets
        self._chunk_cache: OrderedDict[int, tuple[list[int], tuple[str, ...], list[list[Any]]]] = OrderedDict()
        self._times: OrderedDict[tuple[int, int, int], Sequence[int]] = OrderedDict()
        self._fields: OrderedDict[tuple[int, int, int], dict[str, Sequence[Any]]] = OrderedDict()
        self._wanted_names: dict[tuple[int, tuple[str, ...]], frozenset[str]] = {}
        self._series_lists: dict[str, tuple[int, list[Series]]] = {}
        self._newest: dict[tuple[str, int, int], tuple[tuple[int, int], list[tuple[int, int]]]] = {}
        #: each series' newest row time at a moment, from the last whole read of a measurement there
        self._newest_at: dict[str, tuple[tuple[int, int], int, dict[int, int]]] = {}
        #: by measurement, a moment at or before which the head held no row of it (the head query said so), while
        #: the file is unchanged: a cursor in the past asks 10,000 series' heads for nothing once, not at each moment
        self._no_head: dict[str, tuple[tuple[int, int], int]] = {}
        #: chunk timestamps on a regular grid, one object for all equal ones: the series of a source sampled on one
        #: clock (a vCenter's 20 s) share it, and a moment is looked up once per grid, not once per series
        self._grids: dict[range, range] = {}
        #: column-shaped reads of a measurement's few fields within one span (`_plan`), and the moments the last
        #: `_candidates` answer holds for
        self._plans: dict[tuple[str, tuple[str, ...]], tuple[tuple[int, int], int, int, list]] = {}
        self._candidates_hold = (0, 0)
        #: a measurement's chunks over a few spans (series, chunk, rows, first and last time), while the file is
        #: unchanged: "which series moved" at each tick of a cursor moving through the past asks it again and again
        self._span_chunks: dict[tuple[str, int, int], tuple[tuple[int, int], list[tuple[int, int, int, int, int]]]] \
            = {}

    def forget_chunk(self, cid: int) -> None:
        """A chunk replaced by sealing (a late row merged into it): its decoded rows are not kept."""
        self._chunk_cache.pop(cid, None)

    @contextmanager
    def _snapshot(self) -> Iterator[None]:
        """One read transaction: the writer moving rows from head to chunks is seen whole or not at all."""
        if self.db.in_transaction:
            yield
            return
        self.db.execute("BEGIN")
        try:
            if not self.file.chunked:  # a schema-2 store converted by a writer since we opened it
                self.file.chunked = self.file.has_chunks()
            yield
        finally:
            self.db.execute("COMMIT")

    def _chunk(self, cid: int, fieldset: int, data: bytes) -> tuple[list[int], tuple[str, ...], list[list[Any]]]:
        hit = self._chunk_cache.get(cid)
        if hit is not None:
            self._chunk_cache.move_to_end(cid)
            return hit
        try:
            ts, columns = chunks.decode(data)
        except chunks.ChunkError as e:
            raise StoreError(f"{self.file.path}: chunk {cid}: {e}") from None
        hit = self._chunk_cache[cid] = (ts, self.fieldsets.names(fieldset), columns)
        if len(self._chunk_cache) > _CACHED_CHUNKS:
            self._chunk_cache.popitem(last=False)
        return hit

    def _chunk_rows(self, cid: int, fieldset: int, data: bytes, since_ns: int,
                    until_ns: int) -> Iterator[tuple[int, dict[str, FieldValue]]]:
        ts, names, columns = self._chunk(cid, fieldset, data)
        for i in range(bisect_left(ts, since_ns), bisect_right(ts, until_ns)):
            yield ts[i], row_at(names, columns, i)

    def _spans(self, since_ns: int, until_ns: int) -> tuple[int, int]:
        return since_ns // CHUNK_SPAN_NS, until_ns // CHUNK_SPAN_NS

    def _gather(self, chunk_rows: Iterable[tuple[int, int, int, bytes]], head_rows: Iterable[tuple[int, int, int, str]],
                since_ns: int, until_ns: int) -> list[tuple[tuple[int, int], dict[str, FieldValue]]]:
        """((ts, series id), fields) of chunk and head rows in [since, until], oldest first; a head
        row of a time also in a chunk (written late) is merged over it."""
        out: dict[tuple[int, int], dict[str, FieldValue]] = {}
        for sid, cid, fid, data in chunk_rows:
            for ts, fields in self._chunk_rows(cid, fid, data, since_ns, until_ns):
                out[ts, sid] = fields
        for sid, ts, fid, vals in head_rows:
            fields = self.fieldsets.decode(fid, vals)
            out[ts, sid] = {**out[ts, sid], **fields} if (ts, sid) in out else fields
        return sorted(out.items(), key=lambda kv: kv[0])

    def measurements(self) -> list[str]:
        return [r[0] for r in self.db.execute("SELECT DISTINCT measurement FROM series ORDER BY 1")]

    def series(self, measurement: str | None = None) -> list[Series]:
        hit = self._series_lists.get(measurement) if measurement is not None else None
        if hit is not None and hit[0] == self.series_version():  # kept for time travel (`_kept_series`)
            return list(hit[1])
        sql, args = "SELECT id, measurement, tags FROM series", ()
        if measurement is not None:
            sql, args = sql + " WHERE measurement=?", (measurement,)
        cur = self.db.execute(sql + " ORDER BY id", args)
        out: list[Series] = []
        # parsed as facts() are, a few hundred at a time: their keys and short values (a vCenter, a host, a disk's
        # instance) held once, not once a series; a restart holds every live measurement's tags through the
        # history the checks resume from (a 2,000-VM store's 8,000 such series: 6 MB parsed one by one, 2.3 MB so)
        while rows := cur.fetchmany(500):
            tags = json.loads("[" + ",".join(r[2] for r in rows) + "]", object_pairs_hook=_shared)
            out.extend(Series(i, sys.intern(m), t) for (i, m, _), t in zip(rows, tags, strict=True))
        return out

    def series_count(self, measurement: str) -> int:
        return self.db.execute("SELECT count(*) FROM series WHERE measurement=?", (measurement,)).fetchone()[0]

    def _kept_series(self, measurement: str) -> list[Series]:
        """`series`, kept until a series is added or removed: a reader that moves about in time (the TUI) reads
        a measurement's newest rows at each moment, and its 10,000 tag sets need not be parsed each time."""
        version = self.series_version()
        hit = self._series_lists.get(measurement)
        if hit is None or hit[0] != version:
            self._series_lists.pop(measurement, None)
            hit = self._series_lists[measurement] = (version, self.series(measurement))
        return hit[1]

    def rows(self, measurement: str, since_ns: int = 0, until_ns: int | None = None) -> Iterator[Row]:
        """Every sample of one measurement in [since, until], oldest first."""
        with self._snapshot():
            tags = {s.id: s.tags for s in self.series(measurement)}
            found = self._found(measurement, since_ns, until_ns if until_ns is not None else END)
        for (ts, sid), fields in found:
            yield Row(ts, measurement, tags[sid], fields)

    def slices(self, measurement: str, since_ns: int, until_ns: int, step_ns: int,
               fields: Iterable[str] | None = None) -> Iterator[list[Row]]:
        """`rows` of [since, until] a slice of `step_ns` at a time, each oldest first: a wide read (every VM of a
        10,000-VM vCenter) held one slice at a time; with `fields`, rows keep only those (that it has)."""
        keep = None if fields is None else tuple(fields)
        tags: dict[int, dict[str, str]] = {}
        for start in range(since_ns, until_ns + 1, max(step_ns, 1)):
            with self._snapshot():
                found = self._found(measurement, start, min(start + step_ns - 1, until_ns))
                if any(sid not in tags for (_, sid), _ in found):  # the first slice, or a series new since
                    tags = {s.id: s.tags for s in self.series(measurement)}
            if keep is not None:
                found = [(key, {k: values[k] for k in keep if k in values}) for key, values in found]
            yield [Row(ts, measurement, tags[sid], values) for (ts, sid), values in found]

    def _found(self, measurement: str, since_ns: int,
               until: int) -> list[tuple[tuple[int, int], dict[str, FieldValue]]]:
        with self._snapshot():
            return self._gather(
                self.db.execute(
                    "SELECT c.series_id, c.id, c.fieldset, c.data FROM series s JOIN chunks c ON c.series_id = s.id "
                    "WHERE s.measurement=? AND c.span BETWEEN ? AND ? AND c.last_ts >= ? AND c.first_ts <= ?",
                    (measurement, *self._spans(since_ns, until), since_ns, until)) if self.file.chunked else (),
                self.db.execute(
                    "SELECT x.series_id, x.ts, x.fieldset, x.vals FROM series s JOIN samples x ON x.series_id = s.id "
                    "WHERE s.measurement=? AND x.ts >= ? AND x.ts <= ?", (measurement, since_ns, until)),
                since_ns, until)

    def rows_of(self, series: Iterable[Series], since_ns: int = 0, until_ns: int | None = None) -> Iterator[Row]:
        """`rows` for a few chosen series of a large measurement, series by series (one range scan each)."""
        until = until_ns if until_ns is not None else END
        for s in series:
            with self._snapshot():
                found = self._gather(
                    ((s.id, *c) for c in self.db.execute(
                        "SELECT id, fieldset, data FROM chunks WHERE series_id=? AND span BETWEEN ? AND ?",
                        (s.id, *self._spans(since_ns, until)))) if self.file.chunked else (),
                    self.db.execute("SELECT series_id, ts, fieldset, vals FROM samples WHERE series_id=?"
                                    " AND ts >= ? AND ts <= ?", (s.id, since_ns, until)),
                    since_ns, until)
            for (ts, _), fields in found:
                yield Row(ts, s.measurement, s.tags, fields)

    def _chunk_at(self, sid: int, until_ns: int, data: bool) -> tuple[int, int, int, int, bytes | None] | None:
        """The chunk that may hold a series' newest row at `until`: (id, last_ts, fieldset, n, data or None)."""
        return self.db.execute(
            f"SELECT id, last_ts, fieldset, n, {'data' if data else 'NULL'} FROM chunks WHERE series_id=? AND span <= ?"
            " AND first_ts <= ? ORDER BY span DESC LIMIT 1", (sid, until_ns // CHUNK_SPAN_NS, until_ns)).fetchone()

    def _latest_in_chunk(self, sid: int, until_ns: int, newer_than: int,
                         candidate: tuple[int, int, int, int, bytes | None] | None = None
                         ) -> tuple[int, dict[str, FieldValue]] | None:
        """The newest row at or before `until` held in a chunk, if newer than `newer_than` (the head's).
        `candidate`: that chunk's (id, last_ts, fieldset, n, data), when the caller found it already. A chunk whose last
        row is not newer than the head's is not read (the live case: the head holds the newest row)."""
        if candidate is None:
            candidate = self._chunk_at(sid, until_ns, data=True)
        if candidate is None or candidate[1] <= newer_than:
            return None
        cid, last_ts, fid, n, data = candidate
        hit = self._chunk_cache.get(cid)
        if hit is not None:
            ts, names, columns = hit
            i = bisect_right(ts, until_ns) - 1
            return (ts[i], row_at(names, columns, i)) if ts[i] > newer_than else None
        # not decoded whole: the one row only (a past cursor over 10,000 series reads one row of each chunk)
        if data is None:
            (data,) = self.db.execute("SELECT data FROM chunks WHERE id=?", (cid,)).fetchone()
        ts = self._chunk_times(cid, last_ts, n, data)
        i = bisect_right(ts, until_ns) - 1
        if ts[i] <= newer_than:
            return None
        return ts[i], {k: v for k, v in zip(self.fieldsets.names(fid), chunks.row(data, i), strict=True)
                       if v is not None}

    def _candidates(self, measurement: str, series: list[Series],
                    until_ns: int) -> dict[int, tuple[int, int, int, int]]:
        """Each series' chunk that may hold its newest row at `until`: (id, last_ts, fieldset, n) by series id.
        Nearly always the chunk of `until`'s own span (one index probe each); the newest chunk before it for
        the few series without one there (ended, or not begun in that span yet)."""
        span = until_ns // CHUNK_SPAN_NS
        found: dict[int, tuple[int, int, int, int]] = {}
        lo, hi = span * CHUNK_SPAN_NS, (span + 1) * CHUNK_SPAN_NS
        for sid, cid, last, fid, n, first in self.db.execute(
                "SELECT s.id, c.id, c.last_ts, c.fieldset, c.n, c.first_ts FROM series s JOIN chunks c "
                "ON c.series_id = s.id AND c.span = ? WHERE s.measurement=?", (span, measurement)):
            if first <= until_ns:
                found[sid] = (cid, last, fid, n)
                lo = max(lo, first)
            else:
                hi = min(hi, first)
        self._candidates_hold = (lo, hi)  # the moments these same candidates are every series' (see `_plan`)
        missing = [s.id for s in series if s.id not in found]
        if len(missing) > 200:
            found.update({sid: (cid, last, fid, n) for sid, cid, last, fid, n in self.db.execute(
                "SELECT s.id, c.id, c.last_ts, c.fieldset, c.n FROM series s JOIN chunks c ON c.series_id = s.id "
                "AND c.span = (SELECT span FROM chunks WHERE series_id = s.id AND span < ? "
                "ORDER BY span DESC LIMIT 1) WHERE s.measurement=?", (span, measurement)) if sid not in found})
        else:
            for sid in missing:
                row = self.db.execute("SELECT id, last_ts, fieldset, n FROM chunks WHERE series_id=? AND span < ?"
                                      " ORDER BY span DESC LIMIT 1", (sid, span)).fetchone()
                if row is not None:
                    found[sid] = row
        return found

    def _latest_kept(self, series: list[Series], head: dict[int, tuple],
                     candidates: dict[int, tuple[int, int, int, int, bytes | None]], since_ns: int, until_ns: int,
                     fields: Collection[str], newest: dict[int, int]) -> list[Row]:
        """`_latest_sealed`'s loop for a few fields: a chunk whose fields are kept decoded is a lookup."""
        out: list[Row] = []
        kept_fields, times = self._fields, self._times
        wanted_of: dict[int, frozenset[str]] = {}
        # a grid's row at `until`, looked up once per grid (series sampled together share it); by the grid's id, the
        # grid itself kept beside it (a cache evicted meanwhile could free it and its id be taken by another)
        at: dict[int, tuple[Sequence[int], int]] = {}
        for s in series:
            h = head.get(s.id)
            newer_than = h[0] if h else -1
            c = candidates.get(s.id)
            found = None
            if c is not None and c[1] > newer_than:
                key = (c[0], c[1], c[3])
                kept, ts = kept_fields.get(key), times.get(key)
                wanted = wanted_of.get(c[2])
                if wanted is None:
                    wanted = wanted_of[c[2]] = self._wanted(c[2], fields)
                if kept is None or ts is None or not wanted <= kept.keys():
                    found = self._latest_fields(s.id, until_ns, newer_than, c, fields)
                else:
                    kept_fields.move_to_end(key)
                    got = at.get(id(ts))
                    if got is None or got[0] is not ts:
                        got = at[id(ts)] = (ts, bisect_right(ts, until_ns) - 1)
                    i = got[1]
                    t = ts[i]
                    if t > newer_than:
                        if h is None and t >= since_ns:  # the common case (no head row, in the window): inline
                            newest[s.id] = t
                            out.append(Row(t, s.measurement, s.tags,
                                           {name: v for name in wanted if (v := kept[name][i]) is not None}))
                            continue
                        found = t, {name: v for name in wanted if (v := kept[name][i]) is not None}
            self._keep_row(out, newest, s, found, h, since_ns)
        return out

    def _keep_row(self, out: list[Row], newest: dict[int, int], s: Series, found: tuple | None, head: tuple | None,
                  since_ns: int) -> None:
        """A series' newest row (found in a chunk, else the head's) into `out` if at or after `since`; its time
        into `newest` in any case."""
        if found is None and head is not None:
            found = (head[0], self.fieldsets.decode(head[1], head[2]))
        if found is not None:
            newest[s.id] = found[0]
            if found[0] >= since_ns:
                out.append(Row(found[0], s.measurement, s.tags, found[1]))

    def _wanted(self, fid: int, fields: Collection[str]) -> frozenset[str]:
        """Which of `fields` a fieldset has (a chunk lacking a field needs no decoding for it)."""
        key = (fid, fields if isinstance(fields, tuple) else tuple(fields))
        wanted = self._wanted_names.get(key)
        if wanted is None:
            wanted = self._wanted_names[key] = frozenset(self.fieldsets.names(fid)) & frozenset(key[1])
        return wanted

    def _latest_fields(self, sid: int, until_ns: int, newer_than: int,
                       candidate: tuple[int, int, int, int, bytes | None] | None,
                       fields: Collection[str]) -> tuple[int, dict[str, FieldValue]] | None:
        """`_latest_in_chunk` for a few fields: each chunk's wanted columns are decoded once and kept (the
        rows at the next moment, a scrub away, are then a lookup), the other columns not at all."""
        if candidate is None:
            candidate = self._chunk_at(sid, until_ns, data=False)  # its data only if its columns are not kept
        if candidate is None or candidate[1] <= newer_than:
            return None
        cid, last_ts, fid, n, data = candidate
        wanted = self._wanted(fid, fields)
        kept = self._kept(cid, last_ts, n, fid, data, wanted)
        ts = self._chunk_times(cid, last_ts, n, data)
        i = bisect_right(ts, until_ns) - 1
        if ts[i] <= newer_than:
            return None
        return ts[i], {name: v for name in wanted if (v := kept[name][i]) is not None}

    def _kept(self, cid: int, last_ts: int, n: int, fid: int, data: bytes | None,
              wanted: frozenset[str]) -> dict[str, Sequence[Any]]:
        """A chunk's columns `wanted`, decoded once and kept (the other columns not at all)."""
        key = (cid, last_ts, n)
        kept = self._fields.get(key)
        if kept is not None and wanted <= kept.keys():
            self._fields.move_to_end(key)
            return kept
        if data is None:
            (data,) = self.db.execute("SELECT data FROM chunks WHERE id=?", (cid,)).fetchone()
        names = self.fieldsets.names(fid)
        try:
            ts, columns = chunks.select(data, {i for i, name in enumerate(names) if name in wanted})
        except chunks.ChunkError as e:
            raise StoreError(f"{self.file.path}: chunk {cid}: {e}") from None
        kept = self._fields[key] = {**(kept or {}), **{names[i]: column for i, column in columns.items()}}
        self._times[key] = self._grid(ts)
        for cache, most in ((self._fields, _CACHED_FIELDS), (self._times, _CACHED_TIMES)):
            while len(cache) > most:
                cache.popitem(last=False)
        return kept

    def latest(self, measurement: str, since_ns: int = 0, until_ns: int | None = None,
               fields: Collection[str] | None = None) -> list[Row]:
        """The newest sample of each series of a measurement in [since, until] (time travel: `until`).
        Without `until` the head alone answers: it always holds each series' newest row. `fields`: only
        these are wanted (a row from a chunk holds no others; they are kept decoded for the next moment)."""
        until = until_ns if until_ns is not None else END
        version = self._file_version()
        with self._snapshot():
            head = self._head(measurement, until, version)
            if until_ns is None or not self.file.chunked:
                return [Row(ts, measurement, json.loads(tags), self.fieldsets.decode(fid, vals))
                        for ts, fid, vals, tags in head.values() if ts >= since_ns]
            newest: dict[int, int] = {}
            plan = self._plan(measurement, until, fields, version) if fields is not None else None
            if plan is not None:
                rows = self._from_plan(measurement, plan, head, since_ns, until, newest)
            else:
                series = self._kept_series(measurement)
                rows = self._latest_sealed(series, head, since_ns, until, measurement, fields, newest)
                if fields is not None:
                    self._make_plan(measurement, series, until, fields, version)
        self._newest_at[measurement] = (version, until, newest)
        return rows

    def _head(self, measurement: str, until: int, version: tuple[int, int]) -> dict[int, tuple]:
        """Each series' newest head row at or before `until`: (ts, fieldset, vals, tags) by series id."""
        none_before = self._no_head.get(measurement)
        if none_before is not None and none_before[0] == version and until <= none_before[1]:
            return {}
        head = {sid: (ts, fid, vals, tags) for sid, ts, fid, vals, tags in self.db.execute(
            "SELECT s.id, x.ts, x.fieldset, x.vals, s.tags FROM series s JOIN samples x ON x.series_id = s.id "
            "AND x.ts = (SELECT max(ts) FROM samples WHERE series_id = s.id AND ts <= ?) "
            "WHERE s.measurement=? ORDER BY s.id", (until, measurement))}
        if not head and until < END:
            self._no_head[measurement] = (version, until)
        return head

    def present_at(self, measurement: str, until_ns: int) -> dict[int, int]:
        """The series of a measurement with a sample at or before `until`, from the index alone (no chunk is
        inflated): by series id, that sample's time where the index tells it (a head row, a chunk ending by
        `until`), else `until` (its chunk runs past it). A reader that shows a few of 10,000 series first knows
        which the others are without decoding them."""
        span = until_ns // CHUNK_SPAN_NS
        out: dict[int, int] = {}
        with self._snapshot():
            chunked = self.file.chunked
            # nearly every series has a chunk in `until`'s own span: one index probe each (`_candidates`)
            for sid, first, last in self.db.execute(
                    "SELECT s.id, c.first_ts, c.last_ts FROM series s JOIN chunks c ON c.series_id = s.id "
                    "AND c.span = ? WHERE s.measurement=?", (span, measurement)) if chunked else ():
                if first <= until_ns:
                    out[sid] = min(last, until_ns)
            missing = [s.id for s in self._kept_series(measurement) if s.id not in out] if chunked else []
            for sid in missing:  # ended, or not begun in that span yet: its newest chunk before it
                row = self.db.execute("SELECT last_ts FROM chunks WHERE series_id=? AND span < ? ORDER BY span DESC"
                                      " LIMIT 1", (sid, span)).fetchone()
                if row is not None:
                    out[sid] = row[0]
            for sid, ts in self.db.execute(
                    "SELECT x.series_id, max(x.ts) FROM series s JOIN samples x ON x.series_id = s.id "
                    "WHERE s.measurement=? AND x.ts <= ? GROUP BY x.series_id", (measurement, until_ns)):
                out[sid] = max(out.get(sid, ts), ts)
        return out

    def latest_columns(self, measurement: str, until_ns: int, fields: Collection[str]) -> Columns | None:
        """`latest(measurement, 0, until, fields)` column-shaped, from the plan a whole read made in this span
        (`_plan`) when one holds and the head has no row at or before `until` (a cursor in the past); else None,
        and the caller reads rows. No row object is made: a list per field, an item per series."""
        version = self._file_version()
        plan = self._plan(measurement, until_ns, fields, version)
        if plan is None:
            return None
        with self._snapshot():
            if self._head(measurement, until_ns, version):
                return None
        ids: list[int] = []
        tags: list[dict[str, str]] = []
        ts: list[int] = []
        values: dict[str, list[FieldValue | None]] = {name: [] for name in fields}
        for grid, dense, sparse, by_name in plan:
            i = bisect_right(grid, until_ns) - 1
            ids += [e[0] for e in dense] + [e[0] for e in sparse]
            tags += [e[1] for e in dense] + [e[1] for e in sparse]
            ts += [grid[i]] * (len(dense) + len(sparse))
            for name, out in values.items():
                out += [c[i] if c is not None else None for c in by_name[name]]
        self._newest_at[measurement] = (version, until_ns, dict(zip(ids, ts, strict=True)))
        return Columns(measurement, ids, tags, ts, values)

    def _plan(self, measurement: str, until_ns: int, fields: Collection[str],
              version: tuple[int, int]) -> list[tuple] | None:
        """A whole measurement's few fields at a moment, column-shaped: for each series the timestamps and kept
        columns of its chunk at `until`, made by the last read in this span (`_make_plan`) and good while the file is
        unchanged and `until` picks the same chunks. A moment is then one lookup per grid and one per value."""
        hit = self._plans.get((measurement, tuple(fields)))
        if hit is None or hit[0] != version or not hit[1] <= until_ns < hit[2]:
            return None
        return hit[3]

    def _make_plan(self, measurement: str, series: list[Series], until_ns: int, fields: Collection[str],
                   version: tuple[int, int]) -> None:
        """After a whole read at `until`: the plan `_plan` answers the next moments from, if every series' chunk
        has its fields kept (else none: the next read decodes what is missing)."""
        lo, hi = self._candidates_hold
        if not lo <= until_ns < hi:
            return
        found = self._candidates(measurement, series, until_ns)
        grids: dict[int, tuple[Sequence[int], list, list]] = {}  # by id(grid): (grid, dense entries, the rest)
        for s in series:
            c = found.get(s.id)
            if c is None:
                continue
            key = (c[0], c[1], c[3])
            kept, ts = self._fields.get(key), self._times.get(key)
            wanted = self._wanted(c[2], fields)
            if kept is None or ts is None or not wanted <= kept.keys():
                return
            names = tuple(sorted(wanted))
            cols = tuple(kept[name] for name in names)
            group = grids.get(id(ts))
            if group is None:
                group = grids[id(ts)] = (ts, [], [])
            # a column without gaps (an array) has no None to leave out: its row is made in C (`_from_plan`)
            group[1 if all(isinstance(c, array) for c in cols) else 2].append((s.id, s.tags, names, cols))
        if len(self._plans) > 32:
            self._plans.clear()
        lo, hi = self._candidates_hold
        # each grid's series, and for `latest_columns` each field's column of each of them in that order
        self._plans[(measurement, tuple(fields))] = (version, lo, hi, [
            (ts, dense, sparse, {name: [cols[names.index(name)] if name in names else None
                                        for _, _, names, cols in dense + sparse] for name in fields})
            for ts, dense, sparse in grids.values()])

    def _from_plan(self, measurement: str, plan: list[tuple], head: dict[int, tuple],
                   since_ns: int, until_ns: int, newest: dict[int, int]) -> list[Row]:
        """`_latest_kept` from a plan: a series' head row if newer than its chunk's (or it has no chunk). The series
        sampled on one clock share a grid, and the row at `until` is found once for all of them."""
        out: list[Row] = []
        for ts, dense, sparse, _ in plan:
            i = bisect_right(ts, until_ns) - 1
            t, value_at = ts[i], itemgetter(i)
            if head:  # the head's row is the newer: below
                dense = [e for e in dense if not (e[0] in head and head[e[0]][0] >= t)]
                sparse = [e for e in sparse if not (e[0] in head and head[e[0]][0] >= t)]
            newest.update(dict.fromkeys([e[0] for e in dense], t))
            newest.update(dict.fromkeys([e[0] for e in sparse], t))
            if t >= since_ns:
                out += [Row(t, measurement, tags, dict(zip(names, map(value_at, cols), strict=True)))
                        for _, tags, names, cols in dense]
                out += [Row(t, measurement, tags, {name: v for name, col in zip(names, cols, strict=True)
                                                   if (v := col[i]) is not None}) for _, tags, names, cols in sparse]
        if head:
            tags = {s.id: s.tags for s in self._kept_series(measurement)}
            for sid, (t, fid, vals, _) in head.items():
                if newest.get(sid, -1) < t and sid in tags:
                    newest[sid] = t
                    if t >= since_ns:
                        out.append(Row(t, measurement, tags[sid], self.fieldsets.decode(fid, vals)))
        return out

    def latest_of(self, series: Iterable[Series], since_ns: int = 0, until_ns: int | None = None,
                  fields: Collection[str] | None = None) -> list[Row]:
        """`latest` for a few chosen series of a large measurement (one index probe each)."""
        until = until_ns if until_ns is not None else END
        chosen = list(series)
        with self._snapshot():
            head = {}
            for s in chosen:
                row = self.db.execute(
                    "SELECT ts, fieldset, vals FROM samples WHERE series_id=? AND ts <= ? ORDER BY ts DESC LIMIT 1",
                    (s.id, until)).fetchone()
                if row is not None:
                    head[s.id] = row
            if until_ns is None or not self.file.chunked:
                return [Row(head[s.id][0], s.measurement, s.tags, self.fieldsets.decode(*head[s.id][1:3]))
                        for s in chosen if s.id in head and head[s.id][0] >= since_ns]
            return self._latest_sealed(chosen, head, since_ns, until, fields=fields)

    def _latest_sealed(self, series: list[Series], head: dict[int, tuple], since_ns: int, until_ns: int,
                       measurement: str | None = None, fields: Collection[str] | None = None,
                       newest: dict[int, int] | None = None) -> list[Row]:
        """`latest` back in time: a series' newest row before `until` may be in a chunk. For a whole
        measurement, each series' candidate chunk is found by one query. `newest` gets each series' newest row
        time, before `since` too."""
        newest = {} if newest is None else newest
        candidates: dict[int, tuple[int, int, int, int, bytes | None]] = {}
        if measurement is not None:
            found = self._candidates(measurement, series, until_ns)
            # the chunks whose rows are newer than the head's (none when the cursor is now) and not kept decoded,
            # a few hundred a query
            kept_fields, wanted_of = self._fields, {}
            if fields is not None:
                wanted_of = {fid: self._wanted(fid, fields) for fid in {c[2] for c in found.values()}}
            wanted = [c for sid, c in found.items() if c[1] > head.get(sid, (-1,))[0]
                      and not (fields is not None and (kept := kept_fields.get((c[0], c[1], c[3]))) is not None
                               and wanted_of[c[2]] <= kept.keys())]
            data: dict[int, bytes] = {}
            for i in range(0, len(wanted), 500):
                part = [c[0] for c in wanted[i:i + 500]]
                data.update(self.db.execute(f"SELECT id, data FROM chunks WHERE id IN ({','.join('?' * len(part))})",
                                            part))
            candidates = {sid: (*c, data.get(c[0])) for sid, c in found.items()}
            if fields is not None:
                return self._latest_kept(series, head, candidates, since_ns, until_ns, fields, newest)
        out = []
        for s in series:
            h = head.get(s.id)
            newer_than = h[0] if h else -1
            if measurement is not None and candidates.get(s.id, (0, -1))[1] <= newer_than:
                found = None  # no chunk, or the head's row is newer than all of it
            elif fields is not None:
                found = self._latest_fields(s.id, until_ns, newer_than, candidates.get(s.id), fields)
            else:
                found = self._latest_in_chunk(s.id, until_ns, newer_than, candidates.get(s.id))
            self._keep_row(out, newest, s, found, h, since_ns)
        return out

    def newest(self, measurement: str, since_ns: int, until_ns: int) -> list[tuple[int, int]]:
        """(series id, newest ts) of the series of a measurement with samples in [since, until]:
        which series moved, without decoding a sample (readers refresh only those). Asked again while the file
        has not changed (a paused cursor, read again at each key), the answer is the one given."""
        version = self._file_version()
        hit = self._newest.get((measurement, since_ns, until_ns))
        if hit is not None and hit[0] == version:
            return list(hit[1])
        at = self._newest_at.get(measurement)
        if at is not None and at[0] == version and at[1] == until_ns:  # a whole read at this moment said it
            return sorted((sid, ts) for sid, ts in at[2].items() if ts >= since_ns)
        with self._snapshot():
            found = dict(self.db.execute(
                "SELECT x.series_id, max(x.ts) FROM series s JOIN samples x ON x.series_id = s.id "
                "WHERE s.measurement=? AND x.ts >= ? AND x.ts <= ? GROUP BY x.series_id",
                (measurement, since_ns, until_ns)).fetchall())
            if self.file.chunked:
                times = self._times
                at: dict[int, tuple[Sequence[int], int]] = {}  # a grid's last time before `until`, once per grid
                for sid, cid, n, first_ts, last_ts in self._chunks_over(measurement, since_ns, until_ns, version):
                    if last_ts < since_ns or first_ts > until_ns:
                        continue
                    if last_ts > until_ns:  # the chunk runs past `until`: its last row before it (no LRU touch)
                        ts = times.get((cid, last_ts, n)) or self._chunk_times(cid, last_ts, n)
                        got = at.get(id(ts))
                        if got is None or got[0] is not ts:  # (the grid kept beside its id: see `_latest_kept`)
                            i = bisect_right(ts, until_ns) - 1
                            got = at[id(ts)] = (ts, ts[i] if i >= 0 else -1)
                        last_ts = got[1]
                    if last_ts >= since_ns and last_ts > found.get(sid, -1):
                        found[sid] = last_ts
        if len(self._newest) > 256:  # a cursor moving about: keep the recent answers only
            self._newest.clear()
        answer = self._newest[(measurement, since_ns, until_ns)] = (version, sorted(found.items()))
        return list(answer[1])

    def _chunks_over(self, measurement: str, since_ns: int, until_ns: int,
                     version: tuple[int, int]) -> list[tuple[int, int, int, int, int]]:
        """(series, chunk, rows, first time, last time) of a measurement's chunks in the spans of [since, until],
        read once while the file is unchanged (a tick moves `until` a second, within the same spans)."""
        key = (measurement, *self._spans(since_ns, until_ns))
        hit = self._span_chunks.get(key)
        if hit is None or hit[0] != version:
            if len(self._span_chunks) > 24:  # ~1 MB for each of a 10,000-VM vCenter's large measurements
                self._span_chunks.clear()
            hit = self._span_chunks[key] = (version, self.db.execute(
                "SELECT c.series_id, c.id, c.n, c.first_ts, c.last_ts FROM series s JOIN chunks c "
                "ON c.series_id = s.id WHERE s.measurement=? AND c.span BETWEEN ? AND ?", key).fetchall())
        return hit[1]

    def _file_version(self) -> tuple[int, int]:
        """Changes whenever anything is written to the file, by another connection or this one."""
        return self.db.execute("PRAGMA data_version").fetchone()[0], self.db.total_changes

    def _chunk_times(self, cid: int, last_ts: int, n: int, data: bytes | None = None) -> Sequence[int]:
        """A chunk's timestamps, decoded alone and kept (a chunk rewritten by a late row has another last row
        or count, so another key)."""
        hit = self._chunk_cache.get(cid)
        if hit is not None:
            return hit[0]
        key = (cid, last_ts, n)
        ts = self._times.get(key)
        if ts is None:
            if data is None:
                (data,) = self.db.execute("SELECT data FROM chunks WHERE id=?", (cid,)).fetchone()
            ts = self._times[key] = self._grid(chunks.timestamps(data))
            if len(self._times) > _CACHED_TIMES:
                self._times.popitem(last=False)
        else:
            self._times.move_to_end(key)
        return ts

    def _grid(self, ts: Sequence[int]) -> Sequence[int]:
        """Timestamps as kept: a regular grid as the one object shared by all equal ones, others as an array."""
        if isinstance(ts, range):
            if len(self._grids) > 4096:
                self._grids.clear()
            return self._grids.setdefault(ts, ts)
        return array("q", ts)

    def series_version(self) -> int:
        """Changes whenever a series is added or removed: readers cache `series()` until it does."""
        row = self.db.execute("SELECT max(id), count(*) FROM series").fetchone()
        return (row[0] or 0) * 1_000_003 + row[1]

    def window(self, series_id: int, field_name: str, since_ns: int,
               until_ns: int | None = None) -> list[tuple[int, FieldValue]]:
        """(ts, value) of one field of one series, oldest first; rows without it are skipped.
        Decodes only the chunks the window touches."""
        until = until_ns if until_ns is not None else END
        out: dict[int, FieldValue] = {}
        with self._snapshot():
            if self.file.chunked:
                for cid, fid, data, last_ts, n in self.db.execute(
                        "SELECT id, fieldset, data, last_ts, n FROM chunks WHERE series_id=? AND span BETWEEN ? AND ?",
                        (series_id, *self._spans(since_ns, until))):
                    kept = self._fields.get((cid, last_ts, n))
                    if kept is not None and field_name in kept:  # kept decoded by `latest(fields=)`: a Fleet trend
                        ts, col = self._chunk_times(cid, last_ts, n, data), kept[field_name]
                    else:  # decoded whole and kept: a screen reads several fields of a chunk, and `latest` its row
                        ts, names, columns = self._chunk(cid, fid, data)
                        if field_name not in names:
                            continue
                        col = columns[names.index(field_name)]
                    for i in range(bisect_left(ts, since_ns), bisect_right(ts, until)):
                        if col[i] is not None:
                            out[ts[i]] = col[i]
            positions: dict[int, int] = {}
            for ts, fid, vals in self.db.execute(
                    "SELECT ts, fieldset, vals FROM samples WHERE series_id=? AND ts >= ? AND ts <= ? ORDER BY ts",
                    (series_id, since_ns, until)):
                pos = positions.get(fid)
                if pos is None:
                    names = self.fieldsets.names(fid)
                    pos = positions[fid] = names.index(field_name) if field_name in names else -1
                if pos >= 0:
                    out[ts] = json.loads(vals)[pos]
        return sorted(out.items())  # times are unique: the values are never compared

    def time_range(self) -> tuple[int, int] | None:
        """First and last sample time: index probes per series, not a scan of every sample."""
        with self._snapshot():
            row = self.db.execute(
                "SELECT min((SELECT ts FROM samples WHERE series_id = s.id ORDER BY ts LIMIT 1)),"
                " max((SELECT ts FROM samples WHERE series_id = s.id ORDER BY ts DESC LIMIT 1)) FROM series s"
            ).fetchone()
            if self.file.chunked:
                sealed = self.db.execute(
                    "SELECT min((SELECT first_ts FROM chunks WHERE series_id = s.id ORDER BY span LIMIT 1)),"
                    " max((SELECT last_ts FROM chunks WHERE series_id = s.id ORDER BY span DESC LIMIT 1))"
                    " FROM series s").fetchone()
                row = (min(v for v in (row[0], sealed[0]) if v is not None) if sealed[0] is not None else row[0],
                       max(v for v in (row[1], sealed[1]) if v is not None) if sealed[1] is not None else row[1])
        return None if row[0] is None else (row[0], row[1])

    def facts(self, kind: str | None = None) -> list[Fact]:
        """The current version of every entity's facts (of one kind, or all)."""
        sql = ("SELECT kind, entity, data, last_seen FROM facts WHERE id IN "
               "(SELECT max(id) FROM facts GROUP BY kind, entity) AND data != ?")
        args: tuple = (doc(REMOVED),)
        if kind is not None:
            sql, args = sql + " AND kind=?", (*args, kind)
        cur = self.db.execute(sql + " ORDER BY id", args)
        out: list[Fact] = []
        # a few hundred at a time, each batch parsed in one call: the decoder shares a key's string within a
        # call (2,000 VM facts parsed one by one would hold 2,000 copies of each field name), short values (a
        # power state, a host, a NIC type) are shared too, and a 10,000-VM vCenter's JSON text is never held
        # whole beside its parsed form. Measured on a 2,000-VM vCenter: 6.6 MB instead of 14.3 MB.
        while rows := cur.fetchmany(500):
            tags, data = (json.loads("[" + ",".join(r[i] for r in rows) + "]", object_pairs_hook=_shared)
                          for i in (1, 2))
            out.extend(Fact(k, t, d, ts) for (k, _, _, ts), t, d in zip(rows, tags, data, strict=True))
        return out

    def fact_history(self, kind: str, tags: dict[str, str]) -> list[Fact]:
        cur = self.db.execute("SELECT data, first_seen FROM facts WHERE kind=? AND entity=? ORDER BY id",
                              (kind, canonical_tags(tags)))
        return [Fact(kind, dict(tags), json.loads(d), ts) for d, ts in cur]

    def annotations(self, since_ns: int = 0, until_ns: int | None = None) -> list[Annotation]:
        return self.annotations_of((), since_ns, until_ns)

    def annotations_of(self, kinds: Collection[str], since_ns: int = 0,
                       until_ns: int | None = None) -> list[Annotation]:
        """Those of `kinds` (all when empty) in [since, until], in time order."""
        only = f" AND kind IN ({','.join('?' * len(kinds))})" if kinds else ""
        cur = self.db.execute(
            f"SELECT ts, kind, name, tags, text FROM annotations WHERE ts >= ? AND ts <= ?{only} ORDER BY ts, id",
            (since_ns, until_ns if until_ns is not None else 2**63 - 1, *kinds))
        return [Annotation(k, n, json.loads(t), x, ts) for ts, k, n, t, x in cur]

    def findings(self, open_only: bool = True) -> list[Finding]:
        sql = ("SELECT rule, severity, subject, summary, evidence, why, fix, refs, first_seen, last_seen,"
               " resolved_at FROM findings")
        if open_only:
            sql += " WHERE resolved_at IS NULL"
        return [Finding(r, sev, json.loads(sub), summ, json.loads(ev), why, fix, json.loads(refs), fs, ls, res)
                for r, sev, sub, summ, ev, why, fix, refs, fs, ls, res in self.db.execute(sql + " ORDER BY id")]


def _shared(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A decoded JSON object whose keys and short strings are interned: the same value in thousands of facts
    or series is held once (the decoder shares a key only within one call)."""
    return {sys.intern(k): sys.intern(v) if type(v) is str and len(v) <= SHORT_TEXT else v for k, v in pairs}

