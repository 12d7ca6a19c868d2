"""A hostile vCenter (tests/faults/hostile_vcenter.py, in front of the real simulator) against the real
agent: gzip bombs, DOCTYPEs and dates in 9999, in the bulk calls and in the small calls of the login.

Before: 0.5 MB of gzip became 1.5 GB of RSS; DOCTYPEs were accepted (only the interpreter's expat
stopped entity bombs); a QueryPerf answer dated 9999 became each VM's high-water mark, so no later
sample was ever taken. Now each is a collector error (or set-aside samples) in a run that goes on,
with the other sources' samples stored and the exit status saying what failed.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time

import pytest

from db2vtop.agent.core.model import Sample
from db2vtop.agent.core.store import Store
from db2vtop.agent.core.supervise import Supervisor
from db2vtop.collectors.base import CollectorError
from db2vtop.collectors.vsphere.collector import VSphereCollector
from db2vtop.collectors.vsphere.config import VCenterConfig
from tests.faults.agent import AGENT, run_measured
from tests.faults.hostile_vcenter import HostileVCenter
from tests.infra.vsphere_sim import Simulator

SCENARIO = {
    "datacenter": "DC1",
    "datastores": [{"name": "ds1", "capacity_gb": 100, "free_gb": 50,
                    "luns": ["naa.600a0980383030530000000000000001"]}],
    "hosts": [{"name": "esx01", "cpu_sockets": 1, "cpu_cores": 4, "cpu_threads": 8, "cpu_mhz": 2600,
               "memory_mb": 65536, "perf": {"mem.state.latest": 0},
               "vms": [{"name": "db01", "num_cpu": 4, "memory_mb": 8192,
                        "disks": [{"datastore": "ds1", "size_gb": 10}],
                        "perf": {"cpu.usage.average": 2500, "cpu.ready.summation": 800}}]}],
}
ENV = {"VC_TEST_PASSWORD": "anything"}
BOUND_MB = 400  # the agent's peak RSS with a 64 MiB answer bound; the unbounded parse took 1.5 GB


@pytest.fixture(scope="module")
def vcenter(tmp_path_factory):
    d = tmp_path_factory.mktemp("sim")
    with Simulator.of(SCENARIO, d) as sim, HostileVCenter(sim.url) as proxy:
        yield proxy


def once(tmp_path, proxy: HostileVCenter) -> tuple[int, float, str]:
    """`db2vtop agent --once` against the proxy: exit status, peak RSS in MB, its log."""
    store = tmp_path / "m.db"
    cfg = tmp_path / "config.toml"
    cfg.write_text(f'[store]\npath = "{store}"\n[guest]\ninterval = "1s"\n[[vcenter]]\nname = "vc1"\n'
                   f'url = "{proxy.url}"\nuser = "monitor"\npassword_env = "VC_TEST_PASSWORD"\n'
                   'allow_plaintext = true\n')  # the hostile vCenter speaks plain http, as one on the path can
    log = tmp_path / "agent.log"
    status, rss_mb = run_measured([*AGENT, "agent", "-c", str(cfg), "--once"], log, {**os.environ, **ENV})
    with Store(store) as s:  # what the other source gave is stored whatever vCenter did
        assert any(r.tags.get("cpu") == "total" for r in s.rows("guest_cpu", 0)), log.read_text()[-3000:]
    return status, rss_mb, log.read_text()


@pytest.mark.parametrize(("method", "fault", "said"), [
    ("QueryPerf", "bomb", "InvalidResponse: answer larger than 67108864 bytes"),
    ("RetrievePropertiesEx", "bomb", "InvalidResponse: answer larger than 67108864 bytes"),
    ("RetrieveServiceContent", "bomb", "answer larger than 1048576 bytes"),  # the small calls' own bound
    ("RetrievePropertiesEx", "doctype", "DTDForbidden"),
    ("RetrieveServiceContent", "doctype", "DTDForbidden"),
    ("Login", "bomb", "answer larger than 1048576 bytes"),  # pyvmomi's typed call, read through the same bounds
    ("Login", "doctype", "DTDForbidden"),
])
def test_a_bomb_or_a_doctype_is_a_collector_error_in_bounded_memory(tmp_path, vcenter, method, fault, said):
    vcenter.faults = {method: fault}
    try:
        status, rss_mb, log = once(tmp_path, vcenter)
    finally:
        vcenter.faults = {}
    assert vcenter.hits.pop(method, 0) >= 1
    assert status == 1, log[-2000:]  # --once: a collector failed
    assert said in log and "vc1" in log, log[-2000:]
    assert rss_mb < BOUND_MB, rss_mb
    assert "Traceback" not in log
    assert "the password or token is sent unencrypted" in log  # allow_plaintext is warned about at every start


def test_samples_dated_9999_are_set_aside_and_the_next_cycle_still_collects(tmp_path, vcenter):
    vcenter.faults = {"QueryPerf": "year9999"}
    try:
        status, _, log = once(tmp_path, vcenter)
    finally:
        vcenter.faults = {}
    assert status == 0, log[-2000:]
    assert "collector:vsphere:vc1: set aside" in log and "QueryPerf samples of vcenter vc1" in log, log[-2000:]
    with Store(tmp_path / "m.db") as s:
        stamps = [r.ts for m in s.measurements() if m.startswith("vsphere_") for r in s.rows(m, 0)]
    assert not [t for t in stamps if t > time.time_ns() + 86400 * 10**9]

    async def two_cycles() -> list[Sample]:  # the high-water mark must not have moved to 9999
        c = VSphereCollector(VCenterConfig(name="vc1", url=vcenter.url, user="monitor",
                                           password_env="VC_TEST_PASSWORD", allow_plaintext=True))
        c.supervisor = sup = Supervisor()
        try:
            vcenter.faults = {"QueryPerf": "year9999"}
            await c.describe()
            first = [r for r in await c.collect() if _ready(r)]
            vcenter.faults = {}
            assert not first and sup.snapshot()[0].set_aside == 1
            return [r for r in await c.collect() if isinstance(r, Sample)]
        finally:
            vcenter.faults = {}
            await c.close()

    os.environ.update(ENV)
    second = asyncio.run(two_cycles())
    assert [s for s in second if _ready(s) and s.tags.get("vm") == "db01"]


def _ready(r: object) -> bool:
    """A VM's CPU ready sample: it comes only from QueryPerf."""
    return isinstance(r, Sample) and r.measurement == "vsphere_vm" and "cpu_ready_pct" in r.fields


