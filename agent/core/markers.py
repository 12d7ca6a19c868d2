"""Benchmark markers: into the store directly, or via the inbox of the process writing it.

The store has one writer. When another process (an agent, or `watch`) holds it, a marker
is dropped as a small JSON file into the store's marker inbox, which that process's
MarkerInbox collector turns into an Annotation for the store and every sink.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path

from db2vtop.agent.core.model import Annotation
from db2vtop.agent.core.store import Store, StoreError, StoreLockedError


def inbox_of(store_path: Path) -> Path:
    return store_path.with_name(store_path.name + ".markers")


def drop_marker(store_path: Path, marker: Annotation) -> Path:
    """Queue a marker for the store's writer; the file appears atomically, complete."""
    inbox = inbox_of(store_path)
    inbox.mkdir(parents=True, exist_ok=True)
    doc = {"kind": marker.event, "name": marker.name, "tags": marker.tags, "text": marker.text, "ts": marker.ts}
    fd, tmp = tempfile.mkstemp(dir=inbox, prefix=".", suffix=".tmp")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump(doc, f)
    final = inbox / f"{marker.ts:020d}-{os.getpid()}.json"
    os.rename(tmp, final)
    return final


def record_marker(store_path: Path, marker: Annotation) -> str | None:
    """Write the marker now if nobody writes the store (None), else queue it for the writer and
    say who holds the store."""
    try:
        with Store(store_path, writer=True) as store:
            store.write(annotations=[marker])
        return None
    except StoreLockedError as e:
        drop_marker(store_path, marker)
        return str(e)


def deliver_marker(store_path: Path, marker: Annotation) -> str:
    """Write the marker now if nobody writes the store, else queue it for the writer."""
    holder = record_marker(store_path, marker)
    if holder is None:
        return f"marker {marker.name!r} stored in {store_path}"
    return f"marker {marker.name!r} queued for the process writing the store ({holder})"


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
