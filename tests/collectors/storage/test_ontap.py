"""ONTAP over SSH: parsers, Harvest-style rate/latency maths, and the collector against a
real sshd whose login shell is the clustershell stand-in."""

from __future__ import annotations

import contextlib
import copy
import json
import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from db2vtop.agent.core.model import Sample
from db2vtop.agent.core.store import Store
from db2vtop.agent.runtime import Runtime
from db2vtop.collectors.base import CollectorError
from db2vtop.collectors.ssh import SSHTarget
from db2vtop.collectors.ssh.config import SSHConfig
from db2vtop.collectors.storage.common import StorageFormatError
from db2vtop.collectors.storage.ontap.cli import (
    OntapCommandError,
    fact_line,
    parse_fields,
    parse_raw,
    perf_line,
    raw_number,
    size_bytes,
)
from db2vtop.collectors.storage.ontap.collector import OntapCollector
from db2vtop.collectors.storage.ontap.config import OntapConfig
from db2vtop.collectors.storage.ontap.metrics import Snapshot, instance_key, naa_for_serial, rows, snapshot
from db2vtop.collectors.storage.ontap.rest import perf_fields
from tests.collectors.storage.ontap_data import LONG_LUN, T0, t1
from tests.collectors.storage.rest_server import Memory
from tests.conftest import run_cli

# Layout of `statistics show -raw` (ONTAP 9 command reference; as captured from clusters in
# NetApp Harvest's StatPerf test data): wrapped values, arrays, units on latencies.
RAW = """\
Last login time: 11/22/2026 09:59:58

Object: lun
Instance: /vol/vol_a/lun_with_a_rather_long_name_x
Start-time: 11/22/2026 10:00:00
End-time: 11/22/2026 10:00:00
Scope: svm1
Number of Constituents: 2 (complete_aggregation)
    Counter                                                     Value
    -------------------------------- --------------------------------
    avg_read_latency                                      123456789us
    instance_name                     /vol/vol_a/lun_with_a_rather_lo
                                                    ng_name_x
    read_align_histo                                                -
                                   0                             1000
                                   1                               25
    read_ops                                                     1025
    read_partial_blocks                                          250%
    vserver_name                                                 svm1

Object: volume
Instance: vol_a
Start-time: 11/22/2026 10:00:00
End-time: 11/22/2026 10:00:00
Scope: svm1
    Counter                                                     Value
    -------------------------------- --------------------------------
    read_latency                                              1500ms
    read_ops                                                       30
2 entries were displayed.
"""


def test_raw_statistics_layout_parses():
    objs = parse_raw(RAW)
    (lun,) = objs["lun"]
    assert (lun.name, lun.scope) == ("/vol/vol_a/lun_with_a_rather_long_name_x", "svm1")
    assert lun.counters["avg_read_latency"] == "123456789us"
    assert lun.counters["instance_name"] == "/vol/vol_a/lun_with_a_rather_long_name_x"
    assert lun.counters["read_align_histo"] == {"0": "1000", "1": "25"}
    assert lun.counters["read_ops"] == "1025" and lun.counters["vserver_name"] == "svm1"
    (vol,) = objs["volume"]
    assert vol.counters == {"read_latency": "1500ms", "read_ops": "30"}
    assert instance_key(lun) == ("svm1", lun.name) and instance_key(vol) == ("svm1", "vol_a")


def test_fields_table_with_separator():
    text = ("Last login time: 11/22/2026 09:59:58\n"
            "vserver|volume|percent-snapshot-space|\nVserver Name|Volume Name|Snapshot Reserve|\n"
            "vs1|db2data|0%|\nvs1|db2log|20%|\n2 entries were displayed.\n")
    assert parse_fields(text) == [{"vserver": "vs1", "volume": "db2data", "percent-snapshot-space": "0%"},
                                  {"vserver": "vs1", "volume": "db2log", "percent-snapshot-space": "20%"}]
    assert parse_fields("There are no entries matching your query.\n") == []
    with pytest.raises(StorageFormatError, match="3 fields, the header 2"):
        parse_fields("vserver|volume|\nA|B|\nvs1|x|y|\n")
    assert size_bytes("20GB", "s") == 20 * 2**30 and size_bytes("-", "s") is None


