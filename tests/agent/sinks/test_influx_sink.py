"""The InfluxDB sink against real influxd 1.8.10 and 2.7 on 127.0.0.1 (tests/infra/influxd.py).

Exact read-back of tags, field types and timestamps; a rejected point; a full spool;
an outage under steady load; a wrong token. Nothing here is mocked: points travel
through the spool files, the agent's HTTP client and the server's parser.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
import uuid
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from db2vtop.agent.core.config import InfluxConfig
from db2vtop.agent.core.model import Annotation, Fact, Finding, Sample
from db2vtop.agent.sinks.influx import InfluxSink
from db2vtop.agent.sinks.monitor import MEASUREMENT, SinkMonitor
from db2vtop.agent.sinks.spool import Spool
from tests.infra.influxd import VERSIONS, refused_url, running, server, wait_for

T0 = 1_700_000_000_123_456_789


@pytest.fixture(scope="module", params=VERSIONS)
def influxd(request, tmp_path_factory):
    srv = server(request.param, tmp_path_factory.mktemp("influxd"))
    srv.start()
    yield srv
    srv.stop()


@pytest.fixture
def db(influxd) -> str:
    name = "t" + uuid.uuid4().hex[:10]
    influxd.create_db(name)
    return name


OPTS = {"flush_interval": 0.1, "retry_interval": 0.1, "max_retry_delay": 1.0, "flush_timeout": 20.0}


def config(url: str, bucket: str, spool: Path, **kw) -> InfluxConfig:
    """A config of no server's (a refused port)."""
    return InfluxConfig(url=url, bucket=bucket, spool_dir=spool, **{**OPTS, **kw})


def config_of(srv, db: str, spool: Path, **kw) -> InfluxConfig:
    """A config that reaches `srv`'s database `db` (its bucket and token, as the version asks)."""
    bucket = f"{db}/autogen" if srv.version == "1.8" else db
    return srv.sink_config(bucket, spool, **{**OPTS, **kw})


@pytest.fixture
def make_sink():
    sinks: list[InfluxSink] = []

    def make(cfg: InfluxConfig) -> InfluxSink:
        sinks.append(InfluxSink(cfg))
        return sinks[-1]

    yield make
    for s in sinks:
        s.close(timeout=0)


def test_points_read_back_exactly_with_their_tags_types_and_timestamps(influxd, db, tmp_path, make_sink):
    sink = make_sink(config_of(influxd, db, tmp_path / "spool", tags={"agent": "a1"}))
    tags = {"vm": "db2 prod,01", "path": "a=b", "city": "Zürich", "empty": ""}
    fields = {"big": 2**62, "neg": -7, "ratio": 0.1, "tiny": 1e-300, "huge": 1.7976931348623157e308,
              "text": 'say "hi" \\ there ✓', "flag": True, "off": False, "zero": 0.0}
    sink.submit([Sample("db2 perf", tags, fields, T0), Sample("db2 perf", tags, {**fields, "neg": -8}, T0 + 1),
                 Sample("odd", {"dir": "C:\\tmp"}, {"msg": "line1\nline2"}, T0)],
                annotations=[Annotation("marker", "run-42 start", {"stack": "prod"}, "TPC-C warm-up", T0 + 5)])
    sink.submit(findings=[Finding("cpu-ready", "warning", {"layer": "vm", "vm": "db2prod01"}, "ready 7.5%",
                                  {"cpu_ready_pct": 7.5}, "why", "fix", ["NetApp WP-7109 §5.3"], T0 - 10**9, T0 + 7)],
                facts=[Fact("vsphere_vm", {"vcenter": "vc1", "vm": "db2prod01"}, {"num_cpu": 12, "host": "esx01"},
                            T0 + 8)])
    assert sink.flush(30)
    points = influxd.points(db, "db2 perf")
    want_tags = {"agent": "a1", "vm": "db2 prod,01", "path": "a=b", "city": "Zürich"}  # empty values are left out
    assert points == [(T0, want_tags, fields), (T0 + 1, want_tags, {**fields, "neg": -8})]
    assert influxd.field_types(db, "db2 perf") == {
        "big": "integer", "neg": "integer", "ratio": "float", "tiny": "float", "huge": "float", "text": "string",
        "flag": "boolean", "off": "boolean", "zero": "float"}
    assert influxd.points(db, "odd") == [(T0, {"agent": "a1", "dir": "C:/tmp"}, {"msg": "line1 line2"})]
    assert influxd.points(db, "db2vtop_annotation") == [
        (T0 + 5, {"agent": "a1", "kind": "marker", "name": "run-42 start", "stack": "prod"}, {"text": "TPC-C warm-up"})]
    assert influxd.points(db, "db2vtop_finding") == [
        (T0 + 7, {"agent": "a1", "layer": "vm", "vm": "db2prod01", "rule": "cpu-ready", "severity": "warning"},
         {"summary": "ready 7.5%", "state": "open", "first_seen_ns": T0 - 10**9, "evidence": '{"cpu_ready_pct":7.5}',
          "why": "why", "fix": "fix", "refs": '["NetApp WP-7109 §5.3"]'})]
    assert influxd.points(db, "db2vtop_fact") == [
        (T0 + 8, {"agent": "a1", "fact": "vsphere_vm", "vcenter": "vc1", "vm": "db2prod01"},
         {"data": '{"host":"esx01","num_cpu":12}'})]
    assert sink.snapshot()["sent"] == 6 and sink.snapshot()["dead_lettered"] == 0


