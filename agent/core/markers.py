"""Benchmark markers: into the store directly, or via the inbox of the process writing it.

The store has one writer. When another process (an agent, or `watch`) holds it, a marker
is dropped as a small JSON file into the store's marker inbox, which that process's
MarkerInbox collector turns into an Annotation for the store and every sink.
"""

from __future__ import annotations

import json
import os
import stat
import tempfile
import time
from pathlib import Path

from db2vtop.agent.core.files import make_private_dir
from db2vtop.agent.core.model import Annotation
from db2vtop.agent.core.store import Store, StoreAccessError, StoreError, StoreLockedError

#: a marker file is a few hundred bytes; anything larger is not one
MAX_MARKER_BYTES = 64 * 1024


class MarkerError(StoreAccessError):
    """A marker could not be queued in the inbox (not ours, not writable)."""


def inbox_of(store_path: Path) -> Path:
    return store_path.with_name(store_path.name + ".markers")


def inbox_problem(inbox: Path, st: os.stat_result) -> str | None:
    """Why an existing inbox must not be used (its lstat `st`), else None. Only the agent's user may
    put markers in it: one that another user can write to, owns or points to could feed the agent
    anything, and one reached through a link could make it remove another directory's files."""
    if stat.S_ISLNK(st.st_mode):
        return "is a symbolic link"
    if not stat.S_ISDIR(st.st_mode):
        return "is not a directory"
    if st.st_uid != os.geteuid():
        return f"belongs to uid {st.st_uid}, not to this user (uid {os.geteuid()})"
    if st.st_mode & 0o022:
        return (f"can be written by group or others (mode {stat.S_IMODE(st.st_mode):o}); "
                f"if that is not meant, run: chmod 700 {inbox}")
    return None


def drop_marker(store_path: Path, marker: Annotation) -> Path:
    """Queue a marker for the store's writer; the file appears atomically, complete, in an inbox
    private to this user (0700)."""
    inbox = inbox_of(store_path)
    try:
        make_private_dir(inbox)
        why = inbox_problem(inbox, os.lstat(inbox))
        if why:
            raise MarkerError(f"marker inbox {inbox} {why}; the marker is not queued")
        doc = {"kind": marker.event, "name": marker.name, "tags": marker.tags, "text": marker.text, "ts": marker.ts}
        fd, tmp = tempfile.mkstemp(dir=inbox, prefix=".", suffix=".tmp")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(doc, f)
        final = inbox / f"{marker.ts:020d}-{os.getpid()}.json"
        os.rename(tmp, final)
    except OSError as e:
        raise MarkerError(f"cannot queue the marker in {inbox}: {e.strerror or e}") from None
    return final


def record_marker(store_path: Path, marker: Annotation) -> StoreLockedError | None:
    """Write the marker now if nobody writes the store (None), else queue it for the writer and
    say who holds the store."""
    try:
        with Store(store_path, writer=True) as store:
            store.write(annotations=[marker])
        return None
    except StoreLockedError as e:
        drop_marker(store_path, marker)
        return e


def deliver_marker(store_path: Path, marker: Annotation) -> str:
    """Write the marker now if nobody writes the store, else queue it for the writer; what happened, in
    one line (without a writer, nothing is being collected around the marker)."""
    holder = record_marker(store_path, marker)
    if holder is None:
        return (f"marker {marker.name!r} stored in {store_path}; no agent or watch is recording this store, so "
                "nothing is collected around it (start `db2vtop agent` first)")
    return f"marker {marker.name!r} queued for db2vtop (pid {holder.pid}), which records it into {store_path}"


def wait_recorded(store_path: Path, marker: Annotation, timeout: float) -> bool:
    """Whether the marker is in the store within `timeout` seconds (a queued one is recorded by the
    writer's inbox collector about a second later)."""
    deadline = time.monotonic() + timeout
    while True:
        found = []
        try:
            with Store(store_path) as store:
                found = store.annotations(marker.ts, marker.ts)
            if any(a.name == marker.name and a.event == marker.event for a in found):
                return True
        except StoreError:
            pass
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.2)
