"""esxtop over the real sshd with an `esxtop` shim printing batch CSV as VMware documents it
(tests/infra/esxtop_fixture.py names the documents), the parser's fast and slow paths, and fuzzing."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from db2vtop.agent.runtime import Runtime
from db2vtop.checks.engine import Engine
from db2vtop.checks.rules import all_rules
from db2vtop.collectors.esxtop.batch import NUMA, EsxtopFormatError, parse_batch
from db2vtop.collectors.esxtop.collector import EsxtopCollector
from db2vtop.collectors.esxtop.config import EsxtopConfig
from db2vtop.collectors.selfmon import SelfCollector
from tests.collectors.guest.test_guest_remote import Capture, target
from tests.infra.esxtop_fixture import VM, Device, batch_csv, fleet

DB2 = VM("db2prod01", vcpus=8, memory_mb=65536, used_pct=610.0, ready_pct=96.0, costop_pct=4.2,
         max_limited_pct=1.5, swap_wait_pct=0.3, balloon_mb=512, swapped_mb=128, home_nodes="0,1", migrations=7,
         local_mb=33792, remote_mb=31744)
APP = VM("app01", vcpus=2, memory_mb=8192, home_nodes="1", local_mb=8000, remote_mb=192)
LUN = Device("naa.600a098038303053453f463045727a4d", queue_depth=32, active=32, queued=17, davg_ms=18.5,
             kavg_ms=6.2, qavg_ms=6.1)


@pytest.fixture
def esxtop_shim(sshd, tmp_path):
    """An `esxtop` on the remote PATH that logs its arguments and prints a batch CSV."""
    csv_file, log = tmp_path / "esxtop.csv", tmp_path / "esxtop-args.log"

    def install(text: str, script: str | None = None) -> None:
        csv_file.write_text(text)
        sshd.shim("esxtop", script or f'#!/bin/sh\necho "$*" >> {log}\ncat {csv_file}\n')

    install.log = log
    yield install
    (sshd.shims / "esxtop").unlink(missing_ok=True)


async def test_esxtop_cycle_over_ssh(sshd, esxtop_shim):
    esxtop_shim(batch_csv("esx01.example.com", [DB2, APP], [LUN], samples=2))
    c = EsxtopCollector(EsxtopConfig(name="esx01", ssh="test"), target(sshd))
    sshd.clear_commands()
    samples = await c.collect()
    assert sshd.commands() == ["esxtop -b -a -d 2 -n 1"]
    assert esxtop_shim.log.read_text().split() == ["-b", "-a", "-d", "2", "-n", "1"]
    vms = {s.tags["vm"]: s for s in samples if s.measurement == "esxtop_vm"}
    assert set(vms) == {"db2prod01", "app01"}  # system groups (hostd, vmotion, ...) are not VMs
    db2 = vms["db2prod01"]
    assert db2.tags == {"host": "esx01", "vm": "db2prod01"}
    assert db2.fields == pytest.approx({
        "used_pct": 610.0, "run_pct": 610.0, "system_pct": 0.0, "wait_pct": 0.0, "ready_pct": 96.0,
        "costop_pct": 4.2, "max_limited_pct": 1.5, "swap_wait_pct": 0.3, "memory_size_bytes": 64 * 2**30,
        "balloon_bytes": 512 * 2**20, "swapped_bytes": 128 * 2**20, "swap_read_bytes_per_s": 0.0,
        "swap_write_bytes_per_s": 0.0, "numa_home_nodes": "0,1", "numa_migrations": 7.0,
        "numa_remote_bytes": 31744 * 2**20, "numa_local_bytes": 33792 * 2**20, "numa_local_pct": 51.6})
    assert vms["app01"].fields["numa_home_node"] == 1 and vms["app01"].fields["numa_local_pct"] == 97.7
    (dev,) = [s for s in samples if s.measurement == "esxtop_device"]
    assert dev.tags == {"host": "esx01", "device": "naa.600a098038303053453f463045727a4d"}
    assert dev.fields == pytest.approx({
        "queue_depth": 32, "active": 32, "queued": 17, "used_pct": 100.0, "load": 1.53, "commands_per_s": 2000.0,
        "reads_per_s": 1500.0, "writes_per_s": 500.0, "read_bytes_per_s": 48 * 2**20,
        "write_bytes_per_s": 12 * 2**20, "device_latency_ms": 18.5, "kernel_latency_ms": 6.2,
        "guest_latency_ms": 24.7, "queue_latency_ms": 6.1, "guest_read_latency_ms": 24.7,
        "guest_write_latency_ms": 24.7, "aborts_per_s": 0.0, "resets_per_s": 0.0})
    assert c.facts_due()
    (fact,) = await c.describe()
    assert fact.kind == "esxtop_host" and fact.data["esxtop_hostname"] == "esx01.example.com"
    assert {"Group Memory", "Numa Node", "Physical Cpu", "Vcpu"} <= set(fact.data["objects"])
    assert fact.data["columns"]["Group Cpu"][:3] == ["Members", "% Used", "% Run"]
    assert fact.data["numa_columns"] == {"Numa Home Nodes": "numa_home_node", "Numa Migrations": "numa_migrations",
                                         "Numa Remote Memory MBytes": "numa_remote_bytes",
                                         "Numa Local Memory MBytes": "numa_local_bytes",
                                         "% Numa Local": "numa_local_pct"}
    c.facts_done()
    await c.collect()
    assert not c.facts_due()  # the same host: its header is not read again
    await c.close()


async def test_a_header_without_numa_columns_is_a_warning_naming_the_columns(sshd, esxtop_shim, caplog):
    text = batch_csv("esx01.example.com", [DB2, APP], [LUN])
    for name in ("Numa Home Nodes", "Numa Migrations", "Numa Remote Memory MBytes", "Numa Local Memory MBytes",
                 "% Numa Local"):
        text = text.replace(f"\\{name}\"", f"\\NUMA {name.upper()}\"")  # a release that names them otherwise
    esxtop_shim(text)
    c = EsxtopCollector(EsxtopConfig(name="esx01", ssh="test"), target(sshd))
    samples = await c.collect()
    assert not [k for s in samples for k in s.fields if k.startswith("numa_")]  # nothing read by a guess
    assert "NUMA columns not found in esxtop output of esx01.example.com" in caplog.text
    e = Engine(all_rules(), {})
    e.feed(facts=await c.describe())
    (finding,) = [f for f in e.open_findings() if f.rule == "numa-locality"]
    assert finding.severity == "warning" and finding.subject == {"layer": "host", "host": "esx01"}
    assert finding.summary.startswith("NUMA columns not found in esxtop output of esx01 (columns seen: Members, "
                                      "Memory Size MBytes, Memory Granted Size MBytes,")
    assert "NUMA NUMA HOME NODES" in finding.summary and finding.summary.endswith("NUMA % NUMA LOCAL)")
    # the same host, upgraded to a release whose names db2vtop knows: recorded again, the finding resolves
    esxtop_shim(batch_csv("esx01.example.com", [DB2, APP], [LUN]))
    c.facts_done()
    await c.collect()
    assert c.facts_due()
    e.feed(facts=await c.describe())
    assert not [f for f in e.open_findings() if f.rule == "numa-locality"]
    await c.close()


@pytest.mark.parametrize("script, message", [
    ('#!/bin/sh\necho "sh: esxtop: not found" >&2\nexit 127\n', "esxtop is not on the remote PATH"),
    ("#!/bin/sh\necho 'Failed to initialize VSI' >&2\nexit 1\n", "esxtop exited 1: Failed to initialize VSI"),
    ("#!/bin/sh\necho '<html>Unauthorized</html>'\n", "no PDH-CSV header"),
])
async def test_errors_are_recorded_and_the_runtime_goes_on(sshd, esxtop_shim, script, message):
    esxtop_shim("", script)
    c = EsxtopCollector(EsxtopConfig(name="esx01", ssh="test"), target(sshd))
    out = Capture()
    await Runtime([c, SelfCollector()], [out]).run_once()
    me = {s.tags["collector"]: s.fields for s in out.samples if s.measurement == "db2vtop_collector"}
    assert me[c.name]["status"] == "error" and message in me[c.name]["last_error"]
    assert me["self"]["status"] == "ok"


def test_quoted_names_take_the_csv_path_with_the_same_result():
    plain = parse_batch(batch_csv("h", [DB2, APP], [LUN]))
    quoted = parse_batch(batch_csv("h", [DB2, VM('app "01", test', home_nodes="1", local_mb=8000, remote_mb=192,
                                                 vcpus=2, memory_mb=8192)], [LUN]))
    assert quoted.vms['app "01", test'] == plain.vms["app01"] and quoted.devices == plain.devices
    assert quoted.vms["db2prod01"] == plain.vms["db2prod01"]


@pytest.mark.parametrize("spelling", sorted(NUMA))
def test_each_accepted_numa_spelling_is_read(spelling):
    """Every name in the NUMA table (VMware's documented NHN/NMIG/NRMEM/NLMEM/N%L, and the assumed long forms)
    is read into its field, exactly as spelled."""
    field, scale, _ = NUMA[spelling]
    fixture = {"numa_home_node": "Numa Home Nodes", "numa_migrations": "Numa Migrations",
               "numa_remote_bytes": "Numa Remote Memory MBytes", "numa_local_bytes": "Numa Local Memory MBytes",
               "numa_local_pct": "% Numa Local"}[field]
    vm = VM("db2prod01", home_nodes="1", migrations=7, local_mb=33792, remote_mb=31744)
    text = batch_csv("h", [vm], [LUN]).replace(f"\\{fixture}\"", f"\\{spelling}\"")
    batch = parse_batch(text)
    expected = {"numa_home_node": 1, "numa_migrations": 7.0, "numa_remote_bytes": 31744 * 2**20,
                "numa_local_bytes": 33792 * 2**20, "numa_local_pct": 51.6}[field]
    assert batch.vms["db2prod01"][field] == pytest.approx(expected) and batch.numa_columns[spelling] == field
    assert scale in (1, 2**20)


def test_numa_columns_match_exactly_and_locality_is_computed_without_n_l():
    """A column that merely shares words is not taken; without N%L it comes from NLMEM / (NLMEM + NRMEM)."""
    text = batch_csv("h", [DB2], [LUN]).replace("% Numa Local", "% Local Swap Hits")
    vm = parse_batch(text).vms["db2prod01"]
    assert vm["numa_local_pct"] == pytest.approx(51.56, abs=0.01)  # computed, not read from "% Local Swap Hits"
    text = text.replace("Numa Home Nodes", "NUMA Home Node").replace("Numa Local Memory MBytes", "Local Memory MBytes")
    batch = parse_batch(text)
    assert "numa_home_nodes" not in batch.vms["db2prod01"] and "numa_local_bytes" not in batch.vms["db2prod01"]
    assert set(batch.numa_columns) == {"Numa Migrations", "Numa Remote Memory MBytes"}


def test_a_block_laid_out_differently_is_walked():
    text = batch_csv("h", [APP, DB2], [LUN])
    odd = text.replace("Group Cpu(100037:db2prod01)\\% Ready", "Group Cpu(100037:db2prod01)\\% Ready Extra")
    assert odd != text
    vm = parse_batch(odd).vms["db2prod01"]
    assert "ready_pct" not in vm and vm["costop_pct"] == 4.2


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 6), st.integers(0, 4), st.integers(0, 99))
def test_fast_and_csv_paths_agree(vms, devices, seed):
    vm_list, dev_list = fleet(vms, devices, seed)
    text = batch_csv("esx9", vm_list, dev_list, seed=seed)
    fast = parse_batch(text)
    vm_list[0].name = 'x"' + vm_list[0].name  # an escaped quote sends the header down the csv path
    slow = parse_batch(batch_csv("esx9", vm_list, dev_list, seed=seed))
    assert slow.vms.pop(vm_list[0].name) == fast.vms.pop(vm_list[0].name[2:])
    assert slow.vms == fast.vms and slow.devices == fast.devices
    assert len(fast.vms) == vms - 1 and len(fast.devices) == devices


SMALL = batch_csv("esx01", [DB2, APP], [LUN], samples=2)


@settings(max_examples=400, deadline=None)
@given(st.data())
def test_fuzzed_batch_output_raises_only_the_collectors_error(data):
    text = SMALL
    for _ in range(data.draw(st.integers(1, 3))):
        mode = data.draw(st.sampled_from(["truncate", "splice", "delete", "swap"]))
        at = data.draw(st.integers(0, len(text)))
        if mode == "truncate":
            text = text[:at]
        elif mode == "splice":
            junk = data.draw(st.sampled_from(['"', ",", "\r\n", '","', ")\\", "\\\\", "nan", "é"]))
            text = text[:at] + junk + text[at:]
        elif mode == "delete":
            text = text[:at] + text[at + data.draw(st.integers(1, 40)):]
        else:
            text = text.replace(data.draw(st.sampled_from(['","', "Group Cpu(", ")\\", "\r\n"])), data.draw(
                st.sampled_from(['"', "", "Group Memory(", ",", "\n\n"])), 1)
    with contextlib.suppress(EsxtopFormatError):
        batch = parse_batch(text)
        for fields in (*batch.vms.values(), *batch.devices.values()):
            assert all(v == v for v in fields.values() if isinstance(v, float))
