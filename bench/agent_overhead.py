"""Agent overhead benchmark (issue 2). Prints JSON.

Runs the real `db2vtop agent` with local guest collection at a 1 s interval and
measures, over a 60 s steady-state window after a warm-up, its CPU time as a share of
one core and its peak RSS. Targets: <= 1 % of one core, RSS <= 80 MB. Start-up (Python
imports) is reported separately, since it is paid once.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from db2vtop.agent.core.store import Store  # noqa: E402
from db2vtop.agent.core.units import parse_duration  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--window", type=float, default=60.0)
    ap.add_argument("--warmup", type=float, default=10.0)
    ap.add_argument("--interval", default="1s")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        cfg = Path(d) / "agent.toml"
        cfg.write_text(f'[guest]\ninterval = "{args.interval}"\n')
        store = Path(d) / "metrics.db"
        proc = subprocess.Popen([sys.executable, "-m", "db2vtop.agent", "agent", "-c", str(cfg), "--store", str(store),
                                 "--duration", str(args.warmup + args.window + 2)], cwd=ROOT,
                                stderr=subprocess.DEVNULL)
        p = psutil.Process(proc.pid)
        time.sleep(args.warmup)
        t0, c0 = time.monotonic(), p.cpu_times()
        rss_peak = p.memory_info().rss
        while time.monotonic() - t0 < args.window:
            time.sleep(1.0)
            rss_peak = max(rss_peak, p.memory_info().rss)
        t1, c1 = time.monotonic(), p.cpu_times()
        proc.wait(timeout=60)
        with Store(store) as s:
            cycles = sum(1 for r in s.rows("db2vtop_collector") if r.tags["collector"] == "guest")
            guest_samples = sum(len(list(s.rows(m))) for m in ("guest_cpu", "guest_mem", "guest_disk", "guest_net"))
    busy = (c1.user + c1.system) - (c0.user + c0.system)
    print(json.dumps({
        "benchmark": "agent_overhead", "guest_interval": args.interval, "window_s": round(t1 - t0, 1),
        "cpu_pct_of_one_core": round(busy / (t1 - t0) * 100, 3), "rss_peak_mb": round(rss_peak / 2**20, 1),
        "cpu_s_during_startup_and_warmup": round(c0.user + c0.system, 3), "guest_cycles": cycles,
        "guest_samples": guest_samples,
        "cpu_ms_per_guest_cycle": round(busy * 1000 / ((t1 - t0) / parse_duration(args.interval)), 3),
        "targets": {"cpu_pct_of_one_core": 1.0, "rss_peak_mb": 80},
    }, indent=2))


if __name__ == "__main__":
    main()
