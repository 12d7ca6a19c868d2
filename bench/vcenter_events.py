"""vCenter event log benchmark: what reading the event log costs the vSphere collector and vCenter.

The scenario simulator with `--hosts` x `--vms-per-host` VMs (10,000 by default) and `--events` events in the
last 50 minutes (posted through govmomi's EventManager). Prints JSON for: a first start reading that backlog
(the cycles it takes, CYCLE_PAGES pages of PAGE events each); a steady cycle with nothing new, and one with
`--new` events posted since; triage's look back over the hour. For each: wall time, ReadNextEvents calls,
SOAP round trips, the collector's CPU seconds and the simulator's, events, and the collector process's peak RSS.

    .venv/bin/python bench/vcenter_events.py [--hosts 250] [--vms-per-host 40] [--events 10000] [--new 100]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import ssl
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from db2vtop.agent.core.model import Annotation
from db2vtop.collectors.vsphere.collector import VSphereCollector
from db2vtop.collectors.vsphere.config import VCenterConfig
from db2vtop.collectors.vsphere.events import CYCLE_PAGES, PAGE
from tests.infra.vsphere_sim import Simulator


async def measure(sim: Simulator, step) -> dict:
    before, sim_cpu0 = sim.stats()["methods"], sim.cpu_seconds()
    cpu0, t0 = time.process_time(), time.perf_counter()
    out = await step()
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    after = sim.stats()["methods"]
    reads = after.get("ReadNextEvents", 0) - before.get("ReadNextEvents", 0)
    return {"wall_s": round(wall, 3), "read_next_events": reads,
            "soap_round_trips": sum(after.values()) - sum(before.values()), "collector_cpu_s": round(cpu, 3),
            "simulator_cpu_s": round(sim.cpu_seconds() - sim_cpu0, 3),
            "events": sum(1 for r in out if isinstance(r, Annotation))}


def post(sim: Simulator, n: int) -> None:
    """`n` alarm changes now (POST /sim/events)."""
    events = [{"type": "AlarmStatusChangedEvent", "host": "gen-esx000", "alarm": f"bench {i}", "from": "green",
               "to": "yellow"} for i in range(n)]
    req = urllib.request.Request(sim.url.replace("/sdk", "/sim/events"), json.dumps(events).encode(), method="POST")
    with urllib.request.urlopen(req, context=ssl._create_unverified_context(), timeout=120) as r:
        r.read()


async def run(hosts: int, vms_per_host: int, events: int, new: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        scenario = Path(tmp) / "scenario.json"
        scenario.write_text(json.dumps({"generate": {"hosts": hosts, "vms_per_host": vms_per_host, "events": events}}))
        os.environ["DB2VTOP_BENCH_VC_PASSWORD"] = "bench"
        with Simulator(scenario, start_timeout=600) as sim:
            cfg = VCenterConfig(name="bench", url=sim.url, user="bench", password_env="DB2VTOP_BENCH_VC_PASSWORD",
                                verify_tls=False)
            collector = VSphereCollector(cfg)
            collector.history_samples = 2  # an agent's first start: the log of the last hour
            assert collector.event_log is not None
            try:
                conn = await collector._connection()

                async def read() -> list:
                    collector._held = []
                    await collector._read_events(conn)
                    return collector._held

                cycles = []
                while not cycles or cycles[-1]["events"] == PAGE * CYCLE_PAGES:
                    cycles.append(await measure(sim, read))
                backlog = {k: round(sum(c[k] for c in cycles), 3) for k in cycles[0]}
                steady = await measure(sim, read)
                post(sim, new)
                steady_new = await measure(sim, read)
                lookback = await measure(sim, lambda: collector.lookback(3600, vms=["gen-esx000-vm00"]))
            finally:
                await collector.close()
    return {"benchmark": "vcenter_events", "hosts": hosts, "vms": hosts * vms_per_host, "events": events,
            "page": PAGE, "cycle_pages": CYCLE_PAGES, "load_average_1m": round(os.getloadavg()[0], 2),
            "cpus": os.cpu_count(), "first_start": {**backlog, "cycles": len(cycles)}, "steady_cycle": steady,
            f"steady_cycle_{new}_new": steady_new, "lookback_1h_one_vm": lookback,
            "collector_peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hosts", type=int, default=250)
    ap.add_argument("--vms-per-host", type=int, default=40)
    ap.add_argument("--events", type=int, default=10_000)
    ap.add_argument("--new", type=int, default=100)
    args = ap.parse_args()
    print(json.dumps(asyncio.run(run(args.hosts, args.vms_per_host, args.events, args.new)), indent=2))


if __name__ == "__main__":
    main()
