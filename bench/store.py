"""Embedded store benchmark (issues 2 and 17). Prints JSON.

The data is a recording as collectors write it: 1,000 series x 20 fields at 20 s, time-major
batches, with gauges that wander with noise at their source's precision (percent to 2
decimals, latency in whole ms as vCenter reports it), counters, rates, flat values, a string,
a field that comes and goes, and missed collections.

- ingest: 100 batches into a fresh store, then sealing what they closed; field values per
  second over both (target >= 300,000);
- day: the same series over 24 h written as the agent's writer does (sealing each span once
  it is over, free pages given back): bytes of the file per stored value (target <= 1.5);
  built once and kept in bench/results/ (rebuilt with --rebuild);
- read_1h_window: median time to read one field of one series over a random hour of that
  day through a separate reader connection, as the TUI does (target <= 5 ms);
- fleet: the TUI benchmark's 2,000-VM hour (tests/infra/tui_fixture.py): bytes per value
  (target <= 1.5), and the Fleet screen's latest values of every VM and VM disk, live
  (target <= 50 ms) and back in time in the middle of the hour (replay).
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
from db2vtop.agent.core.store import CHUNK_SPAN_NS, Store, StoreError
from tests.infra.tui_fixture import Fleet, build_store, field_values

SERIES, STEP_S = 1000, 20
T0 = 1_700_000_000 * 10**9 // CHUNK_SPAN_NS * CHUNK_SPAN_NS
S = 10**9
RESULTS = Path(__file__).resolve().parent / "results"


class Recording:
    """Deterministic per-series state that advances one collection at a time."""

    # name, kind, scale: gauges wander around a level with noise, rounded as their source rounds
    FIELDS = (
        ("ready_pct", "gauge", 2), ("costop_pct", "rare", 2), ("usage_pct", "gauge", 2),
        ("mem_usage_pct", "gauge", 2), ("balloon_bytes", "flat", 0), ("swapped_bytes", "flat", 0),
        ("read_latency_ms", "gauge_int", 0), ("write_latency_ms", "gauge_int", 0),
        ("read_iops", "gauge_int", 0), ("write_iops", "gauge_int", 0),
        ("read_bytes_per_s", "kib", 0), ("write_bytes_per_s", "kib", 0),
        ("net_rx_bytes_per_s", "walk", 1), ("net_tx_bytes_per_s", "walk", 1),
        ("rows_read", "counter", 0), ("commits", "counter", 0), ("log_write_ms", "gauge", 3),
        ("cpu_mhz", "gauge_int", 0), ("power_state", "state", 0), ("active_mem_bytes", "kib", 0),
    )

    def __init__(self, series: int, seed: int = 17):
        self.rng = random.Random(seed)
        self.series = series
        self.level = [[self.rng.uniform(1, 60) for _ in self.FIELDS] for _ in range(series)]
        self.count = [[self.rng.randrange(10**9) for _ in self.FIELDS] for _ in range(series)]

    def batch(self, k: int) -> list[Sample]:
        rng, ts, out = self.rng, T0 + k * STEP_S * S, []
        for i in range(self.series):
            if rng.random() < 0.01:
                continue  # a missed collection
            fields: dict = {}
            level, count = self.level[i], self.count[i]
            for j, (name, kind, scale) in enumerate(self.FIELDS):
                if kind == "gauge":
                    level[j] = min(100.0, max(0.0, level[j] + rng.gauss(0, 0.5)))
                    fields[name] = round(level[j] + rng.gauss(0, 0.3), scale)
                elif kind == "gauge_int":
                    level[j] = max(0.0, level[j] + rng.gauss(0, 0.5))
                    fields[name] = int(level[j] + rng.gauss(0, 0.8))
                elif kind == "kib":
                    fields[name] = int(level[j] * 1000 + rng.gauss(0, 40)) * 1024
                elif kind == "walk":
                    level[j] = max(0.0, level[j] + rng.gauss(0, 2))
                    fields[name] = round(level[j] * 1000, scale)
                elif kind == "counter":
                    count[j] += rng.randrange(200)
                    fields[name] = count[j]
                elif kind == "rare":
                    if k % 3 == 0:  # a field that comes and goes
                        fields[name] = round(rng.expovariate(5), scale) if rng.random() < 0.1 else 0.0
                elif kind == "flat":
                    fields[name] = 0
                else:
                    fields[name] = "poweredOn"
            out.append(Sample("vsphere_vm", {"vcenter": "vc1", "vm": f"db2vm{i:04d}", "host": f"esx{i % 50:02d}"},
                              fields, ts))
        return out


def _values(batches: list[list[Sample]]) -> int:
    return sum(len(s.fields) for b in batches for s in b)


def _summary(times: list[float]) -> dict:
    times = sorted(times)
    return {"median_ms": round(statistics.median(times), 3), "p95_ms": round(times[int(len(times) * 0.95)], 3),
            "max_ms": round(times[-1], 3)}


def ingest(batches: int) -> dict:
    rec = Recording(SERIES)
    first = rec.batch(0)
    prepared = [rec.batch(k) for k in range(1, batches + 1)]
    with tempfile.TemporaryDirectory() as d, Store(Path(d) / "ingest.db", writer=True) as store:
        store.write(first)  # series creation is a one-time cost; measure the steady state
        t = time.perf_counter()
        for b in prepared:
            store.write(b)
        written = time.perf_counter() - t
        sealed = store.compact()
        elapsed = time.perf_counter() - t
    values = _values(prepared)
    return {"batches": batches, "series": SERIES, "field_values": values, "rows_sealed": sealed,
            "write_seconds": round(written, 3), "seal_seconds": round(elapsed - written, 3),
            "field_values_per_s": round(values / elapsed), "written_only_field_values_per_s": round(values / written),
            "target_field_values_per_s": 300000}


def _fresh(path: Path) -> None:
    for suffix in ("", "-wal", "-shm", "-writer.lock"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)


def _sealed(path: Path) -> bool:
    """A store of this release's format (an older one is rebuilt)."""
    try:
        with Store(path) as store:
            return bool(store.db.execute("SELECT count(*) FROM sqlite_master WHERE name='chunks'").fetchone()[0])
    except StoreError:
        return False