def test_naa_is_netapp_prefix_and_serial_in_hex():
    # NetApp KB example: serial HnT-OZ/GiMhK <-> hex 486e542d4f5a2f47694d684b
    assert naa_for_serial("HnT-OZ/GiMhK") == ("486e542d4f5a2f47694d684b", "naa.600a0980486e542d4f5a2f47694d684b")


def _snap(state: dict, at: float) -> Snapshot:
    from tests.collectors.storage.clustershell import render_raw
    lines = []
    for obj, insts in state["stats"].items():
        for inst in insts:
            lines += render_raw(obj, inst, list(inst["counters"]))
    return snapshot("\n".join(lines), at)


def _by(found, measurement, **tags):
    matches = [r for r in found if r.measurement == measurement and all(r.tags.get(k) == v for k, v in tags.items())]
    assert len(matches) == 1, (measurement, tags, found)
    return matches[0].fields


def test_rates_and_latencies_hand_computed():
    found, resets, gaps = rows(_snap(T0, 100.0), _snap(t1(), 110.0), 10, {})
    assert resets == [] and gaps == []
    data = _by(found, "storage_volume", vserver="vs1", volume="db2data")
    assert data == {"total_iops": 300.0, "read_iops": 200.0, "write_iops": 100.0, "other_iops": 0.0,
                    "read_bytes_per_s": 1638400.0, "write_bytes_per_s": 819200.0,
                    "avg_latency_ms": 1.6333, "read_latency_ms": 1.2, "write_latency_ms": 2.5}
    log = _by(found, "storage_volume", volume="db2log")
    assert "read_latency_ms" not in log and log["read_iops"] == 0.5  # 5 reads < 10: latency suppressed
    assert log["write_latency_ms"] == 0.3 and log["avg_latency_ms"] == 0.321
    lun = _by(found, "storage_lun", lun="/vol/db2data/lun0")
    assert (lun["read_latency_ms"], lun["write_latency_ms"], lun["avg_latency_ms"]) == (0.9, 1.5, 1.1)
    assert (lun["read_misaligned_pct"], lun["write_misaligned_pct"], lun["queue_full_per_s"]) == (2.0, 0.0, 1.2)
    assert _by(found, "storage_node", node="node1") == {
        "total_iops": 300.0, "read_iops": 200.0, "write_iops": 100.0, "cpu_busy_pct": 60.0,
        "disk_busy_pct": 50.0, "disk_busy_avg_pct": 40.0}
    # a lower minimum reports the 5-read latency: (60000-50000) us / 5 = 2 ms
    found, _, _ = rows(_snap(T0, 100.0), _snap(t1(), 110.0), 0, {})
    assert _by(found, "storage_volume", volume="db2log")["read_latency_ms"] == 2.0


def test_counter_going_backwards_skips_the_instance_and_annotates():
    later = t1()
    later["stats"]["volume"][0]["counters"]["read_ops"] = "5"
    found, resets, _ = rows(_snap(T0, 100.0), _snap(later, 110.0), 10, {})
    assert not [r for r in found if r.measurement == "storage_volume" and r.tags["volume"] == "db2data"]
    assert [(a.event, a.name) for a in resets] == [("counter_reset", "ontap volume vs1/db2data")]


# --- the collector over a real sshd -------------------------------------------------------

def _config(server, **extra) -> tuple[OntapConfig, SSHTarget]:
    ssh = server.ssh_config()
    target = SSHTarget(SSHConfig(**{**ssh, "key_file": Path(ssh["key_file"]), "known_hosts": Path(ssh["known_hosts"])}))
    return OntapConfig(name="netapp1", ssh="test", **extra), target