def test_a_vcenter_that_trickles_its_answer_ends_the_call_at_its_deadline_and_the_next_cycle_collects(vcenter):
    """NEW-4: QueryPerf's answer a byte a second (each read gets its byte long before a socket timeout). Before,
    the cycle's call went on for as long as the answer trickled: the collector's worker stayed in it (in the
    agent every later cycle was skipped, and the stop waited on it). Now the call ends at its deadline (the
    collector's timeout), the cycle is a timeout error, and the next cycle, vCenter healthy again, collects."""
    timeout_s, healthy_after_s = 2.0, 15.0

    async def cycles() -> tuple[float, str, list[Sample]]:
        c = VSphereCollector(VCenterConfig(name="vc1", url=vcenter.url, user="monitor",
                                           password_env="VC_TEST_PASSWORD", allow_plaintext=True, timeout=timeout_s))
        c.supervisor = Supervisor()
        # vCenter healthy again: this alone ends a call nothing else ends
        heal = threading.Timer(healthy_after_s, lambda: setattr(vcenter, "faults", {}))
        try:
            await c.describe()
            vcenter.faults = {"QueryPerf": "trickle"}
            heal.start()
            began = time.monotonic()
            try:
                await c.collect()
                error = ""
            except CollectorError as e:
                error = str(e)
            took = time.monotonic() - began
            vcenter.faults = {}
            return took, error, [r for r in await c.collect() if isinstance(r, Sample)]
        finally:
            heal.cancel()
            vcenter.faults = {}
            await c.close()

    os.environ.update(ENV)
    took, error, samples = asyncio.run(cycles())
    assert vcenter.hits.pop("QueryPerf", 0) >= 1
    assert took < timeout_s + 3, (took, error)  # not the trickle's length (healthy_after_s)
    assert "QueryPerf to 127.0.0.1 timed out after 2s" in error, error
    assert [s for s in samples if _ready(s) and s.tags.get("vm") == "db01"]
