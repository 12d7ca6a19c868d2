"""The DB2 collector over a real sshd, with a `db2` CLP stand-in (tests/infra/db2clp.py) answering
from tables printed as IBM documents them (tests/collectors/db2/fixtures/<level>/, each naming its page).

Expected rates are worked out by hand from the fixture values: the server clock moves 10 s
between the two readings, so every rate is delta / 10.
"""

from __future__ import annotations

import asyncio
import json
import logging
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from db2vtop.agent.core.model import SELF_MEASUREMENT, Annotation, Sample
from db2vtop.agent.runtime import Runtime
from db2vtop.collectors.base import BaseCollector, CollectorError
from db2vtop.collectors.db2.collector import Db2Collector
from db2vtop.collectors.db2.config import DB2Config
from db2vtop.collectors.db2.queries import QUERIES, Db2Error
from db2vtop.collectors.db2.transport import ClpTransport, DriverTransport, load_driver
from db2vtop.collectors.ssh import SSHTarget, SSHTimeoutError
from db2vtop.collectors.ssh.config import SSHConfig
from tests.infra.db2clp import DbApi, Table, calls, install
from tests.infra.sshd import SSHServer, free_port

FIXTURES = Path(__file__).resolve().parent / "fixtures"
T0, T1, T2 = "2026-11-22-10.00.00.000000", "2026-11-22-10.00.10.000000", "2026-11-22-10.00.20.000000"
PASSWORD = "S3cret-pw.4711"


class Scenario:
    """One remote DB2 as the CLP stand-in plays it: tables, behaviour, and a collector for it."""

    def __init__(self, sshd: SSHServer, root: Path, level: str = "v11_5", **behaviour: object):
        self.sshd = sshd
        self.root = root
        self.cfg: dict = {"clock": T0, **behaviour}
        self.dir = install(sshd, root / "db2", **self.cfg)
        for f in (FIXTURES / level).iterdir():
            shutil.copy(f, self.dir / "tables" / f.name)
        self.profile = root / "sqllib" / "db2profile"
        self.profile.parent.mkdir(parents=True, exist_ok=True)
        self.profile.write_text("DB2INSTANCE=db2inst1; export DB2INSTANCE\n")

    def set(self, **behaviour: object) -> None:
        self.cfg.update(behaviour)
        (self.dir / "scenario.json").write_text(json.dumps(self.cfg))

    def table(self, name: str) -> Table:
        return Table.load(self.dir / "tables" / f"{name}.txt")

    def edit(self, name: str, where: dict[str, str], **values: object) -> None:
        t = self.table(name)
        t.set(where, **values)
        t.save(self.dir / "tables" / f"{name}.txt")

    def target(self) -> SSHTarget:
        c = self.sshd.ssh_config()
        return SSHTarget(SSHConfig(**{**c, "key_file": Path(c["key_file"]), "known_hosts": Path(c["known_hosts"])}))

    def config(self, **overrides: object) -> DB2Config:
        return DB2Config(**{"name": "prod", "database": "PROD", "ssh": "test", "interval": 10.0,
                            "instance_profile": str(self.profile), **overrides})

    def collector(self, **overrides: object) -> Db2Collector:
        cfg = self.config(**overrides)
        return Db2Collector(cfg, ClpTransport(cfg, self.target()))


@pytest.fixture
def db2(sshd, tmp_path) -> Scenario:
    sshd.clear_commands()
    return Scenario(sshd, tmp_path)


def by(records, measurement: str, **tags: str) -> Sample:
    hits = [r for r in records if isinstance(r, Sample) and r.measurement == measurement
            and all(r.tags.get(k) == v for k, v in tags.items())]
    assert len(hits) == 1, f"{len(hits)} {measurement} samples match {tags}"
    return hits[0]


