"""The store's file: one writer at a time (its lock), clear errors for what is not a store, the schema of an
older or a newer db2vtop, files private and never written through a link, a kill -9 that loses only the open
batch (agent/core/store/files.py)."""

from __future__ import annotations

import os
import sqlite3
import stat
import subprocess
import sys

import pytest

from db2vtop.agent.core.model import Sample
from db2vtop.agent.core.store import Store, StoreAccessError, StoreError, StoreLockedError
from tests.agent.store.records import T0, every_read, fleet_samples, kill_9_midway
from tests.conftest import ROOT


def test_one_writer_at_a_time(store_path):
    with Store(store_path, writer=True):
        with pytest.raises(StoreLockedError, match=r"pid \d+"):
            Store(store_path, writer=True)
        r = subprocess.run([sys.executable, "-m", "db2vtop.agent", "agent", "--once", "--store", str(store_path)],
                           cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert r.returncode == 2 and "being written by another db2vtop process" in r.stderr
    with Store(store_path, writer=True):
        pass  # released on close


def test_reader_errors_are_clear(tmp_path):
    with pytest.raises(StoreError, match="no store at"):
        Store(tmp_path / "missing.db")
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(StoreError, match=r"junk\.db"):
        Store(junk)


def test_a_schema_2_store_is_read_as_is_and_converted_by_the_writer(store_path):
    with Store(store_path, writer=True) as w:
        w.write(fleet_samples(spans=2))
        expected = every_read(w)
    db = sqlite3.connect(store_path)  # what a store of the previous release looks like
    db.executescript("DROP TABLE chunks; UPDATE meta SET value='2' WHERE key='schema_version';")
    db.close()
    with Store(store_path) as r:
        assert every_read(r) == expected
    with Store(store_path, writer=True) as w:
        assert w.db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone() == ("3",)
        w.compact()
        assert w.db.execute("SELECT count(*) FROM chunks").fetchone()[0] > 0
    with Store(store_path) as r:
        assert every_read(r) == expected


def test_a_newer_schema_is_refused_before_anything_is_touched(store_path):
    with Store(store_path, writer=True) as w:
        w.write([Sample("m", {}, {"a": 1}, T0)])
    db = sqlite3.connect(store_path)
    db.execute("UPDATE meta SET value='9' WHERE key='schema_version'")
    db.commit()
    db.close()
    before = store_path.read_bytes()
    for writer in (False, True):
        with pytest.raises(StoreError, match="schema 9, written by a newer db2vtop"):
            Store(store_path, writer=writer)
    assert store_path.read_bytes() == before


def test_kill_9_mid_batch_keeps_every_committed_batch_and_a_sound_file(store_path):
    last, counts = kill_9_midway(store_path, 20000, 3)
    assert max(counts) <= last + 1


def test_store_files_are_private_and_never_written_through_a_link(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("root:x:0:0:IMPORTANT\n")
    (tmp_path / "m.db-writer.lock").symlink_to(victim)  # planted by another user of a shared directory
    with pytest.raises(StoreAccessError, match="symbolic link"):
        Store(tmp_path / "m.db", writer=True)
    assert victim.read_text() == "root:x:0:0:IMPORTANT\n"
    (tmp_path / "m.db-writer.lock").unlink()
    old = os.umask(0)
    try:
        with Store(tmp_path / "deep" / "m.db", writer=True) as s:
            s.write([Sample("m", {}, {"v": 1}, T0)])
            modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in (tmp_path / "deep").iterdir()}
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "deep").stat().st_mode) == 0o700
    assert modes == {"m.db": 0o600, "m.db-wal": 0o600, "m.db-shm": 0o600, "m.db-writer.lock": 0o600}
