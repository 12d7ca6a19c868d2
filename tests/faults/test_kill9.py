"""kill -9 in the middle of each kind of write the agent makes: store transactions, spool appends and
cursor updates (delivering to a real influxd), and markers being queued into its inbox.

What was committed before each kill must be there after it: every row a reader saw in the store,
and every whole record in the spool files, which a later run delivers to InfluxDB.
"""

from __future__ import annotations

import random
import sqlite3
import subprocess
import time
from pathlib import Path

from db2vtop.agent.core.markers import inbox_of
from db2vtop.agent.core.store import Store
from tests.conftest import run_cli
from tests.faults.agent import AGENT, ROOT, nothing_lost, start, wait_seconds, write_config
from tests.faults.test_spool_corrupt import framed, line_key
from tests.infra.influxd import influx_keys, running, store_keys


def whole_records(spool: Path) -> set[tuple]:
    """The keys of every point in a whole record of the spool files as they are now (a record cut by
    the kill, at a segment's end, is not whole, and was never committed)."""
    keys = set()
    for seg in sorted(spool.glob("seg-*.spool")):
        try:
            data = seg.read_bytes()
        except FileNotFoundError:  # delivered and deleted meanwhile
            continue
        for _, payload in framed(data):
            if payload is None:
                break
            keys |= {line_key(x) for x in payload.decode().splitlines()}
    return keys


def test_kill_9_during_store_and_spool_writes_keeps_what_was_committed(tmp_path, influx_version):
    with running(influx_version, tmp_path / "influxd") as srv:
        bucket = srv.create_db("k")
        store, spool = tmp_path / "m.db", tmp_path / "spool"
        cfg = write_config(tmp_path / "config.toml", store, "500ms", extra=(
            f'[influxdb]\n{srv.agent_section(bucket)}spool_dir = "{spool}"\nflush_interval = "200ms"\n'
            'retry_interval = "200ms"\nmax_retry_delay = "1s"\nflush_timeout = "20s"\nstats_interval = "1s"\n'))
        seen: set[tuple] = set()
        spooled: set[tuple] = set()
        rng = random.Random(29)
        for i in range(3):
            agent = start(cfg, store, tmp_path / f"agent{i}.log")
            try:
                wait_seconds(store, 2 * (i + 1))
                time.sleep(rng.uniform(0.3, 1.5))
                seen |= store_keys(store)  # committed: a reader sees it
            finally:
                agent.kill()  # SIGKILL, wherever its threads are
            spooled |= whole_records(spool)
            with sqlite3.connect(store) as db:
                assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
            missing = seen - store_keys(store)
            assert not missing, sorted(missing)[:5]
        r = run_cli("agent", "-c", str(cfg), "--duration", "3", timeout=120)
        assert r.returncode == 0, r.stderr
        delivered = influx_keys(srv, "k") | influx_keys(srv, "k", findings=True) | influx_keys(srv, "k", facts=True)
    assert len(spooled) > 20
    missing = spooled - delivered
    assert not missing, sorted(missing)[:5]
    assert seen <= store_keys(store)


def test_kill_9_of_mark_never_blocks_the_markers_queued_after_it(tmp_path):
    store = tmp_path / "m.db"
    cfg = write_config(tmp_path / "config.toml", store)
    agent = start(cfg, store, tmp_path / "agent.log")
    rng = random.Random(9)
    try:
        wait_seconds(store, 2)
        marks = [subprocess.Popen([*AGENT, "mark", "--store", str(store), f"m{i}"], cwd=ROOT,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for i in range(8)]
        for p in marks[::2]:
            time.sleep(rng.uniform(0.0, 0.4))
            p.kill()
        done = {f"m{i}" for i, p in enumerate(marks) if p.wait(60) == 0}
        r = run_cli("mark", "--store", str(store), "last")
        assert r.returncode == 0, r.stderr
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            with Store(store) as s:
                recorded = {a.name for a in s.annotations() if a.event == "marker"}
            if done | {"last"} <= recorded:
                break
            time.sleep(0.2)
    finally:
        status = agent.stop()
    assert status == 0, agent.text()[-2000:]
    assert done | {"last"} <= recorded, (done, recorded)
    assert not list(inbox_of(store).glob("*.json"))
    nothing_lost(store)
