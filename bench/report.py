"""Run report benchmark (issue 16). Prints JSON.

A store of 100 stacks recorded for 1 h at 20 s, written with the store API (every declared
field in each sample, as wide as the collectors write them): per stack a DB2
database (database, log, two buffer pools), a guest (CPU, memory, network, two disks and a
partition), a VM (two virtual disks on two LUNs); 10 hosts that each see every LUN of the fleet
(2,000 host-LUN series, of which a stack's report reads only its own two on its host) and an array
with the 200 LUNs; vCenter's facts for each VM. A run is marked over the hour; `report` of it is
timed in-process (agent/benchmark.py make_report, as `db2vtop report` runs it: by up to 4 processes
for a fleet this size, and by one for comparison; then each format's rendering), the target being
<= 3 s, and so is the report of the second half-hour against the first; the real command's wall
time is given too, and the machine's load average (other work slows every figure).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from db2vtop.agent.assemble import measurement_catalog  # noqa: E402
from db2vtop.agent.benchmark import make_report  # noqa: E402
from db2vtop.agent.config import load_config  # noqa: E402
from db2vtop.agent.core.model import Fact, Finding, Sample  # noqa: E402
from db2vtop.agent.core.runs import BEGIN, END, edge_marker  # noqa: E402
from db2vtop.agent.core.store import Store  # noqa: E402
from db2vtop.checks import report_render  # noqa: E402

S = 10**9
#: runs a command and prints its wall time, CPU seconds, peak RSS (KB) and exit status, from its own usage
_LAUNCH = ("import resource, subprocess, sys, time; t = time.perf_counter(); "
           "s = subprocess.call(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL); "
           "u = resource.getrusage(resource.RUSAGE_CHILDREN); "
           "print(time.perf_counter() - t, u.ru_utime + u.ru_stime, u.ru_maxrss, s)")


def lun(i: int, d: int) -> str:
    return f"naa.600a0980383030{i:04x}{d:02x}"


def _widen(rows: list[Sample]) -> list[Sample]:
    """Every declared number field in each sample, as the collectors write them (a guest_disk row has
    25 fields, a db2_database row 33): decoding them is most of a report's work."""
    out = []
    for r in rows:
        declared = WIDE[r.measurement]
        out.append(Sample(r.measurement, r.tags, {**declared, **r.fields}, r.ts))
    return out


WIDE = {m.name: {f.name: 1.0 for f in m.fields if f.type == "number"}
        for ms in measurement_catalog().values() for m in ms}