def build_day(path: Path) -> dict:
    """24 h as the agent's writer stores it: every span sealed once the next one has begun."""
    _fresh(path)
    rec, values, sealed_before = Recording(SERIES), 0, 0
    t = time.perf_counter()
    with Store(path, writer=True) as store:
        steps = 24 * 3600 // STEP_S
        for k in range(0, steps, 5):
            batch = [s for j in range(k, min(k + 5, steps)) for s in rec.batch(j)]
            values += _values([batch])
            store.write(batch)
            before = batch[-1].ts // CHUNK_SPAN_NS * CHUNK_SPAN_NS
            if before > sealed_before:
                while not store.seal_step(before)[1]:
                    pass
                store.release_free_pages()
                sealed_before = before
        store.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    info = {"field_values": values, "build_seconds": round(time.perf_counter() - t, 1)}
    path.with_suffix(".json").write_text(json.dumps(info))
    return info


def day_size(path: Path, info: dict) -> dict:
    with Store(path) as store:
        chunk_bytes, head_rows = store.db.execute(
            "SELECT (SELECT sum(length(data)) FROM chunks), (SELECT count(*) FROM samples)").fetchone()
        free = store.db.execute("PRAGMA freelist_count").fetchone()[0] * store.db.execute(
            "PRAGMA page_size").fetchone()[0]
    size = path.stat().st_size
    return {"dataset": f"{SERIES} series x {len(Recording.FIELDS)} fields x 24h at {STEP_S}s",
            "field_values": info["field_values"], "db_bytes": size, "free_bytes": free, "head_rows": head_rows,
            "bytes_per_value": round(size / info["field_values"], 3),
            "chunk_data_bytes_per_value": round(chunk_bytes / info["field_values"], 3),
            "target_bytes_per_value": 1.5}


def read_windows(path: Path, queries: int) -> dict:
    rng = random.Random(7)
    with Store(path) as store:
        ids = [s.id for s in store.series("vsphere_vm")]
        first, last = store.time_range()
        times, points = [], 0
        for _ in range(queries):
            start = rng.randrange(first, last - 3600 * S)
            t = time.perf_counter()
            got = store.window(rng.choice(ids), rng.choice(Recording.FIELDS)[0], start, start + 3600 * S)
            times.append((time.perf_counter() - t) * 1000)
            points += len(got)
    return {"queries": queries, "points_per_query": round(points / queries, 1), **_summary(times),
            "target_median_ms": 5}


def fleet(path: Path, rebuild: bool, queries: int) -> dict:
    """The TUI benchmark's store: its size, and the Fleet screen's reads of every VM's latest values."""
    f = Fleet(vms=2000, hosts=50, stacks=100, minutes=60)
    out: dict = {"dataset": f"tests/infra/tui_fixture.py, {f.vms} VMs / {f.hosts} hosts, {f.minutes} min"}
    if rebuild or not _sealed(path):
        _fresh(path)
        t = time.perf_counter()
        build_store(path, f)
        out["build_seconds"] = round(time.perf_counter() - t, 1)
    values = field_values(f)
    out.update(field_values=values, db_bytes=path.stat().st_size,
               bytes_per_value=round(path.stat().st_size / values, 3), target_bytes_per_value=1.5)
    with Store(path) as store:
        first, last = store.time_range()
        mid = (first + last) // 2
        for name, until in (("latest_live", None), ("latest_replay_mid_hour", mid)):
            times, rows = [], 0
            for _ in range(queries):
                t = time.perf_counter()
                rows = len(store.latest("vsphere_vm", until_ns=until)) + len(
                    store.latest("vsphere_vm_disk", until_ns=until))
                times.append((time.perf_counter() - t) * 1000)
            out[name] = {"rows": rows, "first_ms": round(times[0], 1), **_summary(times)}
        out["latest_live"]["target_median_ms"] = 50
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batches", type=int, default=100)
    ap.add_argument("--queries", type=int, default=500)
    ap.add_argument("--rebuild", action="store_true", help="rebuild the 24 h and fleet datasets")
    args = ap.parse_args()
    out = {"benchmark": "store", "ingest": ingest(args.batches)}
    RESULTS.mkdir(exist_ok=True)
    day = RESULTS / "store-24h.db"
    info_path = day.with_suffix(".json")
    info = build_day(day) if args.rebuild or not info_path.exists() or not _sealed(day) else json.loads(
        info_path.read_text())
    out["day"] = day_size(day, info)
    out["read_1h_window"] = read_windows(day, args.queries)
    out["fleet"] = fleet(RESULTS / "store-fleet.db", args.rebuild, 20)
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
