"""Embedded time-series store: one SQLite file in WAL mode.

Layout: `series` gives each (measurement, tag set) an integer id. New samples land in the
head, `samples`, clustered on (series_id, ts) WITHOUT ROWID: a row's fields are a JSON array
of values plus the id of its `fieldsets` row (the field names, stored once). Once a
30-minute span is over, the writer seals each series' rows of that span into one `chunks`
row (agent/core/chunks.py: columns encoded by codec, then zstd), about 1.4 bytes a value
instead of 8. The newest row of every series stays in the head, so the live view's "latest
value" reads never decode a chunk. Reads merge chunks and head inside one read transaction,
so a reader never sees a row twice or misses one while the writer moves it.

One process writes (a lock file enforces it); readers in other processes see each committed
batch at once. WAL with synchronous=NORMAL means a kill -9 loses at most the transaction
being written and never corrupts the file.
"""

from __future__ import annotations

import fcntl
import functools
import hashlib
import json
import logging
import os
import queue
import sqlite3
import sys
import threading
import time
from array import array
from bisect import bisect_left, bisect_right
from collections import OrderedDict
from collections.abc import Collection, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from operator import itemgetter
from pathlib import Path
from typing import Any

from db2vtop.agent.core import chunks
from db2vtop.agent.core.backlog import Backlog
from db2vtop.agent.core.clock import CLOCK, RetentionClock, iso_utc
from db2vtop.agent.core.files import make_private_dir, open_private
from db2vtop.agent.core.model import (
    REMOVED,
    SHORT_TEXT,
    Annotation,
    Fact,
    FieldValue,
    Finding,
    Sample,
    canonical_tags,
    clean_fields,
    describe_record,
)
from db2vtop.agent.core.source import Columns, Row, Series
from db2vtop.agent.core.supervise import Supervisor

log = logging.getLogger(__name__)

SCHEMA_VERSION = 3  # 2: fields as a fieldset id plus a JSON array of values; 3: sealed chunks
CHUNK_SPAN_NS = 30 * 60 * 10**9  # a chunk holds one series over one such span
_PAGE_SIZE = 65536  # big pages: a chunk (2-4 KB) shares a page with its neighbours, little slack
_CACHED_CHUNKS = 4096  # decoded chunks kept per connection (replay scrubs back and forth)
#: chunks' timestamps kept per connection (~0.8 KB each): a 10,000-VM Fleet's catch-up at a past cursor asks
#: which of some 40,000 chunks hold a newer row, every second
_CACHED_TIMES = 65536
#: chunks whose chosen fields are kept decoded (`latest(..., fields=)`, ~0.8 KB a field): the Fleet of a 10,000-VM
#: vCenter reads a few figures of some 30,000 series at each moment the user moves to
_CACHED_FIELDS = 40000
_END = 2**63 - 1
_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS series(
    id INTEGER PRIMARY KEY, measurement TEXT NOT NULL, tags TEXT NOT NULL,
    UNIQUE(measurement, tags));
