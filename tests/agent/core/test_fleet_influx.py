"""Fleet mode: two agents, each with its own simulated vCenter, write to one real influxd; a third
"machine" (another HOME, no store of its own) reads both back with `--source influxdb`."""

from __future__ import annotations

import copy
import json
import os
import re
import socket
import ssl
import subprocess
import sys
from pathlib import Path

import pytest

from db2vtop.agent.core.influx_source import parse_series_key
from tests.checks.test_triage_vsphere import LUN, SCENARIO
from tests.conftest import ROOT, run_cli
from tests.infra.influxd import VERSIONS, InfluxServer, server
from tests.infra.vsphere_sim import Simulator


def scenario(site: str) -> dict:
    """The triage scenario with names of this site: db2<site>01 has the designed departures."""
    doc = copy.deepcopy(SCENARIO)
    host = doc["hosts"][0]
    host["name"] = f"esx-{site}"
    for vm in host["vms"]:
        vm["name"] = vm["name"].replace("db2prod", f"db2{site}").replace("db2test", f"db2{site}test")
    return doc


def agent_config(d: Path, site: str, sim: Simulator, influx: InfluxServer, bucket: str) -> Path:
    ca = d / "sim-ca.pem"
    ca.write_text(ssl.get_server_certificate(("127.0.0.1", sim.port)))
    cfg = d / "agent.toml"
    cfg.write_text(f'[store]\npath = "{d / "metrics.db"}"\n[guest]\nenabled = false\n'
                   f'[[vcenter]]\nname = "vc-{site}"\nurl = "{sim.url}"\nuser = "monitor"\n'
                   f'password_env = "VC_PASSWORD"\nca_file = "{ca}"\n'
                   f'[influxdb]\n{influx.agent_section(bucket)}spool_dir = "{d / "spool"}"\n'
                   f'flush_interval = "200ms"\nflush_timeout = "30s"\ntags = {{agent = "{site}"}}\n')
    return cfg


def third_machine(tmp_path: Path, influx: InfluxServer, bucket: str) -> tuple[Path, dict[str, str]]:
    """A config with only [influxdb], under a HOME of its own with no store."""
    home = tmp_path / "console-home"
    home.mkdir()
    cfg = home / "fleet.toml"
    cfg.write_text(f'[guest]\nenabled = false\n[influxdb]\n{influx.agent_section(bucket)}'
                   f'spool_dir = "{home / "spool"}"\ntimeout = "5s"\n')
    env = {"HOME": str(home), "XDG_DATA_HOME": str(home / "data"), "XDG_STATE_HOME": str(home / "state"),
           "XDG_CONFIG_HOME": str(home / "config")}
    return cfg, env


@pytest.fixture(scope="module", params=VERSIONS)
def fleet(request, tmp_path_factory):
    """Both agents have collected three vCenter cycles (the rules' "3 samples" to open a finding)
    and delivered everything to influxd (1.8 and 2.7)."""
    base = tmp_path_factory.mktemp("fleet")
    influx = server(request.param, base / "influxd")
    influx.start()
    bucket = influx.create_db("fleet")
    sims, agents = [], []
    try:
        for site in ("a", "b"):
            d = base / f"agent-{site}"
            d.mkdir()
            sim = Simulator.of(scenario(site), d).start()
            sims.append(sim)
            agents.append(subprocess.Popen(
                [sys.executable, "-m", "db2vtop.agent", "agent", "--duration", "50", "-c",
                 str(agent_config(d, site, sim, influx, bucket))],
                cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                env={**os.environ, "VC_PASSWORD": "secret", "XDG_STATE_HOME": str(d / "state")}))
        for p in agents:
            out, _ = p.communicate(timeout=180)
            assert p.returncode == 0, out
        yield base, influx, bucket
    finally:
        for p in agents:  # a failed run must not leave an agent behind
            p.kill()
            p.wait(30)
        for sim in sims:
            sim.stop()
        influx.stop()


