"""Embedded time-series store: one SQLite file in WAL mode.

Layout: `series` gives each (measurement, tag set) an integer id; `samples` is clustered
on (series_id, ts) WITHOUT ROWID, so a time window of one series is a single range scan.
A row's fields are a JSON array of values plus the id of its `fieldsets` row (the list of
field names): names are stored once, not in every row, which keeps a day of a 1,000-VM
fleet well under half the size of one JSON object per row. One process writes (a lock
file enforces it); readers in other processes see each committed batch at once. WAL with
synchronous=NORMAL means a kill -9 loses at most the transaction being written and never
corrupts the file.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import queue
import sqlite3
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from db2vtop.agent.core.model import Annotation, Fact, FieldValue, Finding, Sample, canonical_tags, clean_fields

log = logging.getLogger(__name__)

SCHEMA_VERSION = 2  # 2: fields as a fieldset id plus a JSON array of values
_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS series(
    id INTEGER PRIMARY KEY, measurement TEXT NOT NULL, tags TEXT NOT NULL,
    UNIQUE(measurement, tags));
CREATE TABLE IF NOT EXISTS fieldsets(id INTEGER PRIMARY KEY, names TEXT NOT NULL UNIQUE);
CREATE TABLE IF NOT EXISTS samples(
    series_id INTEGER NOT NULL, ts INTEGER NOT NULL, fieldset INTEGER NOT NULL, vals TEXT NOT NULL,
    PRIMARY KEY(series_id, ts)) WITHOUT ROWID;
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
_INSERT_SAMPLE = "INSERT INTO samples(series_id, ts, fieldset, vals) VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING"


class StoreError(Exception):
    pass


class StoreLockedError(StoreError):
    """Another process holds the writer lock of this store."""


@dataclass(frozen=True, slots=True)
class Row:
    ts: int
    measurement: str
    tags: dict[str, str]
    fields: dict[str, FieldValue]

    def to_json(self) -> dict[str, Any]:
        return {"ts": self.ts, "measurement": self.measurement, "tags": self.tags, "fields": self.fields}


@dataclass(frozen=True, slots=True)
class Series:
    id: int
    measurement: str
    tags: dict[str, str]


_VALUES_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def _encode(fields: dict[str, FieldValue]) -> tuple[tuple[str, ...], str]:
    """(names, JSON array of values) of one sample's fields."""
    try:
        return tuple(fields), _VALUES_ENCODER.encode(list(fields.values()))
    except ValueError:  # NaN or infinity from a careless collector: drop those values only
        fields = clean_fields(fields)
        return tuple(fields), _VALUES_ENCODER.encode(list(fields.values()))


