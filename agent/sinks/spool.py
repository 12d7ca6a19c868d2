"""A durable FIFO of line-protocol records on disk, bounded in size.

Layout of the spool directory:
- `seg-<16 digits>.spool`: segments, oldest first. Each starts with an 8-byte magic and
  holds records `<payload bytes u32><points u32><crc32 u32><payload>`; a payload is
  whole lines of line protocol. Records are only ever appended, to the newest segment.
- `cursor`: (segment, offset) of the first record not yet delivered, rewritten after
  each delivery. A crash between a delivery and this write re-sends one batch, which
  InfluxDB absorbs: a point with the same series and timestamp overwrites itself.

Every record carries a CRC32 of its payload. A kill -9 can leave a torn record at the end of
a segment: opening the spool cuts it. A bad record anywhere else (a flipped bit, a hole) is
skipped: the reader finds the next record whose checksum holds (records start right after a
line's newline) and delivers the rest; the points lost are counted as dropped and logged.
The cursor is a hint, never a reason to delete: one that does not point at a record of the
oldest segment is replaced by that segment's start (points may be sent twice; InfluxDB
absorbs that). An entry that is not a regular file is moved aside as `*.bad`.

When the spool would grow past `max_bytes`, whole oldest segments are deleted and their
undelivered points counted as dropped, so the bound holds at segment granularity (segments
are 1/16 of the bound). A write that fails (disk full) leaves no partial record behind: the
segment is cut back and the caller keeps the record to try again.
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import struct
import threading
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path

from db2vtop.agent.core.files import NOFOLLOW, make_private_dir, open_private

log = logging.getLogger(__name__)

MAGIC = b"D2VSPL1\n"
_HEADER = struct.Struct("<III")
_CURSOR = struct.Struct("<QQ")
_MAX_SEQ = 10**16 - 1  # segment names have 16 digits
_WINDOW = 1 << 20  # bytes read at a time when looking for the next good record
FSYNC_POLICIES = ("always", "interval", "never")


class SpoolError(Exception):
    pass


class SpoolAccessError(SpoolError):
    """The spool directory cannot be made or is not ours: the CLI exits 2 for it, as for bad usage."""

    status = 2


@dataclass
class _Segment:
    seq: int
    path: Path
    size: int = len(MAGIC)
    points: int = 0  # points in records not yet delivered
    bad: dict[int, int] = field(default_factory=dict)  # start of a bad stretch -> the next good record


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
        self.corrupt = 0  # points lost in records whose checksum failed (a flipped bit, a torn tail)
        self.appended = 0
        self._lock = threading.Lock()
        self._segments: list[_Segment] = []
        self._inflight: list[Batch] = []  # read, not yet delivered; committed in order
        self._last_sync = time.monotonic()
        self._dirty = False
        self._closed = False
        self._top = 0  # the highest segment number found on disk, usable or not
        self._open_dir()
        self._lock_fd = _lock_dir(self.dir)
        self._cursor_fd = _open_own(self.dir / "cursor")
        self._recover()
        self._active = self._new_segment()

    # --- opening ------------------------------------------------------------------

    def _open_dir(self) -> None:
        try:
            make_private_dir(self.dir)
            st = self.dir.stat()
        except OSError as e:
            raise SpoolAccessError(f"cannot create the spool directory {self.dir}: {e.strerror or e}") from None
        if st.st_uid != os.geteuid():
            raise SpoolAccessError(f"spool directory {self.dir} belongs to uid {st.st_uid}, not to this user "
                             f"({os.geteuid()}); give the agent a spool_dir of its own")
        if st.st_mode & 0o077:
            log.warning("spool %s: mode %o tightened to 700", self.dir, st.st_mode & 0o777)
            os.chmod(self.dir, 0o700)

    def _recover(self) -> None:
        found: list[_Segment] = []
        for path in sorted(self.dir.glob("seg-*.spool")):
            try:
                seq = int(path.stem[4:])
            except ValueError:
                continue
            self._top = max(self._top, seq)
            if not path.is_file() or path.is_symlink():
                _set_aside(path, "is not a regular file")
                continue
            found.append(_Segment(seq, path))
        raw = os.pread(self._cursor_fd, _CURSOR.size, 0)
        seq, offset = _CURSOR.unpack(raw) if len(raw) == _CURSOR.size else (0, 0)
        if not found:
            if seq > _MAX_SEQ:
                log.error("spool %s: cursor file holds garbage (segment %d); starting afresh", self.dir, seq)
                seq = 0
            self._cursor = self._read = (seq, len(MAGIC))
            return
        oldest = found[0].seq
        start = len(MAGIC)
        if seq == oldest:
            start = offset
        elif seq > oldest:  # never delete on the cursor's word: what it says was delivered is sent again
            log.error("spool %s: the cursor (segment %d offset %d) does not match the segments on disk "
                      "(oldest %d); delivering everything from the oldest (points may be sent twice)",
                      self.dir, seq, offset, oldest)
        for seg in found:
            corrupt = self.corrupt
            checked = self._scan(seg, start if seg.seq == oldest else len(MAGIC), seg is found[-1])
            if checked is None:
                continue
            if seg.seq == oldest and checked is False:
                log.error("spool %s: the cursor (offset %d of segment %d) does not point at a record; "
                          "delivering that segment from its start (points may be sent twice)", self.dir, start, oldest)
                start = len(MAGIC)
                self.corrupt, seg.points, seg.bad = corrupt, 0, {}
                self._scan(seg, start, seg is found[-1])
            self._segments.append(seg)
        first = self._segments[0].seq if self._segments else oldest
        self._cursor = (first, start if self._segments and first == oldest else len(MAGIC))
        self._read = self._cursor
        if self._segments:
            log.info("spool %s: %d points from before the last stop will be sent", self.dir, self.pending_points)

    def _scan(self, seg: _Segment, cursor: int, newest: bool) -> bool | None:
        """Count the points from `cursor` on, skip (and count) bad records, cut a bad tail (torn by a
        crash, in the newest segment). None if the file is unusable (moved aside), else whether `cursor`
        is where a record starts (or the end)."""
        try:
            fd = open_private(seg.path, os.O_RDWR)
        except OSError as e:
            _set_aside(seg.path, e.strerror or str(e))
            return None
        try:
            if os.pread(fd, len(MAGIC), 0) != MAGIC:
                _set_aside(seg.path, "is not a spool segment")
                return None
            pos = len(MAGIC)
            end = os.fstat(fd).st_size
            at_cursor = cursor == pos
            while pos < end:
                rec = _record_at(fd, pos, end)
                if rec is not None:
                    if pos >= cursor:
                        seg.points += rec[1]
                    pos = rec[0]
                else:
                    nxt, lines = _next_good(fd, pos, end)
                    if nxt >= end:  # nothing good after it: the newest segment's tail a crash tore, or worse
                        log.log(logging.WARNING if newest else logging.ERROR,
                                "spool: %s: cut %d bytes at its end, %s (about %d points)", seg.path, end - pos,
                                "a record torn by a crash" if newest else "corrupt", lines)
                        if pos >= cursor:
                            self.corrupt += lines
                        os.ftruncate(fd, pos)
                        end = pos
                        break
                    log.error("spool: %s: %d bytes at offset %d are corrupt (about %d points lost); skipped, "
                              "the records after them are delivered", seg.path, nxt - pos, pos, lines)
                    if pos >= cursor:
                        self.corrupt += lines
                    seg.bad[pos] = nxt
                    pos = nxt
                at_cursor = at_cursor or pos == cursor
            seg.size = end
        finally:
            os.close(fd)
        return at_cursor

    def _new_segment(self) -> _Segment:
        seq = self._segments[-1].seq + 1 if self._segments else max(self._cursor[0], self._top + 1, 1)
        path = self.dir / f"seg-{seq:016d}.spool"
        fd = open_private(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND)
        try:
            if os.write(fd, MAGIC) != len(MAGIC):
                raise OSError(errno.ENOSPC, "short write", str(path))
            if self.fsync != "never":
                _fsync_dir(self.dir)
        except OSError:
            os.close(fd)
            path.unlink(missing_ok=True)
            raise
        self._fd = fd
        seg = _Segment(seq, path)
        self._segments.append(seg)
        if not self._segments[:-1]:
            self._set_cursor(seq, len(MAGIC))
            self._read = self._cursor
        return seg

    # --- writing ------------------------------------------------------------------

    def append(self, payload: bytes, points: int) -> None:
        """Add one record (whole lines, each ending in a newline). Makes room by dropping the oldest
        if full. An OSError (disk full) leaves the spool as it was: the caller keeps the record."""
        record = _HEADER.pack(len(payload), points, zlib.crc32(payload)) + payload
        with self._lock:
            if self._active.size + len(record) > self.segment_bytes and self._active.size > len(MAGIC):
                self._rotate()
            self._make_room(len(record))
            try:
                if os.write(self._fd, record) != len(record):
                    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            except OSError:
                os.ftruncate(self._fd, self._active.size)  # no partial record left behind
                raise
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
        """A new active segment; if it cannot be made, the current one stays active."""
        if self.fsync != "never":
            self._sync()
        old = self._fd
        self._active = self._new_segment()
        os.close(old)

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
            try:
                fd = os.open(seg.path, os.O_RDONLY | NOFOLLOW)
            except OSError as e:  # gone or replaced behind our back: its points are lost, the rest is not
                log.error("spool: cannot read %s: %s; its %d points are lost", seg.path, e.strerror or e, seg.points)
                self.corrupt += seg.points
                seg.points, pos = 0, seg.size
                self._read = (seg.seq, pos)
                return None
            try:
                pos = self._read_records(fd, seg, batch, max_points, max_bytes)
            finally:
                os.close(fd)
            batch.end = pos
            self._read = (seg.seq, pos)
            if not batch.payloads:  # only bad records up to the end of what is written
                return None
            self._inflight.append(batch)
            return batch

    def _read_records(self, fd: int, seg: _Segment, batch: Batch, max_points: int, max_bytes: int) -> int:
        """Fill `batch` from batch.start: at least one record if any, else within the limits, stepping
        over bad ones before the first; returns where the next read starts."""
        pos = batch.start
        while pos < seg.size:
            data = os.pread(fd, min(seg.size - pos, max(max_bytes, _HEADER.size)), pos)
            off = 0
            while off + _HEADER.size <= len(data):
                n, points, crc = _HEADER.unpack_from(data, off)
                end = off + _HEADER.size + n
                payload: bytes | None = None
                if end <= len(data):
                    payload = data[off + _HEADER.size:end]
                elif batch.payloads:
                    return pos + off  # the next read starts with it
                elif pos + end <= seg.size:  # one record larger than max_bytes
                    payload = os.pread(fd, n, pos + off + _HEADER.size)
                if payload is None or len(payload) != n or zlib.crc32(payload) != crc:
                    if batch.payloads:
                        return pos + off  # what came before it is delivered first
                    break
                batch.payloads.append(payload)
                batch.points += points
                off = end
                if batch.points >= max_points or off >= max_bytes:
                    return pos + off
            if batch.payloads:
                return pos + off
            pos = batch.start = self._skip_bad(fd, seg, pos + off)
        return pos

    def _skip_bad(self, fd: int, seg: _Segment, pos: int) -> int:
        """Step over the bad stretch at `pos` (counted once, when first met); where the next good record starts."""
        nxt = seg.bad.get(pos)
        if nxt is None:
            nxt, lines = _next_good(fd, pos, seg.size)
            seg.bad[pos] = nxt
            self.corrupt += lines
            log.error("spool: %s: %d bytes at offset %d are corrupt (about %d points lost); skipped",
                      seg.path, nxt - pos, pos, lines)
        return nxt

    def rewind(self) -> None:
        """Forget the batches in flight: the next read() starts again at the oldest undelivered."""
        with self._lock:
            live = {s.seq for s in self._segments}
            self.dropped += sum(b.points for b in self._inflight if b.seq not in live)  # only held in memory
            self._inflight.clear()
            self._read = self._cursor

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
                    try:
                        self._rotate()
                    except OSError as e:  # disk full: the delivered segment stays until a later commit
                        log.debug("spool: cannot start a new segment: %s", e)
                        return
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


def _record_at(fd: int, pos: int, end: int) -> tuple[int, int] | None:
    """(where the next record starts, points) if a whole record with a good checksum starts at pos."""
    head = os.pread(fd, _HEADER.size, pos)
    if len(head) < _HEADER.size:
        return None
    n, points, crc = _HEADER.unpack(head)
    nxt = pos + _HEADER.size + n
    if n == 0 or nxt > end:
        return None
    payload = os.pread(fd, n, pos + _HEADER.size)
    if len(payload) != n or zlib.crc32(payload) != crc:
        return None
    return nxt, points


def _next_good(fd: int, pos: int, end: int) -> tuple[int, int]:
    """After a bad record at `pos`: where the next good record starts (`end` if none) and the lines
    (points) in between. A record starts right after the newline that ends the one before it, so only
    those places are tried, and a try only reads a payload whose last byte is a newline. The bad
    record's own header is not searched: a length or checksum byte that happens to be a newline is
    not a point."""
    lines = 0
    base = pos + _HEADER.size
    while base < end:
        window = os.pread(fd, min(_WINDOW, end - base), base)
        if not window:
            break
        i = window.find(b"\n")
        while i != -1:
            cand = base + i + 1
            if cand + _HEADER.size <= end:
                n = _HEADER.unpack(os.pread(fd, _HEADER.size, cand))[0]
                last = cand + _HEADER.size + n
                if n > 0 and last <= end and os.pread(fd, 1, last - 1) == b"\n" \
                        and _record_at(fd, cand, end) is not None:
                    return cand, lines + 1
            lines += 1
            i = window.find(b"\n", i + 1)
        base += len(window)
    return end, lines


def _set_aside(path: Path, why: str) -> None:
    """Move a spool entry that cannot be used out of the way (kept for a look), never delete it."""
    log.error("spool: %s %s; moved aside", path, why)
    try:
        os.replace(path, path.with_suffix(".bad"))
    except OSError as e:
        log.error("spool: cannot move %s aside: %s; it is ignored", path, e.strerror or e)


def _open_own(path: Path) -> int:
    """A spool's own small file (lock, cursor); a link or a non-file in its place is moved aside."""
    try:
        return open_private(path, os.O_RDWR | os.O_CREAT)
    except OSError as e:
        if e.errno not in (errno.ELOOP, errno.EINVAL, errno.EISDIR):
            raise SpoolAccessError(f"cannot open {path}: {e.strerror or e}") from None
        _set_aside(path, e.strerror or str(e))
    try:
        return open_private(path, os.O_RDWR | os.O_CREAT)
    except OSError as e:
        raise SpoolAccessError(f"cannot open {path}: {e.strerror or e}") from None


def _lock_dir(path: Path) -> int:
    """One process per spool: two senders would deliver the same points twice and race on the cursor."""
    fd = _open_own(path / "lock")
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
