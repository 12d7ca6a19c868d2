"""Fleet mode over InfluxDB (issue 15). Prints JSON.

A real influxd 1.8.10 (tests/infra/build-influxd.sh) is loaded with the TUI benchmark's recording
(tests/infra/tui_fixture.py: 2,000 VMs on 50 hosts, `--vms N` N VMs 40 a host, 100 DB2 stacks, one hour
at 20 s) encoded as the
agents encode it (agent/sinks/lineproto.py), facts and findings included. Then the Fleet screen's
load (tui/loaders/fleet.py through the TUI's Reader over an InfluxSource) is timed at the end of the
hour:

- first_data: a fresh connection's first load, wall seconds (target <= 2 s);
- refresh: the cursor then moves one second at a time through the last two minutes, as the live
  view refreshes every second; client CPU per refresh (process time of this process: HTTP, JSON
  and the joins; influxd's own CPU is not the client's), target <= 100 ms, and its wall time
  (influxd's answers included), target <= 1 s at 10,000 VMs. Drawing the rows is
  the same as over the embedded store and is measured by bench/tui.py.
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
import sys
import tempfile
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from db2vtop.agent.config import load_config
from db2vtop.agent.core.influx_source import InfluxSource
from db2vtop.agent.sinks.lineproto import LineEncoder
from db2vtop.checks.thresholds import levels
from db2vtop.tui.data import Reader, TableState
from db2vtop.tui.loaders.fleet import load_fleet
from db2vtop.tui.screens.fleet import SPARK_COLS
from tests.infra.influxd import InfluxServer
from tests.infra.tui_fixture import Fleet, records, steps, write_config

FLEET = Fleet(vms=2000, hosts=50, stacks=100, minutes=60)
S = 10**9
WINDOW_NS = 300 * S  # the live view's default window


def load(srv: InfluxServer, db: str) -> dict:
    enc = LineEncoder()
    facts, marks, findings = records(FLEET)
    t = time.perf_counter()
    batches: list[bytes] = []
    points = 0
    lines: list[str] = enc.facts(facts) + enc.annotations(marks) + enc.findings(findings)
    for step in steps(FLEET):
        lines += enc.samples(step)
        if len(lines) >= 10000:
            batches.append(gzip.compress("\n".join(lines).encode(), 1))
            points += len(lines)
            lines = []
    batches.append(gzip.compress("\n".join(lines).encode(), 1))
    points += len(lines)
    encoded = time.perf_counter() - t

    def post(body: bytes) -> None:
        # a 500 is influxd's write timeout on a busy machine: the batch is sent again (a point written twice
        # is the same point, not a duplicate)
        for attempt in range(5):
            req = urllib.request.Request(f"{srv.url}/write?db={db}&precision=ns", data=body, method="POST",
                                         headers={"Content-Encoding": "gzip"})
            try:
                with urllib.request.urlopen(req, timeout=120) as r:
                    assert r.status == 204, r.status
                    return
            except urllib.error.HTTPError as e:
                if e.code != 500 or attempt == 4:
                    raise RuntimeError(f"write: {e.code} {e.read()[:300]!r}") from None
                print(f"write: {e.code} {e.read()[:300]!r}, again", file=sys.stderr)
                time.sleep(2)

    with ThreadPoolExecutor(2) as pool:
        list(pool.map(post, batches))
    return {"points": points, "encode_s": round(encoded, 1), "load_s": round(time.perf_counter() - t - encoded, 1)}


def fleet_reads(cfg_path: Path) -> dict:
    cfg = load_config(cfg_path)
    lv = levels(cfg.checks)
    end = FLEET.end_ns
    first = []
    for _ in range(3):
        t = time.perf_counter()
        with InfluxSource(cfg.influxdb) as src:
            rd = Reader(src)
            rd.begin()
            view = load_fleet(rd, cfg.stack, end - WINDOW_NS, end, TableState(), SPARK_COLS, lv)
        first.append(time.perf_counter() - t)
    rows = len(view.model.rows)
    cpu, wall = [], []
    with InfluxSource(cfg.influxdb) as src:
        rd = Reader(src)
        rd.begin()
        start = end - 120 * S
        load_fleet(rd, cfg.stack, start - WINDOW_NS, start, TableState(), SPARK_COLS, lv)
        for k in range(1, 121):
            until = start + k * S
            c0, w0 = time.process_time(), time.perf_counter()
            rd.begin()
            load_fleet(rd, cfg.stack, until - WINDOW_NS, until, TableState(), SPARK_COLS, lv)
            cpu.append((time.process_time() - c0) * 1000)
            wall.append((time.perf_counter() - w0) * 1000)
    cpu.sort()
    return {"rows": rows,
            "first_data_s": {"runs": [round(x, 2) for x in first], "median": round(statistics.median(first), 2),
                             "target": 2.0},
            "refresh_client_cpu_ms": {"n": len(cpu), "median": round(statistics.median(cpu), 1),
                                      "p95": round(cpu[int(len(cpu) * 0.95)], 1), "max": round(cpu[-1], 1),
                                      "target_median": 100},
            "refresh_wall_ms": {"median": round(statistics.median(wall), 1),
                                "p95": round(sorted(wall)[int(len(wall) * 0.95)], 1), "target_median": 1000}}


def main() -> None:
    global FLEET
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vms", type=int, default=2000, help="VMs in the recording (40 a host)")
    ap.add_argument("--keep", type=Path, metavar="DIR",
                    help="keep influxd's data in DIR and, when DIR holds this size's recording already, read it "
                         "without loading it again (the 10,000-VM recording takes minutes to load)")
    args = ap.parse_args()
    vms = args.vms
    FLEET = Fleet(vms=vms, hosts=max(vms // 40, 1), stacks=min(100, vms), minutes=60)
    dataset = f"tests/infra/tui_fixture.py, {FLEET.vms} VMs / {FLEET.hosts} hosts / {FLEET.stacks} stacks, 1 h at 20 s"
    with tempfile.TemporaryDirectory() as d:
        base = args.keep or Path(d)
        loaded = base / "loaded.txt"
        srv = InfluxServer(base / "influxd")
        srv.start()
        try:
            bucket = srv.create_db("fleet")
            out = {"benchmark": "fleet_influx", "dataset": dataset}
            if loaded.exists() and loaded.read_text() == dataset:
                out["load"] = f"kept in {base}"
            else:
                loaded.unlink(missing_ok=True)
                out["load"] = load(srv, "fleet")
                loaded.write_text(dataset)
            cfg = write_config(Path(d) / "fleet.toml", FLEET)
            cfg.write_text(cfg.read_text() + f'[influxdb]\nurl = "{srv.url}"\nbucket = "{bucket}"\n'
                                             f'spool_dir = "{Path(d) / "spool"}"\ntimeout = "60s"\n')
            out["fleet"] = fleet_reads(cfg)
        finally:
            srv.stop()
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