def test_a_removed_entity_leaves_the_facts_the_fleet_reads_back(influxd, db, tmp_path, make_sink):
    from db2vtop.agent.core.influx_source import InfluxSource
    cfg = config_of(influxd, db, tmp_path / "spool")
    sink = make_sink(cfg)
    gone, stays = {"vcenter": "vc1", "vm": "deleted01"}, {"vcenter": "vc1", "vm": "db2prod01"}
    sink.submit(facts=[Fact("vsphere_vm", gone, {"num_cpu": 4}, T0), Fact("vsphere_vm", stays, {"num_cpu": 8}, T0)])
    sink.submit(facts=[Fact.removal("vsphere_vm", gone, T0 + 10**9)])
    assert sink.flush(30)
    with InfluxSource(cfg) as src:
        assert [f.tags["vm"] for f in src.facts("vsphere_vm")] == ["db2prod01"]
        assert [f.removed for f in src.fact_history("vsphere_vm", gone)] == [False, True]


def test_a_fields_type_stays_what_it_was_first_even_across_restarts(influxd, db, tmp_path, make_sink):
    cfg = config_of(influxd, db, tmp_path / "spool")
    sink = make_sink(cfg)
    sink.submit([Sample("m", {}, {"f": 1.5, "i": 3}, T0), Sample("m", {}, {"f": 2, "i": 4.0}, T0 + 1)])
    assert sink.flush(30)
    sink.close()
    sink = make_sink(cfg)
    sink.submit([Sample("m", {}, {"f": 3, "i": 5.0}, T0 + 2)])
    assert sink.flush(30)
    assert influxd.field_types(db, "m") == {"f": "float", "i": "integer"}
    assert [p[2] for p in influxd.points(db, "m")] == [{"f": 1.5, "i": 3}, {"f": 2.0, "i": 4}, {"f": 3.0, "i": 5}]
    assert sink.snapshot()["dead_lettered"] == 0


def test_a_point_influxdb_refuses_goes_to_the_dead_letter_file_and_the_rest_is_delivered(
        influxd, db, tmp_path, make_sink):
    sink = make_sink(config_of(influxd, db, tmp_path / "spool", batch_size=1000))
    batch = [Sample("m", {"s": str(i % 3)}, {"v": i}, T0 + i) for i in range(100)]
    batch[37] = Sample("m", {"s": "1"}, {"v": "not a number"}, T0 + 37)  # field type conflict
    sink.submit(batch)
    assert sink.flush(30)
    assert len(influxd.points(db, "m")) == 99
    assert T0 + 37 not in {p[0] for p in influxd.points(db, "m")}
    letters = [json.loads(x) for x in (tmp_path / "spool" / "dead-letter.jsonl").read_text().splitlines()]
    assert len(letters) == 1
    # 1.8 refuses the batch (400); 2.7 writes the rest and refuses the point (422, a partial write): both bad data
    assert letters[0]["status"] == (400 if influxd.version == "1.8" else 422)
    assert "field type conflict" in letters[0]["reason"]
    assert letters[0]["line"] == f'm,s=1 v="not a number" {T0 + 37}'
    snap = sink.snapshot()
    assert (snap["sent"], snap["dead_lettered"], snap["pending"], snap["retries"]) == (99, 1, 0, 0)
    assert snap["state"] == "ok"


