"""XtremIO against a local HTTPS server serving XMS REST v3 JSON (numbers as strings, as
the v3 API sends most of them; the XtremIO RESTful API 3.x guide and telegraf's
inputs.xtremio types)."""

from __future__ import annotations

import contextlib
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from db2vtop.agent.runtime import Runtime
from db2vtop.collectors.base import CollectorError
from db2vtop.collectors.storage.xtremio.api import CLUSTER, naa, name_of, objects, perf_fields
from db2vtop.collectors.storage.xtremio.collector import XtremioCollector
from db2vtop.collectors.storage.xtremio.config import XtremioConfig
from tests.collectors.storage.rest_server import FakeREST, Memory

CLUSTERS = {"clusters": [{
    "name": "xbrick1", "iops": "52000", "rd-iops": "40000", "wr-iops": "12000", "rd-bw": "320000",
    "wr-bw": "96000", "avg-latency": "612", "rd-latency": "480", "wr-latency": "1052",
    "data-reduction-ratio": 3.62, "compression-factor": "1.9", "dedup-ratio": "1.905",
    "free-ud-ssd-space-in-percent": 94, "ud-ssd-space": "32740855808", "ud-ssd-space-in-use": "1672478720",
    "logical-space-in-use": "7563116544"}],
    "links": [{"href": "https://xms/api/json/v3/types/clusters/", "rel": "self"}]}
VOLUMES = {"volumes": [
    {"name": "db2data01", "sys-name": "xbrick1", "naa-name": "514F0C5C8F200001", "iops": "2600", "rd-iops": "2000",
     "wr-iops": "600", "rd-bw": "16384", "wr-bw": "4800", "avg-latency": "500", "rd-latency": "450",
     "wr-latency": "667", "logical-space-in-use": "104857600", "vol-size": "1073741824", "lb-size": "512"},
    {"name": "quiet", "sys-name": "xbrick1", "naa-name": "514f0c5c8f200002", "iops": "0.2", "rd-iops": "0.2",
     "wr-iops": "0", "rd-bw": "1", "wr-bw": "0", "avg-latency": "9000", "rd-latency": "9000", "wr-latency": "0",
     "logical-space-in-use": "0", "vol-size": "1048576", "lb-size": "512"}],
    "links": []}


def serve(server: FakeREST) -> None:
    def answer(method, path, query, body):
        data = CLUSTERS if path.endswith("/clusters") else VOLUMES
        kind = "clusters" if path.endswith("/clusters") else "volumes"
        props = set(query.get("prop", []))
        return 200, {kind: [{k: v for k, v in o.items() if k in props} for o in data[kind]], "links": []}
    server.routes = {"/api/json/v3/types/clusters": answer, "/api/json/v3/types/volumes": answer}


def config(server: FakeREST, **extra) -> XtremioConfig:
    keys = {"name": "xio1", "kind": "xtremio", "url": server.url, "user": "monitor", "password_env": "XIO_PW",
            "ca_file": server.ca_file, **extra}
    return XtremioConfig(**keys)


@pytest.fixture
def xms(tmp_path, monkeypatch):
    monkeypatch.setenv("XIO_PW", "s3cret")
    with FakeREST("monitor", "s3cret", tls_dir=tmp_path) as server:
        serve(server)
        yield server


async def test_cluster_and_volume_samples_over_verified_tls(xms):
    c = XtremioCollector(config(xms))
    out = await c.collect()
    facts = await c.describe()
    await c.close()
    cluster = next(s for s in out if s.measurement == "storage_cluster")
    assert cluster.tags == {"storage": "xio1", "kind": "xtremio", "cluster": "xbrick1"}
    assert cluster.fields == {
        "total_iops": 52000.0, "read_iops": 40000.0, "write_iops": 12000.0, "read_bytes_per_s": 327680000.0,
        "write_bytes_per_s": 98304000.0, "avg_latency_ms": 0.612, "read_latency_ms": 0.48, "write_latency_ms": 1.052,
        "data_reduction_ratio": 3.62, "compression_ratio": 1.9, "dedup_ratio": 1.905, "free_ssd_pct": 94.0,
        "physical_capacity_bytes": 32740855808 * 1024.0, "physical_used_bytes": 1672478720 * 1024.0,
        "logical_used_bytes": 7563116544 * 1024.0}
    vol = next(s for s in out if s.tags.get("volume") == "db2data01")
    assert vol.tags["naa"] == "naa.514f0c5c8f200001"
    assert (vol.fields["read_latency_ms"], vol.fields["write_latency_ms"]) == (0.45, 0.667)
    assert vol.fields["read_bytes_per_s"] == 16777216.0 and vol.fields["logical_used_bytes"] == 107374182400.0
    quiet = next(s for s in out if s.tags.get("volume") == "quiet")
    assert "read_latency_ms" not in quiet.fields and "avg_latency_ms" not in quiet.fields  # 0.2 IOPS * 20 s < 10
    assert "write_latency_ms" not in quiet.fields
    paths = [p for _, p, _ in xms.requests]
    assert paths[0].startswith("/api/json/v3/types/clusters?full=1&prop=name&prop=iops")
    assert len(paths) == 3 and c.round_trips == 3
    fact = next(f for f in facts if f.tags["volume"] == "db2data01")
    assert fact.data == {"size_bytes": 1073741824 * 1024, "logical_block_size": 512}


async def test_tls_is_verified_unless_explicitly_turned_off(xms, caplog):
    c = XtremioCollector(config(xms, ca_file=None))
    with pytest.raises(CollectorError, match=r"TLS certificate not trusted .*ca_file"):
        await c.collect()
    c = XtremioCollector(config(xms, ca_file=None, verify_tls=False))
    assert [s for s in await c.collect() if s.measurement == "storage_cluster"]
    assert "TLS certificate verification is OFF" in caplog.text
    await c.close()


@pytest.mark.parametrize(("route", "expected"), [
    (None, "HTTP 401: user 'monitor' was refused"),
    ((500, {"message": "Internal error: XMS is restarting", "error_code": 500}), "HTTP 500: Internal error: XMS"),
    ((200, b"<html>maintenance</html>"), "did not answer JSON"),
    ((200, {"volumes": "nope"}), 'expected {"clusters": \\[...\\]}'),
])
async def test_errors_are_recorded_and_the_runtime_goes_on(xms, monkeypatch, route, expected):
    if route is None:
        monkeypatch.setenv("XIO_PW", "wrong")
    else:
        xms.routes["/api/json/v3/types/clusters"] = route
    c = XtremioCollector(config(xms, interval=5.0))
    out = Memory()
    rt = Runtime([c], [out])
    await rt.run_once()
    stats = rt.stats[c.name]
    assert stats.errors == 1 and re.search(expected, stats.last_error), stats.last_error
    assert "wrong" not in stats.last_error and "s3cret" not in stats.last_error
    assert [s.fields["status"] for s in out.samples] == ["error"]  # recorded as data, nothing raised


_json = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
                     lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=12), c, max_size=4),
                     max_leaves=10)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.sampled_from(["iops", "rd-iops", "rd-latency", "rd-bw", "free-ud-ssd-space-in-percent",
                                        "data-reduction-ratio", "name"]), _json, max_size=6))
def test_fuzzed_objects_raise_only_collector_errors(obj):
    with contextlib.suppress(CollectorError):
        perf_fields(obj, CLUSTER, 20.0, 10, "fuzz")
    for body in (obj, {"volumes": [obj]}, {"volumes": obj}):
        with contextlib.suppress(CollectorError):
            for o in objects(body, "volumes"):
                name_of(o, "volumes")
                naa(o)
