"""The AIX guest over the real sshd, with AIX commands shimmed on the remote PATH (outputs as
IBM documents them, see tests/infra/aix_shims.py), and fuzzed parsers."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from db2vtop.agent.runtime import Runtime
from db2vtop.collectors.base import CollectorError
from db2vtop.collectors.guest.aix import (
    AIXFormatError,
    AIXPlatform,
    number,
    parse_iostat_disks,
    parse_pairs,
    parse_tunables,
)
from db2vtop.collectors.guest.config import RemoteGuestConfig
from db2vtop.collectors.guest.remote import RemoteGuestCollector
from db2vtop.collectors.selfmon import SelfCollector
from db2vtop.collectors.ssh.bundle import Fetched, Output
from tests.collectors.guest.test_guest_remote import Capture, target
from tests.infra import aix_shims


@pytest.fixture
def aix_host(sshd):
    """The test sshd's PATH starts with AIX commands; removed after the test (the sshd is shared)."""
    paths = aix_shims.install(sshd.shims)
    log = sshd.shims / "aix-calls.log"
    log.unlink(missing_ok=True)
    yield log
    for p in paths:
        p.unlink(missing_ok=True)
    log.unlink(missing_ok=True)


def by_key(records):
    return {(r.measurement if hasattr(r, "measurement") else r.kind, r.tags.get("device", r.tags.get("adapter", ""))):
            (r.fields if hasattr(r, "fields") else r.data) for r in records}


async def test_aix_guest_facts_and_samples_in_one_round_trip_per_cycle(sshd, aix_host):
    c = RemoteGuestCollector(RemoteGuestConfig(ssh="db2aix01", interval=5.0), target(sshd))
    await c.start()
    assert isinstance(c.platform, AIXPlatform)  # detected from `uname -s`
    sshd.clear_commands()
    facts = by_key(await c.describe())
    samples = by_key(await c.collect())
    samples_again = by_key(await c.collect())
    assert sshd.commands() == ["sh -s", "sh -s"]  # the facts cycle is one round trip, so is the next
    assert samples_again == samples

    assert facts["guest", ""] == {
        "os": "AIX", "hostname": "db2aix01", "kernel": "6100-09-12-1846", "cpus": 8, "memory_bytes": 16 * 2**30,
        "entitlement": 2.0, "lru_file_repage": 0, "aio_maxservers": 30, "aio_minservers": 3, "aio_maxreqs": 65536,
        "aio_state": "available"}
    assert facts["guest_block_device", "hdisk1"] == {
        "queue_depth": 3, "max_transfer_bytes": 0x80000, "algorithm": "round_robin", "reserve_policy": "no_reserve",
        "unique_id": "3E213600A098038303053453F463045727A4D0F1818      FAStT03IBMfcp",
        "description": "MPIO Other FC SCSI Disk Drive"}
    assert facts["guest_block_device", "hdisk0"]["description"] == "Virtual SCSI Disk Drive"
    assert facts["guest_fc_adapter", "fcs0"] == {"num_cmd_elems": 200, "max_xfer_size_bytes": 0x100000}
    assert ("guest_fc_adapter", "ent0") not in facts and ("guest_block_device", "ent0") not in facts

    assert samples["guest_cpu", ""] == {
        "user_pct": 41, "system_pct": 12, "idle_pct": 30, "iowait_pct": 17, "busy_pct": 53, "procs_running": 4,
        "procs_blocked": 2, "physical_cpus": 1.43, "entitlement_pct": 71.5, "interrupts_per_s": 2214,
        "context_switches_per_s": 4521, "syscalls_per_s": 18312}
    assert samples["guest_mem", ""] == {
        "total_bytes": 16 * 2**30, "free_bytes": 1929511 * 4096, "active_virtual_bytes": 1803012 * 4096,
        "swap_in_bytes_per_s": 12 * 4096, "swap_out_bytes_per_s": 3 * 4096, "pages_freed_per_s": 40,
        "pages_scanned_per_s": 120}
    hdisk1 = samples["guest_disk", "hdisk1"]  # the second report, not the since-boot one
    assert hdisk1 == pytest.approx({
        "util_pct": 98.0, "read_iops": 6000.0, "write_iops": 1500.0, "read_bytes_per_s": 49.2e6,
        "write_bytes_per_s": 12.2e6, "read_service_ms": 4.1, "write_service_ms": 1.1, "queue_wait_ms": 12.5,
        "read_await_ms": 16.6, "write_await_ms": 13.6, "queue_size": 33.2, "wait_queue_size": 30.2,
        "service_queue_size": 3.0, "sqfull_per_s": 850.0, "read_timeouts_per_s": 0, "read_failures_per_s": 0,
        "write_timeouts_per_s": 0, "write_failures_per_s": 0})
    assert samples["guest_disk", "hdisk0"]["read_bytes_per_s"] == 16400.0

    calls = aix_host.read_text().splitlines()
    assert "vmstat 3 2" in calls and "iostat -D 3 2" in calls  # a 3 s window inside a 5 s interval
    assert "lsattr -El aio0 -F attribute:value" in calls and "vmo -F -a" in calls and "ioo -a" in calls
    await c.close()