@pytest.fixture
def down():
    with refused_url() as url:
        yield url


def test_a_full_spool_drops_the_oldest_counts_them_and_says_so(influxd, db, tmp_path, make_sink, down):
    spool = tmp_path / "spool"
    sink = make_sink(config(down, f"{db}/autogen", spool, spool_max_bytes=64 * 1024, batch_size=50))
    n = 0
    for _ in range(100):
        sink.submit([Sample("m", {"s": "x"}, {"v": n + i, "pad": "p" * 40}, T0 + n + i) for i in range(20)])
        n += 20
    assert sink.flush(5) is False  # nothing can be delivered
    snap = wait_for(lambda: (s := sink.snapshot())["spooled"] == n and s, what="everything spooled")
    assert snap["dropped"] > 0 and snap["pending"] + snap["dropped"] == n
    assert snap["spool_bytes"] <= 64 * 1024
    assert snap["state"] == "unreachable" and "Connection refused" in snap["last_error"]
    events = sink.take_events()
    overflow = [e for e in events if e.event == "spool_overflow"]
    assert len(overflow) == 1 and "dropped" in overflow[0].text
    assert any(e.event == "sink_unreachable" for e in events)
    sink.close(timeout=0)  # batches in flight from dropped segments were only in memory: now dropped too
    dropped = sink.snapshot()["dropped"]
    assert dropped >= snap["dropped"]
    sink = make_sink(config_of(influxd, db, spool, spool_max_bytes=64 * 1024))
    assert sink.flush(30)
    got = [p[2]["v"] for p in influxd.points(db, "m")]
    assert got == list(range(dropped, n))  # the newest, each once


@pytest.mark.parametrize("version", VERSIONS)
def test_an_outage_under_steady_load_loses_nothing_and_duplicates_nothing(tmp_path, make_sink, version):
    srv = server(version, tmp_path / "influxd")
    srv.start()
    stop = threading.Event()
    sent: list[int] = []
    try:
        srv.create_db("load")
        sink = make_sink(config_of(srv, "load", tmp_path / "spool", batch_size=500))

        def load():
            i = 0
            while not stop.is_set():
                batch = [Sample("load", {"k": str(j % 7)}, {"i": i + j, "x": 0.5}, T0 + i + j) for j in range(50)]
                sink.submit(batch)
                sent.extend(range(i, i + 50))
                i += 50
                time.sleep(0.02)

        t = threading.Thread(target=load, daemon=True)
        t.start()
        wait_for(lambda: sink.snapshot()["sent"] > 1000, what="delivery before the outage")
        srv.stop()
        time.sleep(8)  # InfluxDB away under load; the agent test keeps it away 30 s
        during = sink.snapshot()
        assert during["state"] == "unreachable" and during["pending"] > 1000
        assert during["retries"] < 40  # backoff (0.1 s doubling to 1 s) holds under load: no retry storm
        srv.start()
        time.sleep(2)
        stop.set()
        t.join()
        assert sink.flush(60)
        got = [p[2]["i"] for p in srv.points("load", "load")]
        assert len(got) == len(sent) and sorted(got) == sent
        assert sink.snapshot()["sent"] == len(sent)  # each point delivered once, none re-sent
    finally:
        stop.set()
        srv.stop()


@pytest.mark.parametrize("version", VERSIONS)
def test_a_wrong_token_is_a_visible_error_spooling_goes_on_and_nothing_is_lost(tmp_path, make_sink, version):
    with running(version, tmp_path / "influxd", auth=True) as srv:
        srv.create_db("sec")
        token = tmp_path / "token"
        token.write_text("admin:wrong\n")
        token.chmod(0o600)
        sink = make_sink(config_of(srv, "sec", tmp_path / "spool", token_file=token))
        sink.submit([Sample("m", {}, {"v": i}, T0 + i) for i in range(300)])
        snap = wait_for(lambda: (s := sink.snapshot())["state"] == "auth_error" and s, what="auth_error")
        assert snap["last_error"] == ("401 authorization failed" if version == "1.8" else "401 unauthorized access")
        assert snap["pending"] == 300 and snap["sent"] == 0
        monitor = SinkMonitor(sink)
        records = asyncio.run(monitor.collect())
        sample = next(r for r in records if isinstance(r, Sample))
        assert sample.measurement == MEASUREMENT and sample.fields["state"] == "auth_error"
        assert any(isinstance(r, Annotation) and r.event == "sink_auth_error" for r in records)
        sink.submit([Sample("m", {}, {"v": i}, T0 + i) for i in range(300, 400)])
        token.write_text(srv.token + "\n")  # the token is read again before each retry after a 401
        assert sink.flush(30)
        assert [p[2]["v"] for p in srv.points("sec", "m")] == list(range(400))
        assert sink.snapshot()["state"] == "ok"


