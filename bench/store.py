"""Embedded store benchmark (issue 2). Prints JSON.

ingest: time-major batches (every series at one timestamp, as collectors write them) of
1,000 series x 20 fields into a fresh store; target >= 300,000 field values/s.
read: with 1,000 series x 20 fields x 24 h at 20 s already stored (4.32 M rows), the
median time to read a 1-hour window of one field of one series through a separate
reader connection (as the TUI does); target <= 5 ms. The 24 h dataset is built once and
kept in bench/results/ (rebuilt with --rebuild).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from db2vtop.agent.core.model import Sample
from db2vtop.agent.core.store import Store

SERIES, FIELDS, STEP_S = 1000, 20, 20
FIELD_NAMES = [f"{name}_{i}" for i, name in enumerate(
    ["ready_pct", "costop_pct", "usage_pct", "balloon_bytes", "swapped_bytes", "read_latency_ms",
     "write_latency_ms", "read_iops", "write_iops", "read_bytes_per_s"] * 2)]
T0 = 1_700_000_000 * 10**9


def batch(k: int) -> list[Sample]:
    ts = T0 + k * STEP_S * 10**9
    return [Sample("vsphere_vm", {"vcenter": "vc1", "vm": f"db2vm{i:04d}", "host": f"esx{i % 50:02d}"},
                   {f: round(random.random() * 100, 3) for f in FIELD_NAMES}, ts) for i in range(SERIES)]


def ingest(batches: int) -> dict:
    with tempfile.TemporaryDirectory() as d, Store(Path(d) / "ingest.db", writer=True) as store:
        store.write(batch(0))  # series creation is a one-time cost; measure the steady state
        prepared = [batch(k) for k in range(1, batches + 1)]
        t = time.perf_counter()
        for b in prepared:
            store.write(b)
        elapsed = time.perf_counter() - t
    values = batches * SERIES * FIELDS
    return {"batches": batches, "series": SERIES, "fields_per_sample": FIELDS, "seconds": round(elapsed, 3),
            "field_values_per_s": round(values / elapsed), "samples_per_s": round(batches * SERIES / elapsed),
            "target_field_values_per_s": 300000}


def build_day(path: Path) -> float:
    for suffix in ("", "-wal", "-shm", "-writer.lock"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    t = time.perf_counter()
    with Store(path, writer=True) as store:
        steps = 24 * 3600 // STEP_S
        for k in range(0, steps, 5):
            store.write([s for j in range(k, min(k + 5, steps)) for s in batch(j)])
        store.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return time.perf_counter() - t


def read_windows(path: Path, queries: int) -> dict:
    rng = random.Random(7)
    with Store(path) as store:
        ids = [s.id for s in store.series("vsphere_vm")]
        first, last = store.time_range()
        times, points = [], 0
        for _ in range(queries):
            start = rng.randrange(first, last - 3600 * 10**9)
            t = time.perf_counter()
            got = store.window(rng.choice(ids), rng.choice(FIELD_NAMES), start, start + 3600 * 10**9)
            times.append((time.perf_counter() - t) * 1000)
            points += len(got)
        rows = store.db.execute("SELECT count(*) FROM samples").fetchone()[0]
    times.sort()
    return {"dataset": f"{SERIES} series x {FIELDS} fields x 24h at {STEP_S}s", "rows": rows,
            "db_bytes": path.stat().st_size, "queries": queries, "points_per_query": points / queries,
            "median_ms": round(statistics.median(times), 3),
            "p95_ms": round(times[int(len(times) * 0.95)], 3), "max_ms": round(times[-1], 3), "target_median_ms": 5}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--batches", type=int, default=100)
    ap.add_argument("--queries", type=int, default=500)
    ap.add_argument("--rebuild", action="store_true", help="rebuild the 24 h dataset")
    args = ap.parse_args()
    out = {"benchmark": "store", "ingest": ingest(args.batches)}
    day = Path(__file__).resolve().parent / "results" / "store-24h.db"
    day.parent.mkdir(exist_ok=True)
    if args.rebuild or not day.exists():
        out["dataset_build_seconds"] = round(build_day(day), 1)
    out["read_1h_window"] = read_windows(day, args.queries)
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
