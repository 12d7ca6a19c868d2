"""Markers queued by `db2vtop mark` or the TUI while this process writes the store.

Each JSON file of the inbox (agent/core/markers.py) becomes an Annotation, so markers reach
the store and every sink in order with the samples around them.

The agent makes its inbox when it starts (0700), so no other user can make it first. The
inbox is input from outside, so it is read defensively: only a directory of this user's,
not a link and not writable by others, is read at all (else the cycle fails, saying why);
each file is opened relative to it without following links and without blocking (a FIFO),
and only a regular file of this user's of at most 64 KiB holding one JSON object with a name
and a time within the allowed clock skew is a marker. Every file is tried once: a marker is
removed, anything else is renamed `*.bad` (kept for a look, never read again) and counted as
set aside, so no file can block the ones queued after it. What is kept ages out (once a minute):
a `*.bad` older than a week or past the newest 100, and a `mark` killed between writing its file
and renaming it leaves a `.*.tmp`, removed after an hour; the inbox is listed every second, and
hundreds of thousands of such files once cost a fifth of a core.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import stat
import time
from pathlib import Path
from typing import Any

from db2vtop.agent.core.clock import CLOCK
from db2vtop.agent.core.files import make_private_dir
from db2vtop.agent.core.markers import MAX_MARKER_BYTES, inbox_of, inbox_problem
from db2vtop.agent.core.model import Annotation, Record, record_problem
from db2vtop.collectors.base import BaseCollector, CollectorError

log = logging.getLogger(__name__)

_OPEN_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_OPEN_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
BAD_KEPT = 100  # the newest files set aside, kept for a look
BAD_KEPT_S = 7 * 86400
TMP_KEPT_S = 3600  # a `mark` still writing its file has long renamed it by then
AGE_EVERY_S = 60.0


class BadMarkerError(ValueError):
    """Why a file of the inbox is not a marker."""


class MarkerInbox(BaseCollector):
    def __init__(self, store_path: Path, interval: float = 1.0, name: str = "markers"):
        super().__init__(name, interval)
        self.inbox = inbox_of(store_path)
        self._aged_at: float | None = None  # monotonic time of the last aging pass

    async def start(self) -> None:
        """Make the inbox now, private, so that no other user can make it first."""
        try:
            await self.run_blocking(make_private_dir, self.inbox)
        except OSError as e:
            raise CollectorError(f"cannot create the marker inbox {self.inbox}: {e.strerror or e}") from None

    async def collect(self) -> list[Record]:
        return await self.run_blocking(self._drain)

    def _drain(self) -> list[Record]:
        dfd = self._open_inbox()
        if dfd is None:
            return []
        out: list[Record] = []
        try:
            names = os.listdir(dfd)
            if self._aged_at is None or time.monotonic() - self._aged_at >= AGE_EVERY_S:
                self._aged_at = time.monotonic()
                self._age_out(dfd, names)
            for name in sorted(n for n in names if n.endswith(".json")):
                try:
                    out.append(self._read(dfd, name))
                except Exception as e:  # whatever the file holds, it is tried once
                    self._set_aside(dfd, name, e)
                    continue
                try:
                    os.unlink(name, dir_fd=dfd)
                except OSError as e:
                    log.warning("marker inbox: cannot remove %s after reading it: %s", name, e.strerror or e)
        finally:
            os.close(dfd)
        return out

    def _age_out(self, dfd: int, names: list[str]) -> None:
        """Remove the `*.bad` past the newest BAD_KEPT or older than BAD_KEPT_S, and `.*.tmp` older than TMP_KEPT_S
        (by their modification time: a file set aside keeps the one its writer gave it)."""
        now = time.time()
        bad: list[tuple[float, str]] = []
        old: list[str] = []
        for name in names:
            is_tmp = name.startswith(".") and name.endswith(".tmp")
            if not (is_tmp or name.endswith(".bad")):
                continue
            try:
                changed = os.stat(name, dir_fd=dfd, follow_symlinks=False).st_mtime
            except OSError:
                continue
            if is_tmp:
                if now - changed > TMP_KEPT_S:
                    old.append(name)
            else:
                bad.append((changed, name))
        bad.sort(reverse=True)
        old += [name for i, (changed, name) in enumerate(bad) if i >= BAD_KEPT or now - changed > BAD_KEPT_S]
        removed = 0
        for name in old:
            try:
                os.unlink(name, dir_fd=dfd)
                removed += 1
            except OSError:
                continue
        if removed:
            log.info("marker inbox: removed %d old file(s) set aside or left half-written", removed)

    def _open_inbox(self) -> int | None:
        """The inbox opened as a directory (None if there is none); one that must not be read raises
        CollectorError, which the cycle reports."""
        try:
            st = os.lstat(self.inbox)
        except FileNotFoundError:
            return None
        why = inbox_problem(self.inbox, st)
        if why:
            raise CollectorError(f"marker inbox {self.inbox} {why}; its markers are not read")
        dfd = os.open(self.inbox, _OPEN_DIR)
        opened = os.fstat(dfd)
        if (opened.st_dev, opened.st_ino) != (st.st_dev, st.st_ino):  # swapped between the look and the open
            os.close(dfd)
            raise CollectorError(f"marker inbox {self.inbox} changed while being opened; its markers are not read")
        if opened.st_mode & 0o077:  # older db2vtop made it with the umask's mode
            log.warning("marker inbox %s: mode %o tightened to 700", self.inbox, stat.S_IMODE(opened.st_mode))
            os.fchmod(dfd, 0o700)
        return dfd

    def _read(self, dfd: int, name: str) -> Annotation:
        try:
            fd = os.open(name, _OPEN_FILE, dir_fd=dfd)
        except OSError as e:
            raise BadMarkerError("a symbolic link" if e.errno == errno.ELOOP else e.strerror or str(e)) from None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise BadMarkerError("not a regular file")
            if st.st_uid != os.geteuid():
                raise BadMarkerError(f"owned by uid {st.st_uid}, not by this agent's user")
            data = os.read(fd, MAX_MARKER_BYTES + 1)
        finally:
            os.close(fd)
        if len(data) > MAX_MARKER_BYTES:
            raise BadMarkerError(f"larger than {MAX_MARKER_BYTES // 1024} KiB")
        return self._marker(json.loads(data.decode("utf-8")))

    def _marker(self, doc: Any) -> Annotation:
        if not isinstance(doc, dict):
            raise BadMarkerError(f"a JSON {type(doc).__name__}, not an object")
        name, kind, text, tags = doc.get("name"), doc.get("kind", "marker"), doc.get("text", ""), doc.get("tags") or {}
        if not isinstance(name, str) or not name:
            raise BadMarkerError("no name")
        if not isinstance(kind, str) or not isinstance(text, str):
            raise BadMarkerError("kind and text must be strings")
        if not isinstance(tags, dict) or not all(isinstance(v, str | int | float | bool) for v in tags.values()):
            raise BadMarkerError("tags must be an object of plain values")
        marker = Annotation(kind, name, {str(k): str(v) for k, v in tags.items()}, text, doc.get("ts"))
        now, skew = CLOCK.now_ns(), int(self.clock_skew_s * 1e9)
        why = record_problem(marker, now - skew, now + skew)
        if why:
            raise BadMarkerError(why)
        return marker

    def _set_aside(self, dfd: int, name: str, error: Exception) -> None:
        """Rename it `<name>.bad` (another suffix if that is taken by something it cannot replace)."""
        why = error if isinstance(error, BadMarkerError) else f"{type(error).__name__}: {error}"
        for n in range(10):
            target = f"{name}.bad" if n == 0 else f"{name}.{n}.bad"
            try:
                os.rename(name, target, src_dir_fd=dfd, dst_dir_fd=dfd)
                break
            except OSError:
                continue
        else:
            log.error("marker inbox: cannot rename %s aside; it will be tried again", name)
        self.supervisor.set_aside(self.thread, f"marker file {self.inbox / name}", str(why))
