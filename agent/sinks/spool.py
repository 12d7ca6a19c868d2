"""A durable FIFO of line-protocol records on disk, bounded in size.

Layout of the spool directory:
- `seg-<16 digits>.spool`: segments, oldest first. Each starts with an 8-byte magic and
  holds records `<payload bytes u32><points u32><crc32 u32><payload>`; a payload is
  whole lines of line protocol. Records are only ever appended, to the newest segment.
- `cursor`: (segment, offset) of the first record not yet delivered, rewritten after
  each delivery. A crash between a delivery and this write re-sends one batch, which
  InfluxDB absorbs: a point with the same series and timestamp overwrites itself.

A kill -9 can leave a torn record at the end of a segment; opening the spool verifies
every record's checksum and cuts the segment at the first bad one. When the spool would grow past `max_bytes`,
whole oldest segments are deleted and their undelivered points counted as dropped,
so the bound holds at segment granularity (segments are 1/16 of the bound).
"""

from __future__ import annotations

import fcntl
import logging
import os
import struct
import threading
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger(__name__)

MAGIC = b"D2VSPL1\n"
_HEADER = struct.Struct("<III")
_CURSOR = struct.Struct("<QQ")
FSYNC_POLICIES = ("always", "interval", "never")


class SpoolError(Exception):
    pass


@dataclass
class _Segment:
    seq: int
    path: Path
    size: int = len(MAGIC)
    points: int = 0  # points in records not yet delivered


@dataclass
class Batch:
    """Consecutive records of one segment, read for delivery."""

    seq: int
    start: int
    end: int
    points: int
    payloads: list[bytes] = field(default_factory=list)

    @property
    def data(self) -> bytes:
        return b"".join(self.payloads)


