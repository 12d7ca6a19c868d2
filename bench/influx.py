"""InfluxDB sink throughput against a real local influxd 1.8.10; prints one JSON object.

- spool_append: records of pre-encoded line protocol appended to the spool (fsync
  policy "interval", the default), and the whole writer path from Sample objects
  (encode + append), in points/s.
- sustained: Samples submitted to InfluxSink as fast as it takes them for a while;
  points/s delivered to influxd (2xx), end to end (encode, spool, gzip, HTTP).
- replay: a backlog spooled while InfluxDB was away, delivered after it returns.
- spool_cpu: the spool's share of the agent's CPU: CPU seconds per million points
  appended, and as a share of the sink's whole CPU in the sustained run.
- influxd_alone: the server's own ceiling here, fed pre-encoded gzip'd batches by plain
  HTTP client threads: what any client could reach with influxd on the same 2 cores.
- agent_outage: a real `db2vtop agent` run with InfluxDB stopped in the middle; the
  point counts in the embedded store and in InfluxDB at the end.

Run: `.venv/bin/python bench/influx.py` (or `make bench`); `--quick` for shorter runs.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import subprocess
import sys
import tempfile
import threading
import time
import zlib
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from db2vtop.agent.core.config import InfluxConfig  # noqa: E402
from db2vtop.agent.core.httpclient import HttpClient  # noqa: E402
from db2vtop.agent.core.model import Sample  # noqa: E402
from db2vtop.agent.sinks.influx import InfluxSink  # noqa: E402
from db2vtop.agent.sinks.lineproto import LineEncoder  # noqa: E402
from db2vtop.agent.sinks.spool import Spool  # noqa: E402
from tests.infra.influxd import InfluxServer, influx_keys, store_keys, wait_for, write_agent_config  # noqa: E402

T0 = 1_700_000_000_000_000_000


TAGS = [{"guest": "db2prod01", "device": f"sd{i}", "type": "disk"} for i in range(64)]


def samples(n: int, start: int = 0) -> list[Sample]:
    """Points shaped like guest_disk: 3 tags, 6 fields (5 float, 1 integer)."""
    return [Sample("bench_disk", TAGS[i % 64],
                   {"read_iops": 1.5 + i, "write_iops": 2.25, "read_await_ms": 0.5, "write_await_ms": 0.75,
                    "util_pct": 12.5, "in_flight": i % 7}, T0 + start + i)
            for i in range(n)]


def cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def bench_spool(tmp: Path, n: int) -> dict:
    lines = LineEncoder().samples(samples(5000))
    record = "".join(lines).encode()
    spool = Spool(tmp / "append", 2**34)
    t0, c0 = time.perf_counter(), cpu()
    for _ in range(n // 5000):
        spool.append(record, 5000)
        spool.maybe_sync()
    wall, cpu_s = time.perf_counter() - t0, cpu() - c0
    spool.close()
    batch = samples(5000)
    encoder = LineEncoder()
    spool = Spool(tmp / "encode", 2**34)
    t0 = time.perf_counter()
    for _ in range(n // 5000):
        spool.append("".join(encoder.samples(batch)).encode(), 5000)
        spool.maybe_sync()
    wall_enc = time.perf_counter() - t0
    spool.close()
    return {"points": n, "bytes_per_point": round(len(record) / 5000, 1),
            "append_points_per_s": round(n / wall), "append_cpu_s_per_million_points": round(cpu_s / n * 1e6, 3),
            "encode_and_append_points_per_s": round(n / wall_enc)}


def sink_config(srv: InfluxServer, bucket: str, spool: Path, **options) -> InfluxConfig:
    return InfluxConfig(url=srv.url, bucket=bucket, spool_dir=spool, flush_timeout=120.0, **options)


def server_cpu(srv: InfluxServer) -> float:
    t = psutil.Process(srv.proc.pid).cpu_times()
    return t.user + t.system


def bench_sustained(srv: InfluxServer, tmp: Path, seconds: float, name: str = "sustained", **options) -> dict:
    bucket = srv.create_db(name)
    batch_n = 5000
    batches = [samples(batch_n, i * batch_n) for i in range(int(seconds * 400_000) // batch_n)]  # made beforehand
    sink = InfluxSink(sink_config(srv, bucket, tmp / name, **options))
    s0 = server_cpu(srv)
    stop = time.monotonic() + seconds
    submitted = 0
    c0, t0 = cpu(), time.perf_counter()
    for batch in batches:
        if time.monotonic() >= stop:
            break
        sink.submit(batch)
        submitted += batch_n
        while sink.spool.pending_points > 20 * batch_n or sink._q.qsize() > 4:  # keep up, do not just queue
            time.sleep(0.005)
    ok = sink.flush(300)
    wall, cpu_s, server_s = time.perf_counter() - t0, cpu() - c0, server_cpu(srv) - s0
    sent = sink.snapshot()["sent"]
    sink.close()
    counted = srv.query('SELECT count("util_pct") FROM "bench_disk"', name)[0]["series"][0]["values"][0][1]
    return {"options": options, "seconds": round(wall, 1), "points": submitted, "delivered": sent,
            "in_influxdb": counted, "flushed": ok, "points_per_s": round(sent / wall),
            "sink_cpu_pct_of_one_core": round(cpu_s / wall * 100),
            "influxd_cpu_pct_of_one_core": round(server_s / wall * 100)}


def bench_server_ceiling(srv: InfluxServer, points: int, connections: int = 2) -> dict:
    """influxd alone: pre-encoded, pre-gzip'd batches posted by plain HTTP client threads (no sink)."""
    bucket = srv.create_db("ceiling")
    encoder = LineEncoder()
    bodies = [zlib.compress("".join(encoder.samples(samples(5000, i))).encode(), 1, wbits=31)
              for i in range(0, points, 5000)]
    path = f"/api/v2/write?bucket={bucket}&org=-&precision=ns"

    def post(chunk: list[bytes]) -> None:
        http = HttpClient(srv.url, timeout=60)
        for body in chunk:
            r = http.request("POST", path, body, {"Content-Encoding": "gzip"})
            assert r.status == 204, r.body
        http.close()

    threads = [threading.Thread(target=post, args=(bodies[i::connections],)) for i in range(connections)]
    s0, t0 = server_cpu(srv), time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    return {"connections": connections, "points": points, "points_per_s": round(points / wall),
            "influxd_cpu_pct_of_one_core": round((server_cpu(srv) - s0) / wall * 100)}


