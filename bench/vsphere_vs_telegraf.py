"""db2vtop's vSphere collection against Telegraf's `inputs.vsphere`, side by side on ONE simulator.

One scenario simulator (tests/infra/vsphere-sim, 40 VMs a host: 2,000 VMs on 50 hosts by default) serves
both tools in turn, in one run:

- one-shot: `telegraf --once` and `db2vtop agent --once` (one `[[vcenter]]`, nothing else):
  wall time, the process's CPU seconds, the simulator's CPU seconds while it ran, peak RSS
  (the kernel's ru_maxrss of the child, from wait4). db2vtop's first run is on an empty store
  (every VM's device list read); `restart_once_*` is a second `--once` on that store, which
  reads again only the VMs whose identity moved (none here). Telegraf keeps nothing between
  runs, so both are compared with its one-shot. `--repeat` rounds (default 3) of the three
  runs, interleaved; each figure is the median of its rounds;
- steady: each tool runs with a 20 s interval; after its first cycles, CPU (its own and the
  simulator's) is sampled every half second over `--cycles` (default 5) whole 20 s periods plus one.
  Each period is cut at the tool's own quiet moment (the phase of the period where its CPU moved
  least: Telegraf's cycles start on the minute's 20 s marks, db2vtop's every 20 s from its start), so
  a window holds exactly one of its cycles, and each figure is the median of the per-cycle values
  (the mean is printed beside it). Both tools are measured by this one procedure, one after the
  other. Before, the figure was the mean of three periods: one period of other work on these
  shared cores, or of the simulator's garbage collector, moved it by a third; the median of five
  does not follow one such period. Peak RSS is the whole run's.

Telegraf 1.36.4 is built once with `go install` (tags custom,inputs.vsphere,outputs.discard)
into ~/.cache/db2vtop/telegraf-1.36.4/. Telegraf asks for the same counters db2vtop reads
(VM and host realtime counters of collectors/vsphere/counters.py; datastore, cluster,
datacenter, resource pool and vSAN objects excluded); it asks every one for all instances
(`*`: it has no per-counter choice), db2vtop asks CPU ready and co-stop for the VM as a whole.
Every ratio is db2vtop / Telegraf: at or below 1.0 db2vtop is the lighter.

`--vms` sets the size (a multiple of 40; repeat it to run several sizes, each on its own
simulator, and get each tool's peak-RSS growth per VM between the smallest and the largest).
The simulator holds its whole inventory in memory: 10,000 VMs take ~5 GB and 75 s to start on an
idle machine (3 minutes on a busy one); at that size the whole run takes about 17 minutes.

`--alerts` runs db2vtop's steady phase a second time with two `[[alert]]` receivers (Alertmanager's kind and a
webhook, a local HTTP receiver) and prints `alerts_cpu_pct_of_one_core`: what judging and delivering alerts adds
to a steady cycle (target: at most 1 % of a core at 2,000 VMs).

    .venv/bin/python bench/vsphere_vs_telegraf.py [--vms 2000 [--vms 10000]] [--cycles 5] [--repeat 3] [--alerts]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from db2vtop.collectors.vsphere.counters import HOST_COUNTERS, VM_COUNTERS
from tests.infra.vsphere_sim import Simulator, process_cpu_seconds

TELEGRAF_VERSION = "1.36.4"
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "db2vtop" / f"telegraf-{TELEGRAF_VERSION}"
TELEGRAF = CACHE / "telegraf"
INTERVAL_S = 20
VMS_PER_HOST = 40


def build_telegraf() -> Path:
    if TELEGRAF.exists():
        return TELEGRAF
    CACHE.mkdir(parents=True, exist_ok=True)
    print(f"building telegraf {TELEGRAF_VERSION} into {CACHE} (minutes, once)", file=sys.stderr)
    subprocess.run(["go", "install", "-tags", "custom,inputs.vsphere,outputs.discard",
                    f"github.com/influxdata/telegraf/cmd/telegraf@v{TELEGRAF_VERSION}"],
                   check=True, env={**os.environ, "GOBIN": str(CACHE), "GOFLAGS": "-buildvcs=false"})
    return TELEGRAF


def _toml_list(names: list[str]) -> str:
    return "[" + ", ".join(json.dumps(n) for n in names) + "]"


def telegraf_config(url: str, interval: int) -> str:
    vm = sorted({c.name for c in VM_COUNTERS})
    host = sorted({c.name for c in HOST_COUNTERS})
    return f"""