def second_reading(db2: Scenario) -> None:
    """Cycle 2, 10 s after the fixtures' cycle 1 (values chosen so every rate is exact)."""
    db2.set(clock=T1)
    db2.edit("MON_GET_DATABASE", {"MEMBER": "0"}, TOTAL_APP_COMMITS=10500, TOTAL_APP_ROLLBACKS=110,
             ACT_COMPLETED_TOTAL=52000, ROWS_READ=1100000, ROWS_RETURNED=210000, TOTAL_RQST_TIME=420000,
             TOTAL_WAIT_TIME=210000, TOTAL_CPU_TIME=155000000, POOL_READ_TIME=84000, LOG_DISK_WAIT_TIME=42000,
             LOCK_WAIT_TIME=31000, LOCK_WAITS=310, DEADLOCKS=2, TOTAL_SORTS=5100, SORT_OVERFLOWS=55,
             PKG_CACHE_INSERTS=510, PKG_CACHE_LOOKUPS=101000, PREFETCH_WAIT_TIME=6500, TOTAL_HASH_JOINS=500,
             HASH_JOIN_OVERFLOWS=9)
    # a prefetch-heavy interval (a scan): of 7 900 data pages read from disk 7 600 came in by prefetch, ahead of
    # the agents, who found 9 800 of their 10 000 data page requests in the pool
    db2.edit("MON_GET_BUFFERPOOL", {"BP_NAME": "IBMDEFAULTBP"}, POOL_DATA_L_READS=1009000,
             POOL_DATA_P_READS=57900, POOL_INDEX_L_READS=2010000, POOL_INDEX_P_READS=10100,
             POOL_TEMP_DATA_L_READS=11000, POOL_ASYNC_DATA_READS=37600, POOL_READ_TIME=216000,
             POOL_ASYNC_READ_TIME=115400, POOL_WRITE_TIME=30600, POOL_DATA_WRITES=20200, POOL_INDEX_WRITES=5100,
             POOL_DRTY_PG_STEAL_CLNS=15, POOL_LSN_GAP_CLNS=110, POOL_DATA_LBP_PAGES_FOUND=997300,
             POOL_ASYNC_DATA_LBP_PAGES_FOUND=37500, POOL_INDEX_LBP_PAGES_FOUND=1999900)
    db2.edit("MON_GET_TABLESPACE", {"TBSP_NAME": "USERSPACE1"}, POOL_READ_TIME=101500, POOL_DATA_P_READS=40500,
             POOL_INDEX_P_READS=8250, POOL_COL_P_READS=250, POOL_ASYNC_DATA_READS=20300, POOL_ASYNC_COL_READS=200,
             POOL_WRITE_TIME=20600, POOL_DATA_WRITES=15100, POOL_INDEX_WRITES=4050, DIRECT_READ_REQS=110,
             DIRECT_READ_TIME=540, PREFETCH_WAIT_TIME=950, PREFETCH_WAITS=35)
    db2.edit("MON_GET_CONTAINER", {"CONTAINER_ID": "0", "TBSP_NAME": "USERSPACE1"}, POOL_READ_TIME=61200,
             PAGES_READ=30400, POOL_WRITE_TIME=12200, PAGES_WRITTEN=10100)
    db2.edit("MON_GET_CONTAINER", {"CONTAINER_ID": "1", "TBSP_NAME": "USERSPACE1"}, POOL_READ_TIME=40300,
             PAGES_READ=20300)
    db2.edit("MON_GET_TRANSACTION_LOG", {"MEMBER": "0"}, LOG_WRITES=502560, LOG_WRITE_TIME=30400,
             NUM_LOG_WRITE_IO=101000, NUM_LOG_BUFFER_FULL=3, TOTAL_LOG_USED=350000000, TOTAL_LOG_AVAILABLE=650000000)
    db2.edit("ENV_GET_SYSTEM_RESOURCES", {"MEMBER": "0"}, SWAP_PAGES_IN=1100)


# --- the normal cycle ---------------------------------------------------------------------------