def bench_replay(srv: InfluxServer, tmp: Path, n: int) -> dict:
    bucket = srv.create_db("replay")
    srv.stop()  # the outage: everything goes to the spool
    spool_dir = tmp / "replay"
    sink = InfluxSink(sink_config(srv, bucket, spool_dir))
    for i in range(0, n, 5000):
        sink.submit(samples(5000, i))
    wait_for(lambda: sink.snapshot()["spooled"] == n, 300, "the backlog spooled")
    sink.close(timeout=0)
    srv.start()
    t0 = time.perf_counter()
    sink = InfluxSink(sink_config(srv, bucket, spool_dir))
    ok = sink.flush(600)
    wall = time.perf_counter() - t0
    sent = sink.snapshot()["sent"]
    sink.close()
    counted = srv.query('SELECT count("util_pct") FROM "bench_disk"', "replay")[0]["series"][0]["values"][0][1]
    return {"points": n, "delivered": sent, "in_influxdb": counted, "flushed": ok, "seconds": round(wall, 1),
            "points_per_s": round(sent / wall)}


def bench_agent_outage(srv: InfluxServer, tmp: Path, before: float, outage: float, after: float) -> dict:
    bucket = srv.create_db("agent")
    store = tmp / "agent" / "metrics.db"
    store.parent.mkdir()
    cfg = write_agent_config(tmp / "agent" / "config.toml", srv, bucket, store)
    with open(tmp / "agent" / "agent.log", "wb") as log:
        agent = subprocess.Popen([sys.executable, "-m", "db2vtop.agent", "agent", "-c", str(cfg)], cwd=ROOT,
                                 stdout=subprocess.DEVNULL, stderr=log)
    try:
        time.sleep(before)
        srv.stop()
        time.sleep(outage)
        srv.start()
        time.sleep(after)
    finally:
        agent.send_signal(signal.SIGTERM)
        status = agent.wait(120)
    in_store, in_influx = store_keys(store), influx_keys(srv, "agent")
    return {"outage_s": outage, "agent_exit": status, "points_in_store": len(in_store),
            "points_in_influxdb": len(in_influx), "identical": in_store == in_influx}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="shorter runs (a smoke test of the benchmark)")
    args = ap.parse_args()
    n = 200_000 if args.quick else 1_000_000
    with tempfile.TemporaryDirectory(prefix="db2vtop-bench-") as d:
        tmp = Path(d)
        out: dict = {"benchmark": "influx", "cpus": os.cpu_count(), "influxd": "1.8.10 (local, same machine)"}
        out["spool_append"] = bench_spool(tmp, n)
        srv = InfluxServer(tmp / "influxd")
        srv.start()
        try:
            out["influxd_alone"] = bench_server_ceiling(srv, n // 2)
            out["sustained"] = bench_sustained(srv, tmp, 5 if args.quick else 20)
            out["replay"] = bench_replay(srv, tmp, n)
            out["agent_outage"] = bench_agent_outage(srv, tmp, 3, 5 if args.quick else 30, 5)
        finally:
            srv.stop()
        a = out["spool_append"]
        s = out["sustained"]
        spool_cpu_s = a["append_cpu_s_per_million_points"] * s["delivered"] / 1e6
        out["spool_cpu"] = {
            "cpu_s_per_million_points": a["append_cpu_s_per_million_points"],
            "share_of_sink_cpu_pct_in_sustained_run": round(
                spool_cpu_s / (s["sink_cpu_pct_of_one_core"] / 100 * s["seconds"]) * 100, 1),
            "note": "the spool (append + fsync) against the sink's total (encode, spool, gzip, HTTP)"}
        out["targets"] = {"sustained_points_per_s": 200_000, "spool_append_points_per_s": 500_000,
                          "replay_points_per_s": 100_000}
        print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
