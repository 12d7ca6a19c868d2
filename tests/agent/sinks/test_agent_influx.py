"""The real `db2vtop agent` feeding a real influxd: outages, kill -9, a wrong token, SIGHUP.

"Nothing lost" is checked the strict way: every (measurement, tags, timestamp) in the
embedded store is in InfluxDB and InfluxDB holds nothing else.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from db2vtop.agent.core.store import Store, StoreError
from db2vtop.agent.sinks.spool import Spool
from tests.conftest import ROOT, run_cli
from tests.infra.influxd import (
    InfluxServer,
    fact_entities,
    influx_keys,
    running,
    server,
    store_fact_entities,
    store_keys,
    wait_for,
    write_agent_config,
)

OUTAGE_S = 30  # the scenario: InfluxDB away for 30 s while the agent collects
DASHBOARD = ROOT / "contrib" / "grafana" / "db2vtop-dashboard.json"
RULES = ROOT / "contrib" / "grafana" / "db2vtop-alert-rules.json"
UNIT = ROOT / "contrib" / "systemd" / "db2vtop-agent.service"

def start_agent(cfg: Path, log: Path, *extra: str) -> subprocess.Popen:
    with open(log, "ab") as f:
        return subprocess.Popen([sys.executable, "-m", "db2vtop.agent", "agent", "-c", str(cfg), *extra], cwd=ROOT,
                                stdout=subprocess.DEVNULL, stderr=f)


def stop_agent(p: subprocess.Popen, log: Path) -> None:
    p.send_signal(signal.SIGTERM)
    assert p.wait(90) == 0, log.read_text()


def sink_states(store: Path) -> list[str]:
    try:
        with Store(store) as s:
            return [r.fields["state"] for r in s.rows("db2vtop_sink")] if "db2vtop_sink" in s.measurements() else []
    except StoreError:  # not there yet, or its writer is still creating it
        return []


@pytest.fixture
def influxd(tmp_path, influx_version):
    srv = server(influx_version, tmp_path / "influxd")
    yield srv
    srv.stop()


@pytest.mark.slow
def test_an_outage_in_the_middle_of_an_agent_run_loses_nothing(tmp_path, influxd):
    influxd.start()
    bucket = influxd.create_db("e2e")
    store = tmp_path / "metrics.db"
    cfg = write_agent_config(tmp_path / "config.toml", influxd, bucket, store)
    log = tmp_path / "agent.log"
    agent = start_agent(cfg, log)
    try:
        wait_for(lambda: influxd.measurements("e2e"), 60, "first points in InfluxDB")
        influxd.stop()
        time.sleep(OUTAGE_S)
        assert "unreachable" in sink_states(store)
        influxd.start()
        wait_for(lambda: sink_states(store)[-1:] == ["ok"], 60, "the sink delivering again")
    finally:
        stop_agent(agent, log)
    in_store, in_influx = store_keys(store), influx_keys(influxd, "e2e")
    assert len(in_store) > 500
    assert in_influx == in_store
    assert fact_entities(influxd, "e2e") == store_fact_entities(store) != set()
    assert store_keys(store, findings=True) <= influx_keys(influxd, "e2e", findings=True)
    markers = influxd.points("e2e", "db2vtop_annotation")
    assert {"sink_unreachable", "sink_ok"} <= {tags["kind"] for _, tags, _ in markers}
    check_dashboard_queries(influxd, "e2e")


def check_dashboard_queries(srv: InfluxServer, db: str) -> None:
    """Every query of contrib's Grafana dashboard runs against what the agent wrote."""
    dash = json.loads(DASHBOARD.read_text())
    subst = {"$timeFilter": "time > now() - 1h", "$__interval": "10s", "$guest": ".*"}

    def run(q: str) -> list:
        for k, v in subst.items():
            q = q.replace(k, v)
        assert not re.search(r"\$[A-Za-z_]", q), q
        return srv.query(q, db)[0].get("series", [])

    panels = [p for p in dash["panels"] if p["type"] != "row"]
    assert panels
    for p in panels:
        for t in p["targets"]:
            assert run(t["query"]), f"panel {p['title']!r} shows nothing: {t['query']}"
    notes = {a["name"]: a for a in dash["annotations"]["list"]}
    assert run(notes["Events"]["query"])  # the sink's state changes
    for name in ("Markers", "Alerts", "Findings"):
        run(notes[name]["query"])  # valid InfluxQL; none of them in this run
    for rule in json.loads(RULES.read_text())["groups"][0]["rules"]:  # contrib's Grafana alert rules
        run(rule["data"][0]["model"]["query"])
    variable = next(v for v in dash["templating"]["list"] if v["name"] == "guest")
    assert run(variable["query"])