async def test_rates_are_right_on_the_fixture_data(db2):
    c = db2.collector()
    await c.start()
    second_reading(db2)
    records = await c.collect()
    d = by(records, "db2_database", member="0").fields
    assert d["commits_per_s"] == 50.0 and d["rollbacks_per_s"] == 1.0 and d["activities_per_s"] == 200.0
    assert d["rows_read_per_s"] == 10000.0 and d["rows_returned_per_s"] == 1000.0
    assert d["rows_read_per_row_returned"] == 10.0
    assert d["request_ms_per_s"] == 2000.0 and d["wait_ms_per_s"] == 1000.0
    # shares of the 20 000 ms of request time: wait 10 000, pool read 4 000, log disk 2 000, lock 1 000,
    # prefetch 500; CPU 5 000 000 µs = 5 000 ms
    assert d["wait_pct"] == 50.0 and d["pool_read_wait_pct"] == 20.0 and d["log_disk_wait_pct"] == 10.0
    assert d["lock_wait_pct"] == 5.0 and d["prefetch_wait_pct"] == 2.5 and d["cpu_pct"] == 25.0
    assert d["pool_write_wait_pct"] == 0.0 and d["direct_read_wait_pct"] == 0.0
    assert d["cpu_ms_per_s"] == 500.0 and d["cpu_us_per_activity"] == 2500.0
    assert d["lock_waits_per_s"] == 1.0 and d["lock_wait_ms"] == 100.0 and d["deadlocks_per_s"] == 0.1
    assert d["sort_overflow_pct"] == 5.0 and d["sorts_per_s"] == 10.0
    assert d["hash_join_overflow_pct"] == 5.0 and d["pkg_cache_hit_pct"] == 99.0

    bp = by(records, "db2_bufferpool", bufferpool="IBMDEFAULTBP").fields
    assert (1 - bp["physical_reads_per_s"] / bp["logical_reads_per_s"]) * 100 == 60.0  # the old formula: "cold"
    # logical 9 000 data + 10 000 index + 1 000 temp data = 20 000; physical 7 900 + 100 = 8 000, 7 600 prefetched.
    # Pages the agents found (found - found by prefetchers): data 17 300 - 7 500 = 9 800 of 10 000, index 9 900 of
    # 10 000. 1 - physical/logical would call this pool cold: data 21 %, overall 60 %.
    assert bp["logical_reads_per_s"] == 2000.0 and bp["physical_reads_per_s"] == 800.0
    assert bp["data_hit_pct"] == 98.0 and bp["index_hit_pct"] == 99.0 and bp["hit_pct"] == 98.5
    assert "temp_hit_pct" not in bp and bp["temp_logical_reads_per_s"] == 100.0
    assert bp["async_reads_per_s"] == 760.0 and bp["async_read_pct"] == 95.0
    assert bp["read_ms_per_page"] == 2.0 and bp["sync_read_ms_per_page"] == 1.5
    assert bp["writes_per_s"] == 30.0 and bp["write_ms_per_page"] == 2.0
    assert bp["dirty_steal_cleans_per_s"] == 0.5 and bp["lsn_gap_cleans_per_s"] == 1.0
    assert bp["threshold_cleans_per_s"] == 0.0
    idle = by(records, "db2_bufferpool", bufferpool="BP32K").fields
    assert idle["hit_pct"] is None and idle["logical_reads_per_s"] == 0.0  # no reads: no ratio, not 0 %
    assert not [r for r in records if r.tags.get("bufferpool", "").startswith("IBMSYSTEMBP")]

    ts = by(records, "db2_tablespace", tablespace="USERSPACE1").fields
    assert ts["pages_read_per_s"] == 100.0 and ts["read_ms_per_page"] == 1.5
    assert ts["pages_written_per_s"] == 15.0 and ts["write_ms_per_page"] == 4.0
    # prefetched: 300 data + 200 column-organized pages of 1 000 read
    assert ts["async_read_pct"] == 50.0 and ts["direct_read_ms"] == 4.0 and ts["prefetch_wait_ms"] == 10.0
    assert ts["used_bytes"] == 75000 * 8192 and ts["total_bytes"] == 100000 * 8192 and ts["used_pct"] == 75.0

    c0 = by(records, "db2_container", container="/db2/data1/db2inst1/PROD/userspace1 c0.dat").fields
    c1 = by(records, "db2_container", container="/db2/daten2/db2inst1/PROD/straße|c1.dat").fields
    assert c0["read_ms_per_page"] == 3.0 and c1["read_ms_per_page"] == 1.0  # the imbalance to see
    assert c0["pages_read_per_s"] == 40.0 and c0["write_ms_per_page"] == 2.0 and c1["write_ms_per_page"] is None
    assert c0["fs_used_pct"] == 60.0 and c1["fs_total_bytes"] == 500000000000 and c0["accessible"] is True

    lg = by(records, "db2_log", member="0").fields
    assert lg["log_write_ms"] == 0.4 and lg["log_writes_per_s"] == 100.0
    assert lg["log_write_bytes_per_s"] == 2560 * 4096 / 10 and lg["log_buffer_full"] == 1
    assert lg["log_used_pct"] == 35.0 and lg["log_available_bytes"] == 650000000

    mem = by(records, "db2_memory", memory_set="DATABASE", memory_db="PROD").fields
    assert mem["committed_bytes"] == 4000000 * 1024
    assert by(records, "db2_memory", memory_set="DBMS").tags["memory_db"] == "-"
    sysr = by(records, "db2_system", member="0").fields
    assert sysr["swap_in_pages_per_s"] == 10.0 and sysr["swap_out_pages_per_s"] == 0.0
    assert sysr["cpu_usage_pct"] == 35 and sysr["memory_total_bytes"] == 32768 * 2**20
    await c.close()


async def test_one_ssh_round_trip_and_one_clp_process_per_cycle(db2):
    c = db2.collector()
    await c.start()
    await c.describe()  # facts and monitoring queries in the same session
    await c.collect()
    await c.collect()
    assert db2.sshd.commands() == ["sh -s"] * 3
    assert [x["argv"][1:] for x in calls(db2.dir)] == [["-x", "+p", "-t"]] * 3
    stdin = calls(db2.dir)[-1]["stdin"]
    assert stdin.startswith("ECHO @@db2vtop:connect;\nCONNECT TO PROD;\n") and stdin.endswith("TERMINATE;\n")
    assert stdin.count("SELECT ") == 7 and calls(db2.dir)[1]["stdin"].count("SELECT ") == len(QUERIES)
    await c.close()


