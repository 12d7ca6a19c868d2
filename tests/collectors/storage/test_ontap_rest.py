"""ONTAP's REST transport (plain JSON through the arrays' bounded client) against a local HTTPS
server serving the documented JSON (ONTAP 9 REST API reference: /api/storage/volumes
metric object with IOPS, throughput in B/s and latency in microseconds over `duration`)."""

from __future__ import annotations

import pytest

from db2vtop.agent.runtime import Runtime
from db2vtop.collectors.storage.ontap.collector import OntapCollector
from db2vtop.collectors.storage.ontap.config import OntapConfig
from db2vtop.collectors.storage.ontap.rest import duration_s
from tests.collectors.storage.rest_server import FakeREST, Memory


def metric(iops: dict, latency_us: dict, throughput: dict, status: str = "ok") -> dict:
    return {"timestamp": "2026-11-22T10:00:00Z", "duration": "PT15S", "status": status,
            "iops": iops, "latency": latency_us, "throughput": throughput}


def records(*items: dict) -> tuple[int, dict]:
    return 200, {"records": list(items), "num_records": len(items)}


ROUTES = {
    "/api/storage/volumes": lambda m, p, q, b: records(
        {"name": "db2data", "svm": {"name": "vs1"}, "uuid": "u1",
         "metric": metric({"read": 200, "write": 100, "other": 0, "total": 300},
                          {"read": 1200, "write": 2500, "other": 0, "total": 1633},
                          {"read": 1638400, "write": 819200, "other": 0, "total": 2457600}),
         "aggregates": [{"name": "aggr1"}], "size": 2199023255552,
         "space": {"snapshot": {"reserve_percent": 0}}, "snapshot_policy": {"name": "none"},
         "guarantee": {"type": "none"}, "access_time_enabled": False},
        {"name": "quiet", "svm": {"name": "vs1"}, "uuid": "u2",
         "metric": metric({"read": 1, "write": 0, "other": 0, "total": 1},
                          {"read": 9000, "write": 0, "other": 0, "total": 9000},
                          {"read": 800, "write": 0, "other": 0, "total": 800})},
        {"name": "stale", "svm": {"name": "vs1"}, "uuid": "u3",
         "metric": metric({"read": 1, "write": 1, "other": 0, "total": 2}, {}, {}, status="partial_no_response")}),
    "/api/storage/luns": lambda m, p, q, b: records(
        {"name": "/vol/db2data/lun0", "svm": {"name": "vs1"}, "uuid": "l1", "location": {"volume": {"name": "db2data"}},
         "serial_number": "HnT-OZ/GiMhK", "os_type": "vmware",
         "space": {"size": 1099511627776, "guarantee": {"requested": False}},
         "metric": metric({"read": 160, "write": 80, "other": 0, "total": 240},
                          {"read": 900, "write": 1500, "other": 0, "total": 1100},
                          {"read": 1310720, "write": 655360, "other": 0, "total": 1966080})}),
    "/api/cluster/nodes": lambda m, p, q, b: records(
        {"name": "node1", "uuid": "n1", "metric": {"duration": "PT15S", "status": "ok",
                                                   "processor_utilization": 61, "timestamp": "2026-11-22T10:00:00Z"}}),
    "/api/storage/aggregates": lambda m, p, q, b: records(
        {"name": "aggr1", "uuid": "a1", "node": {"name": "node1"},
         "block_storage": {"primary": {"raid_type": "raid_dp", "raid_size": 18}}}),
    "/api/network/ethernet/ports": lambda m, p, q, b: records(
        {"name": "e0c", "uuid": "p1", "node": {"name": "node1"}, "mtu": 9000}),
    "/api/protocols/san/igroups": lambda m, p, q, b: records(
        {"name": "DC1_iSCSI", "uuid": "g1", "svm": {"name": "vs1"}, "protocol": "iscsi", "os_type": "vmware",
         "initiators": [{"name": "iqn.1998-01.com.vmware:esx01"}]}),
}


@pytest.fixture
def ontap_api(tmp_path, monkeypatch):
    monkeypatch.setenv("NA_PW", "pw")
    with FakeREST("monitor", "pw", tls_dir=tmp_path) as server:
        server.routes = dict(ROUTES)
        yield server


def config(server: FakeREST, **extra) -> OntapConfig:
    return OntapConfig(**{"name": "netapp1", "kind": "ontap", "transport": "rest", "url": server.url,
                            "user": "monitor", "password_env": "NA_PW", "ca_file": server.ca_file, **extra})


async def test_rest_metrics_and_facts(ontap_api):
    c = OntapCollector(config(ontap_api, min_ops_for_latency=20))
    facts = await c.describe()
    out = await c.collect()
    await c.close()
    vol = next(s for s in out if s.measurement == "storage_volume" and s.tags["volume"] == "db2data")
    assert vol.fields == {"total_iops": 300.0, "read_iops": 200.0, "write_iops": 100.0, "other_iops": 0.0,
                          "avg_latency_ms": 1.633, "read_latency_ms": 1.2, "write_latency_ms": 2.5,
                          "read_bytes_per_s": 1638400.0, "write_bytes_per_s": 819200.0}
    quiet = next(s for s in out if s.tags.get("volume") == "quiet")
    assert "read_latency_ms" not in quiet.fields  # 1 IOPS over 15 s = 15 ops < 20
    assert not [s for s in out if s.tags.get("volume") == "stale"]  # ONTAP marked it partial
    lun = next(s for s in out if s.measurement == "storage_lun")
    assert lun.tags["naa"] == "naa.600a0980486e542d4f5a2f47694d684b" and lun.fields["read_latency_ms"] == 0.9
    assert next(s for s in out if s.measurement == "storage_node").fields == {"cpu_busy_pct": 61.0}
    kinds = {f.kind: f for f in facts if f.tags.get("volume") in (None, "db2data")}
    assert kinds["storage_volume"].data == {"aggregate": "aggr1", "size_bytes": 2 * 2**40.0,
                                            "snapshot_reserve_pct": 0.0, "snapshot_policy": "none",
                                            "atime_update": False, "space_guarantee": "none"}
    assert kinds["storage_lun"].data["volume_to_luns_ratio"] == 2.0
    assert kinds["storage_aggregate"].data == {"node": "node1", "raid_type": "raid_dp", "raid_group_size": 18}
    paths = [p for _, p, _ in ontap_api.requests]
    assert any(p.startswith("/api/storage/volumes?") and "metric" in p for p in paths)


async def test_rest_http_errors_are_recorded(ontap_api, monkeypatch):
    ontap_api.routes["/api/storage/luns"] = (500, {"error": {"message": "entry doesn't exist", "code": "4"}})
    c = OntapCollector(config(ontap_api, interval=5.0))
    c.first_delay = 0.0
    rt = Runtime([c], [Memory()])
    await rt.run_once()
    assert "/api/storage/luns: HTTP 500: entry doesn't exist" in rt.stats[c.name].last_error
    monkeypatch.setenv("NA_PW", "nope")
    c = OntapCollector(config(ontap_api, interval=5.0))
    c.first_delay = 0.0
    rt = Runtime([c], [Memory()])
    await rt.run_once()
    assert "HTTP 401" in rt.stats[c.name].last_error and "nope" not in rt.stats[c.name].last_error


def test_iso_durations():
    assert duration_s("PT15S") == 15 and duration_s("PT1M30S") == 90 and duration_s("PT1H") == 3600
