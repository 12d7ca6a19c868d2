"""The store's file: its schema, the writer's lock, the connection opened for a writer or a reader, and the
errors a command says in one line. Every room (writing, sealing, reading) works on the one connection
a `StoreFile` holds."""

from __future__ import annotations

import fcntl
import os
import sqlite3
from pathlib import Path

from db2vtop.agent.core.files import make_private_dir, open_private

SCHEMA_VERSION = 3  # 2: fields as a fieldset id plus a JSON array of values; 3: sealed chunks
CHUNK_SPAN_NS = 30 * 60 * 10**9  # a chunk holds one series over one such span
END = 2**63 - 1  # the last moment: "until" unbounded
_PAGE_SIZE = 65536  # big pages: a chunk (2-4 KB) shares a page with its neighbours, little slack
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


class StoreFile:
    """The store's file opened for one connection (`db`): `writer=True` takes the process-wide writer lock and
    makes the file (whole, under another name first) or brings an older schema up to this one."""

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
        self.chunked = self.has_chunks()  # read again by a reader's snapshot: a writer may convert the file

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

    def has_chunks(self) -> bool:
        """Whether the file has the chunks table (a schema-2 store has none until a writer converts it)."""
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