async def test_collector_cycle_over_ssh(ontap_sshd):
    ontap_sshd.set_state(T0)
    ontap_sshd.clear_commands()
    cfg, target = _config(ontap_sshd)
    c = OntapCollector(cfg, target)
    facts = await c.describe()
    await c.start()
    t0 = c.source.prev.at
    ontap_sshd.set_state(t1())
    out = await c.collect()
    dt = c.source.prev.at - t0
    await c.close()
    target.close()

    # exactly what reached the cluster: one line per fact table, one per perf cycle
    sent = ontap_sshd.commands()
    assert sent[-2:] == [perf_line(), perf_line()] and sent[:-2] == [fact_line(w, None) for w in (
        "volume", "lun", "aggregate", "port", "igroup", "iscsi_session")]
    # the session NetApp Harvest's StatPerf collector sets up before its own `statistics show -raw`
    assert perf_line().startswith("set -privilege diagnostic -confirmations off -rows 0 -showallfields false "
                                  "-units raw; statistics settings modify -counter-display all; statistics show -raw "
                                  "-object volume -counter vserver_name|total_ops|")
    assert c.round_trips == 8 and target.connects == 1
    assert c.take_problems() == []

    samples = [r for r in out if isinstance(r, Sample)]
    vol = next(s for s in samples if s.measurement == "storage_volume" and s.tags["volume"] == "db2data")
    assert vol.tags == {"storage": "netapp1", "kind": "ontap", "vserver": "vs1", "volume": "db2data"}
    assert (vol.fields["read_latency_ms"], vol.fields["write_latency_ms"]) == (1.2, 2.5)
    assert vol.fields["read_iops"] * dt == pytest.approx(2000)
    assert vol.fields["read_bytes_per_s"] * dt == pytest.approx(16_384_000, abs=dt)  # exact bytes: -units raw
    assert set(vol.fields) == {"total_iops", "read_iops", "write_iops", "other_iops", "read_bytes_per_s",
                               "write_bytes_per_s", "avg_latency_ms", "read_latency_ms", "write_latency_ms"}
    lun = next(s for s in samples if s.measurement == "storage_lun" and s.tags["lun"] == "/vol/db2data/lun0")
    assert lun.tags["naa"] == "naa.600a0980486e542d4f5a2f47694d684b" and lun.tags["serial"] == "HnT-OZ/GiMhK"
    assert lun.tags["volume"] == "db2data" and lun.fields["read_misaligned_pct"] == 2.0
    assert any(s.measurement == "storage_lun" and s.tags["lun"] == LONG_LUN for s in samples)  # wrapped name
    node = next(s for s in samples if s.measurement == "storage_node")
    assert node.fields["cpu_busy_pct"] == 60.0 and node.fields["disk_busy_pct"] == 50.0  # no-display bases read
    assert set(node.fields) == {"total_iops", "read_iops", "write_iops", "cpu_busy_pct", "disk_busy_pct",
                                "disk_busy_avg_pct"}

    by_kind = {}
    for f in facts:
        by_kind.setdefault(f.kind, []).append(f)
    data = next(f for f in by_kind["storage_volume"] if f.tags["volume"] == "db2data").data
    assert data == {"aggregate": "aggr1", "size_bytes": 2 * 2**40, "snapshot_reserve_pct": 0.0,
                    "snapshot_policy": "none", "atime_update": False, "nvfail": True, "space_guarantee": "none",
                    "snapdir_access": False}
    lun0 = next(f for f in by_kind["storage_lun"] if f.tags["lun"] == "/vol/db2data/lun0")
    assert lun0.data["volume_to_luns_ratio"] == 2.0 and lun0.data["space_reserve"] is False
    assert lun0.tags["naa"].startswith("naa.600a0980")
    assert by_kind["storage_aggregate"][0].data == {"node": "node1", "raid_type": "raid_dp", "raid_group_size": 18}
    assert {f.tags["port"]: f.data["mtu"] for f in by_kind["storage_port"]} == {"e0c": 9000, "e0d": 1500}
    assert by_kind["storage_igroup"][0].data["initiators"] == ["iqn.1998-01.com.vmware:esx01",
                                                              "iqn.1998-01.com.vmware:esx02"]
    assert by_kind["storage_iscsi"][0].data == {"sessions": 2, "cmd_window_size_min": 128,
                                                "cmd_window_size_max": 256}


async def test_vserver_filter_is_sent_and_applied(ontap_sshd):
    ontap_sshd.set_state(T0)
    ontap_sshd.clear_commands()
    cfg, target = _config(ontap_sshd, vserver="vs2")
    c = OntapCollector(cfg, target)
    assert [f for f in await c.describe() if f.kind in ("storage_volume", "storage_lun")] == []
    assert "volume show -vserver vs2 -fields" in ontap_sshd.commands()[0]
    await c.start()
    ontap_sshd.set_state(t1())
    assert {s.measurement for s in await c.collect() if isinstance(s, Sample)} == {"storage_node"}
    target.close()


