"""Storage array collectors: parse cost at scale and SSH round trips per cycle.

Prints JSON; parse figures are median CPU milliseconds of this process. The ONTAP
figures use a cluster of 2,000 volumes, 4,000 LUNs, 4 nodes and 96 disks in the layout
of `statistics show -raw` (rendered by the test stand-in); the
end-to-end figure runs the real collector over Debian's sshd on 127.0.0.1 against the
clustershell stand-in (its rendering time is included there).

    .venv/bin/python bench/storage.py
"""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from db2vtop.collectors.ssh import SSHTarget  # noqa: E402
from db2vtop.collectors.ssh.config import SSHConfig  # noqa: E402
from db2vtop.collectors.storage.ontap.cli import parse_fields  # noqa: E402
from db2vtop.collectors.storage.ontap.collector import OntapCollector  # noqa: E402
from db2vtop.collectors.storage.ontap.config import OntapConfig  # noqa: E402
from db2vtop.collectors.storage.ontap.metrics import rows, snapshot  # noqa: E402
from db2vtop.collectors.storage.powermax import symstat  # noqa: E402
from db2vtop.collectors.storage.xtremio.api import VOLUME, objects, perf_fields  # noqa: E402
from tests.collectors.storage.clustershell import render_raw  # noqa: E402

VOLUMES, LUNS, NODES, DISKS = 2000, 4000, 4, 96


def cluster(step: int) -> dict:
    def io(i: int, lat_names: tuple[str, str, str, str]) -> dict:
        r, w, o = 1000 * i + 500 * step, 400 * i + 200 * step, 10 * i
        return {"vserver_name": "vs1", "total_ops": str(r + w + o), "read_ops": str(r), "write_ops": str(w),
                "other_ops": str(o), "read_data": str(r * 8192), "write_data": str(w * 8192),
                lat_names[0]: f"{(r + w + o) * 700}us", lat_names[1]: f"{r * 500}us", lat_names[2]: f"{w * 900}us",
                lat_names[3]: f"{o * 100}us"}
    vols = [{"instance": f"db2vol_{i:05d}", "scope": "vs1",
             "counters": io(i, ("avg_latency", "read_latency", "write_latency", "other_latency"))}
            for i in range(VOLUMES)]
    luns = []
    for i in range(LUNS):
        c = io(i, ("avg_latency", "avg_read_latency", "avg_write_latency", "avg_other_latency"))
        c["queue_full"] = str(step)
        c["read_align_histo"] = {str(b): str((1000 * i + 500 * step) if b == 0 else step) for b in range(8)}
        c["write_align_histo"] = {str(b): str((400 * i + 200 * step) if b == 0 else 0) for b in range(8)}
        luns.append({"instance": f"/vol/db2vol_{i // 2:05d}/lun{i % 2}", "scope": "vs1", "counters": c})
    nodes = [{"instance": f"node{n}", "scope": f"node{n}", "counters": {
        "cpu_busy": f"{(40 + step) * 10**6}%", "cpu_elapsed_time": str((100 + step * 10) * 10**6),
        "total_ops": str(10**6 + step * 3000), "read_ops": str(6 * 10**5 + step * 2000),
        "write_ops": str(4 * 10**5 + step * 1000)}} for n in range(NODES)]
    disks = [{"instance": f"1.0.{d}.P3", "scope": f"node{d % NODES}", "counters": {
        "node_name": f"node{d % NODES}", "disk_busy": f"{(30 + step) * 100}%",
        "base_for_disk_busy": str(10000 + step * 1000)}} for d in range(DISKS)]
    return {"stats": {"volume": vols, "lun": luns, "system:node": nodes, "disk:constituent": disks},
            "tables": fact_tables()}


def fact_tables() -> dict:
    return {
        "volume show": [{"vserver": "vs1", "volume": f"db2vol_{i:05d}", "aggregate": "aggr1", "size": "2199023255552B",
                         "percent-snapshot-space": "0%", "snapshot-policy": "none", "atime-update": "false",
                         "nvfail": "on", "space-guarantee": "none", "snapdir-access": "false"}
                        for i in range(VOLUMES)],
        "lun show": [{"vserver": "vs1", "path": f"/vol/db2vol_{i // 2:05d}/lun{i % 2}",
                      "volume": f"db2vol_{i // 2:05d}", "size": "549755813888B", "ostype": "vmware",
                      "serial": f"HnT-OZ/{i:05d}", "space-reserve": "disabled"} for i in range(LUNS)],
        "storage aggregate show": [{"aggregate": "aggr1", "node": "node0", "raidtype": "raid_dp", "maxraidsize": "18"}],
        "network port show": [{"node": "node0", "port": "e0c", "mtu": "9000", "flowcontrol-admin": "none",
                               "flowcontrol-oper": "none"}],
        "lun igroup show": [{"vserver": "vs1", "igroup": "DC1_iSCSI", "protocol": "iscsi", "ostype": "vmware",
                             "initiator": "iqn.1998-01.com.vmware:esx01"}],
        "vserver iscsi session parameter show": [{"vserver": "vs1", "tpgroup": "lif1", "tsih": "1",
                                                  "cmd-window-size": "128"}],
    }