class Spool:
    def __init__(self, directory: Path, max_bytes: int, *, fsync: str = "interval",
                 fsync_interval: float = 1.0, segment_bytes: int | None = None):
        if fsync not in FSYNC_POLICIES:
            raise ValueError(f"fsync policy must be one of {FSYNC_POLICIES}")
        self.dir = Path(directory)
        self.max_bytes = max_bytes
        self.segment_bytes = segment_bytes or min(max(max_bytes // 16, 4096), 64 * 2**20)
        self.fsync = fsync
        self.fsync_interval = fsync_interval
        self.dropped = 0  # points deleted undelivered because the spool was full
        self.appended = 0
        self._lock = threading.Lock()
        self._segments: list[_Segment] = []
        self._inflight: list[Batch] = []  # read, not yet delivered; committed in order
        self._last_sync = time.monotonic()
        self._dirty = False
        self._closed = False
        self.dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        self._lock_fd = _lock_dir(self.dir)
        self._cursor_fd = os.open(self.dir / "cursor", os.O_RDWR | os.O_CREAT, 0o600)
        self._recover()
        self._active = self._new_segment()

    # --- opening ------------------------------------------------------------------

    def _recover(self) -> None:
        paths = sorted(self.dir.glob("seg-*.spool"))
        raw = os.pread(self._cursor_fd, _CURSOR.size, 0)
        seq, offset = _CURSOR.unpack(raw) if len(raw) == _CURSOR.size else (0, 0)
        for path in paths:
            try:
                s = int(path.stem[4:])
            except ValueError:
                continue
            if s < seq:  # fully delivered before the last stop
                path.unlink(missing_ok=True)
                continue
            seg = self._scan(_Segment(s, path), offset if s == seq else len(MAGIC))
            if seg is not None:
                self._segments.append(seg)
        if self._segments and self._segments[0].seq != seq:
            self._cursor = (self._segments[0].seq, len(MAGIC))
        else:
            self._cursor = (seq, max(offset, len(MAGIC)))
        self._read = self._cursor
        if self._segments:
            log.info("spool %s: %d points from before the last stop will be sent", self.dir, self.pending_points)

    def _scan(self, seg: _Segment, cursor: int) -> _Segment | None:
        """Count undelivered points; cut a torn or corrupt tail. None if the file is unusable."""
        with open(seg.path, "r+b") as f:
            if f.read(len(MAGIC)) != MAGIC:
                log.error("spool: %s is not a spool segment; moved aside", seg.path)
                os.replace(seg.path, seg.path.with_suffix(".bad"))
                return None
            pos = len(MAGIC)
            end = os.fstat(f.fileno()).st_size
            while pos + _HEADER.size <= end:
                n, points, crc = _HEADER.unpack(os.pread(f.fileno(), _HEADER.size, pos))
                if pos + _HEADER.size + n > end or zlib.crc32(os.pread(f.fileno(), n, pos + _HEADER.size)) != crc:
                    break
                if pos >= cursor:
                    seg.points += points
                pos += _HEADER.size + n
            if pos != end:
                log.warning("spool: %s: cut %d bytes of a record torn by a crash", seg.path, end - pos)
                f.truncate(pos)
            seg.size = pos
        return seg

    def _new_segment(self) -> _Segment:
        seq = self._segments[-1].seq + 1 if self._segments else max(self._cursor[0], 1)
        path = self.dir / f"seg-{seq:016d}.spool"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o600)
        os.write(fd, MAGIC)
        self._fd = fd
        seg = _Segment(seq, path)
        self._segments.append(seg)
        if not self._segments[:-1]:
            self._set_cursor(seq, len(MAGIC))
            self._read = self._cursor
        if self.fsync != "never":
            _fsync_dir(self.dir)
        return seg

    # --- writing ------------------------------------------------------------------

    def append(self, payload: bytes, points: int) -> None:
        """Add one record (whole lines). Makes room by dropping the oldest if full."""
        record = _HEADER.pack(len(payload), points, zlib.crc32(payload)) + payload
        with self._lock:
            if self._active.size + len(record) > self.segment_bytes and self._active.size > len(MAGIC):
                self._rotate()
            self._make_room(len(record))
            os.write(self._fd, record)
            self._active.size += len(record)
            self._active.points += points
            self.appended += points
            self._dirty = True
            if self.fsync == "always":
                self._sync()

    def maybe_sync(self) -> None:
        """fsync if the interval policy says the data written since the last one is due."""
        if self.fsync == "interval" and self._dirty and time.monotonic() - self._last_sync >= self.fsync_interval:
            with self._lock:
                self._sync()

    def _sync(self) -> None:
        if self._dirty:
            os.fsync(self._fd)
            self._dirty = False
        self._last_sync = time.monotonic()

    def _rotate(self) -> None:
        if self.fsync != "never":
            self._sync()
        os.close(self._fd)
        self._active = self._new_segment()

    def _make_room(self, need: int) -> None:
        while self.total_bytes + need > self.max_bytes and len(self._segments) > 1:
            seg = self._segments.pop(0)
            # batches in flight are still delivered from memory: not lost
            lost = seg.points - sum(b.points for b in self._inflight if b.seq == seg.seq)
            seg.path.unlink(missing_ok=True)
            self.dropped += lost
            nxt = (self._segments[0].seq, len(MAGIC))
            if self._cursor[0] <= seg.seq:
                self._set_cursor(*nxt)
            if self._read[0] <= seg.seq:
                self._read = nxt
            log.debug("spool full: dropped segment %d (%d points)", seg.seq, lost)

    # --- reading ------------------------------------------------------------------

    def read(self, max_points: int, max_bytes: int) -> Batch | None:
        """The next records not yet read, from one segment: at least one, else within the limits.

        Several batches may be in flight; commit() them in the order they were read.
        Runs under the lock (a pread from the page cache), so a segment cannot be dropped
        between reading it and marking the batch in flight.
        """
        with self._lock:
            if self._closed:
                return None
            seq, pos = self._read
            later = [s for s in self._segments if s.seq >= seq]
            if not later:
                return None
            seg = later.pop(0)
            if seg.seq != seq:
                pos = len(MAGIC)
            while pos >= seg.size and later:  # this one is read to its end: the next one
                seg, pos = later.pop(0), len(MAGIC)
            if pos >= seg.size:
                return None
            batch = Batch(seq=seg.seq, start=pos, end=pos, points=0)
            with open(seg.path, "rb") as f:
                data = os.pread(f.fileno(), min(seg.size - pos, max(max_bytes, _HEADER.size)), pos)
                off = 0
                while off + _HEADER.size <= len(data):
                    n, points, crc = _HEADER.unpack_from(data, off)
                    if off + _HEADER.size + n > len(data):
                        if batch.payloads:
                            break
                        data = os.pread(f.fileno(), _HEADER.size + n, pos)  # one record over max_bytes
                    payload = data[off + _HEADER.size: off + _HEADER.size + n]
                    if len(payload) != n or zlib.crc32(payload) != crc:
                        raise SpoolError(f"{seg.path}: corrupt record at offset {pos + off}")
                    batch.payloads.append(payload)
                    batch.points += points
                    off += _HEADER.size + n
                    if batch.points >= max_points:
                        break
            batch.end = pos + off
            self._read = (seg.seq, batch.end)
            self._inflight.append(batch)
            return batch

    def rewind(self) -> None:
        """Forget the batches in flight: the next read() starts again at the oldest undelivered."""
        with self._lock:
            live = {s.seq for s in self._segments}
            self.dropped += sum(b.points for b in self._inflight if b.seq not in live)  # only held in memory
            self._inflight.clear()
            self._read = self._cursor

    def skip_corrupt(self) -> int:
        """Give up on the rest of the segment being read (after a SpoolError); returns points lost."""
        with self._lock:
            seg = next((s for s in self._segments if s.seq == self._read[0]), None)
            if seg is None:
                return 0
            lost = seg.points - sum(b.points for b in self._inflight if b.seq == seg.seq)
            self.dropped += lost
            seg.points -= lost
            if seg is self._active:
                self._rotate()
            self._read = (seg.seq, seg.size)
            return lost

    def commit(self, batch: Batch) -> None:
        """The oldest batch in flight was delivered (or dead-lettered): never read it again."""
        with self._lock:
            if self._closed or not self._inflight or self._inflight[0] is not batch:
                return
            self._inflight.pop(0)
            seg = next((s for s in self._segments if s.seq == batch.seq), None)
            if seg is None:
                return  # its segment was dropped while the batch was in flight
            seg.points -= batch.points
            while self._segments[0] is not seg:  # older ones are delivered (or were empty)
                self._segments.pop(0).path.unlink(missing_ok=True)
            self._set_cursor(batch.seq, batch.end)
            if batch.end >= seg.size and (seg is not self._active or seg.size >= self.segment_bytes // 4):
                if seg is self._active:  # keep the disk small in steady state
                    self._rotate()
                self._segments.pop(0)
                seg.path.unlink(missing_ok=True)
                self._set_cursor(self._segments[0].seq, len(MAGIC))
                if self._read < self._cursor:
                    self._read = self._cursor

    def _set_cursor(self, seq: int, offset: int) -> None:
        self._cursor = (seq, offset)
        os.pwrite(self._cursor_fd, _CURSOR.pack(seq, offset), 0)

    # --- state --------------------------------------------------------------------

    @property
    def total_bytes(self) -> int:
        return sum(s.size for s in self._segments)

    @property
    def pending_points(self) -> int:
        """Points not yet delivered, in flight or not (in flight from a dropped segment too)."""
        live = {s.seq for s in self._segments}
        return sum(s.points for s in self._segments) + sum(b.points for b in self._inflight if b.seq not in live)

    @property
    def unread_points(self) -> int:
        """Points not yet delivered nor in flight."""
        return self.pending_points - sum(b.points for b in self._inflight)

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            if self.fsync != "never":
                self._sync()
                os.fsync(self._cursor_fd)
            os.close(self._fd)
            os.close(self._cursor_fd)
            if self._active.size == len(MAGIC) and len(self._segments) == 1:
                self._active.path.unlink(missing_ok=True)  # nothing in it: do not leave empty files
            os.close(self._lock_fd)


def _lock_dir(path: Path) -> int:
    """One process per spool: two senders would deliver the same points twice and race on the cursor."""
    fd = os.open(path / "lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        pid = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
        os.close(fd)
        raise SpoolError(f"spool {path} is in use by another db2vtop process (pid {pid}); "
                         "give each agent its own [influxdb] spool_dir") from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, str(os.getpid()).encode(), 0)
    return fd


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