@pytest.mark.parametrize(("errors", "expected", "kept"), [
    ({"statistics show -raw -object lun": "Error: command failed: not authorized for that command"},
     "ONTAP refused part of statistics show -raw: Error: command failed: not authorized", "storage_volume"),
    ({"statistics show -raw -object volume": "Error: command failed: Object \"volume\" was not found."},
     "was not found", "storage_lun"),
])
async def test_a_refused_object_is_an_error_and_the_others_are_kept(ontap_sshd, errors, expected, kept):
    ontap_sshd.set_state({**T0, "errors": errors})
    cfg, target = _config(ontap_sshd, interval=10.0)
    c = OntapCollector(cfg, target)
    c.first_delay = 0.0
    out = Memory()
    rt = Runtime([c], [out])
    await rt.run_once()
    st = rt.stats[c.name]
    assert st.errors >= 1 and expected in st.last_error
    assert {s.measurement for s in out.samples if s.measurement.startswith("storage_")} == {kept, "storage_node"}
    target.close()


async def test_a_cluster_refusing_every_object_is_one_clear_error(ontap_sshd):
    ontap_sshd.set_state({**T0, "errors": {"statistics show": "Error: command failed: not authorized"}})
    cfg, target = _config(ontap_sshd)
    with pytest.raises(OntapCommandError, match="ONTAP refused statistics show -raw: Error: command failed: not"):
        await OntapCollector(cfg, target).collect()
    target.close()


async def test_garbage_and_refusals_are_clear_errors(ontap_sshd):
    cfg, target = _config(ontap_sshd)
    c = OntapCollector(cfg, target)
    ontap_sshd.set_state({"stats": {obj: [] for obj in T0["stats"]}, "tables": {}, "banner": "totally not ONTAP"})
    with pytest.raises(StorageFormatError, match="printed no Object: blocks"):
        await c.collect()
    ontap_sshd.set_state({**T0, "tables": {"volume show": [{"vserver": "vs1|x", "volume": "v"}]}})
    with pytest.raises(CollectorError):
        await c.describe()
    ontap_sshd.set_state({**T0, "errors": {"lun show": 'Error: Invalid field "nvfail"'}})
    with pytest.raises(OntapCommandError, match='lun show: Error: Invalid field "nvfail"'):
        await c.describe()
    target.close()


async def test_a_missing_counter_costs_only_its_fields_and_names_the_command(ontap_sshd):
    cfg, target = _config(ontap_sshd)
    c = OntapCollector(cfg, target)
    ontap_sshd.set_state(T0)
    await c.start()
    cut = t1()
    cut["stats"]["volume"][1]["counters"] = {"vserver_name": "vs1", "write_ops": "5400"}  # output cut short
    ontap_sshd.set_state(cut)
    samples = [s for s in await c.collect() if isinstance(s, Sample)]
    log = next(s for s in samples if s.measurement == "storage_volume" and s.tags["volume"] == "db2log")
    assert set(log.fields) == {"write_iops"}
    assert any(s.measurement == "storage_volume" and s.tags["volume"] == "db2data" for s in samples)
    assert any(s.measurement == "storage_node" and "cpu_busy_pct" in s.fields for s in samples)
    problems = c.take_problems()
    assert ('ONTAP volume vs1/db2log: counter total_ops is missing, so total_iops and avg_latency_ms cannot be '
            'computed; "statistics show -raw -object volume -instance \"db2log\" -counter total_ops" shows what the '
            "cluster prints") in problems
    assert len(problems) == 9  # one line per missing counter, not per field
    target.close()


async def test_the_stand_in_prints_what_the_session_asked_for(ontap_sshd):
    """The shim follows the session as ONTAP does: without NetApp's session set-up no-display base counters are
    left out and byte counters print scaled; a regression in perf_line() shows up here and below."""
    ontap_sshd.set_state(T0)
    _, target = _config(ontap_sshd)
    old = ("set -privilege advanced -confirmations off -rows 0; statistics show -raw -object system:node "
           "-counter cpu_busy|cpu_elapsed_time; statistics show -raw -object disk:constituent "
           "-counter disk_busy|base_for_disk_busy; statistics show -raw -object volume -counter read_data|read_ops")
    objs = parse_raw(target.run_line(old, timeout=30, what="old").text())
    assert "cpu_elapsed_time" not in objs["system:node"][0].counters and "cpu_busy" in objs["system:node"][0].counters
    assert "base_for_disk_busy" not in objs["disk:constituent"][0].counters
    assert objs["volume"][0].counters["read_data"] == "468.75MB" and objs["volume"][0].counters["read_ops"] == "60000"
    refused = target.run_line("set -privilege advanced -confirmations off; statistics settings modify "
                              "-counter-display all", timeout=30, what="modify").text()
    assert 'Error: invalid argument "-counter-display"' in refused  # a diagnostic-level parameter
    objs = parse_raw(target.run_line(perf_line(), timeout=30, what="new").text())
    assert objs["system:node"][0].counters["cpu_elapsed_time"] == "100000000"
    assert objs["disk:constituent"][0].counters["base_for_disk_busy"] == "10000"
    assert objs["volume"][0].counters["read_data"] == "491520000"
    target.close()


