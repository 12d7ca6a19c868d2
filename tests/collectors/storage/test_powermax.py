"""PowerMax: `symstat` over a real sshd through a shim, and Unisphere REST on a local server."""

from __future__ import annotations

import contextlib
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from db2vtop.agent.core.supervise import Supervisor
from db2vtop.agent.runtime import Runtime
from db2vtop.collectors.base import CollectorError
from db2vtop.collectors.ssh import SSHTarget
from db2vtop.collectors.ssh.config import SSHConfig
from db2vtop.collectors.storage.common import StorageFormatError
from db2vtop.collectors.storage.powermax import symstat, unisphere
from db2vtop.collectors.storage.powermax.collector import PowermaxCollector
from db2vtop.collectors.storage.powermax.config import PowermaxConfig
from tests.collectors.storage.rest_server import FakeREST, Memory

SID = "000197900123"

# Element names of `symstat -type requests -output XML` as Dell EMC's ViPR SRM (Watch4net)
# VMAX collector reads them (/Request/r_per_second, ../dev_name ...); SYMCLI XML reports
# have a <SymCLI_ML> root. Values invented.
SYMSTAT_XML = f"""<?xml version="1.0" standalone="yes" ?>
<SymCLI_ML>
  <Symmetrix>
    <Symm_Info><symid>{SID}</symid></Symm_Info>
    <Statistics>
      <Request>
        <dev_name>0011A</dev_name><pd_name>/dev/sdc</pd_name>
        <r_per_second>1250</r_per_second><w_per_second>800</w_per_second>
        <kb_r_per_second>40960</kb_r_per_second><kb_w_per_second>25600</kb_w_per_second>
        <r_cache_hit_pct>92.5</r_cache_hit_pct><w_cache_hit_pct>100</w_cache_hit_pct>
        <sequential_r_pct>12</sequential_r_pct><wp_tracks>340</wp_tracks>
      </Request>
      <Request>
        <dev_name>0011B</dev_name><pd_name>N/A</pd_name>
        <r_per_second>0</r_per_second><w_per_second>0</w_per_second>
        <kb_r_per_second>0</kb_r_per_second><kb_w_per_second>0</kb_w_per_second>
        <r_cache_hit_pct>N/A</r_cache_hit_pct><w_cache_hit_pct>N/A</w_cache_hit_pct>
        <sequential_r_pct>N/A</sequential_r_pct><wp_tracks>0</wp_tracks>
      </Request>
    </Statistics>
  </Symmetrix>
</SymCLI_ML>
"""


def shim(sshd, tmp_path: Path, output: str, rc: int = 0) -> None:
    out = tmp_path / "symstat.out"
    out.write_text(output)
    sshd.shim("symstat", f"""#!/bin/sh
[ "$*" = "-sid {SID} -type requests -i 2 -c 1 -output XML" ] || {{ echo "symstat: bad arguments: $*" >&2; exit 1; }}
cat {out}
exit {rc}
""")


def ssh_collector(sshd, **extra) -> tuple[PowermaxCollector, SSHTarget]:
    ssh = sshd.ssh_config()
    target = SSHTarget(SSHConfig(**{**ssh, "key_file": Path(ssh["key_file"]), "known_hosts": Path(ssh["known_hosts"])}))
    cfg = PowermaxConfig(name="vmax1", ssh="test", sid=SID, sample_interval=2.0, **extra)
    return PowermaxCollector(cfg, target), target


async def test_symstat_per_device_over_ssh(sshd, tmp_path):
    shim(sshd, tmp_path, SYMSTAT_XML)
    sshd.clear_commands()
    c, target = ssh_collector(sshd)
    out = await c.collect()
    target.close()
    assert sshd.commands() == [f"symstat -sid {SID} -type requests -i 2 -c 1 -output XML"]
    dev = next(s for s in out if s.tags["device"] == "0011A")
    assert dev.tags == {"storage": "vmax1", "kind": "powermax", "sid": SID, "device": "0011A", "pd_name": "/dev/sdc"}
    assert dev.fields == {"read_iops": 1250.0, "write_iops": 800.0, "total_iops": 2050.0,
                          "read_bytes_per_s": 41943040.0, "write_bytes_per_s": 26214400.0, "read_hit_pct": 92.5,
                          "write_hit_pct": 100.0, "sequential_read_pct": 12.0, "write_pending_tracks": 340.0}
    idle = next(s for s in out if s.tags["device"] == "0011B")
    assert "pd_name" not in idle.tags and "read_hit_pct" not in idle.fields


@pytest.mark.parametrize(("output", "rc", "expected"), [
    ("", 1, "symstat -sid 000197900123 ended with status 1"),
    ("<SymCLI_ML><Symmetrix><Statistics><Request><dev_name>0011A</dev_name>", 0, "not XML"),
    ("<SymCLI_ML><Request><dev_name>1</dev_name><r_per_second>x</r_per_second></Request></SymCLI_ML>", 0,
     "r_per_second: 'x' is not a number"),
])
async def test_symstat_failures_are_recorded(sshd, tmp_path, output, rc, expected):
    shim(sshd, tmp_path, output, rc)
    c, target = ssh_collector(sshd, interval=10.0)
    rt = Runtime([c], [Memory()])
    await rt.run_once()
    target.close()
    assert rt.stats[c.name].errors == 1 and expected in rt.stats[c.name].last_error