def test_query_reads_rows_of_both_vcenters(fleet, tmp_path):
    _, influx, bucket = fleet
    cfg, env = third_machine(tmp_path, influx, bucket)
    r = run_cli("query", "-c", str(cfg), "--source", "influxdb", "-m", "vsphere_vm", "--since", "1h", env=env)
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)
    assert {(row["tags"]["vcenter"], row["tags"]["vm"]) for row in rows} == {
        ("vc-a", "db2a01"), ("vc-a", "db2atest01"), ("vc-b", "db2b01"), ("vc-b", "db2btest01")}
    assert all(isinstance(row["fields"]["cpu_ready_pct"], float) for row in rows if "cpu_ready_pct" in row["fields"])
    assert rows == sorted(rows, key=lambda row: row["ts"])
    r = run_cli("query", "-c", str(cfg), "--source", "influxdb", "-m", "no_such_thing", env=env)
    assert r.returncode == 1 and "no measurement 'no_such_thing'" in r.stderr and influx.url in r.stderr


def test_triage_finds_the_designed_findings_of_both_vcenters(fleet, tmp_path):
    _, influx, bucket = fleet
    cfg, env = third_machine(tmp_path, influx, bucket)
    r = run_cli("triage", "-c", str(cfg), "--source", "influxdb", "--format", "json", "--lookback", "30m",
                env=env, timeout=120)
    assert r.returncode == 1, r.stdout + r.stderr  # warnings, no critical: as for the local store
    doc = json.loads(r.stdout)
    assert doc["sources"]["influxdb"].startswith("ok")
    got = sorted((f["rule"], f["subject"].get("vcenter"), f["subject"].get("vm") or f["subject"].get("lun"))
                 for f in doc["findings"] if f["severity"] != "info")
    for site in ("a", "b"):
        vm = f"db2{site}01"
        for rule in ("balloon-zero", "cpu-ready", "vm-fits-numa-node"):
            assert (rule, f"vc-{site}", vm) in got, (rule, site, got)
        assert ("disk-queue-saturation", f"vc-{site}", LUN) in got, got
    assert not any(vm and "test" in vm for _, _, vm in got), got  # the twins stay clean
    for f in doc["findings"]:
        assert f["why"] and f["fix"] and f["references"]


def test_facts_and_findings_read_back_whole(fleet, tmp_path):
    from db2vtop.agent.config import load_config
    from db2vtop.agent.core.influx_source import InfluxSource

    _, influx, bucket = fleet
    cfg, _ = third_machine(tmp_path, influx, bucket)
    with InfluxSource(load_config(cfg).influxdb) as src:
        vms = {(f.tags["vcenter"], f.tags["vm"]): f for f in src.facts("vsphere_vm")}
        assert {("vc-a", "db2a01"), ("vc-b", "db2b01")} <= set(vms)
        assert vms["vc-a", "db2a01"].data["num_cpu"] == 12 and vms["vc-a", "db2a01"].tags["agent"] == "a"
        recorded = src.findings()
        ready = [f for f in recorded if f.rule == "cpu-ready" and f.subject.get("vm") == "db2b01"]
        assert ready and ready[0].evidence and ready[0].references and ready[0].resolved_at is None
        series = src.series("vsphere_vm")
        one = next(s for s in series if s.tags.get("vm") == "db2a01")
        assert [r.tags for r in src.latest_of([one])] == [one.tags]
        assert src.time_range() is not None


def test_an_influxdb_outage_is_a_clear_source_error_and_triage_exits_3(tmp_path):
    srv = InfluxServer(tmp_path / "gone")  # never started: nothing listens on its port
    cfg, env = third_machine(tmp_path, srv, "fleet/autogen")
    r = run_cli("triage", "-c", str(cfg), "--source", "influxdb", env=env, timeout=60)
    assert r.returncode == 3, r.stdout + r.stderr
    assert f"influxdb at {srv.url} did not answer" in r.stderr
    r = run_cli("query", "-c", str(cfg), "--source", "influxdb", "-m", "vsphere_vm", env=env, timeout=60)
    assert r.returncode == 1 and f"influxdb at {srv.url} did not answer" in r.stderr
    for view in (("watch",), ("replay",)):
        r = run_cli(*view, "-c", str(cfg), "--source", "influxdb", env=env, timeout=60)
        assert r.returncode == 1 and f"influxdb at {srv.url} did not answer" in r.stderr, r.stderr