async def test_without_counter_display_the_node_cpu_is_a_clear_error_and_the_rest_is_kept(ontap_sshd):
    """A monitoring role that may not turn the counter display on: ONTAP refuses the setting, leaves the
    no-display bases out, and only the fields built on them are lost, with an error saying why."""
    refusal = 'Error: invalid argument "-counter-display"'
    ontap_sshd.set_state({**T0, "errors": {"statistics settings modify": refusal}})
    cfg, target = _config(ontap_sshd, interval=10.0)
    c = OntapCollector(cfg, target)
    c.first_delay = 0.0
    out = Memory()
    rt = Runtime([c], [out])
    await rt.run_once()  # the baseline, then a cycle against it
    node = next(s for s in out.samples if s.measurement == "storage_node")
    assert set(node.fields) == {"total_iops", "read_iops", "write_iops"}
    assert {s.tags["volume"] for s in out.samples if s.measurement == "storage_volume"} == {"db2data", "db2log"}
    assert rt.stats[c.name].status == "error"
    error = rt.stats[c.name].last_error
    assert f"ONTAP refused part of statistics show -raw: {refusal}" in error
    assert ("ONTAP system:node node1: counter cpu_elapsed_time is missing, so cpu_busy_pct cannot be computed; "
            '"statistics show -raw -object system:node -instance \"node1\" -counter cpu_elapsed_time" shows') in error
    assert "cpu_elapsed_time is a no-display base counter, printed only after \"set -privilege diagnostic" in error
    assert "base_for_disk_busy is missing, so disk_busy_pct and disk_busy_avg_pct cannot be computed" in error
    target.close()


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 2**62))
def test_scaled_byte_counters_parse_to_bytes(n):
    from tests.collectors.storage.clustershell import scaled
    assert raw_number(scaled(str(n)), "x") == pytest.approx(n, rel=0.005 / 1.0, abs=0.5)


async def test_hung_cluster_times_out_and_the_next_cycle_recovers(ontap_sshd):
    cfg, target = _config(ontap_sshd, interval=10.0, timeout=1.0)
    c = OntapCollector(cfg, target)
    c.first_delay = 0.0
    ontap_sshd.set_state({**T0, "sleep": 5})
    rt = Runtime([c], [Memory()])
    await rt.run_once()
    assert "statistics show -raw timed out after" in rt.stats[c.name].last_error
    ontap_sshd.set_state(T0)
    c = OntapCollector(cfg, target)  # the runtime closed the first one; the SSH connection lives on
    await c.collect()
    ontap_sshd.set_state(t1())
    assert [s for s in await c.collect() if isinstance(s, Sample) and s.measurement == "storage_volume"]
    assert target.connects == 1
    target.close()


# --- fuzzing: only the collector's own error type may escape ---------------------------------

_lines = st.lists(st.one_of(
    st.sampled_from(["Object: volume", "Object: lun", "Instance: v1", "Scope: vs1", "    Counter    Value",
                     "    ---------- ----------", "    read_ops   12", "    read_latency  40us", "    x   -",
                     "         0   5", "   wrapped", "    read_ops   1x2", "Error: nope", "vserver|volume|",
                     "a|b|", "1 entries were displayed."]),
    st.text(max_size=40)), max_size=30)


@settings(max_examples=200, deadline=None)
@given(st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
                    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.sampled_from(
                        ["status", "duration", "iops", "latency", "throughput", "read", "total", "ok"]), c, max_size=5),
                    max_leaves=12))
