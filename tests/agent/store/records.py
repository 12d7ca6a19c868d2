"""Records and processes the store's room tests share: a fleet's samples over a few spans, every read a store
answers, and a writer in another process (tests/infra/store_writer_proc.py) to read beside or kill -9."""

from __future__ import annotations

import random
import signal
import sqlite3
import subprocess
import sys
import time

from db2vtop.agent.core.model import Sample
from db2vtop.agent.core.store import CHUNK_SPAN_NS, Store
from tests.conftest import ROOT

#: where the records begin: the start of a chunk's span
T0 = 1_700_000_000_000_000_000 // CHUNK_SPAN_NS * CHUNK_SPAN_NS
S = 10**9


def spawn_writer(path, batches, per_batch, pause, *extra: str) -> subprocess.Popen:
    p = subprocess.Popen([sys.executable, "-m", "tests.infra.store_writer_proc", str(path), str(batches),
                          str(per_batch), str(pause), *extra], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "ready"
    return p


def committed(p: subprocess.Popen, upto: int) -> int:
    for line in p.stdout:
        n = int(line.split()[1])
        if n >= upto:
            return n
    raise AssertionError("writer ended early")


def kill_9_midway(store_path, per_batch: int, after: int, *extra: str) -> tuple[int, dict[int, int]]:
    """Start a writer process, kill -9 it at a random moment after batch `after` is committed, check the
    file is sound; (the last batch it said was committed, rows read back per batch)."""
    p = spawn_writer(store_path, 1000, per_batch, 0.0, *extra)
    try:
        last = committed(p, after)
        time.sleep(random.uniform(0.0, 0.3))  # land inside a later batch's transaction (or a sealing step)
        p.send_signal(signal.SIGKILL)
        p.wait()
        for line in p.stdout:
            last = int(line.split()[1])
    finally:
        p.kill()
    db = sqlite3.connect(store_path)
    assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    db.close()
    with Store(store_path) as r:
        counts: dict[int, int] = {}
        for row in r.rows("bench"):
            counts[row.fields["batch"]] = counts.get(row.fields["batch"], 0) + 1
    assert all(counts.get(b) == per_batch for b in range(last + 1)), "a committed batch is incomplete"
    assert all(n == per_batch for n in counts.values()), "a batch was half written"
    return last, counts


def fleet_samples(spans: int, seed: int = 1) -> list[Sample]:
    """Counters, noisy gauges, flat values, strings, gaps and a field that comes and goes."""
    rng = random.Random(seed)
    out = []
    for vm in range(6):
        counter = rng.randrange(10**9)
        for i in range(spans * CHUNK_SPAN_NS // (20 * S)):
            if rng.random() < 0.05:
                continue  # a missed collection
            counter += rng.randrange(5000)
            fields: dict = {"ready_pct": round(rng.uniform(0, 9), 2), "bytes": counter, "flat": 4.0,
                            "ratio": rng.random(), "state": "on" if i % 50 else "off"}
            if i % 7 == 0:
                fields["rare_ms"] = rng.uniform(0, 3)
            out.append(Sample("vm", {"vm": f"vm{vm}"}, fields, T0 + i * 20 * S + rng.randrange(10**6)))
    return out


def every_read(store: Store) -> dict:
    series = store.series("vm")
    mid = T0 + CHUNK_SPAN_NS + 7 * 60 * S
    return {
        "rows": [r.to_json() for r in store.rows("vm")],
        "window": [r.to_json() for r in store.rows("vm", T0 + 25 * 60 * S, T0 + 95 * 60 * S)],
        "rows_of": [r.to_json() for r in store.rows_of(series[1:3], T0 + 10 * 60 * S, mid)],
        "latest": [r.to_json() for r in store.latest("vm")],
        "latest_then": [r.to_json() for r in store.latest("vm", until_ns=mid)],
        "latest_of_then": [r.to_json() for r in store.latest_of(series[:2], mid - 60 * S, mid)],
        "newest": store.newest("vm", T0 + 20 * 60 * S, mid),
        "field": [store.window(s.id, f, T0 + 5 * 60 * S, mid) for s in series for f in ("ready_pct", "rare_ms")],
        "range": store.time_range(),
    }