[agent]
  interval = "{interval}s"
  round_interval = true
  flush_interval = "{interval}s"
  omit_hostname = true
  quiet = true
[[inputs.vsphere]]
  vcenters = ["{url}"]
  username = "bench"
  password = "bench"
  insecure_skip_verify = true
  vm_metric_include = {_toml_list(vm)}
  host_metric_include = {_toml_list(host)}
  datastore_metric_exclude = ["*"]
  cluster_metric_exclude = ["*"]
  datacenter_metric_exclude = ["*"]
  resource_pool_metric_exclude = ["*"]
  vsan_metric_exclude = ["*"]
[[outputs.discard]]
"""


def db2vtop_config(url: str, store: Path, interval: int) -> str:
    return f"""
[store]
path = "{store}"
[guest]
enabled = false
[[vcenter]]
name = "bench"
url = "{url}"
user = "bench"
password_env = "DB2VTOP_BENCH_VC_PASSWORD"
verify_tls = false
interval = "{interval}s"
"""


def with_alerts(agent: list[str], sim: Simulator, env: dict[str, str], t: Path, cycles: int, warm: int,
                without: dict) -> dict:
    """The steady agent again with alerts judged every 20 s and two receivers (Alertmanager's kind and a webhook,
    both a local HTTP receiver): what alert delivery adds to a cycle, as a share of one core."""
    from tests.infra.alertmanager import WebhookReceiver

    hook = WebhookReceiver().start()
    try:
        (t / "db2vtop.toml").write_text(db2vtop_config(sim.url, t / "steady-alerts.db", INTERVAL_S) + f"""
[[alert]]
name = "am"
url = "{hook.url.rsplit('/', 1)[0]}"
[[alert]]
name = "hook"
kind = "webhook"
url = "{hook.url}"
""")
        steady_alerts = steady(agent, sim, env, t / "db2vtop-steady-alerts.log", cycles, warm)
    finally:
        hook.stop()
    added = steady_alerts["cpu_s_per_cycle"] - without["cpu_s_per_cycle"]
    return {"db2vtop_steady_alerts": steady_alerts, "alert_posts": len(hook.received),
            "alerts_cpu_pct_of_one_core": round(added / INTERVAL_S * 100, 3),
            "alerts_target_pct_of_one_core": 1.0}


def compile_db2vtop() -> None:
    """Bytecode for every db2vtop module, as `pip install` leaves it: this machine sets
    PYTHONDONTWRITEBYTECODE, so a source checkout would otherwise be compiled again at every start
    (Telegraf is measured as the binary it installs as, too)."""
    import importlib

    dirs = sorted({str(Path(importlib.import_module(f"db2vtop.{p}").__file__).parent)
                   for p in ("agent", "collectors", "checks", "tui")})
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    subprocess.run([sys.executable, "-m", "compileall", "-q", *dirs], check=True, env=env,
                   stdout=subprocess.DEVNULL)


def _wait(proc: subprocess.Popen) -> tuple[int, float, float]:
    """(exit status, CPU seconds, peak RSS MB) of a child, from wait4's rusage."""
    _, status, ru = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return proc.returncode, ru.ru_utime + ru.ru_stime, ru.ru_maxrss / 1024