async def test_facts_name_the_configuration_the_practices_check(db2):
    c = db2.collector()
    facts = {(f.kind, tuple(sorted(f.tags.items()))): f.data for f in await c.describe()}
    kinds = {k for k, _ in facts}
    assert kinds == {"db2_database", "db2_dbcfg", "db2_dbmcfg", "db2_registry", "db2_tablespace", "db2_container",
                     "db2_bufferpool"}

    def one(kind, **tags):
        want = {"db2": "prod", "database": "PROD", **tags}
        return next(d for (k, t), d in facts.items() if k == kind and all(dict(t).get(x) == v for x, v in want.items()))

    db = one("db2_database")
    assert db["level"] == "DB2 v11.5.8.0" and db["server"] == "DB2/LINUXX8664 11.5.8.0" and db["instance"] == "DB2INST1"
    assert db["log_path"] == "/ssd1/logs/NODE0000/LOGSTREAM0000/" and db["monitoring_status"] == "ok"
    assert db["monitoring"] == {"mon_req_metrics": "BASE", "mon_act_metrics": "BASE", "mon_obj_metrics": "BASE"}
    assert db["sources"]["log"] == "MON_GET_TRANSACTION_LOG" and "fallbacks" not in db
    cfg = one("db2_dbcfg", member="0")
    params = cfg["params"]
    for name, value in {"self_tuning_mem": "OFF", "database_memory": "AUTOMATIC(1250000)", "num_iocleaners": "20",
                        "num_ioservers": "8", "logbufsz": "8192", "logfilsiz": "16384", "logprimary": "50",
                        "logsecond": "0"}.items():
        assert params[name] == value, name
    assert cfg["pending"] == {"pckcachesz": "2000"}
    dbm = facts[("db2_dbmcfg", (("db2", "prod"),))]
    assert dbm["params"]["instance_memory"] == "AUTOMATIC(8355840)" and dbm["pending"] == {"cpuspeed": "-1"}
    reg = facts[("db2_registry", (("db2", "prod"), ("member", "0")))]
    assert reg["DB2_PARALLEL_IO"] == "*:5" and reg["DB2_LARGE_PAGE_MEM"] == "DB"
    assert reg["DB2_USE_ALTERNATE_PAGE_CLEANING"] == "YES"
    us = one("db2_tablespace", tablespace="USERSPACE1")
    assert us == {"id": 2, "type": "DMS", "content": "LARGE", "page_size_bytes": 8192, "extent_pages": 32,
                  "prefetch_pages": 64, "prefetch_automatic": False, "auto_storage": False, "auto_resize": True,
                  "fs_caching": 1, "overhead_ms": 8.6, "transfer_rate_ms": 0.1, "bufferpool_id": 1,
                  "containers": 2, "members": ["0"]}
    assert one("db2_tablespace", tablespace="SYSCATSPACE")["prefetch_automatic"] is True
    odd = one("db2_container", container="/db2/daten2/db2inst1/PROD/straße|c1.dat")
    assert odd["path"] == "/db2/daten2/db2inst1/PROD/straße|c1.dat" and odd["fs_id"] == "64784"
    assert one("db2_container", tablespace="TEMPSPACE1")["fs_id"] == "fs-a1"  # FS_ID is VARCHAR(22)
    assert one("db2_bufferpool", bufferpool="IBMDEFAULTBP")["automatic"] is True
    assert one("db2_bufferpool", bufferpool="BP32K")["block_pages"] == 3200
    assert db2.sshd.commands() == ["sh -s"]
    records = await c.collect()  # the monitoring rows came with the facts: no second round trip
    assert db2.sshd.commands() == ["sh -s"]
    assert {r.measurement for r in records if isinstance(r, Sample)} == {"db2_memory", "db2_system"}  # no rates yet
    await c.close()


async def test_a_monitoring_level_of_none_is_reported(db2):
    db2.edit("SYSIBMADM.DBCFG", {"NAME": "mon_obj_metrics"}, VALUE="NONE", DEFERRED_VALUE="NONE")
    db2.edit("SYSIBMADM.DBCFG", {"NAME": "mon_req_metrics"}, VALUE="NONE", DEFERRED_VALUE="NONE")
    c = db2.collector()
    db = next(f.data for f in await c.describe() if f.kind == "db2_database")
    assert db["monitoring_status"].startswith("off: mon_req_metrics=NONE, mon_obj_metrics=NONE")
    await c.close()


# --- errors -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("behaviour", "overrides", "expected"), [
    ({"connect_error": "SQL1032N"}, {}, r"instance is not started \(SQL1032N .*\); start it with db2start"),
    ({}, {"database": "NOSUCH"}, r"database NOSUCH is not known to this instance \(SQL1013N"),
    ({"deny": ["MON_GET_BUFFERPOOL"]}, {},
     r"SQL0551N .*Grant the monitoring user: GRANT EXECUTE ON FUNCTION SYSPROC\.MON_GET_BUFFERPOOL TO USER"),
    ({"garbage": {"MON_GET_BUFFERPOOL": "Segmentation fault (core dumped)\n\x00\xff junk"}}, {},
     "unexpected output from the CLP for query 'bp'"),
    ({"truncate": "MON_GET_CONTAINER"}, {}, r"output ended early \(after ct; no exit status\)"),
    ({}, {"instance_profile": "~nosuchuser/sqllib/db2profile"},
     "instance profile ~nosuchuser/sqllib/db2profile is not readable"),
], ids=["instance-down", "no-such-database", "no-privilege", "garbage", "truncated", "no-profile"])
async def test_each_failure_is_a_clear_collector_error(db2, behaviour, overrides, expected):
    db2.set(**behaviour)
    c = db2.collector(**overrides)
    with pytest.raises(Db2Error, match=expected):
        await c.collect()
    await c.close()


async def test_a_hung_clp_times_out_and_is_killed_on_the_remote_side(db2):
    db2.set(hang_s=60)
    c = db2.collector(timeout=2.0)
    with pytest.raises(SSHTimeoutError, match=r"timed out after 1\.8s \(the whole call\)"):
        await c.collect()
    pid = int((db2.dir / "hung.pid").read_text())
    deadline = time.monotonic() + 15  # the remote watchdog fires int(timeout) + 3 s after the start
    while time.monotonic() < deadline and Path(f"/proc/{pid}").exists():
        await asyncio.sleep(0.2)
    assert not Path(f"/proc/{pid}").exists(), "the hung CLP outlived the remote watchdog"
    db2.set(hang_s=0)
    await c.collect()  # and the next cycle works again over the same connection
    await c.close()