@pytest.mark.parametrize("shim, body, message", [
    ("iostat", 'echo "sh: iostat: not found" >&2; exit 127\n', "iostat: not found on the remote PATH"),
    ("iostat", "echo 'iostat: 0551-157 Asynchronous I/O not configured'; exit 2\n", "iostat: exit status 2"),
    ("vmstat", "echo 'Segmentation fault'\n", "vmstat: no column header"),
])
async def test_broken_aix_commands_are_recorded_not_raised(sshd, aix_host, shim, body, message):
    sshd.shim(shim, "#!/bin/sh\n" + body)
    # a 1 s sampling window (60 % of the interval) with 2 s to spare: a loaded machine's ssh login took more than 0.9 s
    c = RemoteGuestCollector(RemoteGuestConfig(ssh="db2aix01", os="aix", interval=3.0), target(sshd))
    out = Capture()
    await Runtime([c, SelfCollector()], [out]).run_once()
    me = {s.tags["collector"]: s.fields for s in out.samples if s.measurement == "db2vtop_collector"}
    assert me[c.name]["status"] == "error" and message in me[c.name]["last_error"]
    assert me["self"]["status"] == "ok"
    assert any(f.kind == "guest" for f in out.facts)  # facts still arrive when the samples fail


def test_number_suffixes():
    assert number("16.4K", "x") == 16400.0 and number("61.4M", "x") == 61.4e6 and number("1.2S", "x") == 1200.0
    assert number("3", "x") == 3.0
    for bad in ("", "K", "1.2.3", "x", "-", "1e5"):
        with pytest.raises(AIXFormatError):
            number(bad, "x")


def test_later_report_replaces_the_since_boot_one():
    disks = parse_iostat_disks(aix_shims.fixture("iostat"))
    assert disks["hdisk1"]["queue.sqfull"] == 850.0 and disks["hdisk1"]["queue.maxtime"] == 1200.0


FIXTURES = {name: aix_shims.fixture(name) for name in ("vmstat", "iostat", "vmo", "ioo")}


def mutate(data, text: str) -> str:
    mode = data.draw(st.sampled_from(["truncate", "splice", "token", "drop_line"]))
    if mode == "truncate":
        return text[: data.draw(st.integers(0, len(text)))]
    if mode == "splice":
        at = data.draw(st.integers(0, len(text)))
        return text[:at] + data.draw(st.text(max_size=30)) + text[at:]
    lines = text.splitlines()
    i = data.draw(st.integers(0, max(0, len(lines) - 1)))
    if mode == "drop_line" and lines:
        del lines[i]
    elif lines:
        words = lines[i].split() or [""]
        j = data.draw(st.integers(0, len(words) - 1))
        words[j] = data.draw(st.sampled_from(["-", "1e400", "nan", "12Q", ":", "hdisk9", "xfer:", "read:", "", "=="]))
        lines[i] = " ".join(words)
    return "\n".join(lines)


@settings(max_examples=400, deadline=None)
@given(st.sampled_from(sorted(FIXTURES)), st.data())
def test_fuzzed_aix_output_raises_only_the_collectors_error(name, data):
    texts = dict(FIXTURES, **{name: mutate(data, FIXTURES[name])})
    got = Fetched(commands={k: Output(0, v) for k, v in texts.items()})
    platform = AIXPlatform("g", RemoteGuestConfig(ssh="g"))
    with contextlib.suppress(CollectorError):
        for sample in platform.samples(got, 1):
            assert all(v == v for v in sample.fields.values() if isinstance(v, float))
    platform.facts(got, 1)  # facts never fail on odd values: unknown ones are None
    parse_pairs(texts[name])
    parse_tunables(texts[name])