def unisphere_routes(server: FakeREST, results: list[dict]) -> None:
    server.routes = {
        unisphere.KEYS_PATH: (200, {"storageGroupInfo": [{"storageGroupId": "DB2_PROD_SG", "firstAvailableDate": 1,
                                                          "lastAvailableDate": 2}]}),
        unisphere.METRICS_PATH: lambda m, p, q, body: (200, {
            "resultList": {"result": results, "from": 1, "to": len(results)}, "id": "x", "count": len(results),
            "expirationTime": 0, "maxPageSize": 1000}),
    }


async def test_unisphere_storage_group_response_times(tmp_path, monkeypatch):
    monkeypatch.setenv("U4P_PW", "pw")
    now = int(time.time() * 1000)
    older = {"timestamp": now - 600_000, "HostIOs": 1.0, "ResponseTime": 99.0}
    newest = {"timestamp": now - 300_000, "HostIOs": 3000.0, "HostReads": 2000.0, "HostWrites": 1000.0,
              "HostMBReads": 62.5, "HostMBWritten": 31.25, "ResponseTime": 0.8, "ReadResponseTime": 0.6,
              "WriteResponseTime": 1.2}
    with FakeREST("monitor", "pw", tls_dir=tmp_path) as server:
        unisphere_routes(server, [older, newest])
        cfg = PowermaxConfig(name="vmax1", transport="rest", url=server.url, user="monitor",
                            password_env="U4P_PW", ca_file=server.ca_file, sid=SID)
        c = PowermaxCollector(cfg)
        (sample,) = await c.collect()
        again = await c.collect()  # Unisphere has nothing newer: nothing is stored twice
        await c.close()
        sent = [(m, p, b) for m, p, b in server.requests]
    assert sample.measurement == "storage_group" and sample.ts == newest["timestamp"] * 1_000_000
    assert sample.tags == {"storage": "vmax1", "kind": "powermax", "sid": SID, "storage_group": "DB2_PROD_SG"}
    assert sample.fields == {"total_iops": 3000.0, "read_iops": 2000.0, "write_iops": 1000.0,
                             "read_bytes_per_s": 65536000.0, "write_bytes_per_s": 32768000.0,
                             "avg_latency_ms": 0.8, "read_latency_ms": 0.6, "write_latency_ms": 1.2}
    assert again == []
    body = sent[1][2]
    assert (body["symmetrixId"], body["storageGroupId"], body["dataFormat"]) == (SID, "DB2_PROD_SG", "Average")
    assert "ReadResponseTime" in body["metrics"] and body["endDate"] > body["startDate"]


async def test_an_interval_dated_past_2262_is_set_aside_and_the_next_one_still_taken(tmp_path, monkeypatch):
    """It became the group's mark (no later interval was ever newer) and, as a sample time, ended the store
    writer's thread; now it is set aside at the source and counted."""
    monkeypatch.setenv("U4P_PW", "pw")
    now = int(time.time() * 1000)
    with FakeREST("monitor", "pw", tls_dir=tmp_path) as server:
        cfg = PowermaxConfig(name="vmax1", transport="rest", url=server.url, user="monitor",
                            password_env="U4P_PW", ca_file=server.ca_file, sid=SID)
        c = PowermaxCollector(cfg)
        c.supervisor = sup = Supervisor()
        unisphere_routes(server, [{"timestamp": 10**13, "HostIOs": 1.0}])  # the year 2286
        assert await c.collect() == []
        unisphere_routes(server, [{"timestamp": now - 300_000, "HostIOs": 5.0}])
        (sample,) = await c.collect()
        await c.close()
    assert sample.ts == (now - 300_000) * 1_000_000
    (health,) = sup.snapshot()
    assert health.set_aside == 1 and "Unisphere interval of DB2_PROD_SG" in health.last_error


def test_symstat_xml_with_a_doctype_is_refused():
    bomb = ('<?xml version="1.0"?><!DOCTYPE l [<!ENTITY a "aaaaaaaaaa"><!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;">]>'
            "<SymCLI_ML><Request><dev_name>&b;</dev_name></Request></SymCLI_ML>")
    with pytest.raises(StorageFormatError, match="refused XML \\(DTDForbidden\\)"):
        symstat.parse(bomb)


def test_unisphere_refusal_in_a_200_body_is_an_error():
    with pytest.raises(StorageFormatError, match="Symmetrix 000197900123 not found"):
        unisphere.groups({"message": "Symmetrix 000197900123 not found"})


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=300), st.lists(st.sampled_from(
    ["<SymCLI_ML>", "</SymCLI_ML>", "<Request>", "</Request>", "<dev_name>1A</dev_name>",
     "<r_per_second>5</r_per_second>", "<w_per_second>N/A</w_per_second>", "<kb_r_per_second>1e3</kb_r_per_second>",
     "<kb_w_per_second>-</kb_w_per_second>", "&amp;", "<x/>"]), max_size=12))
def test_fuzzed_symstat_raises_only_collector_errors(noise, parts):
    for text in (noise, "".join(parts)):
        with contextlib.suppress(CollectorError):
            symstat.parse(text)


@settings(max_examples=200, deadline=None)
@given(st.recursive(st.none() | st.integers() | st.floats() | st.text(max_size=6),
                    lambda c: st.lists(c, max_size=3) | st.dictionaries(
                        st.sampled_from(["resultList", "result", "timestamp", "HostIOs", "ResponseTime", "message",
                                         "storageGroupInfo", "storageGroupId"]), c, max_size=4), max_leaves=12))
def test_fuzzed_unisphere_raises_only_collector_errors(body):
    for fn in (lambda: unisphere.groups(body), lambda: unisphere.latest(body, "g", 10)):
        with contextlib.suppress(CollectorError):
            fn()