async def test_facts_are_read_again_after_a_reconnect(db2):
    c = db2.collector()
    await c.describe()
    c.facts_done()  # what the runtime does after describe()
    await c.collect()
    assert not c.facts_due()
    db2.sshd.kill_sessions()  # the SSH connection drops (host reboot, network, sshd restart)
    for _ in range(3):
        try:
            await c.collect()
            break
        except CollectorError:
            await asyncio.sleep(1.1)  # the SSH layer's reconnect backoff
    assert c.transport.connects == 2 and c.facts_due()
    await c.close()


async def test_a_counter_reset_starts_a_new_baseline_and_is_annotated(db2):
    c = db2.collector()
    await c.start()
    second_reading(db2)
    assert by(await c.collect(), "db2_database", member="0").fields["commits_per_s"] == 50.0
    # the database was deactivated and activated again: counters restart near zero
    db2.set(clock=T2)
    db2.edit("MON_GET_DATABASE", {"MEMBER": "0"}, DB_CONN_TIME="2026-11-22-10.00.15.000000", TOTAL_APP_COMMITS=40)
    db2.edit("MON_GET_BUFFERPOOL", {"BP_NAME": "IBMDEFAULTBP"}, POOL_DATA_L_READS=900)
    records = await c.collect()
    assert not [r for r in records if isinstance(r, Sample) and r.measurement in
                ("db2_database", "db2_bufferpool", "db2_tablespace", "db2_container", "db2_log")]
    (reset,) = [r for r in records if isinstance(r, Annotation)]
    assert reset.event == "reset" and reset.tags == {"db2": "prod", "database": "PROD", "member": "0"}
    assert "activated again at 2026-11-22-10.00.15.000000" in reset.text and "new baseline" in reset.text
    # a third reading rates against the new baseline
    db2.set(clock="2026-11-22-10.00.30.000000")
    db2.edit("MON_GET_DATABASE", {"MEMBER": "0"}, TOTAL_APP_COMMITS=240)
    assert by(await c.collect(), "db2_database", member="0").fields["commits_per_s"] == 20.0
    await c.close()


async def test_one_counter_going_back_resets_only_that_row(db2):
    c = db2.collector()
    await c.start()
    second_reading(db2)
    db2.edit("MON_GET_BUFFERPOOL", {"BP_NAME": "IBMDEFAULTBP"}, POOL_DATA_L_READS=5)  # dropped and re-created
    records = await c.collect()
    assert by(records, "db2_database", member="0").fields["commits_per_s"] == 50.0
    assert by(records, "db2_bufferpool", bufferpool="BP32K")
    assert not [r for r in records if isinstance(r, Sample) and r.tags.get("bufferpool") == "IBMDEFAULTBP"]
    (reset,) = [r for r in records if isinstance(r, Annotation)]
    assert reset.event == "reset" and "MON_GET_BUFFERPOOL IBMDEFAULTBP" in reset.text
    await c.close()


async def test_a_password_is_never_on_a_remote_command_line(db2, monkeypatch):
    monkeypatch.setenv("DB2MON_PW", PASSWORD)
    db2.set(password=PASSWORD)
    c = db2.collector(user="db2mon", password_env="DB2MON_PW")
    await c.start()
    await c.collect()
    assert db2.sshd.commands() == ["sh -s", "sh -s"]  # all that sshd received as commands
    for call in calls(db2.dir):
        assert PASSWORD not in " ".join(call["argv"])  # the CLP's own argv, as `ps` would show it
        assert f"CONNECT TO PROD USER db2mon USING {PASSWORD};" in call["stdin"]  # it went on stdin
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert PASSWORD not in ps
    monkeypatch.setenv("DB2MON_PW", "wrong-" + PASSWORD)
    with pytest.raises(Db2Error, match="refused the user or password") as e:
        await c.collect()
    assert PASSWORD not in str(e.value)
    await c.close()


async def test_a_password_the_clp_cannot_take_is_refused_before_sending(db2, monkeypatch):
    monkeypatch.setenv("DB2MON_PW", "with space;drop")
    c = db2.collector(user="db2mon", password_env="DB2MON_PW")
    with pytest.raises(Db2Error, match="blank, quote"):
        await c.collect()
    assert db2.sshd.commands() == []
    await c.close()


# --- DB2 levels ------------------------------------------------------------------------------------------