def one_shot(cmd: list[str], sim: Simulator, env: dict[str, str], log: Path) -> dict:
    sim0 = sim.cpu_seconds()
    t0 = time.perf_counter()
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env)
        rc, cpu, rss = _wait(proc)
    wall = time.perf_counter() - t0
    return {"exit": rc, "wall_s": round(wall, 2), "cpu_s": round(cpu, 2),
            "vcenter_cpu_s": round(sim.cpu_seconds() - sim0, 2), "peak_rss_mb": round(rss, 1)}


def steady(cmd: list[str], sim: Simulator, env: dict[str, str], log: Path, cycles: int, warm: int = 2) -> dict:
    """CPU per 20 s cycle once running: the median of `cycles` single cycles (see per_cycle)."""
    samples: list[tuple[float, float, float]] = []   # (monotonic s, the tool's CPU s, the simulator's CPU s)
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env)
        try:
            # the first cycle (discovery, facts) lands in the first `warm` periods; start sampling after them
            time.sleep(INTERVAL_S * warm + INTERVAL_S / 2 - (time.time() % INTERVAL_S))
            end = time.monotonic() + INTERVAL_S * (cycles + 1)
            while time.monotonic() < end:
                if proc.poll() is not None:
                    raise RuntimeError(f"{cmd[0]} exited early; see {log}")
                samples.append((time.monotonic(), process_cpu_seconds(proc.pid), sim.cpu_seconds()))
                time.sleep(SAMPLE_S)
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                rc, _, rss = _wait_timeout(proc, 30)
            except TimeoutError:
                proc.kill()
                rc, _, rss = _wait(proc)
    own, vc = per_cycle(samples, cycles)
    return {"cycles": len(own), "cpu_s_per_cycle": round(statistics.median(own), 3),
            "vcenter_cpu_s_per_cycle": round(statistics.median(vc), 3),
            "cpu_s_per_cycle_mean": round(statistics.fmean(own), 3),
            "vcenter_cpu_s_per_cycle_mean": round(statistics.fmean(vc), 3),
            "cpu_s_each_cycle": [round(x, 3) for x in own], "vcenter_cpu_s_each_cycle": [round(x, 3) for x in vc],
            "peak_rss_mb": round(rss, 1), "exit": rc}


SAMPLE_S = 0.5


def per_cycle(samples: list[tuple[float, float, float]], cycles: int) -> tuple[list[float], list[float]]:
    """Each whole period's CPU, the tool's own and the simulator's, cut at the tool's quiet moment: the
    phase (of SAMPLE_S steps) around which the tool's CPU moved least over every period sampled. Whatever
    a tool's schedule, each window then holds one of its cycles whole."""
    t0 = samples[0][0]
    steps = round(INTERVAL_S / SAMPLE_S)
    busy = [0.0] * steps
    for (ta, ca, _), (_, cb, _) in itertools.pairwise(samples):
        busy[round((ta - t0) / SAMPLE_S) % steps] += cb - ca
    # the quietest two seconds of the period, and its middle
    spread = round(2 / SAMPLE_S)
    quiet = min(range(steps), key=lambda i: sum(busy[(i + k) % steps] for k in range(-spread, spread + 1)))

    def at(t: float) -> tuple[float, float]:
        nearest = min(samples, key=lambda s: abs(s[0] - t))
        return nearest[1], nearest[2]
    cuts = [at(t0 + (quiet + k * steps) * SAMPLE_S) for k in range(cycles + 1)
            if t0 + (quiet + k * steps) * SAMPLE_S <= samples[-1][0]]
    own = [b[0] - a[0] for a, b in itertools.pairwise(cuts)]
    vc = [b[1] - a[1] for a, b in itertools.pairwise(cuts)]
    return own, vc


def _wait_timeout(proc: subprocess.Popen, timeout: float) -> tuple[int, float, float]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pid, status, ru = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            proc.returncode = os.waitstatus_to_exitcode(status)
            return proc.returncode, ru.ru_utime + ru.ru_stime, ru.ru_maxrss / 1024
        time.sleep(0.1)
    raise TimeoutError


