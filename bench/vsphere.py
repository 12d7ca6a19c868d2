"""vSphere collector benchmark: 50 hosts x 40 VMs (2,000 VMs) from the scenario simulator.

Prints JSON for the cycle every interval runs ("cycle": inventory refresh - VM placement,
vCPUs, quickStats of every VM and host - then realtime perf of every counter of every
powered-on VM and host) and for the cycle that also takes the facts pass ("facts_cycle":
the configuration of every VM with its device list, host and datastore; first cycle, then
every facts_interval): wall time, SOAP round trips (counted by the simulator), the
collector's CPU seconds and the simulator's own. Targets (issue 3): a full cycle <= 5 s,
round trips <= 10 + VMs/250.

    .venv/bin/python bench/vsphere.py [--hosts 50] [--vms-per-host 40]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from db2vtop.collectors.vsphere.collector import VSphereCollector
from db2vtop.collectors.vsphere.config import VCenterConfig
from tests.infra.vsphere_sim import Simulator


async def measure(sim: Simulator, collector: VSphereCollector, step) -> dict:
    calls0, sim_cpu0 = sim.stats()["total"], sim.cpu_seconds()
    cpu0, t0 = time.process_time(), time.perf_counter()
    out = await step()
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    return {"wall_s": round(wall, 3), "soap_round_trips": sim.stats()["total"] - calls0,
            "collector_cpu_s": round(cpu, 3), "simulator_cpu_s": round(sim.cpu_seconds() - sim_cpu0, 3),
            "records": len(out)}


async def run(hosts: int, vms_per_host: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        scenario = Path(tmp) / "scenario.json"
        scenario.write_text(json.dumps({"generate": {"hosts": hosts, "vms_per_host": vms_per_host}}))
        os.environ["DB2VTOP_BENCH_VC_PASSWORD"] = "bench"
        with Simulator(scenario) as sim:
            cfg = VCenterConfig(name="bench", url=sim.url, user="bench", password_env="DB2VTOP_BENCH_VC_PASSWORD",
                                verify_tls=False)
            collector = VSphereCollector(cfg)
            try:
                async def login_only():
                    await collector._connection()
                    return []

                login = await measure(sim, collector, login_only)

                async def full():
                    facts = await collector.describe()
                    return facts + await collector.collect()

                facts_cycle = await measure(sim, collector, full)
                collector._inventory_at = 0.0   # force the light inventory refresh a steady cycle does
                collector.perf_state = type(collector.perf_state)()  # and ask for the newest sample again
                cycle = await measure(sim, collector, collector.collect)
                lookback = await measure(sim, collector, lambda: collector.lookback(3600, vms=["gen-esx000-vm00"]))
            finally:
                await collector.close()
    vms = hosts * vms_per_host
    return {"benchmark": "vsphere", "hosts": hosts, "vms": vms, "workers": cfg.workers,
            "max_query_entities": cfg.max_query_entities,
            "load_average_1m": round(os.getloadavg()[0], 2), "cpus": os.cpu_count(),
            "login": login, "cycle": cycle, "facts_cycle": facts_cycle, "lookback_1h_one_vm": lookback,
            "targets": {"cycle_wall_s": 5.0, "round_trips": 10 + vms / 250}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hosts", type=int, default=50)
    ap.add_argument("--vms-per-host", type=int, default=40)
    args = ap.parse_args()
    print(json.dumps(asyncio.run(run(args.hosts, args.vms_per_host)), indent=2))


if __name__ == "__main__":
    main()
