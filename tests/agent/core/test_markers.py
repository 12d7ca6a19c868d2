"""The marker inbox read as hostile input: every file is tried once, nothing blocks the markers queued
after it, nothing outside the inbox is read or removed, and only this user's inbox is read at all."""

from __future__ import annotations

import asyncio
import json
import os
import stat
import time

import pytest

from db2vtop.agent.core.markers import MarkerError, drop_marker, inbox_of
from db2vtop.agent.core.model import Annotation
from db2vtop.agent.core.supervise import Supervisor
from db2vtop.collectors.base import CollectorError
from db2vtop.collectors.markers import MarkerInbox

NOBODY = 65534
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user needs root")


def collect(inbox: MarkerInbox) -> list:
    return asyncio.run(inbox.collect())


def hostile_files(box, outside) -> int:
    """The review's poison files, each of which blocked every later marker or read outside the inbox;
    returns how many were made."""
    now = time.time_ns()
    (box / "0001-dir.json").mkdir()
    (box / "0002-deep.json").write_text("[" * 200_000 + "]" * 200_000)
    (box / "0003-inf.json").write_text('{"name": "x", "ts": 1e400}')
    (box / "0004-list.json").write_text("[1, 2]")
    os.mkfifo(box / "0005-fifo.json")
    (box / "0006-link.json").symlink_to(outside)
    (box / "0007-zero.json").symlink_to("/dev/zero")
    (box / "0008-bigts.json").write_text(f'{{"name": "evil", "ts": {10**30}}}')
    (box / "0009-nan.json").write_text('{"name": "x", "ts": NaN}')
    (box / "0010-big.json").write_text(json.dumps({"name": "big", "ts": now, "text": "x" * 70_000}))
    (box / "0011-notname.json").write_text(json.dumps({"name": 5, "ts": now}))
    (box / "0012-future.json").write_text(json.dumps({"name": "far", "ts": now + 3 * 86400 * 10**9}))
    return 12


def test_hostile_files_are_set_aside_once_and_the_good_marker_after_them_is_read(tmp_path):
    store = tmp_path / "m.db"
    outside = tmp_path / "settings.json"
    outside.write_text(json.dumps({"name": "leak", "ts": time.time_ns(), "text": "content of another file"}))
    good = Annotation("marker", "run 2 start", {"by": "cli"}, "", time.time_ns())
    box = drop_marker(store, good).parent
    hostile_files(box, outside)
    reader = MarkerInbox(store)
    reader.supervisor = sup = Supervisor()
    assert [(a.name, a.tags) for a in collect(reader)] == [("run 2 start", {"by": "cli"})]
    assert collect(reader) == []  # each was tried once
    left = sorted(p.name for p in box.iterdir())
    assert not [n for n in left if n.endswith(".json")], left
    assert len([n for n in left if n.endswith(".bad")]) == 12
    assert {h.name: h.set_aside for h in sup.snapshot()}["collector:markers"] == 12
    assert outside.exists() and os.path.exists("/dev/zero")


def test_files_set_aside_or_left_half_written_age_out(tmp_path):
    """The inbox is listed every second: what piles up in it ages out. Before: 300,000 `*.bad` and 50,000
    `.tmp` files were kept for ever and cost a fifth of a core. Now the newest 100 `*.bad` of the last week
    are kept, and a `.tmp` (a `mark` killed before its rename) for an hour."""
    store = tmp_path / "m.db"
    good = Annotation("marker", "m", {}, "", time.time_ns())
    box = drop_marker(store, good).parent
    week_ago = time.time() - 8 * 86400
    for i in range(130):
        (box / f"{i:04d}.json.bad").write_text("x")
        if i < 10:  # ten of the newest past a week: gone however few are left
            os.utime(box / f"{i:04d}.json.bad", (week_ago, week_ago))
        else:
            os.utime(box / f"{i:04d}.json.bad", (time.time() - 1000 + i, time.time() - 1000 + i))
    (box / ".stale.tmp").write_text("{")
    os.utime(box / ".stale.tmp", (time.time() - 3700, time.time() - 3700))
    (box / ".writing.tmp").write_text("{")
    (box / "notes.txt").write_text("not ours to remove")
    assert [a.name for a in collect(MarkerInbox(store))] == ["m"]
    left = sorted(p.name for p in box.iterdir())
    assert left == [".writing.tmp", *(f"{i:04d}.json.bad" for i in range(30, 130)), "notes.txt"], left


@as_root
def test_a_marker_from_another_user_is_not_taken(tmp_path):
    store = tmp_path / "m.db"
    marker = drop_marker(store, Annotation("marker", "theirs", ts=time.time_ns()))
    os.chown(marker, NOBODY, NOBODY)
    assert collect(MarkerInbox(store)) == []
    assert marker.with_name(marker.name + ".bad").exists()


@pytest.mark.parametrize("case", ["link", "others-write", pytest.param("not-ours", marks=as_root)])
def test_an_inbox_others_could_feed_or_point_elsewhere_is_not_read(tmp_path, case):
    store = tmp_path / "m.db"
    box = inbox_of(store)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "important.json").write_text(json.dumps({"name": "x", "ts": time.time_ns()}))
    if case == "link":
        box.symlink_to(elsewhere)  # F16: a root agent used to delete every *.json in the target
        why = "symbolic link"
    else:
        box.mkdir()
        (box / "m.json").write_text(json.dumps({"name": "x", "ts": time.time_ns()}))
        box.chmod(0o777) if case == "others-write" else os.chown(box, NOBODY, NOBODY)
        why = "written by group or others" if case == "others-write" else "belongs to uid 65534"
    with pytest.raises(CollectorError, match=why):
        collect(MarkerInbox(store))
    assert (elsewhere / "important.json").exists()
    with pytest.raises(MarkerError, match=why):
        drop_marker(store, Annotation("marker", "m", ts=time.time_ns()))


def test_the_inbox_is_made_private_and_an_old_readable_one_is_tightened(tmp_path):
    store = tmp_path / "m.db"
    old = os.umask(0)
    try:
        drop_marker(store, Annotation("marker", "m", ts=time.time_ns()))
    finally:
        os.umask(old)
    box = inbox_of(store)
    assert stat.S_IMODE(box.stat().st_mode) == 0o700
    box.chmod(0o755)  # made by an older db2vtop under umask 022
    assert [a.name for a in collect(MarkerInbox(store))] == ["m"]
    assert stat.S_IMODE(box.stat().st_mode) == 0o700