def build(path: Path, stacks: int, hosts: int, seconds: int, step: int, t0: int, vms: int = 0) -> int:
    rnd = random.Random(16)
    written = 0
    luns = [lun(i, d) for i in range(stacks) for d in range(2)]
    facts = [Fact("vsphere_vm", {"vcenter": "vc1", "vm": f"db2vm{i:03d}"},
                  {"host": f"esx{i % hosts:02d}", "guest_hostname": f"db2vm{i:03d}",
                   "disks": [{"key": d, "luns": [lun(i, d)]} for d in range(2)]}, t0) for i in range(stacks)]
    others = [(f"vm{i:05d}", f"esx{i % hosts:02d}") for i in range(stacks, vms)]  # the vCenter's other VMs
    facts += [Fact("vsphere_vm", {"vcenter": "vc1", "vm": vm}, {"host": host, "disks": [{"key": 0}]}, t0)
              for vm, host in others]
    with Store(path, writer=True) as w:
        w.write(facts=facts)
        for ts in range(t0, t0 + seconds * S + 1, step * S):
            rows = []
            for i in range(stacks):
                db2 = {"db2": f"db{i:03d}", "database": "PROD", "member": "0"}
                guest, vm, host = f"g{i:03d}", f"db2vm{i:03d}", f"esx{i % hosts:02d}"
                load = 1.0 + 0.3 * rnd.random()
                rows += [
                    Sample("db2_database", db2, {"activities_per_s": 3000 * load, "commits_per_s": 800 * load,
                                                 "rollbacks_per_s": 2.0, "rows_read_per_s": 90000 * load,
                                                 "lock_waits_per_s": 3 * load, "lock_wait_ms": 4.0,
                                                 "lock_wait_pct": 2.0, "log_disk_wait_pct": 8.0,
                                                 "pool_read_wait_pct": 6.0, "cpu_ms_per_s": 900 * load}, ts),
                    Sample("db2_log", db2, {"log_write_ms": 0.8 * load, "log_writes_per_s": 700 * load,
                                            "log_write_bytes_per_s": 6e6 * load}, ts),
                    *(Sample("db2_bufferpool", {**db2, "bufferpool": bp}, {"hit_pct": 99 - rnd.random()}, ts)
                      for bp in ("IBMDEFAULTBP", "BP32K")),
                    Sample("guest_cpu", {"guest": guest, "cpu": "total"},
                           {"busy_pct": 40 * load, "iowait_pct": 2.0, "steal_pct": 0.1, "load1": 4.0}, ts),
                    Sample("guest_mem", {"guest": guest}, {"used_pct": 80.0, "swap_in_bytes_per_s": 0.0}, ts),
                    Sample("guest_net", {"guest": guest, "interface": "ens192"}, {"rx_bytes_per_s": 2e6}, ts),
                    *(Sample("guest_disk", {"guest": guest, "device": dev, "type": kind},
                             {"read_await_ms": 1.0 * load, "write_await_ms": 0.9 * load, "read_iops": 300 * load,
                              "write_iops": 500 * load, "read_bytes_per_s": 5e6 * load,
                              "write_bytes_per_s": 8e6 * load}, ts)
                      for dev, kind in (("sdb", "disk"), ("sdc", "disk"), ("sdb1", "partition"))),
                    Sample("vsphere_vm", {"vcenter": "vc1", "vm": vm, "host": host},
                           {"cpu_ready_pct": 0.5 * load, "cpu_costop_pct": 0.1, "cpu_usage_pct": 35 * load,
                            "mem_balloon_bytes": 0, "mem_swapin_bytes_per_s": 0.0, "vcpus": 8}, ts),
                    *(Sample("vsphere_vm_disk", {"vcenter": "vc1", "vm": vm, "host": host, "instance": f"scsi0:{d}",
                                                 "datastore": f"ds{i:03d}{d}", "lun": lun(i, d)},
                             {"read_latency_ms": 1.1 * load, "write_latency_ms": 1.0 * load, "read_iops": 300.0,
                              "write_iops": 500.0, "read_bytes_per_s": 5e6, "write_bytes_per_s": 8e6}, ts)
                      for d in range(2)),
                ]
            for h in range(hosts):
                rows.append(Sample("vsphere_host", {"vcenter": "vc1", "host": f"esx{h:02d}"},
                                   {"cpu_usage_pct": 50.0, "mem_swapin_bytes_per_s": 0.0}, ts))
                rows += [Sample("vsphere_host_lun", {"vcenter": "vc1", "host": f"esx{h:02d}", "lun": n},
                                {"kernel_latency_ms": 0.05, "device_latency_ms": 0.8, "queue_latency_ms": 0.0,
                                 "read_iops": 10.0, "write_iops": 10.0}, ts) for n in luns]
            for vm, host in others:  # each with a virtual disk on a shared datastore
                rows += [Sample("vsphere_vm", {"vcenter": "vc1", "vm": vm, "host": host},
                                {"cpu_ready_pct": 0.5, "cpu_usage_pct": 20.0, "mem_balloon_bytes": 0, "vcpus": 4}, ts),
                         Sample("vsphere_vm_disk", {"vcenter": "vc1", "vm": vm, "host": host, "instance": "scsi0:0",
                                                    "datastore": f"shared{host}"},
                                {"read_latency_ms": 1.0, "write_latency_ms": 1.0, "read_iops": 50.0}, ts)]
            rows += [Sample("storage_lun", {"storage": "netapp1", "kind": "ontap", "vserver": "svm1",
                                            "lun": f"/vol/v{k}/l0", "naa": n},
                            {"avg_latency_ms": 0.5, "read_latency_ms": 0.6, "write_latency_ms": 0.4,
                             "total_iops": 800.0, "read_bytes_per_s": 5e6, "write_bytes_per_s": 8e6}, ts)
                     for k, n in enumerate(luns)]
            w.write(_widen(rows))
            written += len(rows)
        w.write(findings=[Finding("guest-io-latency", "warning", {"layer": "guest", "guest": f"g{i:03d}",
                                                                  "device": "sdb"}, "await", {"samples": 3}, "why",
                                  "fix", [], t0 + 600 * S, t0 + 900 * S) for i in range(0, stacks, 10)],
                annotations=[edge_marker("hour", BEGIN, ts=t0 + 5 * S), edge_marker("hour", END, ts=t0 + seconds * S),
                             edge_marker("first", BEGIN, ts=t0 + 5 * S),
                             edge_marker("first", END, ts=t0 + seconds // 2 * S),
                             edge_marker("second", BEGIN, ts=t0 + seconds // 2 * S + S),
                             edge_marker("second", END, ts=t0 + seconds * S)])
        w.compact()  # as the agent's writer seals the spans that are over: the report reads chunks
    return written


def config(path: Path, stacks: int) -> None:
    parts = ['[guest]\nenabled = false\n[[vcenter]]\nname = "vc1"\nurl = "https://127.0.0.1:1/sdk"\nuser = "b"\n'
             'password_env = "BENCH_NONE"\n[[ssh]]\nname = "array"\nhost = "127.0.0.1"\nuser = "b"\n'
             '[[storage]]\nname = "netapp1"\nkind = "ontap"\nssh = "array"\n']
    for i in range(stacks):
        parts.append(f'[[ssh]]\nname = "g{i:03d}"\nhost = "10.0.{i // 250}.{i % 250 + 1}"\nuser = "b"\n'
                     f'[[db2]]\nname = "db{i:03d}"\nssh = "g{i:03d}"\ndatabase = "PROD"\n'
                     f'[[stack]]\nname = "s{i:03d}"\ndb2 = "db{i:03d}"\nvm = "db2vm{i:03d}"\nvcenter = "vc1"\n'
                     f'guest = "g{i:03d}"\nstorage = ["netapp1"]\n')
    path.write_text("".join(parts))


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def timed(fn):
    t = time.perf_counter()
    value = fn()
    return value, round(time.perf_counter() - t, 3)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--stacks", type=int, default=100)
    ap.add_argument("--hosts", type=int, default=10)
    ap.add_argument("--seconds", type=int, default=3600)
    ap.add_argument("--step", type=int, default=20)
    ap.add_argument("--vms", type=int, default=0,
                    help="VMs in the vCenter, the stacks' included (more than --stacks: the others are recorded "
                         "too, as a 10,000-VM vCenter's agent records them: --vms 10000 --hosts 250)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        store, cfg_path = Path(d) / "bench.db", Path(d) / "bench.toml"
        t0 = (time.time_ns() // S - args.seconds - 120) * S
        samples, build_s = timed(lambda: build(store, args.stacks, args.hosts, args.seconds, args.step, t0,
                                                       args.vms))
        config(cfg_path, args.stacks)
        cfg = load_config(cfg_path)
        with Store(store) as s:
            series = len(s.series())
        out = {"benchmark": "report", "stacks": args.stacks, "vms": max(args.vms, args.stacks), "hosts": args.hosts,
               "run_s": args.seconds,
               "step_s": args.step, "series": series, "samples": samples, "store_bytes": store.stat().st_size,
               "build_s": round(build_s, 1), "target_s": 3.0}
        cpu, children = time.process_time(), _children_cpu()
        report, out["report_s"] = timed(lambda: make_report(cfg, store, "hour"))
        parent_cpu, workers_cpu = time.process_time() - cpu, _children_cpu() - children
        workers = max(1, min(4, len(os.sched_getaffinity(0))))
        cpu = time.process_time()
        _, out["report_one_process_s"] = timed(lambda: make_report(cfg, store, "hour", workers=1))
        # CPU seconds do not grow with other work on the machine as wall time does: on idle CPUs the
        # report takes about its own process's CPU time plus one worker's share
        out["report_cpu_s"] = {"one_process": round(time.process_time() - cpu, 3), "parent": round(parent_cpu, 3),
                               "workers": round(workers_cpu, 3), "worker_processes": workers,
                               "idle_estimate_s": round(parent_cpu + workers_cpu / workers, 3)}
        for fmt, render in (("text", lambda r: report_render.to_text(r)), ("json", report_render.to_json),
                            ("html", report_render.to_html)):
            text, out[f"render_{fmt}_s"] = timed(lambda render=render: render(report))
            out[f"{fmt}_bytes"] = len(text.encode())
        out["report_html_total_s"] = round(out["report_s"] + out["render_html_s"], 3)
        out["stacks_reported"] = len(report.run.stacks)
        out["figures"] = sum(len(f) for layers in report.run.stacks.values() for f in layers.values())
        compared, out["report_with_baseline_s"] = timed(lambda: make_report(cfg, store, "second", "first"))
        _, out["render_json_with_baseline_s"] = timed(lambda: report_render.to_json(compared))
        # the command is started by a small launcher, not from this process: a child's peak RSS counts the
        # memory of the process it was forked from (this one holds the store it built, ~0.5 GB)
        r = subprocess.run([sys.executable, "-c", _LAUNCH, sys.executable, "-m", "db2vtop.agent", "report", "hour",
                            "-c", str(cfg_path), "--store", str(store), "--format", "json"],
                           cwd=ROOT, capture_output=True, text=True, check=True)
        wall, cpu_s, rss_kb, status = r.stdout.split()
        out["command_json_wall_s"] = round(float(wall), 3)
        out["command_cpu_s"] = round(float(cpu_s), 2)
        out["command_peak_rss_mb"] = round(int(rss_kb) / 1024, 1)  # its worker processes' included: the largest
        out["command_status"] = int(status)
        out["bench_process_peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
        out["load_average"] = [round(x, 2) for x in os.getloadavg()]  # other work on the machine slows it
        out["cpus"] = len(os.sched_getaffinity(0))
        out["within_target"] = out["report_html_total_s"] <= 3.0 and out["report_s"] + out["render_json_s"] <= 3.0
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