async def test_db2_9_7_falls_back_and_says_which(sshd, tmp_path):
    sshd.clear_commands()
    db2 = Scenario(sshd, tmp_path, level="v9_7")
    c = db2.collector()
    await c.start()         # MON_GET_DATABASE, MON_GET_TRANSACTION_LOG, memory and system: SQL0440N
    await c.describe()      # MON_GET_WORKLOAD's newer columns, DBCFG.MEMBER, ENV_GET_REG_VARIABLES: SQL0206N/0440N
    c.facts_done()          # as the runtime does after describe()
    notes = await c.collect()
    assert c.facts_due()    # those facts were incomplete: read again next cycle
    for _ in range(3):      # one fallback per query and cycle: (member, showall), (member), then the view
        facts = await c.describe()
        c.facts_done()
        notes += await c.collect()
        if not c.facts_due():
            break
    assert not c.facts_due()  # now all from 9.7 sources
    texts = [n.text for n in notes if isinstance(n, Annotation) and n.event == "db2_fallback"]
    assert ('MON_GET_TRANSACTION_LOG is not available at this DB2 level (SQL0440N No authorized routine named '
            '"MON_GET_TRANSACTION_LOG" of type "FUNCTION" having compatible arguments was found.); '
            "using SYSIBMADM.SNAPDB") in texts
    assert any(t.startswith('MON_GET_WORKLOAD summed per member lacks a column at this DB2 level (SQL0206N '
                            '"PREFETCH_WAIT_TIME" is not valid') for t in texts)
    assert any("MON_GET_MEMORY_SET is not available" in t and t.endswith("not collected") for t in texts)
    db = next(f.data for f in facts if f.kind == "db2_database")
    assert db["sources"]["db"] == ("MON_GET_WORKLOAD summed per member without HASH_JOIN_OVERFLOWS, "
                                   "PREFETCH_WAIT_TIME, TOTAL_HASH_JOINS")
    assert db["sources"]["log"] == "SYSIBMADM.SNAPDB" and db["sources"]["reg"] == "SYSIBMADM.REG_VARIABLES"
    assert set(db["unavailable"]) == {"mem", "sys"} and db["level"] == "DB2 v9.7.0.1"
    assert set(db["fallbacks"]) == {"db", "log", "reg", "dbcfg", "inst", "bp", "ts", "ct", "ctcfg"}
    assert next(f for f in facts if f.kind == "db2_dbcfg").data["params"]["logbufsz"] == "8192"
    assert next(f for f in facts if f.kind == "db2_registry").data["DB2_PARALLEL_IO"] == "*:5"
    # the 9.7 readings give rates too: workloads summed per member, SNAPDB log times in s + ns
    db2.set(clock=T1)
    db2.edit("MON_GET_WORKLOAD", {"WORKLOAD_NAME": "SYSDEFAULTUSERWORKLOAD"}, TOTAL_APP_COMMITS=9450)
    db2.edit("MON_GET_WORKLOAD", {"WORKLOAD_NAME": "SYSDEFAULTADMWORKLOAD"}, TOTAL_APP_COMMITS=1050)
    db2.edit("SYSIBMADM.SNAPDB", {"DBPARTITIONNUM": "0"}, NUM_LOG_WRITE_IO=101000, LOG_WRITE_TIME_S=30,
             LOG_WRITE_TIME_NS=500000000)
    db2.edit("MON_GET_BUFFERPOOL", {"BP_NAME": "IBMDEFAULTBP"}, POOL_DATA_L_READS=1009000, POOL_DATA_P_READS=50900)
    records = await c.collect()
    assert by(records, "db2_database", member="0").fields["commits_per_s"] == 50.0
    assert by(records, "db2_log", member="0").fields["log_write_ms"] == 0.5
    # no pages-found counters on 9.7: that level's documented 1 - physical/logical (900 of 9 000 data pages)
    bp = by(records, "db2_bufferpool", bufferpool="IBMDEFAULTBP").fields
    assert bp["data_hit_pct"] == 90.0 and bp["hit_pct"] == 90.0
    assert not [r for r in records if isinstance(r, Sample) and r.measurement in ("db2_memory", "db2_system")]
    statements = calls(db2.dir)[-1]["stdin"]
    assert "MON_GET_TRANSACTION_LOG" not in statements and "MON_GET_MEMORY_SET" not in statements
    await c.close()


@pytest.mark.parametrize(("syntax", "answered"), [
    ("member, showall", "ENV_GET_REG_VARIABLES(member, showall)"),
    ("member", "ENV_GET_REG_VARIABLES(member)"),  # as levels before showall document it
])
async def test_registry_variables_come_from_the_documented_signature_and_the_log_says_which(
        db2, caplog, syntax, answered):
    path = db2.dir / "tables" / "ENV_GET_REG_VARIABLES.txt"
    path.write_text(path.read_text().replace("ENV_GET_REG_VARIABLES(member, showall)",
                                             f"ENV_GET_REG_VARIABLES({syntax})"))
    c = db2.collector()
    caplog.set_level(logging.INFO, logger="db2vtop.collectors.db2.collector")
    facts = await c.describe()
    if syntax == "member":  # a signature the server lacks costs one cycle
        assert not [f for f in facts if f.kind == "db2_registry"]
        facts = await c.describe()
    reg = next(f.data for f in facts if f.kind == "db2_registry")
    assert reg["DB2_PARALLEL_IO"] == "*:5"
    assert next(f.data for f in facts if f.kind == "db2_database")["sources"]["reg"] == answered
    assert f"query 'reg' answered by {answered}" in caplog.text
    assert "TABLE(ENV_GET_REG_VARIABLES(-2,0))" in calls(db2.dir)[0]["stdin"]  # all members, set variables only
    if syntax == "member":
        assert 'SQL0440N No authorized routine named "ENV_GET_REG_VARIABLES"' in caplog.text
    await c.close()