def test_what_comes_after_close_is_counted_and_fails_the_thread(tmp_path):
    """The shutdown watchdog closes the pipeline under a runtime that may still hand on a cycle (the store,
    closed last, still takes it): the sink says what it could not spool, and so does the exit status."""
    with refused_url() as url:
        sink = InfluxSink(config(url, "b", tmp_path / "spool", flush_timeout=0.1))
        sink.submit([Sample("m", {}, {"v": 0}, T0)])
        sink.close()
        sink.submit([Sample("m", {}, {"v": i}, T0 + i) for i in (1, 2, 3)], annotations=[Annotation("e", "x", {}, "t")])
        sink.submit([Sample("m", {}, {"v": 4}, T0 + 4)])
    assert sink.late == 5
    assert sink.supervisor.failures == [f"influx-spool: 4 points came after the sink was closed and were not written "
                                        f"to the spool {tmp_path / 'spool'}"]
    spool = Spool(tmp_path / "spool", 2**20)
    assert (b := spool.read(100, 2**20)) is not None and b.data == f"m v=0i {T0}\n".encode()
    spool.close()


def _name(text: str) -> str:
    """The documented normalisation of measurement, tag and field names."""
    return text.replace("\\", "/").replace("\n", " ").replace("\r", " ")


names = st.text(st.characters(blacklist_categories=("Cs", "Cc"), blacklist_characters="#") | st.sampled_from(
    list(',= \\"\n')), min_size=1, max_size=12).filter(lambda t: t.strip() and t != "time" and not t.startswith("_"))
values = st.one_of(st.integers(-(2**63), 2**63 - 1), st.floats(allow_nan=False, allow_infinity=False),
                   st.booleans(), st.text(st.characters(blacklist_categories=("Cs",)), max_size=20))


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.dictionaries(names, names, max_size=3), st.dictionaries(names, values, min_size=1,
                                                                                     max_size=4)),
                min_size=1, max_size=20), names)
def test_any_text_round_trips_through_real_influxdb_as_documented(influxd, tmp_path_factory, points, measurement):
    db = "h" + uuid.uuid4().hex[:10]
    influxd.create_db(db)
    sink = InfluxSink(config_of(influxd, db, tmp_path_factory.mktemp("spool")))
    try:
        want = {}
        for i, (tags, fields) in enumerate(points):
            fields = {k: v for k, v in fields.items() if _name(k) not in {_name(t) for t in tags}}
            if not fields or len({_name(k) for k in fields}) < len(fields):
                continue  # one name for a tag and a field, or two names that normalise alike
            if len({_name(k) for k in tags}) < len(tags):
                continue
            sink.submit([Sample(measurement, tags, fields, T0 + i)])
            want[T0 + i] = ({_name(k): _name(v) for k, v in tags.items()},
                            {_name(k): v.replace("\n", " ").replace("\r", " ") if isinstance(v, str) else v
                             for k, v in fields.items()})
        assert sink.flush(30)
        snap = sink.snapshot()
        got = {ts: (tags, fields) for ts, tags, fields in influxd.points(db, _name(measurement))}
        delivered = {ts: w for ts, w in want.items() if ts in got}
        assert snap["sent"] == len(got) and snap["sent"] + snap["dead_lettered"] == len(want)
        for ts, (tags, fields) in delivered.items():
            assert got[ts][0] == tags
            for k, v in fields.items():  # JSON shows integral floats without a point: compare numbers as such
                g = got[ts][1][k]
                assert g == v if isinstance(v, bool | str) else float(g) == float(v)
    finally:
        sink.close(timeout=0)