CREATE TABLE IF NOT EXISTS fieldsets(id INTEGER PRIMARY KEY, names TEXT NOT NULL UNIQUE);
CREATE TABLE IF NOT EXISTS samples(
    series_id INTEGER NOT NULL, ts INTEGER NOT NULL, fieldset INTEGER NOT NULL, vals TEXT NOT NULL,
    PRIMARY KEY(series_id, ts)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS chunks(
    id INTEGER PRIMARY KEY AUTOINCREMENT, series_id INTEGER NOT NULL, span INTEGER NOT NULL,
    first_ts INTEGER NOT NULL, last_ts INTEGER NOT NULL, fieldset INTEGER NOT NULL, n INTEGER NOT NULL,
    data BLOB NOT NULL, UNIQUE(series_id, span));
CREATE TABLE IF NOT EXISTS facts(
    id INTEGER PRIMARY KEY, kind TEXT NOT NULL, entity TEXT NOT NULL, data TEXT NOT NULL,
    first_seen INTEGER NOT NULL, last_seen INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS facts_entity ON facts(kind, entity, id);
CREATE TABLE IF NOT EXISTS annotations(
    id INTEGER PRIMARY KEY, ts INTEGER NOT NULL, kind TEXT NOT NULL, name TEXT NOT NULL,
    tags TEXT NOT NULL, text TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS annotations_ts ON annotations(ts);
CREATE TABLE IF NOT EXISTS findings(
    id INTEGER PRIMARY KEY, key TEXT NOT NULL, rule TEXT NOT NULL, severity TEXT NOT NULL,
    subject TEXT NOT NULL, summary TEXT NOT NULL, evidence TEXT NOT NULL, why TEXT NOT NULL,
    fix TEXT NOT NULL, refs TEXT NOT NULL, first_seen INTEGER NOT NULL,
    last_seen INTEGER NOT NULL, resolved_at INTEGER);
CREATE UNIQUE INDEX IF NOT EXISTS findings_open ON findings(key) WHERE resolved_at IS NULL;
CREATE INDEX IF NOT EXISTS findings_seen ON findings(last_seen);
"""
#: rows one statement carries at most (a power of two; fewer where SQLite allows fewer parameters). sqlite3 lets
#: the GIL go for each step of a statement and must win it back after, from threads that may keep it for their
#: whole switch interval: executemany's step per row left the store writer of a 10,000-VM first cycle waiting most
#: of its time (a convoy; 100,000 rows beside two threads that never wait: 9 s in 256-row statements, minutes one
#: row a step; beside the agent's own threads, which wait often, a few ms). Larger statements cost memory: sqlite3
#: keeps each prepared (a 4,096-row one held some MB, a 2,000-VM agent's peak grew by 9 MB)
ROWS_PER_STATEMENT = 256


@functools.lru_cache(maxsize=64)
def _values(width: int, n: int) -> str:
    """`VALUES (?,?),(?,?)...`: n rows of `width` parameters."""
    return "VALUES " + ",".join(["(" + ",".join("?" * width) + ")"] * n)


def _parts(items: Sequence[Any], per: int) -> Iterator[Sequence[Any]]:
    """`items` in parts of at most `per` (a power of two), each a power of two long: however batches vary, a
    statement has one of a few shapes, each prepared once."""
    i, n = 0, len(items)
    while i < n:
        k = per
        while k > n - i:
            k //= 2
        yield items[i:i + k]
        i += k


class StoreError(Exception):
    pass


class StoreLockedError(StoreError):
    """Another process holds the writer lock of this store: `pid`, as its lock file says ("?" unknown)."""

    def __init__(self, path: Path, pid: str):
        super().__init__(f"{path} is being written by another db2vtop process (pid {pid})")
        self.pid = pid


class StoreAccessError(StoreError):
    """The store's file or directory cannot be made or written (read-only, missing, not ours): a
    problem of the command's setup, said in one line; the CLI exits 2 for it, as for bad usage."""

    status = 2


_VALUES_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def _series_keys(samples: Sequence[Sample]) -> list[str]:
    """Each sample's series key: the measurement and its sorted tags in one string (cheaper than the canonical
    text, same identity). Made once per tags dict: a collector's samples of one series share theirs (a first
    cycle reaching back hands on ten of each)."""
    made: dict[tuple[str, int], str] = {}
    out = []
    for s in samples:
        key = made.get((s.measurement, id(s.tags)))
        if key is None:
            key = made[(s.measurement, id(s.tags))] = "\0".join(
                (s.measurement, *(f"{k}\0{v}" for k, v in sorted(s.tags.items()))))
        out.append(key)
    return out


def _encode(fields: dict[str, FieldValue]) -> tuple[tuple[str, ...], str]:
    """(names, JSON array of values) of one sample's fields."""
    try:
        return tuple(fields), _VALUES_ENCODER.encode(list(fields.values()))
    except ValueError:  # NaN or infinity from a careless collector: drop those values only
        fields = clean_fields(fields)
        return tuple(fields), _VALUES_ENCODER.encode(list(fields.values()))


def _row_at(names: tuple[str, ...], columns: list[list[Any]], i: int) -> dict[str, FieldValue]:
    """Row i of a decoded chunk: the fields it has."""
    return {n: c[i] for n, c in zip(names, columns, strict=True) if c[i] is not None}


def _doc(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def _digest(doc: str) -> bytes:
    """What the writer remembers of each entity's current facts: enough to see a change, not the text."""
    return hashlib.blake2b(doc.encode(), digest_size=16).digest()


class Store:
    """One connection to the store, a Source (agent/core/source.py). `writer=True` takes the process-wide
    writer lock."""

    def __init__(self, path: Path, *, writer: bool = False):
        self.path = Path(path)
        self.writer = writer
        self._lock_fd: int | None = None
        new_file = self._prepare_files() if writer else False
        if not writer and not self.path.exists():
            raise StoreError(f"no store at {self.path}")
        try:
            self.db = sqlite3.connect(self.path, timeout=10, isolation_level=None, check_same_thread=False)
            self.db.execute("PRAGMA busy_timeout=10000")
            if writer:
                if new_file:  # both only take effect before the first table is written
                    self.db.execute(f"PRAGMA page_size={_PAGE_SIZE}")
                    self.db.execute("PRAGMA auto_vacuum=INCREMENTAL")
                self.db.execute("PRAGMA journal_mode=WAL")
                self.db.execute("PRAGMA synchronous=NORMAL")
                self.db.execute("PRAGMA wal_autocheckpoint=256")  # pages: 16 MiB of WAL at 64 KiB pages
                # 4 MiB: a cycle of a large fleet touches every leaf page of the head, more than any cache
                # an agent can afford holds; pages come back from the OS cache in microseconds, and a
                # bigger cache only grew the agent's memory for half an hour
                self.db.execute("PRAGMA cache_size=-4096")
                if not new_file:
                    self._check_schema()  # a newer schema is refused before anything is touched
                # one transaction: a reader sees no store, or a whole one, never tables half made; schema 2 is a
                # head without chunks: it gains the table and its rows are sealed as they age
                self.db.executescript(
                    f"BEGIN IMMEDIATE;{_SCHEMA}INSERT OR IGNORE INTO meta VALUES('schema_version', '{SCHEMA_VERSION}');"
                    f"UPDATE meta SET value='{SCHEMA_VERSION}' WHERE key='schema_version' AND value='2';COMMIT;")
            else:
                self.db.execute("PRAGMA query_only=1")
                self.db.execute("PRAGMA cache_size=-16384")
            self._check_schema()
        except sqlite3.DatabaseError as e:
            self.close()
            if writer and isinstance(e, sqlite3.OperationalError):  # read-only, I/O error, cannot open
                raise StoreAccessError(f"cannot write the store {self.path}: {e}") from None
            if not writer and isinstance(e, sqlite3.OperationalError) and not os.access(self.path.parent, os.W_OK):
                self._open_immutable()  # a recording on read-only media: nobody can be writing it
            else:
                raise StoreError(f"{self.path}: {e}") from None
        self._series: dict[str, int] = {}
        self._fieldset_ids: dict[tuple[str, ...], int] = {}
        self._fieldset_names: dict[int, tuple[str, ...]] = {}
        self._facts: dict[tuple[str, str], bytes] = {}  # (kind, entity) -> the digest of its newest stored version
        self._retention_cursor = 0
        self._seal_cursor = 0
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
        self._chunked = self._has_chunks()

    def _open_immutable(self) -> None:
        """Read a store whose directory cannot be written: SQLite cannot make the WAL's shared-memory
        file there, so the file is opened as immutable (no locks, no WAL), which is what it is."""
        try:
            self.db = sqlite3.connect(f"{self.path.resolve().as_uri()}?immutable=1", uri=True, timeout=10,
                                      isolation_level=None, check_same_thread=False)
            self.db.execute("PRAGMA query_only=1")
            self._check_schema()
        except sqlite3.DatabaseError as e:
            self.close()
            raise StoreError(f"{self.path}: {e}") from None

    def _prepare_files(self) -> bool:
        """The writer's directory, lock and database file, made private (0700, 0600: SQLite gives the
        WAL and shared-memory files the database's mode) and never through a symbolic link; True for a
        new (empty) store. A directory that cannot be written is one StoreAccessError."""
        step = f"cannot create the directory {self.path.parent}"
        try:
            make_private_dir(self.path.parent)
            step = f"cannot create the writer lock {self.path}-writer.lock"
            self._take_writer_lock()
            step = f"cannot open the store {self.path}"
            if not os.path.lexists(self.path):
                self._create()
            fd = open_private(self.path, os.O_RDWR | os.O_CREAT)
            try:
                size = os.fstat(fd).st_size
            finally:
                os.close(fd)
            for suffix in ("-wal", "-shm"):  # left by an older db2vtop with the umask's mode
                side = Path(f"{self.path}{suffix}")
                if side.is_file() and not side.is_symlink() and side.stat().st_uid == os.geteuid():
                    side.chmod(0o600)
        except OSError as e:
            self.close()
            raise StoreAccessError(f"{step}: {e.strerror or e}") from None
        return size == 0

    def _create(self) -> None:
        """A new store is made whole under another name and renamed into place: a reader that finds the
        file finds its tables (an agent's first seconds, `watch` attaching, `mark --wait`)."""
        tmp = self.path.with_name(f".{self.path.name}.new-{os.getpid()}")
        os.close(open_private(tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC))
        try:
            db = sqlite3.connect(tmp, isolation_level=None)
            try:  # page size and vacuum mode only take effect before the first table is written
                db.execute(f"PRAGMA page_size={_PAGE_SIZE}")
                db.execute("PRAGMA auto_vacuum=INCREMENTAL")
                db.executescript(f"BEGIN;{_SCHEMA}INSERT INTO meta VALUES('schema_version', '{SCHEMA_VERSION}');"
                                 "COMMIT;")
            finally:
                db.close()
            os.rename(tmp, self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def _take_writer_lock(self) -> None:
        lock_path = f"{self.path}-writer.lock"
        fd = open_private(lock_path, os.O_RDWR | os.O_CREAT)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pid = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
            os.close(fd)
            raise StoreLockedError(self.path, pid) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        self._lock_fd = fd

    def _check_schema(self) -> None:
        try:
            row = self.db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
        except sqlite3.OperationalError:
            if self.writer:
                return  # an empty file: the writer creates the store
            raise StoreError(f"{self.path} is not a db2vtop store (or is still being created)") from None
        if row is None and not self.writer:  # made by an older db2vtop, its tables one by one: not yet whole
            raise StoreError(f"{self.path} is not a db2vtop store (or is still being created)")
        if row and int(row[0]) > SCHEMA_VERSION:
            raise StoreError(f"{self.path} has store schema {row[0]}, written by a newer db2vtop; "
                             f"this one reads schemas 2 to {SCHEMA_VERSION}")
        if row and int(row[0]) < 2:
            raise StoreError(f"{self.path} has store schema {row[0]}; this db2vtop reads schemas 2 to {SCHEMA_VERSION}")

    def _has_chunks(self) -> bool:
        found = self.db.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name='chunks'").fetchone()
        return found is not None

    def close(self) -> None:
        db = getattr(self, "db", None)
        if db is not None:
            db.close()
            self.db = None  # type: ignore[assignment]
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- writing ----------------------------------------------------------------------

    def _series_id(self, key: str, measurement: str, tags: dict[str, str], text: str | None = None) -> int:
        sid = self._series.get(key)
        if sid is None:  # one statement for a new series (a first cycle makes thousands), two for a known one
            row = (measurement, text or canonical_tags(tags))
            found = self.db.execute("INSERT INTO series(measurement, tags) VALUES (?, ?) ON CONFLICT DO NOTHING "
                                    "RETURNING id", row).fetchone()
            if found is None:
                found = self.db.execute("SELECT id FROM series WHERE measurement=? AND tags=?", row).fetchone()
            sid = self._series[key] = found[0]
        return sid

    def _learn_series(self, samples: Sequence[Sample], keys: list[str]) -> dict[str, str]:
        """The ids of the series this batch names and the cache does not know yet, a few hundred a
        statement (a first cycle of a large vCenter names tens of thousands): stored ones looked up, new
        ones made in one statement and looked up in turn; the canonical tags of those still unknown (a
        lone one, made by _series_id), by key."""
        unknown: dict[tuple[str, str], str] = {}
        asked: set[str] = set()  # a series' samples share its key: its canonical text made once, not per sample
        for s, key in zip(samples, keys, strict=True):
            if key not in self._series and key not in asked:
                asked.add(key)
                unknown.setdefault((s.measurement, canonical_tags(s.tags)), key)
        if len(unknown) > 1:
            self._look_up(unknown)
        if len(unknown) > 1:
            self._insert("INSERT INTO series(measurement, tags)", list(unknown), " ON CONFLICT DO NOTHING")
            self._look_up(unknown)
        return {key: text for (_, text), key in unknown.items()}

    def _look_up(self, unknown: dict[tuple[str, str], str]) -> None:
        """Cache the ids of the stored series among `unknown` ((measurement, tags) -> key), taken out of it."""
        by_measurement: dict[str, list[str]] = {}
        for measurement, text in unknown:
            by_measurement.setdefault(measurement, []).append(text)
        for measurement, texts in by_measurement.items():
            for part in _parts(texts, self._per_statement(1) // 2):
                # one row, not one per series: a step each (see ROWS_PER_STATEMENT). Canonical tags are JSON, in
                # which a control character such as the record separator is always escaped
                ids, found = self.db.execute(
                    "SELECT group_concat(id, ','), group_concat(tags, char(30)) FROM series WHERE measurement=? "
                    f"AND tags IN ({','.join(['?'] * len(part))})", (measurement, *part)).fetchone()
                for sid, text in zip(ids.split(",") if ids else (), found.split("\x1e") if ids else (), strict=True):
                    self._series[unknown.pop((measurement, text))] = int(sid)

    def _fieldset_id(self, names: tuple[str, ...]) -> int:
        fid = self._fieldset_ids.get(names)
        if fid is None:
            text = json.dumps(names, ensure_ascii=False, separators=(",", ":"))
            self.db.execute("INSERT OR IGNORE INTO fieldsets(names) VALUES (?)", (text,))
            fid = self.db.execute("SELECT id FROM fieldsets WHERE names=?", (text,)).fetchone()[0]
            self._fieldset_ids[names] = fid
            self._fieldset_names[fid] = names
        return fid

    def _names(self, fieldset: int) -> tuple[str, ...]:
        names = self._fieldset_names.get(fieldset)
        if names is None:  # written by another process since we last looked
            for fid, text in self.db.execute("SELECT id, names FROM fieldsets WHERE id >= ?", (fieldset,)):
                self._fieldset_names[fid] = tuple(json.loads(text))
            names = self._fieldset_names[fieldset]
        return names

    def _decode(self, fieldset: int, vals: str) -> dict[str, FieldValue]:
        return dict(zip(self._names(fieldset), json.loads(vals), strict=True))

    def write(self, samples: Sequence[Sample] = (), facts: Sequence[Fact] = (),
              annotations: Sequence[Annotation] = (), findings: Sequence[Finding] = ()) -> None:
        """Write everything in one transaction: all of it is stored, or none of it."""
        self.db.execute("BEGIN IMMEDIATE")
        try:
            samples = [s for s in samples if s.fields]
            # cheaper than the canonical text, same identity; one string, not a tuple of pairs (a fleet has
            # tens of thousands of series)
            keys = _series_keys(samples)
            texts = self._learn_series(samples, keys)
            rows = []
            for s, key in zip(samples, keys, strict=True):
                names, vals = _encode(s.fields)
                rows.append((self._series_id(key, s.measurement, s.tags, texts.get(key)), s.ts,
                             self._fieldset_id(names), vals))
            before = self.db.total_changes
            self._insert("INSERT INTO samples(series_id, ts, fieldset, vals)", rows, " ON CONFLICT DO NOTHING")
            if self.db.total_changes - before < len(rows):
                self._merge_conflicts(rows)
            self._write_facts(facts)
            self.db.executemany(
                "INSERT INTO annotations(ts, kind, name, tags, text) VALUES (?, ?, ?, ?, ?)",
                [(a.ts, a.event, a.name, canonical_tags(a.tags), a.text) for a in annotations])
            for f in findings:
                self._write_finding(f)
            self.db.execute("COMMIT")
        except BaseException:
            if self.db.in_transaction:
                self.db.execute("ROLLBACK")
            self._series.clear()  # ids inserted by the rolled-back transaction are gone
            self._fieldset_ids.clear()
            self._fieldset_names.clear()
            self._facts.clear()
            raise

    def _merge_conflicts(self, rows: list[tuple[int, int, int, str]]) -> None:
        """Same series and timestamp written twice: keep the union of fields, the newer value winning
        (InfluxDB's semantics). The stored rows are read 500 series a statement: a restart's first cycle
        reaching back over what the store holds (vCenter's last samples) meets thousands."""
        for i in range(0, len(rows), 500):
            part = rows[i:i + 500]
            sids = sorted({r[0] for r in part})
            stored = {(sid, ts): (fid, vals) for sid, ts, fid, vals in self.db.execute(
                f"SELECT series_id, ts, fieldset, vals FROM samples WHERE series_id IN ({','.join(['?'] * len(sids))})"
                " AND ts BETWEEN ? AND ?", (*sids, min(r[1] for r in part), max(r[1] for r in part)))}
            for sid, ts, fid, vals in part:
                old = stored.get((sid, ts))
                if old is None or old == (fid, vals):
                    continue
                was = self._decode(*old)
                merged = {**was, **self._decode(fid, vals)}
                if merged == was:  # what the store holds already (a reach-back over stored samples): no write
                    continue
                names, text = _encode(merged)
                stored[(sid, ts)] = (self._fieldset_id(names), text)
                self.db.execute("UPDATE samples SET fieldset=?, vals=? WHERE series_id=? AND ts=?",
                                (*stored[(sid, ts)], sid, ts))

    def _per_statement(self, width: int) -> int:
        """The most rows of `width` parameters a statement carries: a power of two."""
        most = max(1, min(ROWS_PER_STATEMENT, self.db.getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER) // width))
        return 1 << (most.bit_length() - 1)

    def _insert(self, head: str, rows: Sequence[tuple], tail: str = "") -> None:
        """`head VALUES ... tail` of these rows, a few hundred a statement (see ROWS_PER_STATEMENT)."""
        if not rows:
            return
        width = len(rows[0])
        for part in _parts(rows, self._per_statement(width)):
            self.db.execute(f"{head} {_values(width, len(part))}{tail}", [x for r in part for x in r])

    def _write_facts(self, facts: Sequence[Fact]) -> None:
        """Each fact a new version of its entity, or, the same as its newest stored version, that version's
        last_seen moved on; in a few statements however many facts (a 10,000-VM facts pass), not a few each."""
        if not facts:
            return
        keyed = [((f.kind, canonical_tags(f.tags)), f) for f in facts]
        self._recall_facts(list({key for key, _ in keyed if key not in self._facts}))
        inserts: list[tuple[str, str, str, int, int]] = []
        added: dict[tuple[str, str], int] = {}  # entity -> its newest version in `inserts`
        seen: dict[int, list[tuple[str, str]]] = {}  # ts -> the entities whose stored newest version it saw again
        for key, f in keyed:
            data = _doc(f.data)
            digest = _digest(data)
            if self._facts.get(key) == digest:
                if key in added:  # this batch's own version, seen again
                    row = inserts[added[key]]
                    inserts[added[key]] = (*row[:4], max(row[4], f.ts))
                else:
                    seen.setdefault(f.ts, []).append(key)
                continue
            added[key] = len(inserts)
            inserts.append((*key, data, f.ts, f.ts))
            self._facts[key] = digest
        for ts, keys in seen.items():  # before the inserts: their newest version is the stored one
            for part in _parts(keys, self._per_statement(2) // 2):
                self.db.execute("UPDATE facts SET last_seen=max(last_seen, ?) WHERE id IN (SELECT max(id) FROM facts "
                                f"WHERE (kind, entity) IN ({_values(2, len(part))}) GROUP BY kind, entity)",
                                (ts, *(x for k in part for x in k)))
        self._insert("INSERT INTO facts(kind, entity, data, first_seen, last_seen)", inserts)

    def _recall_facts(self, keys: list[tuple[str, str]]) -> None:
        """The digests of these entities' newest stored versions (a first facts pass finds none)."""
        for part in _parts(keys, self._per_statement(2)):
            for kind, entity, data in self.db.execute(
                    "SELECT kind, entity, data FROM facts WHERE id IN (SELECT max(id) FROM facts "
                    f"WHERE (kind, entity) IN ({_values(2, len(part))}) GROUP BY kind, entity)",
                    [x for k in part for x in k]):
                self._facts[(kind, entity)] = _digest(data)

    def _write_finding(self, f: Finding) -> None:
        """Open a finding, refresh the open one with the same rule and subject, or resolve it."""
        args = (f.severity, f.summary, _doc(f.evidence), f.why, f.fix, _doc(f.references), f.last_seen,
                f.resolved_at, f.key)
        cur = self.db.execute(
            "UPDATE findings SET severity=?, summary=?, evidence=?, why=?, fix=?, refs=?, last_seen=?, resolved_at=? "
            "WHERE key=? AND resolved_at IS NULL", args)
        if cur.rowcount == 0 and f.resolved_at is None:
            self.db.execute(
                "INSERT INTO findings(key, rule, severity, subject, summary, evidence, why, fix, refs,"
                " first_seen, last_seen) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                (f.key, f.rule, f.severity, _doc(f.subject), f.summary, _doc(f.evidence), f.why, f.fix,
                 _doc(f.references), f.first_seen, f.last_seen))

    def enforce_retention(self, cutoff_ns: int, budget: int = 20000) -> int:
        """Delete up to `budget` rows (head rows and whole chunks) older than the cutoff, a few series
        at a time. A chunk goes once its newest row is past the cutoff.

        Called repeatedly by the writer, so a large backlog (after a retention change)
        is worked off in short transactions that never block readers for long.
        """
        deleted = 0
        ids = [r[0] for r in self.db.execute("SELECT id FROM series WHERE id > ? ORDER BY id LIMIT 500",
                                             (self._retention_cursor,))]
        for sid in ids:
            left = budget - deleted
            if left <= 0:
                return deleted
            with self.db:
                if self._chunked:
                    deleted += self.db.execute(
                        "DELETE FROM chunks WHERE id IN (SELECT id FROM chunks WHERE series_id=? AND last_ts < ?"
                        " ORDER BY span LIMIT ?)", (sid, cutoff_ns, left)).rowcount
                    left = budget - deleted
                edge = self.db.execute(
                    "SELECT ts FROM samples WHERE series_id=? AND ts < ? ORDER BY ts LIMIT 1 OFFSET ?",
                    (sid, cutoff_ns, max(left, 1) - 1)).fetchone()
                bound, op = (edge[0], "<=") if edge else (cutoff_ns, "<")
                deleted += self.db.execute(f"DELETE FROM samples WHERE series_id=? AND ts {op} ?",
                                           (sid, bound)).rowcount
                if edge is None and not self._has_data(sid):
                    self.db.execute("DELETE FROM series WHERE id=?", (sid,))
                    self._series = {k: v for k, v in self._series.items() if v != sid}
            if edge is None:
                self._retention_cursor = sid
        if len(ids) < 500:  # a full pass is done: small tables, then start over
            self._retention_cursor = 0
            with self.db:
                self.db.execute("DELETE FROM annotations WHERE ts < ?", (cutoff_ns,))
                self.db.execute("DELETE FROM findings WHERE resolved_at < ?", (cutoff_ns,))
                self.db.execute(
                    "DELETE FROM facts WHERE last_seen < ? AND id NOT IN"
                    " (SELECT max(id) FROM facts GROUP BY kind, entity)",
                    (cutoff_ns,))
        return deleted

    def _has_data(self, sid: int) -> bool:
        if self.db.execute("SELECT 1 FROM samples WHERE series_id=? LIMIT 1", (sid,)).fetchone():
            return True
        return bool(self._chunked and self.db.execute("SELECT 1 FROM chunks WHERE series_id=? LIMIT 1",
                                                      (sid,)).fetchone())

    # --- sealing ----------------------------------------------------------------------

    def seal_step(self, before_ns: int, budget: int = 20000) -> tuple[int, bool]:
        """Move up to about `budget` head rows older than `before_ns` into chunks, a few series at a
        time, in one short transaction; the newest row of each series stays in the head. Returns
        (rows moved, whether a pass over every series is complete). Late rows of a span that is
        already sealed are merged into its chunk."""
        moved = 0
        self.db.execute("BEGIN IMMEDIATE")
        try:
            ids = [r[0] for r in self.db.execute("SELECT id FROM series WHERE id > ? ORDER BY id LIMIT 200",
                                                 (self._seal_cursor,))]
            for sid in ids:
                newest = self.db.execute("SELECT max(ts) FROM samples WHERE series_id=?", (sid,)).fetchone()[0]
                if newest is not None:
                    limit = max(budget - moved, 1000)
                    rows = self.db.execute(
                        "SELECT ts, fieldset, vals FROM samples WHERE series_id=? AND ts < ? ORDER BY ts LIMIT ?",
                        (sid, min(before_ns, newest), limit)).fetchall()
                    if rows:
                        self._seal_rows(sid, rows)
                        moved += len(rows)
                        if len(rows) == limit:  # more of this series left: the next step goes on with it
                            break
                self._seal_cursor = sid
                if moved >= budget:
                    break
            else:
                if len(ids) < 200:
                    self._seal_cursor = 0
            self.db.execute("COMMIT")
        except BaseException:
            if self.db.in_transaction:
                self.db.execute("ROLLBACK")
            self._fieldset_ids.clear()
            self._fieldset_names.clear()
            raise
        return moved, self._seal_cursor == 0 and moved < budget

    def _seal_rows(self, sid: int, rows: list[tuple[int, int, str]]) -> None:
        by_span: dict[int, list[tuple[int, int, str]]] = {}
        for row in rows:
            by_span.setdefault(row[0] // CHUNK_SPAN_NS, []).append(row)
        for span, part in by_span.items():
            merged: dict[int, dict[str, FieldValue]] = {}
            old = self.db.execute("SELECT id, fieldset, data FROM chunks WHERE series_id=? AND span=?",
                                  (sid, span)).fetchone()
            if old is not None:
                merged = dict(self._chunk_rows(*old, 0, _END))
                self._chunk_cache.pop(old[0], None)
            for ts, fid, vals in part:  # the head's value wins, as in a write of the same time twice
                fields = self._decode(fid, vals)
                merged[ts] = {**merged[ts], **fields} if ts in merged else fields
            stamps = sorted(merged)
            names = tuple(dict.fromkeys(n for ts in stamps for n in merged[ts]))
            columns = [[merged[ts].get(n) for ts in stamps] for n in names]
            self.db.execute(
                "INSERT OR REPLACE INTO chunks(series_id, span, first_ts, last_ts, fieldset, n, data)"
                " VALUES (?,?,?,?,?,?,?)",
                (sid, span, stamps[0], stamps[-1], self._fieldset_id(names), len(stamps),
                 chunks.encode(stamps, columns)))
            self.db.execute("DELETE FROM samples WHERE series_id=? AND ts >= ? AND ts <= ?",
                            (sid, part[0][0], part[-1][0]))

    def compact(self) -> int:
        """Seal everything but the newest row of each series now (tests, benchmarks, imports)."""
        total, done = 0, False
        self._seal_cursor = 0
        while not done:
            moved, done = self.seal_step(_END)
            total += moved
        self.release_free_pages()
        return total

    def release_free_pages(self) -> None:
        """Give the pages freed by sealing and retention back to the file system."""
        self.db.executescript("PRAGMA incremental_vacuum;")  # execute() would free only one page

    # --- reading ----------------------------------------------------------------------

    @contextmanager
    def _snapshot(self) -> Iterator[None]:
        """One read transaction: the writer moving rows from head to chunks is seen whole or not at all."""
        if self.db.in_transaction:
            yield
            return
        self.db.execute("BEGIN")
        try:
            if not self._chunked:  # a schema-2 store converted by a writer since we opened it
                self._chunked = self._has_chunks()
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
            raise StoreError(f"{self.path}: chunk {cid}: {e}") from None
        hit = self._chunk_cache[cid] = (ts, self._names(fieldset), columns)
        if len(self._chunk_cache) > _CACHED_CHUNKS:
            self._chunk_cache.popitem(last=False)
        return hit

    def _chunk_rows(self, cid: int, fieldset: int, data: bytes, since_ns: int,
                    until_ns: int) -> Iterator[tuple[int, dict[str, FieldValue]]]:
        ts, names, columns = self._chunk(cid, fieldset, data)
        for i in range(bisect_left(ts, since_ns), bisect_right(ts, until_ns)):
            yield ts[i], _row_at(names, columns, i)

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
            fields = self._decode(fid, vals)
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
        return [Series(i, m, json.loads(t)) for i, m, t in self.db.execute(sql + " ORDER BY id", args)]

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
            found = self._found(measurement, since_ns, until_ns if until_ns is not None else _END)
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
                    (measurement, *self._spans(since_ns, until), since_ns, until)) if self._chunked else (),
                self.db.execute(
                    "SELECT x.series_id, x.ts, x.fieldset, x.vals FROM series s JOIN samples x ON x.series_id = s.id "
                    "WHERE s.measurement=? AND x.ts >= ? AND x.ts <= ?", (measurement, since_ns, until)),
                since_ns, until)

    def rows_of(self, series: Iterable[Series], since_ns: int = 0, until_ns: int | None = None) -> Iterator[Row]:
        """`rows` for a few chosen series of a large measurement, series by series (one range scan each)."""
        until = until_ns if until_ns is not None else _END
        for s in series:
            with self._snapshot():
                found = self._gather(
                    ((s.id, *c) for c in self.db.execute(
                        "SELECT id, fieldset, data FROM chunks WHERE series_id=? AND span BETWEEN ? AND ?",
                        (s.id, *self._spans(since_ns, until)))) if self._chunked else (),
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
            return (ts[i], _row_at(names, columns, i)) if ts[i] > newer_than else None
        # not decoded whole: the one row only (a past cursor over 10,000 series reads one row of each chunk)
        if data is None:
            (data,) = self.db.execute("SELECT data FROM chunks WHERE id=?", (cid,)).fetchone()
        ts = self._chunk_times(cid, last_ts, n, data)
        i = bisect_right(ts, until_ns) - 1
        if ts[i] <= newer_than:
            return None
        return ts[i], {k: v for k, v in zip(self._names(fid), chunks.row(data, i), strict=True) if v is not None}

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
            found = (head[0], self._decode(head[1], head[2]))
        if found is not None:
            newest[s.id] = found[0]
            if found[0] >= since_ns:
                out.append(Row(found[0], s.measurement, s.tags, found[1]))

    def _wanted(self, fid: int, fields: Collection[str]) -> frozenset[str]:
        """Which of `fields` a fieldset has (a chunk lacking a field needs no decoding for it)."""
        key = (fid, fields if isinstance(fields, tuple) else tuple(fields))
        wanted = self._wanted_names.get(key)
        if wanted is None:
            wanted = self._wanted_names[key] = frozenset(self._names(fid)) & frozenset(key[1])
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
        names = self._names(fid)
        try:
            ts, columns = chunks.select(data, {i for i, name in enumerate(names) if name in wanted})
        except chunks.ChunkError as e:
            raise StoreError(f"{self.path}: chunk {cid}: {e}") from None
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
        until = until_ns if until_ns is not None else _END
        version = self._file_version()
        with self._snapshot():
            head = self._head(measurement, until, version)
            if until_ns is None or not self._chunked:
                return [Row(ts, measurement, json.loads(tags), self._decode(fid, vals))
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
        if not head and until < _END:
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
            # nearly every series has a chunk in `until`'s own span: one index probe each (`_candidates`)
            for sid, first, last in self.db.execute(
                    "SELECT s.id, c.first_ts, c.last_ts FROM series s JOIN chunks c ON c.series_id = s.id "
                    "AND c.span = ? WHERE s.measurement=?", (span, measurement)) if self._chunked else ():
                if first <= until_ns:
                    out[sid] = min(last, until_ns)
            missing = [s.id for s in self._kept_series(measurement) if s.id not in out] if self._chunked else []
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
                        out.append(Row(t, measurement, tags[sid], self._decode(fid, vals)))
        return out

    def latest_of(self, series: Iterable[Series], since_ns: int = 0, until_ns: int | None = None,
                  fields: Collection[str] | None = None) -> list[Row]:
        """`latest` for a few chosen series of a large measurement (one index probe each)."""
        until = until_ns if until_ns is not None else _END
        chosen = list(series)
        with self._snapshot():
            head = {}
            for s in chosen:
                row = self.db.execute(
                    "SELECT ts, fieldset, vals FROM samples WHERE series_id=? AND ts <= ? ORDER BY ts DESC LIMIT 1",
                    (s.id, until)).fetchone()
                if row is not None:
                    head[s.id] = row
            if until_ns is None or not self._chunked:
                return [Row(head[s.id][0], s.measurement, s.tags, self._decode(*head[s.id][1:3]))
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
            if self._chunked:
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
        until = until_ns if until_ns is not None else _END
        out: dict[int, FieldValue] = {}
        with self._snapshot():
            if self._chunked:
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
                    names = self._names(fid)
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
            if self._chunked:
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
        args: tuple = (_doc(REMOVED),)
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


def store_writer(path: Path) -> int | None:
    """The pid of the process writing the store at `path` (holding its writer lock), None when none does: `watch`
    attached to an agent's store says so when that agent stops. Learnt without taking the lock (a lock taken only
    to look would make an agent starting at that moment fail): from the kernel's table of locks where there is one
    (Linux), else from whether the process its lock file names is alive."""
    lock = Path(f"{path}-writer.lock")
    try:
        st = os.stat(lock)
        named = lock.read_text(errors="replace").strip()
    except OSError:
        return None
    try:
        with open("/proc/locks", encoding="ascii", errors="replace") as f:
            table = f.read()
    except OSError:
        table = None
    if table is not None:  # "1: FLOCK  ADVISORY  WRITE 4242 fd:01:1234 0 EOF" (a waiter's has "->" after "1:")
        file = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
        for line in table.splitlines():
            parts = line.split()
            if "FLOCK" in parts and "->" not in parts and file in parts:
                holder = parts[parts.index(file) - 1]
                return int(holder) if holder.isdigit() else None
        return None
    if not named.isdigit():
        return None
    try:
        os.kill(int(named), 0)
    except ProcessLookupError:
        return None
    except PermissionError:  # alive, another user's
        pass
    return int(named)

def _shared(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A decoded JSON object whose short strings are interned: the same value in thousands of facts is
    held once."""
    return {k: sys.intern(v) if type(v) is str and len(v) <= SHORT_TEXT else v for k, v in pairs}


@dataclass
class WriterStats:
    batches: int = 0
    samples: int = 0
    write_ms: float = 0.0
    last_error: str = ""
    pending: int = 0
    retention_deleted: int = 0
    sealed: int = 0
    dropped: int = 0  # samples dropped, the oldest first, while more than max_pending waited for the disk


@dataclass
class _Batch:
    samples: list[Sample] = field(default_factory=list)
    facts: list[Fact] = field(default_factory=list)
    annotations: list[Annotation] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)

    def extend(self, other: _Batch) -> None:
        self.samples += other.samples
        self.facts += other.facts
        self.annotations += other.annotations
        self.findings += other.findings

    def empty(self) -> bool:
        return not (self.samples or self.facts or self.annotations or self.findings)

    def size(self) -> int:
        return len(self.samples) + len(self.facts) + len(self.annotations) + len(self.findings)

    def items(self) -> list[Sample | Fact | Annotation | Finding]:
        """Every record in write order (samples, facts, annotations, findings)."""
        return [*self.samples, *self.facts, *self.annotations, *self.findings]

    @classmethod
    def of(cls, items: Sequence[Sample | Fact | Annotation | Finding]) -> _Batch:
        b = cls()
        for r in items:
            (b.samples if isinstance(r, Sample) else b.facts if isinstance(r, Fact)
             else b.annotations if isinstance(r, Annotation) else b.findings).append(r)
        return b


#: a failed commit waits this long before the next try, doubling up to the most
_RETRY_S, _MAX_RETRY_S = 0.5, 8.0
#: samples kept in memory for the retry while the store cannot be written (a disk full for long); past it
#: the oldest are dropped, logged and counted (StoreWriter._bound)
MAX_PENDING = 100_000


class StoreWriter:
    """The store's single writer: a thread that commits queued batches in order, under the supervisor.

    Callers never wait on SQLite. A commit that fails for a reason of the moment (disk full, I/O
    error, a read-only remount) keeps the batch and retries with backoff, so nothing handed to the
    writer is dropped while the process lives, up to `max_pending` samples waiting: past that (a disk
    full for hours) the oldest samples are dropped, logged and counted, so memory stays bounded.
    A batch the store refuses for what it holds (an integer past 64 bits, a value of no storable
    type) is split until the refused records are alone; those are set aside (logged, counted in the
    thread's health) and the rest is written. A store that can no longer be written at all (a
    corrupt file) fails the thread, which stops the agent.
    """

    THREAD = "store-writer"
    #: tries, a second apart, to write what is still pending at exit
    exit_tries = 5

    def __init__(self, path: Path, retention_s: float, retention_every_s: float = 10.0,
                 supervisor: Supervisor | None = None, max_pending: int = MAX_PENDING):
        self.store = Store(path, writer=True)
        self.retention_s = retention_s
        self.max_pending = max_pending
        self.retention_every_s = retention_every_s
        self.stats = WriterStats()
        self.supervisor = supervisor or Supervisor()
        self._newest_ns = 0  # newest sample time committed: spans before its own are closed
        self._sealed_before = 0  # every head row before this is sealed (but each series' newest)
        self._pass_before: int | None = None  # the bound of the sealing pass under way
        self._retry_s = _RETRY_S
        self._retention_clock = RetentionClock(CLOCK.now_ns())  # from the store's newest data once it runs
        self._q: queue.SimpleQueue = queue.SimpleQueue()
        #: records queued and not yet committed (or set aside): what the runtime's back-pressure reads
        self.backlog = Backlog(self.THREAD)
        self._thread = self.backlog.thread = self.supervisor.start(self.THREAD, self._run)

    @property
    def path(self) -> Path:
        return self.store.path

    def submit(self, samples: Iterable[Sample] = (), facts: Iterable[Fact] = (),
               annotations: Iterable[Annotation] = (), findings: Iterable[Finding] = ()) -> None:
        batch = _Batch(list(samples), list(facts), list(annotations), list(findings))
        if not batch.empty():
            self.backlog.add(batch.size())
            self._q.put(batch)

    def call(self, fn: Any, timeout: float = 30.0) -> Any:
        """Run fn(store) on the writer thread, in order with queued batches; return its result."""
        if not self._thread.is_alive():
            raise StoreError(f"the store writer of {self.path} has stopped")
        done = threading.Event()
        box: dict[str, Any] = {}

        def job(store: Store) -> None:
            try:
                box["result"] = fn(store)
            except Exception as e:  # handed back to the caller
                box["error"] = e
            done.set()

        self._q.put(job)
        if not done.wait(timeout):
            raise StoreError(f"store writer did not answer within {timeout:.0f}s")
        if "error" in box:
            raise box["error"]
        return box.get("result")

    def flush(self, timeout: float = 30.0) -> None:
        self.call(lambda store: None, timeout)

    def close(self, timeout: float = 30.0) -> None:
        self._q.put(None)
        self._thread.join(timeout)
        self.store.close()

    def _run(self) -> None:
        pending = _Batch()
        self._start_retention_clock()
        next_retention = time.monotonic() + self.retention_every_s
        while True:
            stop = False
            for item in self._drain():
                if item is None:
                    stop = True
                elif isinstance(item, _Batch):
                    pending.extend(item)
                else:  # a job: commit what was queued before it first, so it sees that data
                    pending = self._commit_counted(pending)
                    item(self.store)
            pending = self._commit_counted(pending)
            self._bound(pending)
            self.stats.pending = len(pending.samples)
            if stop:
                self._commit_at_exit(pending)
                return
            if time.monotonic() >= next_retention:
                self._maintain("retention", self._retention_step)
                next_retention = time.monotonic() + self.retention_every_s
            self._maintain("sealing", self._seal_step)

    def _drain(self) -> list[Any]:
        try:  # while a sealing pass is under way, come back to it soon
            items = [self._q.get(timeout=1.0 if self._pass_before is None else 0.05)]
        except queue.Empty:
            return []
        while len(items) < 1000:
            try:
                items.append(self._q.get_nowait())
            except queue.Empty:
                break
        return items

    def _bound(self, pending: _Batch) -> None:
        """Past `max_pending` samples waiting for a store that cannot be written (a disk full for hours), drop
        the oldest (facts, markers and findings are kept): memory stays bounded, and what is lost is logged
        and counted in the thread's health (`db2vtop_thread` set_aside) and in stats.dropped."""
        over = len(pending.samples) - self.max_pending
        if over <= 0:
            return
        dropped = pending.samples[:over]
        del pending.samples[:over]
        self.backlog.done(over)
        self.stats.dropped += over
        times = [s.ts for s in dropped]
        self.supervisor.set_aside(
            self.THREAD, f"{over} samples of {iso_utc(min(times))} to {iso_utc(max(times))}",
            f"dropped, the oldest of more than {self.max_pending} waiting for a store that cannot be written "
            f"({self.stats.last_error or 'no error yet'}); {self.stats.dropped} dropped since the start", count=over)

    def _commit_at_exit(self, pending: _Batch) -> None:
        self._retry_s = 0.0  # a few more tries, a second apart, then the loss is said
        for _ in range(self.exit_tries):
            if pending.empty():
                return
            time.sleep(1.0)
            pending = self._commit(pending)
        if not pending.empty():  # lost: the exit status must say so
            self.supervisor.fail(self.THREAD, f"{len(pending.samples)} samples could not be written at exit: "
                                              f"{self.stats.last_error}")

    def _commit_counted(self, b: _Batch) -> _Batch:
        """_commit, and what it took (written, or set aside as unstorable) off the backlog."""
        before = b.size()
        left = self._commit(b)
        self.backlog.done(before - left.size())
        return left

    def _commit(self, b: _Batch) -> _Batch:
        """Write b; what is left to retry (all of it after a failure of the moment), else an empty batch."""
        if b.empty():
            return b
        t0 = time.perf_counter()
        try:
            self.store.write(b.samples, b.facts, b.annotations, b.findings)
        except sqlite3.OperationalError as e:  # disk full, I/O error, read-only: keep and retry
            return self._keep(b, e)
        except sqlite3.DatabaseError as e:
            if isinstance(e, sqlite3.IntegrityError | sqlite3.DataError):
                return self._isolate(b.items())
            raise StoreError(f"{self.path} cannot be written: {e}") from None  # corrupt: the thread ends
        except Exception:  # something in the batch the store cannot hold
            return self._isolate(b.items())
        self.stats.write_ms = (time.perf_counter() - t0) * 1000
        self._written(b)
        return _Batch()

    def _keep(self, b: _Batch, e: Exception) -> _Batch:
        self.stats.last_error = f"store write failed: {e}"
        self.supervisor.retrying(self.THREAD, f"{self.stats.last_error} ({len(b.samples)} samples kept for retry)")
        time.sleep(self._retry_s)
        self._retry_s = min(self._retry_s * 2, _MAX_RETRY_S)
        return b

    def _written(self, b: _Batch) -> None:
        now = CLOCK.now_ns()  # a source's clock ahead of ours must not close spans still filling
        self._newest_ns = max([self._newest_ns, *(min(s.ts, now) for s in b.samples)])
        self.stats.batches += 1
        self.stats.samples += len(b.samples)
        if self.stats.last_error:
            self.stats.last_error = ""
            self._retry_s = _RETRY_S
            self.supervisor.recovered(self.THREAD)

    def _isolate(self, items: list[Sample | Fact | Annotation | Finding]) -> _Batch:
        """Write `items` in order in ever smaller parts until each record the store refuses is alone;
        set those aside. Stops at a failure of the moment and returns what is left for the retry."""
        parts = [items]
        while parts:
            part = parts.pop(0)
            b = _Batch.of(part)
            try:
                self.store.write(b.samples, b.facts, b.annotations, b.findings)
            except sqlite3.OperationalError as e:
                return self._keep(_Batch.of([r for p in (part, *parts) for r in p]), e)
            except Exception as e:
                if isinstance(e, sqlite3.DatabaseError) and not isinstance(e, sqlite3.IntegrityError
                                                                            | sqlite3.DataError):
                    raise StoreError(f"{self.path} cannot be written: {e}") from None
                if len(part) == 1:
                    self.supervisor.set_aside(self.THREAD, _describe(part[0]), e)
                else:
                    half = len(part) // 2
                    parts[:0] = [part[:half], part[half:]]
                continue
            self._written(b)
        return _Batch()

    def _maintain(self, what: str, step: Any) -> None:
        """Retention and sealing: a step that fails is retried on the next turn; storing goes on."""
        try:
            step()
        except sqlite3.Error as e:
            log.warning("store %s step failed: %s", what, e)
        except Exception:  # a bug in upkeep must not stop the writing
            log.exception("store %s step failed", what)

    def _start_retention_clock(self) -> None:
        """Retention counts on from the newest data the store holds (when that is earlier than now): an agent
        started under a clock that jumped ahead, or after a long stop, does not delete at once what was kept."""
        now = CLOCK.now_ns()
        try:
            span = self.store.time_range()
        except sqlite3.Error as e:
            log.warning("store: cannot read its time range (%s); retention counts from now", e)
            span = None
        self._retention_clock = RetentionClock(min(span[1], now) if span else now)

    def _retention_step(self) -> None:
        """Delete what is older than `retention`, counted on the retention clock (agent/core/clock.py): a jump
        of the system clock, forward or back, deletes nothing it would not have deleted anyway."""
        cutoff = self._retention_clock.now_ns() - int(self.retention_s * 1e9)
        self.stats.retention_deleted += self.store.enforce_retention(cutoff)

    def _seal_step(self) -> None:
        """Seal a little of the spans that have closed since the last pass; one short transaction."""
        if self._pass_before is None:
            before = self._newest_ns // CHUNK_SPAN_NS * CHUNK_SPAN_NS
            if before <= self._sealed_before:
                return
            self._pass_before = before
        moved, done = self.store.seal_step(self._pass_before)
        self.stats.sealed += moved
        if done:
            self._sealed_before, self._pass_before = self._pass_before, None
            self.store.release_free_pages()


def _describe(r: Sample | Fact | Annotation | Finding) -> str:
    if isinstance(r, Finding):
        return f"finding {r.key}"
    return describe_record(r)