async def test_watch_over_influxdb_shows_both_vcenters_on_the_fleet(fleet, tmp_path):
    from db2vtop.agent.config import load_config
    from db2vtop.agent.core.influx_source import InfluxSource
    from db2vtop.tui.app import Db2vtopApp
    from db2vtop.tui.screens.fleet import FleetScreen
    from db2vtop.tui.timecursor import TimeCursor
    from tests.tui.test_tui import wait_for

    _, influx, bucket = fleet
    cfg = load_config(third_machine(tmp_path, influx, bucket)[0])
    app = Db2vtopApp(tmp_path / "none.db", None, refresh_s=0.5, config=cfg, prefer_fleet=True, read_only=True,
                     source=lambda: InfluxSource(cfg.influxdb))
    async with app.run_test(size=(170, 40)) as pilot:
        await wait_for(pilot, lambda: isinstance(app.screen, FleetScreen) and app.screen.view is not None, 20)
        keys = {r.key for r in app.screen.view.model.rows}
        assert {"vm:db2a01", "vm:db2b01", "vm:db2atest01", "vm:db2btest01"} <= keys, keys
        assert {"host:esx-a", "host:esx-b"} <= keys, keys
        # the agents themselves: both ran on this machine, so one row for its host name
        agent = next(r for r in app.screen.view.model.rows if r.key == f"agent:{socket.gethostname()}")
        # its last sample was taken before the final flush delivered the points behind it
        assert re.fullmatch(r"sink ok · wrote \S+ ago · backlog \d+", agent.cells[-1]), agent.cells  # `where`
        await pilot.press("q")

    with InfluxSource(cfg.influxdb) as src:
        span = src.time_range()
    app = Db2vtopApp(tmp_path / "none.db", None, cursor=TimeCursor.replay(*span), config=cfg, read_only=True,
                     source=lambda: InfluxSource(cfg.influxdb))  # replay --source influxdb
    async with app.run_test(size=(170, 40)) as pilot:
        await wait_for(pilot, lambda: isinstance(app.screen, FleetScreen) and app.screen.view is not None, 20)
        assert {"vm:db2a01", "vm:db2b01"} <= {r.key for r in app.screen.view.model.rows}
        await pilot.press("q")


async def test_an_influxdb_outage_is_shown_on_screen(tmp_path):
    from db2vtop.agent.config import load_config
    from db2vtop.agent.core.influx_source import InfluxSource
    from db2vtop.tui.app import Db2vtopApp
    from tests.tui.test_tui import text, wait_for

    srv = InfluxServer(tmp_path / "gone")
    cfg = load_config(third_machine(tmp_path, srv, "fleet/autogen")[0])
    app = Db2vtopApp(tmp_path / "none.db", None, refresh_s=0.2, config=cfg, prefer_fleet=True, read_only=True,
                     source=lambda: InfluxSource(cfg.influxdb))
    async with app.run_test(size=(140, 40)) as pilot:
        await wait_for(pilot, lambda: f"source: influxdb at {srv.url} did not answer" in text(app, "#status"), 20)
        await pilot.press("q")