def ratio(a: float, b: float) -> float | None:
    return round(a / b, 2) if b else None


def median_run(runs: list[dict]) -> dict:
    """Each figure's median over the runs (the worst exit status): one run's figures on these shared
    cores move by a third from one run to the next."""
    out = {k: round(statistics.median(r[k] for r in runs), 2) for k in runs[0] if k != "exit"}
    return {"exit": max(r["exit"] for r in runs), "runs": len(runs), **out}


def run(hosts: int, vms_per_host: int, cycles: int, only: str | None, repeat: int = 3, alerts: bool = False) -> dict:
    telegraf = build_telegraf() if only != "db2vtop" else TELEGRAF
    compile_db2vtop()
    vms = hosts * vms_per_host
    warm = 2 + vms // 5000  # a 10,000-VM first cycle (every VM's device list) takes most of a period
    with tempfile.TemporaryDirectory() as tmp:
        t = Path(tmp)
        scenario = t / "scenario.json"
        scenario.write_text(json.dumps({"generate": {"hosts": hosts, "vms_per_host": vms_per_host}}))
        env = {**os.environ, "DB2VTOP_BENCH_VC_PASSWORD": "bench", "PYTHONUNBUFFERED": "1"}
        agent = [sys.executable, "-m", "db2vtop.agent", "agent", "-c", str(t / "db2vtop.toml")]
        tg = [str(telegraf), "--config", str(t / "telegraf.conf")]
        out: dict = {"benchmark": "vsphere_vs_telegraf", "telegraf": TELEGRAF_VERSION, "hosts": hosts,
                     "vms": hosts * vms_per_host, "vm_counters": len({c.name for c in VM_COUNTERS}),
                     "host_counters": len({c.name for c in HOST_COUNTERS}), "cpus": os.cpu_count()}
        with Simulator(scenario, start_timeout=max(120.0, vms * 0.06)) as sim:
            (t / "telegraf.conf").write_text(telegraf_config(sim.url, INTERVAL_S))
            runs: dict[str, list[dict]] = {"telegraf_once": [], "db2vtop_once": [], "db2vtop_once_restart": []}
            for i in range(repeat):  # interleaved, so a slow spell of the shared machine hits both tools
                if only != "db2vtop":
                    runs["telegraf_once"].append(one_shot([*tg, "--once"], sim, env, t / "telegraf-once.log"))
                if only != "telegraf":
                    (t / "db2vtop.toml").write_text(db2vtop_config(sim.url, t / f"once{i}.db", INTERVAL_S))
                    (t / "db2vtop.toml").chmod(0o600)
                    runs["db2vtop_once"].append(one_shot([*agent, "--once"], sim, env, t / "db2vtop-once.log"))
                    runs["db2vtop_once_restart"].append(
                        one_shot([*agent, "--once"], sim, env, t / "db2vtop-restart.log"))
            out.update({k: median_run(v) for k, v in runs.items() if v})
            if cycles:
                (t / "db2vtop.toml").write_text(db2vtop_config(sim.url, t / "steady.db", INTERVAL_S))
                if only != "db2vtop":
                    out["telegraf_steady"] = steady(tg, sim, env, t / "telegraf-steady.log", cycles, warm)
                if only != "telegraf":
                    out["db2vtop_steady"] = steady(agent, sim, env, t / "db2vtop-steady.log", cycles, warm)
                if only != "telegraf" and alerts:
                    out.update(with_alerts(agent, sim, env, t, cycles, warm, out["db2vtop_steady"]))
            for name in ("db2vtop-once.log", "db2vtop-restart.log", "telegraf-once.log"):
                p = t / name
                if p.exists() and p.stat().st_size:
                    tail = p.read_text(errors="replace").strip().splitlines()[-3:]
                    out.setdefault("log_tails", {})[name] = tail
    if only is None:
        d, g = out["db2vtop_once"], out["telegraf_once"]
        ratios = {"once_wall": ratio(d["wall_s"], g["wall_s"]), "once_cpu": ratio(d["cpu_s"], g["cpu_s"]),
                  "once_vcenter_cpu": ratio(d["vcenter_cpu_s"], g["vcenter_cpu_s"])}
        r = out["db2vtop_once_restart"]  # Telegraf keeps nothing between runs: its restart is its one-shot
        ratios |= {"restart_once_wall": ratio(r["wall_s"], g["wall_s"]),
                   "restart_once_cpu": ratio(r["cpu_s"], g["cpu_s"]),
                   "restart_once_vcenter_cpu": ratio(r["vcenter_cpu_s"], g["vcenter_cpu_s"])}
        rss_d, rss_g = max(d["peak_rss_mb"], r["peak_rss_mb"]), g["peak_rss_mb"]
        if cycles:
            ds, gs = out["db2vtop_steady"], out["telegraf_steady"]
            ratios["steady_cpu_per_cycle"] = ratio(ds["cpu_s_per_cycle"], gs["cpu_s_per_cycle"])
            ratios["steady_vcenter_cpu_per_cycle"] = ratio(ds["vcenter_cpu_s_per_cycle"],
                                                           gs["vcenter_cpu_s_per_cycle"])
            rss_d, rss_g = max(rss_d, ds["peak_rss_mb"]), max(rss_g, gs["peak_rss_mb"])
        ratios["peak_rss"] = ratio(rss_d, rss_g)
        out["peak_rss_mb"] = {"telegraf": rss_g, "db2vtop": rss_d}
        out["ratios_db2vtop_over_telegraf"] = ratios
        out["all_at_or_below_1"] = all(v is not None and v <= 1.0 for v in ratios.values())
    return out