def _doc(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


class Store:
    """One connection to the store. `writer=True` takes the process-wide writer lock."""

    def __init__(self, path: Path, *, writer: bool = False):
        self.path = Path(path)
        self.writer = writer
        self._lock_fd: int | None = None
        if writer:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._take_writer_lock()
        elif not self.path.exists():
            raise StoreError(f"no store at {self.path}")
        try:
            self.db = sqlite3.connect(self.path, timeout=10, isolation_level=None, check_same_thread=False)
            self.db.execute("PRAGMA busy_timeout=10000")
            if writer:
                self.db.execute("PRAGMA journal_mode=WAL")
                self.db.execute("PRAGMA synchronous=NORMAL")
                self.db.execute("PRAGMA cache_size=-65536")
                self.db.executescript(_SCHEMA)
                self.db.execute("INSERT OR IGNORE INTO meta VALUES('schema_version', ?)", (str(SCHEMA_VERSION),))
            else:
                self.db.execute("PRAGMA query_only=1")
                self.db.execute("PRAGMA cache_size=-16384")
            self._check_schema()
        except sqlite3.DatabaseError as e:
            self.close()
            raise StoreError(f"{self.path}: {e}") from None
        self._series: dict[tuple, int] = {}
        self._fieldset_ids: dict[tuple[str, ...], int] = {}
        self._fieldset_names: dict[int, tuple[str, ...]] = {}
        self._facts: dict[tuple[str, str], tuple[int, str]] = {}
        self._retention_cursor = 0

    def _take_writer_lock(self) -> None:
        lock_path = f"{self.path}-writer.lock"
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pid = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
            os.close(fd)
            raise StoreLockedError(f"{self.path} is being written by another db2vtop process (pid {pid})") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        self._lock_fd = fd

    def _check_schema(self) -> None:
        try:
            row = self.db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
        except sqlite3.OperationalError:
            raise StoreError(f"{self.path} is not a db2vtop store (or is still being created)") from None
        if row and int(row[0]) != SCHEMA_VERSION:
            raise StoreError(f"{self.path} has store schema {row[0]}; this db2vtop reads schema {SCHEMA_VERSION}")

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

    def _series_id(self, measurement: str, tags: dict[str, str]) -> int:
        key = (measurement, *sorted(tags.items()))  # cheaper than the canonical text, same identity
        sid = self._series.get(key)
        if sid is None:
            row = (measurement, canonical_tags(tags))
            self.db.execute("INSERT OR IGNORE INTO series(measurement, tags) VALUES (?, ?)", row)
            sid = self.db.execute("SELECT id FROM series WHERE measurement=? AND tags=?", row).fetchone()[0]
            self._series[key] = sid
        return sid

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
            rows = []
            for s in samples:
                if s.fields:
                    names, vals = _encode(s.fields)
                    rows.append((self._series_id(s.measurement, s.tags), s.ts, self._fieldset_id(names), vals))
            before = self.db.total_changes
            self.db.executemany(_INSERT_SAMPLE, rows)
            if self.db.total_changes - before < len(rows):
                self._merge_conflicts(rows)
            for f in facts:
                self._write_fact(f)
            self.db.executemany(
                "INSERT INTO annotations(ts, kind, name, tags, text) VALUES (?, ?, ?, ?, ?)",
                [(a.ts, a.kind, a.name, canonical_tags(a.tags), a.text) for a in annotations])
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
        (InfluxDB's semantics). Rare, so it is allowed to be slow."""
        for sid, ts, fid, vals in rows:
            stored = self.db.execute("SELECT fieldset, vals FROM samples WHERE series_id=? AND ts=?",
                                     (sid, ts)).fetchone()
            if stored == (fid, vals):
                continue
            merged = {**self._decode(*stored), **self._decode(fid, vals)}
            names, text = _encode(merged)
            self.db.execute("UPDATE samples SET fieldset=?, vals=? WHERE series_id=? AND ts=?",
                            (self._fieldset_id(names), text, sid, ts))

    def _write_fact(self, f: Fact) -> None:
        key = (f.kind, canonical_tags(f.tags))
        data = _doc(f.data)
        known = self._facts.get(key)
        if known is None:
            row = self.db.execute("SELECT id, data FROM facts WHERE kind=? AND entity=? ORDER BY id DESC LIMIT 1",
                                  key).fetchone()
            known = (row[0], row[1]) if row else None
        if known and known[1] == data:
            self.db.execute("UPDATE facts SET last_seen=max(last_seen, ?) WHERE id=?", (f.ts, known[0]))
            self._facts[key] = known
            return
        cur = self.db.execute("INSERT INTO facts(kind, entity, data, first_seen, last_seen) VALUES (?,?,?,?,?)",
                              (*key, data, f.ts, f.ts))
        self._facts[key] = (cur.lastrowid, data)

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
        """Delete up to `budget` rows older than the cutoff, a few series at a time.

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
                edge = self.db.execute(
                    "SELECT ts FROM samples WHERE series_id=? AND ts < ? ORDER BY ts LIMIT 1 OFFSET ?",
                    (sid, cutoff_ns, left - 1)).fetchone()
                bound, op = (edge[0], "<=") if edge else (cutoff_ns, "<")
                deleted += self.db.execute(f"DELETE FROM samples WHERE series_id=? AND ts {op} ?",
                                           (sid, bound)).rowcount
                if edge is None and not self.db.execute("SELECT 1 FROM samples WHERE series_id=? LIMIT 1",
                                                        (sid,)).fetchone():
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

    # --- reading ----------------------------------------------------------------------

    def measurements(self) -> list[str]:
        return [r[0] for r in self.db.execute("SELECT DISTINCT measurement FROM series ORDER BY 1")]

    def series(self, measurement: str | None = None) -> list[Series]:
        sql, args = "SELECT id, measurement, tags FROM series", ()
        if measurement is not None:
            sql, args = sql + " WHERE measurement=?", (measurement,)
        return [Series(i, m, json.loads(t)) for i, m, t in self.db.execute(sql + " ORDER BY id", args)]

    def rows(self, measurement: str, since_ns: int = 0, until_ns: int | None = None) -> Iterator[Row]:
        """Every sample of one measurement in [since, until], oldest first."""
        cur = self.db.execute(
            "SELECT x.ts, s.tags, x.fieldset, x.vals FROM series s JOIN samples x ON x.series_id = s.id "
            "WHERE s.measurement=? AND x.ts >= ? AND x.ts <= ? ORDER BY x.ts, s.id",
            (measurement, since_ns, until_ns if until_ns is not None else 2**63 - 1))
        for ts, tags, fid, vals in cur:
            yield Row(ts, measurement, json.loads(tags), self._decode(fid, vals))

    def rows_of(self, series: Iterable[Series], since_ns: int = 0, until_ns: int | None = None) -> Iterator[Row]:
        """`rows` for a few chosen series of a large measurement, series by series (one range scan each)."""
        until = until_ns if until_ns is not None else 2**63 - 1
        for s in series:
            cur = self.db.execute("SELECT ts, fieldset, vals FROM samples WHERE series_id=? AND ts >= ? AND ts <= ?"
                                  " ORDER BY ts", (s.id, since_ns, until))
            for ts, fid, vals in cur.fetchall():
                yield Row(ts, s.measurement, s.tags, self._decode(fid, vals))

    def latest(self, measurement: str, since_ns: int = 0, until_ns: int | None = None) -> list[Row]:
        """The newest sample of each series of a measurement in [since, until] (time travel: `until`)."""
        cur = self.db.execute(
            "SELECT x.ts, s.tags, x.fieldset, x.vals FROM series s JOIN samples x ON x.series_id = s.id "
            "AND x.ts = (SELECT max(ts) FROM samples WHERE series_id = s.id AND ts <= ?) "
            "WHERE s.measurement=? AND x.ts >= ? ORDER BY s.id",
            (until_ns if until_ns is not None else 2**63 - 1, measurement, since_ns))
        return [Row(ts, measurement, json.loads(t), self._decode(fid, v)) for ts, t, fid, v in cur]

    def latest_of(self, series: Iterable[Series], since_ns: int = 0, until_ns: int | None = None) -> list[Row]:
        """`latest` for a few chosen series of a large measurement (one index probe each)."""
        until = until_ns if until_ns is not None else 2**63 - 1
        out = []
        for s in series:
            row = self.db.execute(
                "SELECT ts, fieldset, vals FROM samples WHERE series_id=? AND ts <= ? ORDER BY ts DESC LIMIT 1",
                (s.id, until)).fetchone()
            if row is not None and row[0] >= since_ns:
                out.append(Row(row[0], s.measurement, s.tags, self._decode(row[1], row[2])))
        return out

    def newest(self, measurement: str, since_ns: int, until_ns: int) -> list[tuple[int, int]]:
        """(series id, newest ts) of the series of a measurement with samples in [since, until]:
        which series moved, without decoding a sample (readers refresh only those)."""
        return self.db.execute(
            "SELECT x.series_id, max(x.ts) FROM series s JOIN samples x ON x.series_id = s.id "
            "WHERE s.measurement=? AND x.ts >= ? AND x.ts <= ? GROUP BY x.series_id",
            (measurement, since_ns, until_ns)).fetchall()

    def series_version(self) -> int:
        """Changes whenever a series is added or removed: readers cache `series()` until it does."""
        row = self.db.execute("SELECT max(id), count(*) FROM series").fetchone()
        return (row[0] or 0) * 1_000_003 + row[1]

    def window(self, series_id: int, field_name: str, since_ns: int,
               until_ns: int | None = None) -> list[tuple[int, FieldValue]]:
        """(ts, value) of one field of one series, oldest first; rows without it are skipped."""
        cur = self.db.execute(
            "SELECT ts, fieldset, vals FROM samples WHERE series_id=? AND ts >= ? AND ts <= ? ORDER BY ts",
            (series_id, since_ns, until_ns if until_ns is not None else 2**63 - 1))
        out, positions = [], {}
        for ts, fid, vals in cur:
            pos = positions.get(fid)
            if pos is None:
                names = self._names(fid)
                pos = positions[fid] = names.index(field_name) if field_name in names else -1
            if pos >= 0:
                out.append((ts, json.loads(vals)[pos]))
        return out

    def time_range(self) -> tuple[int, int] | None:
        """First and last sample time: two index probes per series, not a scan of every sample."""
        row = self.db.execute(
            "SELECT min((SELECT ts FROM samples WHERE series_id = s.id ORDER BY ts LIMIT 1)),"
            " max((SELECT ts FROM samples WHERE series_id = s.id ORDER BY ts DESC LIMIT 1)) FROM series s").fetchone()
        return None if row[0] is None else (row[0], row[1])

    def facts(self, kind: str | None = None) -> list[Fact]:
        """The current version of every entity's facts (of one kind, or all)."""
        sql = ("SELECT kind, entity, data, last_seen FROM facts WHERE id IN "
               "(SELECT max(id) FROM facts GROUP BY kind, entity)")
        args: tuple = ()
        if kind is not None:
            sql, args = sql + " AND kind=?", (kind,)
        cur = self.db.execute(sql + " ORDER BY id", args)
        return [Fact(k, json.loads(e), json.loads(d), ts) for k, e, d, ts in cur]

    def fact_history(self, kind: str, tags: dict[str, str]) -> list[Fact]:
        cur = self.db.execute("SELECT data, first_seen FROM facts WHERE kind=? AND entity=? ORDER BY id",
                              (kind, canonical_tags(tags)))
        return [Fact(kind, dict(tags), json.loads(d), ts) for d, ts in cur]

    def annotations(self, since_ns: int = 0, until_ns: int | None = None) -> list[Annotation]:
        cur = self.db.execute(
            "SELECT ts, kind, name, tags, text FROM annotations WHERE ts >= ? AND ts <= ? ORDER BY ts, id",
            (since_ns, until_ns if until_ns is not None else 2**63 - 1))
        return [Annotation(k, n, json.loads(t), x, ts) for ts, k, n, t, x in cur]

    def findings(self, open_only: bool = True) -> list[Finding]:
        sql = ("SELECT rule, severity, subject, summary, evidence, why, fix, refs, first_seen, last_seen,"
               " resolved_at FROM findings")
        if open_only:
            sql += " WHERE resolved_at IS NULL"
        return [Finding(r, sev, json.loads(sub), summ, json.loads(ev), why, fix, json.loads(refs), fs, ls, res)
                for r, sev, sub, summ, ev, why, fix, refs, fs, ls, res in self.db.execute(sql + " ORDER BY id")]


@dataclass
class WriterStats:
    batches: int = 0
    samples: int = 0
    write_ms: float = 0.0
    last_error: str = ""
    pending: int = 0
    retention_deleted: int = 0


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


class StoreWriter:
    """The store's single writer: a thread that commits queued batches in order.

    Callers never wait on SQLite. A failed commit (disk full, I/O error) keeps the batch
    and retries, so nothing handed to the writer is dropped while the process lives.
    """

    def __init__(self, path: Path, retention_s: float, retention_every_s: float = 10.0):
        self.store = Store(path, writer=True)
        self.retention_s = retention_s
        self.retention_every_s = retention_every_s
        self.stats = WriterStats()
        self._q: queue.SimpleQueue = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="store-writer", daemon=True)
        self._thread.start()

    @property
    def path(self) -> Path:
        return self.store.path

    def submit(self, samples: Iterable[Sample] = (), facts: Iterable[Fact] = (),
               annotations: Iterable[Annotation] = (), findings: Iterable[Finding] = ()) -> None:
        batch = _Batch(list(samples), list(facts), list(annotations), list(findings))
        if not batch.empty():
            self._q.put(batch)

    def call(self, fn: Any, timeout: float = 30.0) -> Any:
        """Run fn(store) on the writer thread, in order with queued batches; return its result."""
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
        next_retention = time.monotonic() + self.retention_every_s
        while True:
            stop = False
            for item in self._drain():
                if item is None:
                    stop = True
                elif isinstance(item, _Batch):
                    pending.extend(item)
                else:  # a job: commit what was queued before it first, so it sees that data
                    pending = self._commit(pending)
                    item(self.store)
            pending = self._commit(pending)
            self.stats.pending = len(pending.samples)
            if stop:
                self._commit_at_exit(pending)
                return
            if time.monotonic() >= next_retention:
                self._retention_step()
                next_retention = time.monotonic() + self.retention_every_s

    def _drain(self) -> list[Any]:
        try:
            items = [self._q.get(timeout=1.0)]
        except queue.Empty:
            return []
        while len(items) < 1000:
            try:
                items.append(self._q.get_nowait())
            except queue.Empty:
                break
        return items

    def _commit_at_exit(self, pending: _Batch) -> None:
        for _ in range(5):
            if pending.empty():
                return
            time.sleep(1.0)
            pending = self._commit(pending)
        if not pending.empty():
            log.error("store: %d samples could not be written at exit: %s",
                      len(pending.samples), self.stats.last_error)

    def _commit(self, b: _Batch) -> _Batch:
        if b.empty():
            return b
        t0 = time.perf_counter()
        try:
            self.store.write(b.samples, b.facts, b.annotations, b.findings)
        except sqlite3.Error as e:
            self.stats.last_error = f"store write failed: {e}"
            log.error("%s (%d samples kept for retry)", self.stats.last_error, len(b.samples))
            time.sleep(0.5)
            return b
        self.stats.write_ms = (time.perf_counter() - t0) * 1000
        self.stats.batches += 1
        self.stats.samples += len(b.samples)
        self.stats.last_error = ""
        return _Batch()

    def _retention_step(self) -> None:
        cutoff = time.time_ns() - int(self.retention_s * 1e9)
        try:
            self.stats.retention_deleted += self.store.enforce_retention(cutoff)
        except sqlite3.Error as e:
            log.warning("store retention step failed: %s", e)