@pytest.mark.slow
def test_a_kill_9_during_an_outage_keeps_the_spool_for_the_next_start(tmp_path, influxd):
    influxd.start()
    bucket = influxd.create_db("k9")
    influxd.stop()  # InfluxDB is down for the whole first run
    store = tmp_path / "metrics.db"
    cfg = write_agent_config(tmp_path / "config.toml", influxd, bucket, store)
    log = tmp_path / "agent.log"
    agent = start_agent(cfg, log)
    try:
        wait_for(lambda: "unreachable" in sink_states(store), 60, "the sink noticing the outage")
        time.sleep(2)
    finally:  # killed whatever happens: a failed wait must not leave an agent running
        agent.kill()
        agent.wait(30)
    killed_at = time.time_ns()
    spool = Spool(tmp_path / "spool", 2**30)
    spooled = spool.pending_points
    spool.close()
    assert spooled > 50
    influxd.start()
    second_start = time.time_ns()
    r = run_cli("agent", "-c", str(cfg), "--duration", "3", timeout=120)
    assert r.returncode == 0, r.stderr
    assert f"{spooled} points from before the last stop will be sent" in r.stderr
    in_store, in_influx = store_keys(store), influx_keys(influxd, "k9")
    second = {k for k in in_store if k[2] >= second_start}
    first_settled = {k for k in in_store if k[2] < killed_at - 2 * 10**9}
    assert first_settled <= in_influx
    assert second == {k for k in in_influx if k[2] >= second_start}
    first = {k for k in in_influx | influx_keys(influxd, "k9", findings=True) | influx_keys(influxd, "k9", facts=True)
             if k[2] < second_start}
    assert len(first) == spooled  # the spooled points (findings and facts too), each once


@pytest.mark.slow
def test_a_wrong_token_then_sighup_with_the_right_one_delivers_everything(tmp_path, influx_version):
    with running(influx_version, tmp_path / "influxd", auth=True) as srv:
        bucket = srv.create_db("auth")
        wrong, right = tmp_path / "wrong-token", tmp_path / "right-token"
        for f, text in ((wrong, "admin:nope"), (right, srv.token)):
            f.write_text(text + "\n")
            f.chmod(0o600)
        store = tmp_path / "metrics.db"
        cfg = write_agent_config(tmp_path / "config.toml", srv, bucket, store, token_file=wrong)
        log = tmp_path / "agent.log"
        agent = start_agent(cfg, log, "--log-format", "json")
        try:
            wait_for(lambda: "auth_error" in sink_states(store), 60, "auth_error in db2vtop_sink")
            assert not srv.measurements("auth")
            write_agent_config(cfg, srv, bucket, store, token_file=right)
            agent.send_signal(signal.SIGHUP)
            wait_for(lambda: srv.measurements("auth"), 60, "delivery after the reload")
            wait_for(lambda: sink_states(store)[-1:] == ["ok"], 60, "the sink state ok")
        finally:
            stop_agent(agent, log)
        in_influx, in_store = influx_keys(srv, "auth"), store_keys(store)
        assert in_influx == in_store, (f"only in InfluxDB: {sorted(in_influx - in_store)[:5]}; only in the store: "
                                       f"{sorted(in_store - in_influx)[:5]}\n{log.read_text()[-3000:]}")
    lines = []
    for x in log.read_text().splitlines():
        try:
            lines.append(json.loads(x))
        except json.JSONDecodeError:
            pytest.fail(f"a log line that is not JSON: {x!r}")
    assert all(set(x) >= {"ts", "level", "logger", "msg"} for x in lines)
    said = "401 authorization failed" if influx_version == "1.8" else "401 unauthorized access"
    assert any(x["level"] == "error" and f"auth_error: {said}" in x["msg"] for x in lines)
    assert any(x["msg"].startswith("reload: configuration read again") for x in lines)


def test_the_systemd_unit_is_valid_and_its_command_line_runs(tmp_path, store_path):
    text = UNIT.read_text()
    exec_start = re.search(r"^ExecStart=(\S+) (.*)$", text, re.M)
    assert exec_start and exec_start.group(1) == "/usr/local/bin/db2vtop"
    assert re.search(r"^ExecReload=/bin/kill -HUP \$MAINPID$", text, re.M)
    unit = tmp_path / UNIT.name
    unit.write_text(text.replace("/usr/local/bin/db2vtop", str(Path(sys.executable).parent / "db2vtop")))
    r = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stderr.strip() == "", r.stderr
    args = exec_start.group(2).replace("/etc/db2vtop/config.toml", str(tmp_path / "c.toml")).split()
    (tmp_path / "c.toml").write_text(f'[store]\npath = "{store_path}"\n')
    r = run_cli(*args, "--once")
    assert r.returncode == 0, r.stderr


def test_sighup_with_a_broken_config_keeps_the_running_one(tmp_path, store_path):
    cfg = tmp_path / "config.toml"
    cfg.write_text(f'[store]\npath = "{store_path}"\n[guest]\ninterval = "500ms"\n')
    log = tmp_path / "agent.log"
    agent = start_agent(cfg, log)
    try:
        wait_for(lambda: "agent (pid" in log.read_text(), 30, "the agent running")
        cfg.write_text("[guest]\ninterval = 'soon'\n")
        agent.send_signal(signal.SIGHUP)
        wait_for(lambda: "keeping the running configuration" in log.read_text(), 30, "the reload refused")
        assert agent.poll() is None
        before = len(store_keys(store_path))
        wait_for(lambda: len(store_keys(store_path)) > before, 30, "collection going on")
    finally:
        stop_agent(agent, log)
    assert "guest.interval: 'soon' is not valid" in log.read_text()