def raw_text(state: dict) -> str:
    lines = []
    for obj, insts in state["stats"].items():
        for inst in insts:
            lines += render_raw(obj, inst, list(inst["counters"]))
    return "\n".join(lines) + "\n"


def timed(fn, repeat: int = 5) -> tuple[float, object]:
    """Median CPU milliseconds of this process (other jobs on the machine do not count)."""
    times, result = [], None
    for _ in range(repeat):
        t0 = time.process_time()
        result = fn()
        times.append((time.process_time() - t0) * 1000)
    return round(statistics.median(times), 1), result


def table_text(rows_: list[dict]) -> str:
    fields = list(rows_[0])
    return "\n".join(["|".join(fields) + "|", "|".join(fields) + "|",
                      *("|".join(r[f] for f in fields) + "|" for r in rows_)]) + "\n"


async def over_ssh(state0: dict) -> dict:
    from tests.collectors.storage.conftest import ClustershellServer, running
    with tempfile.TemporaryDirectory() as tmp, running(ClustershellServer(Path(tmp))) as server:
        ssh = server.ssh_config()
        target = SSHTarget(SSHConfig(**{**ssh, "key_file": Path(ssh["key_file"]),
                                        "known_hosts": Path(ssh["known_hosts"])}))
        c = OntapCollector(OntapConfig(name="bench", ssh="test", timeout=120.0), target)
        server.set_state(state0)
        t0 = time.perf_counter()
        facts = await c.describe()
        describe_ms = (time.perf_counter() - t0) * 1000
        trips_describe = c.round_trips
        await c.start()
        cycles, durations = 3, []
        for i in range(cycles):
            server.set_state(cluster(i + 1))
            t0 = time.perf_counter()
            out = await c.collect()
            durations.append((time.perf_counter() - t0) * 1000)
        trips = c.round_trips - trips_describe
        await c.close()
        target.close()
        return {"cycles": cycles, "ssh_round_trips_per_cycle": (trips - 1) / cycles,
                "ssh_round_trips_per_describe": trips_describe, "connections": target.connects,
                "cycle_ms_median_incl_standin": round(statistics.median(durations), 1),
                "describe_ms_incl_standin": round(describe_ms, 1),
                "samples_per_cycle": len(out), "facts": len(facts)}


def main() -> None:
    s0, s1 = cluster(0), cluster(1)
    text0, text1 = raw_text(s0), raw_text(s1)
    parse_ms, _ = timed(lambda: snapshot(text1, 20.0))
    snap0 = snapshot(text0, 0.0)
    rows(snap0, snapshot(text1, 20.0), 10, {})  # steady state: the baseline's numbers are converted already
    cycle_ms, (found, _, _) = timed(lambda: rows(snap0, snapshot(text1, 20.0), 10, {}))
    tables = fact_tables()
    vol_text, lun_text = table_text(tables["volume show"]), table_text(tables["lun show"])
    facts_ms, _ = timed(lambda: (parse_fields(vol_text), parse_fields(lun_text)))

    xio = {"volumes": [{"name": f"v{i}", "sys-name": "x1", "naa-name": f"514f0c5c8f2{i:05x}", "iops": "2600",
                        "rd-iops": "2000", "wr-iops": "600", "rd-bw": "16384", "wr-bw": "4800", "avg-latency": "500",
                        "rd-latency": "450", "wr-latency": "667", "logical-space-in-use": "104857600"}
                       for i in range(VOLUMES)]}
    xio_text = json.dumps(xio)
    xio_ms, _ = timed(lambda: [perf_fields(v, VOLUME, 20.0, 10, "v") for v in objects(json.loads(xio_text), "volumes")])

    req = ("<Request><dev_name>{d:05X}</dev_name><pd_name>N/A</pd_name><r_per_second>1250</r_per_second>"
           "<w_per_second>800</w_per_second><kb_r_per_second>40960</kb_r_per_second><kb_w_per_second>25600"
           "</kb_w_per_second><r_cache_hit_pct>92.5</r_cache_hit_pct><w_cache_hit_pct>100</w_cache_hit_pct>"
           "<sequential_r_pct>12</sequential_r_pct><wp_tracks>340</wp_tracks></Request>")
    xml = "<SymCLI_ML><Symmetrix><Statistics>" + "".join(req.format(d=d) for d in range(LUNS)) + \
          "</Statistics></Symmetrix></SymCLI_ML>"
    sym_ms, _ = timed(lambda: symstat.parse(xml))

    result = {
        "ontap": {"volumes": VOLUMES, "luns": LUNS, "nodes": NODES, "disks": DISKS,
                  "raw_output_bytes": len(text1), "parse_ms": parse_ms, "cycle_cpu_ms": cycle_ms,
                  "samples": len(found),
                  "fact_tables_parse_ms": facts_ms, "ssh": asyncio.run(over_ssh(s0))},
        "xtremio": {"volumes": VOLUMES, "parse_ms": xio_ms, "rest_requests_per_cycle": 2},
        "powermax_symstat": {"devices": LUNS, "parse_ms": sym_ms, "ssh_round_trips_per_cycle": 1},
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