def test_fuzzed_rest_metric_raises_only_collector_errors(metric):
    with contextlib.suppress(CollectorError):
        perf_fields(metric, 10, "fuzz")
    with contextlib.suppress(CollectorError):
        perf_fields({"status": "ok", "duration": "PT15S", "iops": metric, "latency": metric}, 10, "fuzz")


@settings(max_examples=300, deadline=None)
@given(_lines, _lines)
def test_fuzzed_output_raises_only_storage_errors(a, b):
    with contextlib.suppress(CollectorError):
        rows(snapshot("\n".join(a), 1.0), snapshot("\n".join(b), 2.0), 10, {})
    with contextlib.suppress(CollectorError):
        parse_fields("\n".join(a))


async def test_implausible_counters_are_set_aside_and_counted_never_stored(ontap_sshd):
    """A broken or hostile cluster's counters: a negative one, one of 400 digits (read as inf, it once made
    the latencies 0.0), a node's total_ops jumping by 9e18, a LUN's read latency adding 1e16 us over 1,600
    reads (6e9 ms each). Before: stored as figures (1e17 IOPS and more), the cycle ok. Now: a counter no 64-bit
    counter can be is refused and said, an interval with a figure no array reaches is set aside and counted."""
    before = copy.deepcopy(T0)
    before["stats"]["volume"][1]["counters"]["write_ops"] = "-900000000000"
    ontap_sshd.set_state(before)
    cfg, target = _config(ontap_sshd)
    c = OntapCollector(cfg, target)
    await c.start()
    later = t1()
    data = later["stats"]["volume"][0]["counters"]
    data["total_ops"] = data["read_ops"] = "9" * 400
    later["stats"]["system:node"][0]["counters"]["total_ops"] = "9000000000000000000"
    later["stats"]["lun"][0]["counters"]["avg_read_latency"] = "10000000000000000us"
    ontap_sshd.set_state(later)
    try:
        out = await c.collect()
    finally:
        await c.close()
        target.close()
    samples = [r for r in out if isinstance(r, Sample)]
    for s in samples:  # nothing past 100 million IOPS, 1 TB/s or an hour of latency; all finite, none negative
        for name, v in s.fields.items():
            assert math.isfinite(v) and v >= 0, (s.tags, name, v)
            assert v <= (3.6e6 if name.endswith("_ms") else 1e12 if name.endswith("bytes_per_s") else 1e8), (name, v)
    vols = {s.tags["volume"]: s.fields for s in samples if s.measurement == "storage_volume"}
    assert not {"total_iops", "read_iops", "avg_latency_ms", "read_latency_ms"} & set(vols["db2data"])
    assert vols["db2data"]["write_latency_ms"] == 2.5 and "write_iops" not in vols["db2log"]
    assert not [s for s in samples if s.measurement == "storage_node"]  # set aside, with the LUN's
    assert not [s for s in samples if s.tags.get("lun") == "/vol/db2data/lun0"]
    problems = "\n".join(c.take_problems())
    assert "counter total_ops is negative or past 64 bits" in problems, problems
    assert "counter write_ops is negative or past 64 bits in the previous reading" in problems, problems
    health = {h.name: h for h in c.supervisor.snapshot()}[c.thread]
    assert health.set_aside == 2 and "more than any array does" in health.last_error, health


def test_agent_once_fills_the_store_with_ontap_samples_and_facts(ontap_sshd, tmp_path, store_path):
    ontap_sshd.set_state(T0)
    ssh = ontap_sshd.ssh_config(name="netapp1-admin")
    cfg = tmp_path / "db2vtop.toml"
    cfg.write_text("[guest]\nenabled = false\n[[ssh]]\n" + "".join(f"{k} = {json.dumps(v)}\n" for k, v in ssh.items())
                   + '[[storage]]\nname = "netapp1"\nkind = "ontap"\nssh = "netapp1-admin"\ninterval = "2s"\n'
                     'timeout = "15s"\n')
    r = run_cli("agent", "--once", "-c", str(cfg), "--store", str(store_path), timeout=120)
    assert r.returncode == 0, r.stderr
    store = Store(store_path)
    volumes = {row.tags["volume"] for row in store.latest("storage_volume")}
    assert volumes == {"db2data", "db2log"}
    assert {f.tags["lun"] for f in store.facts("storage_lun")} == {"/vol/db2data/lun0", "/vol/db2log/lun0"}