# --- through the real runtime ------------------------------------------------------------------------------


class Heartbeat(BaseCollector):
    async def collect(self):
        return [Sample("heartbeat", {}, {"ok": 1})]


class Capture:
    def __init__(self):
        self.samples, self.facts, self.annotations = [], [], []

    def submit(self, samples=(), facts=(), annotations=()):
        self.samples += samples
        self.facts += facts
        self.annotations += annotations

    def status(self, name):
        return [s.fields for s in self.samples if s.measurement == SELF_MEASUREMENT and s.tags["collector"] == name]


@pytest.mark.parametrize(("behaviour", "overrides", "expected"), [
    ({"connect_error": "SQL1032N"}, {}, "SQL1032N"),
    ({}, {"database": "NOSUCH"}, "SQL1013N"),
    ({"deny": ["MON_GET_TABLESPACE"]}, {}, "SQL0551N"),
    ({"garbage": {"MON_GET_CONTAINER": "%%%%"}}, {}, "unexpected output"),
    ({"truncate": "MON_GET_BUFFERPOOL"}, {}, "ended early"),
    ({"hang_s": 30}, {"timeout": 1.5}, "timed out after"),
])
async def test_every_error_is_a_recorded_collector_error_while_others_go_on(db2, behaviour, overrides, expected):
    db2.set(**behaviour)
    c = db2.collector(**{"interval": 0.5, "timeout": 5.0, **overrides})
    out = Capture()
    rt = Runtime([c, Heartbeat("heartbeat", 0.2)], [out])
    await rt.run(duration=2.5)
    mine = out.status("db2:prod")
    assert mine and all(m["status"] in ("error", "timeout", "skipped") for m in mine)
    assert expected in rt.stats["db2:prod"].last_error
    beats = out.status("heartbeat")
    assert len(beats) >= 6 and all(m["status"] == "ok" for m in beats)


async def test_a_healthy_collector_fills_measurements_and_facts_through_the_runtime(db2):
    db2.set(clock=None)  # the stand-in's real clock: a second reading a little later
    c = db2.collector(interval=1.0, timeout=10.0)
    out = Capture()
    await Runtime([c], [out]).run_once()
    assert {s.measurement for s in out.samples} >= {"db2_database", "db2_bufferpool", "db2_tablespace",
                                                    "db2_container", "db2_log", "db2_memory", "db2_system"}
    assert {f.kind for f in out.facts} >= {"db2_database", "db2_dbcfg", "db2_registry"}
    assert out.status("db2:prod")[-1]["status"] == "ok"


# --- the ibm_db transport -------------------------------------------------------------------------------------