def test_the_latest_and_window_caches_follow_points_written_since(fleet, tmp_path):
    """A moving cursor reads only what was written since; what it answers is what a fresh read answers."""

    from db2vtop.agent.config import load_config
    from db2vtop.agent.core.influx_source import InfluxSource

    _, influx, _ = fleet
    bucket = influx.create_db("cache")
    t0 = 1_700_000_000 * 10**9

    def write(*lines: str) -> None:
        influx.write("cache", lines)

    def answers(src: InfluxSource, until: int) -> tuple:
        a = next(s for s in src.series("m") if s.tags == {"vm": "a"})
        return ([(r.tags["vm"], r.ts, r.fields) for r in sorted(src.latest("m", 0, until), key=lambda r: r.tags["vm"])],
                src.window(a.id, "v", t0 - 60 * 10**9, until))

    cfg = load_config(third_machine(tmp_path, influx, bucket)[0]).influxdb
    write(f"m,vm=a v=1 {t0}", f"m,vm=b v=1 {t0}")
    with InfluxSource(cfg) as src:
        assert answers(src, t0 + 10**9) == ([("a", t0, {"v": 1.0}), ("b", t0, {"v": 1.0})], [(t0, 1.0)])
        write(f"m,vm=a v=2 {t0 + 20 * 10**9}", f"m,vm=b v=3 {t0 + 10**9 // 2}")  # b's is late: before the cursor
        moved = answers(src, t0 + 21 * 10**9)
        assert moved == ([("a", t0 + 20 * 10**9, {"v": 2.0}), ("b", t0 + 10**9 // 2, {"v": 3.0})],
                         [(t0, 1.0), (t0 + 20 * 10**9, 2.0)])
        with InfluxSource(cfg) as fresh:
            assert answers(fresh, t0 + 21 * 10**9) == moved
        assert answers(src, t0 + 10**9)[0][0] == ("a", t0, {"v": 1.0})  # back in time: read again
        a = next(x for x in src.series("m") if x.tags == {"vm": "a"})
        assert src.window(a.id, "v", t0 - 60 * 10**9, t0 + 10**9) == [(t0, 1.0)]  # a range inside the cached one


def test_series_keys_are_unescaped_as_line_protocol_escapes_them():
    assert parse_series_key(r"vsphere_vm,vcenter=vc1,vm=db2\,prod\ 01") == (
        "vsphere_vm", {"vcenter": "vc1", "vm": "db2,prod 01"})
    assert parse_series_key(r"m\ x,k\=1=v\=2") == ("m x", {"k=1": "v=2"})


# the caches' ways of reading are the same InfluxQL on both versions: all four on 1.8, one on 2.7
PARITY = [(r, "1.8") for r in ("caught up", "read whole", "probed", "large")] + [("caught up", "2.7")]


@pytest.mark.parametrize(("reads", "influx_version"), PARITY)
def test_the_fleet_over_influxdb_shows_what_it_shows_over_the_store_while_points_arrive(reads, tmp_path, monkeypatch,
                                                                                        influx_version):
    """One recording delivered as it happens, at the same moments, to the embedded store and to a real influxd;
    the Fleet loaded at each cursor (1-3 s apart, then a jump back and forward) over each shows the same rows,
    cells, trends, staleness and collectors. Samples are stamped at times of their own per series and vCenter's
    arrive 40 s after their stamp, as a real fleet's do: the caches that keep a refresh cheap must still see
    them as soon as the store does. `read whole`: every load reads each measurement whole (as every
    FULL_READ_S); `probed`: every measurement is found moved by one field's newest time (as one of thousands of
    series); `large`: every one is a large one too (as a 10,000-VM vCenter's), looked at one a look: the Fleet
    shows what the store does after at most three loads at a cursor."""
    import dataclasses

    import db2vtop.agent.core.influx_source as influx_source
    import db2vtop.tui.data as tui_data
    from db2vtop.agent.config import load_config
    from db2vtop.agent.core.influx_source import InfluxSource
    from db2vtop.agent.core.store import Store
    from db2vtop.agent.sinks.lineproto import LineEncoder
    from db2vtop.checks.thresholds import levels
    from db2vtop.tui.data import Reader, TableState
    from db2vtop.tui.loaders.fleet import load_fleet
    from tests.infra.tui_fixture import STEP_S, T0, Fleet, records, steps, write_config

    s = 10**9
    if reads == "read whole":
        monkeypatch.setattr(influx_source, "FULL_READ_S", 0.0)
    elif reads == "probed":
        monkeypatch.setattr(influx_source, "PROBE_SERIES", 2)
    elif reads == "large":
        for name, value in (("PROBE_SERIES", 2), ("LARGE_SERIES", 2), ("LARGE_DUTY", 0.0), ("RECHECK_S", 0.0)):
            monkeypatch.setattr(influx_source, name, value)
        monkeypatch.setattr(tui_data, "RECHECK_S", 0.0)  # the Reader's own, at a paused cursor
    fleet = Fleet(vms=24, hosts=3, stacks=3, minutes=8)
    influx = server(influx_version, tmp_path / "influxd")
    influx.start()
    try:
        bucket = influx.create_db("parity")
        enc = LineEncoder()

        def deliver(samples=(), facts=(), marks=(), findings=()) -> None:
            store.write(list(samples), facts=list(facts), annotations=list(marks), findings=list(findings))
            lines = enc.samples(samples) + enc.facts(facts) + enc.annotations(marks) + enc.findings(findings)
            if lines:
                influx.write("parity", lines)

        def stamp(x):  # each series its own phase in the 20 s step: 0..13 s after it
            return dataclasses.replace(x, ts=x.ts + (sum(map(ord, "".join(sorted(x.tags.values())))) % 14) * s)

        arriving = sorted(((x.ts + (40 * s if x.measurement.startswith("vsphere") else s), i, x)
                           for i, x in enumerate(stamp(x) for step in steps(fleet) for x in step)),
                          key=lambda a: a[:2])
        cfg_path = write_config(tmp_path / "fleet.toml", fleet)
        cfg_path.write_text(cfg_path.read_text() + f'[influxdb]\n{influx.agent_section(bucket)}'
                                                   f'spool_dir = "{tmp_path / "spool"}"\ntimeout = "30s"\n')
        cfg = load_config(cfg_path)
        lv = levels(cfg.checks)
        store = Store(tmp_path / "metrics.db", writer=True)
        facts, marks, findings = records(fleet)
        deliver(facts=facts, marks=marks, findings=[dataclasses.replace(x, resolved_at=None) for x in findings])
        deliver(findings=[x for x in findings if x.resolved_at is not None])  # as an agent opens, then resolves

        def shown(rd: Reader, until: int) -> tuple:
            view = load_fleet(rd, cfg.stack, until - 300 * s, until, TableState(), 16, lv)
            return ([(r.key, r.cells, r.style) for r in view.model.rows], [c.name for c in view.model.columns],
                    view.counts, view.stale, view.findings,
                    sorted((c.collector, c.status, c.age_s) for c in view.collectors),  # in series order: ids differ
                    [m.name for m in view.markers])

        with InfluxSource(cfg.influxdb) as src:
            over_store, over_influx = Reader(store), Reader(src)
            step = 2 * s if reads == "caught up" else 10 * s
            cursors = [*range(T0 + 150 * s, T0 + 330 * s, step), T0 + 331 * s, T0 + 332 * s]
            cursors += [T0 + 200 * s, T0 + 203 * s, T0 + 420 * s, T0 + 421 * s]  # back in time, then past a gap
            done = 0
            compared = 0
            for until in cursors:
                batch = []
                while done < len(arriving) and arriving[done][0] <= until:
                    batch.append(arriving[done][2])
                    done += 1
                if batch:
                    deliver(batch)
                for rd in (over_store, over_influx):
                    rd.begin()
                expected = shown(over_store, until)
                assert len(expected[0]) > fleet.vms, expected[0]
                got = shown(over_influx, until)
                for _ in range(2 if reads == "large" else 0):  # one large measurement a look: the next loads
                    if got != expected:
                        over_influx.begin()
                        got = shown(over_influx, until)
                for name, a, b in zip(("rows", "columns", "counts", "stale", "findings", "collectors", "markers"),
                                      expected, got, strict=True):
                    if name == "rows":  # the differing cells of the first rows that differ
                        diff = [(x[0], [(c, y[1][i]) for i, c in enumerate(x[1]) if c != y[1][i]] or (x, y))
                                for x, y in zip(a, b, strict=False) if x != y]
                        assert len(a) == len(b) and not diff, (f"at T0+{(until - T0) / s:g}s", diff[:3])
                    assert a == b, (f"at T0+{(until - T0) / s:g}s", name, a, b)
                compared += 1
            assert compared == len(cursors) and STEP_S == 20
        store.close()
    finally:
        influx.stop()