def growth(runs: list[dict]) -> dict | None:
    """Each tool's peak RSS growth per VM (KB) between the smallest and the largest size, and their ratio."""
    small, large = min(runs, key=lambda r: r["vms"]), max(runs, key=lambda r: r["vms"])
    if small is large or "peak_rss_mb" not in small:
        return None
    per = {tool: round((large["peak_rss_mb"][tool] - small["peak_rss_mb"][tool]) * 1024
                       / (large["vms"] - small["vms"]), 2) for tool in ("telegraf", "db2vtop")}
    return {"from_vms": small["vms"], "to_vms": large["vms"], "kb_per_vm": per,
            "ratio_db2vtop_over_telegraf": ratio(per["db2vtop"], per["telegraf"])}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vms", type=int, action="append",
                    help="VMs on the simulator, 40 a host (default 2000; repeat it for several sizes)")
    ap.add_argument("--cycles", type=int, default=5,
                    help="20 s cycles measured one by one in steady state, their median taken (0: one-shot only)")
    ap.add_argument("--only", choices=("db2vtop", "telegraf"), help="run one tool only (no ratios)")
    ap.add_argument("--repeat", type=int, default=3, help="one-shot rounds; each figure is their median")
    ap.add_argument("--alerts", action="store_true",
                    help="also the steady agent with [[alert]] receivers: what alert delivery adds (%% of one core)")
    args = ap.parse_args()
    sizes = sorted(set(args.vms or [2000]))
    if any(n < VMS_PER_HOST or n % VMS_PER_HOST for n in sizes):
        ap.error(f"--vms must be a multiple of {VMS_PER_HOST} (VMs a simulated host holds)")
    runs = [run(n // VMS_PER_HOST, VMS_PER_HOST, args.cycles, args.only, max(args.repeat, 1), args.alerts)
            for n in sizes]
    if len(runs) == 1:
        print(json.dumps(runs[0], indent=2))
        return
    print(json.dumps({"runs": runs, "rss_growth": growth(runs)}, indent=2))


if __name__ == "__main__":
    main()
