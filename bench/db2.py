"""DB2 collector benchmark: round trips, CLP invocations and bytes per cycle over a real sshd on
127.0.0.1, and the time to parse one cycle of a large database (100 buffer pools, 1,000
containers), with the CLP stand-in of the tests. Prints one JSON object.

    .venv/bin/python bench/db2.py [--cycles N] [--repeat N]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from db2vtop.collectors.db2.clp import connect_statement, parse_output, session_script  # noqa: E402
from db2vtop.collectors.db2.collector import Db2Collector  # noqa: E402
from db2vtop.collectors.db2.config import DB2Config  # noqa: E402
from db2vtop.collectors.db2.transport import ClpTransport  # noqa: E402
from db2vtop.collectors.ssh import SSHTarget  # noqa: E402
from db2vtop.collectors.ssh.config import SSHConfig  # noqa: E402
from tests.infra.db2clp import Table, calls, install  # noqa: E402
from tests.infra.sshd import SSHServer  # noqa: E402

FIXTURES = ROOT / "tests" / "fixtures" / "db2" / "v11_5"
BUFFERPOOLS, TABLESPACES, CONTAINERS_PER_TABLESPACE = 100, 50, 20


def big_database(tables: Path) -> None:
    """Copy the 11.5 fixtures and grow them to 100 buffer pools and 1,000 containers."""
    for f in FIXTURES.iterdir():
        shutil.copy(f, tables / f.name)
    bp = Table.load(tables / "MON_GET_BUFFERPOOL.txt")
    proto = bp.rows[0]
    bp.rows = [{**proto, "BP_NAME": f"BP{i:03d}", "POOL_DATA_L_READS": str(1000000 + i * 7919)}
               for i in range(BUFFERPOOLS)]
    bp.save(tables / "MON_GET_BUFFERPOOL.txt")
    ts = Table.load(tables / "MON_GET_TABLESPACE.txt")
    proto = ts.rows[-1]
    ts.rows = [{**proto, "TBSP_NAME": f"TS{i:03d}", "TBSP_ID": str(i)} for i in range(TABLESPACES)]
    ts.save(tables / "MON_GET_TABLESPACE.txt")
    ct = Table.load(tables / "MON_GET_CONTAINER.txt")
    proto = ct.rows[2]
    ct.rows = [{**proto, "TBSP_NAME": f"TS{t:03d}", "TBSP_ID": str(t), "CONTAINER_ID": str(c),
                "CONTAINER_NAME": f"/db2/data{c % 8}/db2inst1/NODE0000/PROD/T{t:07d}/C{c:07d}.LRG",
                "PAGES_READ": str(30000 + t * 100 + c)}
               for t in range(TABLESPACES) for c in range(CONTAINERS_PER_TABLESPACE)]
    ct.save(tables / "MON_GET_CONTAINER.txt")


def ms(seconds: list[float]) -> dict:
    return {"min": round(min(seconds) * 1000, 2), "median": round(statistics.median(seconds) * 1000, 2),
            "max": round(max(seconds) * 1000, 2)}


async def main(cycles: int, repeat: int) -> dict:
    tmp = Path(tempfile.mkdtemp(prefix="db2vtop-bench-"))
    server = SSHServer(tmp / "sshd")
    (tmp / "sshd").mkdir()
    server.setup()
    server.start()
    try:
        scenario = install(server, tmp / "db2")
        big_database(scenario / "tables")
        profile = tmp / "db2profile"
        profile.write_text("DB2INSTANCE=db2inst1; export DB2INSTANCE\n")
        c = server.ssh_config()
        target = SSHTarget(SSHConfig(**{**c, "key_file": Path(c["key_file"]), "known_hosts": Path(c["known_hosts"])}))
        cfg = DB2Config(name="bench", database="PROD", ssh="test", instance_profile=str(profile), interval=10.0)
        collector = Db2Collector(cfg, ClpTransport(cfg, target))

        await collector.start()
        server.clear_commands()
        before = len(calls(scenario))
        wall, bytes_in, bytes_out, samples = [], [], [], 0
        for _ in range(cycles):
            t0 = time.perf_counter()
            records = await collector.collect()
            wall.append(time.perf_counter() - t0)
            bytes_in.append(collector.last_session.bytes_in)
            bytes_out.append(collector.last_session.bytes_out)
            samples = len(records)
        ssh_commands = len(server.commands())
        clp_runs = len(calls(scenario)) - before
        facts = await collector.describe()
        facts_in = collector.last_session.bytes_in

        # parsing alone, on one cycle's real output as it came over SSH
        statements = collector.statements(False)
        script = session_script(cfg.instance_profile, connect_statement(cfg.database), statements, 30)
        text = target.run(["sh", "-s"], stdin=script).text()
        tags = [t for t, _ in statements]
        parse, parse_cpu, rates, rates_cpu = [], [], [], []
        for _ in range(repeat):
            t0, c0 = time.perf_counter(), time.thread_time()
            rows = collector.digest(parse_output(text, tags, "bench", cfg.instance_profile))
            parse.append(time.perf_counter() - t0)
            parse_cpu.append(time.thread_time() - c0)
            later = {**rows, "db": [{**r, "CLOCK": "2099-01-01-00.00.10.000000"} for r in rows["db"]]}
            collector.baselines.rows.clear()
            collector.records({**rows, "db": [{**r, "CLOCK": "2099-01-01-00.00.00.000000"} for r in rows["db"]]}, 0)
            t0, c0 = time.perf_counter(), time.thread_time()
            out = collector.records(later, 0)  # rates for every row, 10 s after the baseline
            assert len(out) == samples, "the timed cycle did not compute every rate"
            rates.append(time.perf_counter() - t0)
            rates_cpu.append(time.thread_time() - c0)
        await collector.close()
        return {
            "bench": "db2",
            "database": {"bufferpools": BUFFERPOOLS, "tablespaces": TABLESPACES,
                         "containers": TABLESPACES * CONTAINERS_PER_TABLESPACE},
            "cycles": cycles,
            "ssh_round_trips_per_cycle": ssh_commands / cycles,
            "ssh_connections": target.connects,
            "clp_invocations_per_cycle": clp_runs / cycles,
            "bytes_from_db2_host_per_cycle": statistics.median(bytes_in),
            "bytes_to_db2_host_per_cycle": statistics.median(bytes_out),
            "bytes_from_db2_host_facts_cycle": facts_in,
            "records_per_cycle": samples,
            "facts": len(facts),
            "cycle_wall_ms": ms(wall),
            "parse_ms": ms(parse),
            "parse_cpu_ms": ms(parse_cpu),
            "rates_ms": ms(rates),
            "rates_cpu_ms": ms(rates_cpu),
            "parse_plus_rates_cpu_ms_median": round((statistics.median(parse_cpu) + statistics.median(rates_cpu))
                                                    * 1000, 2),
            "target_parse_ms": 20,
            "load_average_1m": round(os.getloadavg()[0], 2),
        }
    finally:
        server.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cycles", type=int, default=5)
    ap.add_argument("--repeat", type=int, default=50)
    args = ap.parse_args()
    print(json.dumps(asyncio.run(main(args.cycles, args.repeat)), indent=2))