def test_a_missing_driver_is_one_line_of_advice(tmp_path):
    """`python -S`: no site-packages, so no ibm_db, exactly as on a machine without the extra.

    The db2vtop namespace is laid out from the source folders by symlinks, as the wheel lays it out.
    """
    root = Path(__file__).resolve().parents[3]
    (tmp_path / "db2vtop").mkdir()
    for folder in ("agent", "collectors"):
        (tmp_path / "db2vtop" / folder).symlink_to(root / folder)
    code = ("from db2vtop.collectors.db2.transport import load_driver\ntry:\n    load_driver()\n"
            "except Exception as e:\n    print(type(e).__name__, e)")
    r = subprocess.run([sys.executable, "-S", "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=30)
    assert r.stdout == ("Db2Error transport = \"ibm_db\" needs IBM's Python driver, which is not installed: "
                        "pip install 'db2vtop[ibm_db]' (or pip install ibm_db)\n"), r.stderr


def test_a_broken_driver_is_one_line_of_advice(tmp_path, monkeypatch):
    (tmp_path / "ibm_db_dbi.py").write_text(
        "raise ImportError('libdb2.so.1: cannot open shared object file: No such file or directory')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "ibm_db_dbi", raising=False)
    with pytest.raises(Db2Error) as e:
        load_driver()
    msg = str(e.value)
    assert "\n" not in msg and "libdb2.so.1: cannot open shared object file" in msg
    assert "pip install --force-reinstall ibm_db" in msg


async def test_the_real_driver_reports_an_unreachable_server_clearly(monkeypatch):
    pytest.importorskip("ibm_db_dbi")
    monkeypatch.setenv("DB2MON_PW", PASSWORD)
    cfg = DB2Config(name="prod", database="PROD", transport="ibm_db", host="127.0.0.1", port=free_port(),
                    user="db2mon", password_env="DB2MON_PW", timeout=3.0)
    c = Db2Collector(cfg, DriverTransport(cfg, "127.0.0.1"))
    with pytest.raises(Db2Error, match=r"cannot reach the DB2 server \(SQL30081N A communication error") as e:
        await c.collect()
    assert PASSWORD not in str(e.value) and "\n" not in str(e.value)
    await c.close()


async def test_the_driver_transport_runs_the_same_queries_to_the_same_figures(db2, monkeypatch):
    monkeypatch.setenv("DB2MON_PW", PASSWORD)
    api = DbApi(db2.dir)
    cfg = db2.config(transport="ibm_db", host="db2prod01", user="db2mon", password_env="DB2MON_PW", ssh=None)
    c = Db2Collector(cfg, DriverTransport(cfg, "db2prod01", driver=api))
    facts = await c.describe()
    await c.collect()
    second_reading(db2)
    records = await c.collect()
    assert by(records, "db2_database", member="0").fields["commits_per_s"] == 50.0
    assert by(records, "db2_bufferpool", bufferpool="IBMDEFAULTBP").fields["hit_pct"] == 98.5
    assert next(f.data for f in facts if f.kind == "db2_database")["transport"] == "ibm_db"
    assert len(api.dsns) == 1 and f"PWD={PASSWORD};" in api.dsns[0] and "HOSTNAME=db2prod01;PORT=50000;" in api.dsns[0]
    assert len(api.executed) == len(QUERIES) + 7 and db2.sshd.commands() == []
    db2.set(connect_error="SQL1032N")
    c.transport.close()
    with pytest.raises(Db2Error, match="instance is not started"):
        await c.collect()
    await c.close()


# --- config, assembly and the real CLI ------------------------------------------------------------------------


SSH_SECTION = '[[ssh]]\nname = "h"\nhost = "db2prod01"\nuser = "db2inst1"\n'


@pytest.mark.parametrize(("section", "key", "problem"), [
    ('database = "PRODUCTION1"\nssh = "h"', "db2[0].database", "a database alias of 1-8"),
    ('database = "PROD"\nssh = "h"\nuser = "db2mon"', "db2[0]", "user and a password_* go together"),
    ('database = "PROD"\nssh = "h"\npassword_env = "PW"', "db2[0]", "user and a password_* go together"),
    ('database = "PROD"\nssh = "h"\nuser = "a b"\npassword_env = "PW"', "db2[0].user", "a DB2 user name"),
    ('database = "PROD"\ntransport = "ibm_db"', "db2[0].host", "connects to host:port"),
    ('database = "PROD"\ntransport = "ibm_db"\nhost = "x"', "db2[0]", "needs user and one of password_env"),
    ('database = "PROD"\nssh = "h"\nmember = -3', "db2[0].member", "-2 (all members)"),
])
def test_db2_config_errors_name_the_key(tmp_path, section, key, problem):
    from tests.infra.configs import error_of

    e = error_of(tmp_path, f'{SSH_SECTION}[[db2]]\nname = "prod"\n{section}\n')
    assert e.key == key and problem in e.problem


def test_db2_sections_become_collectors_sharing_one_ssh_connection(tmp_path):
    from db2vtop.agent.assemble import build_collectors
    from db2vtop.agent.config import load_config

    path = tmp_path / "c.toml"
    path.write_text(SSH_SECTION + '[[db2]]\nname = "a"\nssh = "h"\ndatabase = "PROD"\n'
                    '[[db2]]\nname = "b"\nssh = "h"\ndatabase = "TEST"\ninterval = "30s"\nmember = -1\n'
                    '[[db2]]\nname = "c"\ndatabase = "PROD"\ntransport = "ibm_db"\nssh = "h"\nuser = "u"\n'
                    'password_env = "PW"\n')
    db2s = [c for c in build_collectors(load_config(path)) if isinstance(c, Db2Collector)]
    assert [c.name for c in db2s] == ["db2:a", "db2:b", "db2:c"] and db2s[1].interval == 30.0
    assert db2s[0].transport.target is db2s[1].transport.target
    assert isinstance(db2s[2].transport, DriverTransport) and db2s[2].transport.host == "db2prod01"
    assert "MON_GET_BUFFERPOOL('',-1)" in dict(db2s[1].statements(False))["bp"]


def test_the_agent_stores_db2_measurements_and_facts(db2, tmp_path):
    from db2vtop.agent.core.store import Store
    from tests.conftest import run_cli

    db2.set(clock=None)
    ssh = db2.sshd.ssh_config()
    cfg = tmp_path / "db2vtop.toml"
    cfg.write_text(f'''[guest]
enabled = false
[[ssh]]
name = "db2host"
host = "127.0.0.1"
port = {ssh["port"]}
user = "{ssh["user"]}"
key_file = "{ssh["key_file"]}"
known_hosts = "{ssh["known_hosts"]}"
[[db2]]
name = "prod"
ssh = "db2host"
database = "PROD"
instance_profile = "{db2.profile}"
interval = "1s"
timeout = "10s"
''')
    store = tmp_path / "m.db"
    r = run_cli("agent", "--once", "-c", str(cfg), "--store", str(store))
    assert r.returncode == 0, r.stderr
    with Store(store) as s:
        assert set(s.measurements()) >= {"db2_database", "db2_bufferpool", "db2_tablespace", "db2_container",
                                         "db2_log", "db2_memory", "db2_system", "db2vtop_collector"}
        assert s.latest("db2_database")[0].fields["commits_per_s"] == 0.0
        kinds = {f.kind for f in s.facts()}
        assert {"db2_database", "db2_dbcfg", "db2_dbmcfg", "db2_registry", "db2_tablespace", "db2_container",
                "db2_bufferpool"} <= kinds
