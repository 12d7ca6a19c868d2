"""The Linux storage host over the real sshd: a loop device under a real dd load against the real
iostat run over the same SSH target; identities and multipath maps from documented sysfs layouts."""

from __future__ import annotations

import asyncio
import contextlib
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from db2vtop.agent.runtime import Runtime
from db2vtop.collectors.base import CollectorError
from db2vtop.collectors.selfmon import SelfCollector
from db2vtop.collectors.ssh.bundle import Fetched
from db2vtop.collectors.storage.linux.collector import (
    Identity,
    LinuxStorageCollector,
    identities,
    queue_limit,
    vpd_serial,
)
from db2vtop.collectors.storage.linux.config import LinuxStorageConfig
from tests.collectors.guest.test_guest import dd, loop_device  # noqa: F401 - the fixture
from tests.collectors.guest.test_guest_remote import Capture, broken_sh, target  # noqa: F401 - broken_sh is a fixture


def collector(sshd, **cfg) -> LinuxStorageCollector:
    return LinuxStorageCollector(LinuxStorageConfig(name="san1", ssh="test", **cfg), target(sshd))


async def test_matches_real_iostat_over_the_same_target(sshd, loop_device):  # noqa: F811
    """A dd burst inside both windows: iostat's (3 s, run over the same SSH target) and the collector's
    (a little longer). Both then saw exactly the same I/Os, so their totals (rate x window) agree."""
    name = Path(loop_device).name
    c = collector(sshd, devices_exclude=[], interval=2.0)
    await c.start()
    facts = {(f.kind, f.tags.get("device")): f.data for f in await c.describe()}
    await c.collect()
    begin = c.prev.uptime_s
    iostat = asyncio.create_task(asyncio.to_thread(
        c.target.run, ["iostat", "-dxk", "-y", "-o", "JSON", "3", "1", name]))
    await asyncio.sleep(0.8)
    assert await asyncio.to_thread(dd(loop_device, 128).wait) == 0
    r = await iostat
    samples = await c.collect()
    window = c.prev.uptime_s - begin
    assert r.rc == 0, r.stderr
    (theirs,) = json.loads(r.stdout)["sysstat"]["hosts"][0]["statistics"][0]["disk"]
    (disk,) = [s for s in samples if s.tags["device"] == name]
    ours = disk.fields
    assert theirs["w/s"] * 3 > 60, "the burst did not reach the device inside iostat's window"
    totals = {"write_iops": "w/s", "queue_size": "aqu-sz", "util_pct": "util"}
    # iostat prints 2 decimals (+-0.005 a second of its 3 s window: +-0.015) and the kernel counts the queue and
    # busy time in whole ms at each end of both windows (+-0.004): a total at the very edge of the rounding is equal.
    for ours_key, their_key in totals.items():
        assert ours[ours_key] * window == pytest.approx(theirs[their_key] * 3, rel=0.05, abs=0.019), ours_key
    assert ours["write_bytes_per_s"] * window == pytest.approx(theirs["wkB/s"] * 1024 * 3, rel=0.02)
    assert ours["write_bytes_per_s"] * window == pytest.approx(128 * 2**20, rel=0.05)
    assert ours["write_await_ms"] == pytest.approx(theirs["w_await"], rel=0.05)
    nr = int(Path(f"/sys/block/{name}/queue/nr_requests").read_text())  # a loop device has no SCSI queue depth
    assert ours["queue_depth"] == nr and ours["queue_limit_source"] == "nr_requests"
    assert ours["queue_depth_used_pct"] == pytest.approx(ours["queue_size"] * 100 / nr, abs=0.01)
    assert disk.tags == {"storage": "san1", "device": name, "type": "disk"}
    assert facts["storage_block_device", name]["nr_requests"] == nr
    assert facts["storage_host", None]["hostname"] == Path("/proc/sys/kernel/hostname").read_text().strip()
    await c.close()


async def test_one_round_trip_per_cycle_facts_included(sshd):
    c = collector(sshd, interval=1.0)
    await c.start()
    sshd.clear_commands()
    await c.describe()
    await c.collect()
    await c.collect()
    assert sshd.commands() == ["sh -s"] * 2
    await c.close()


# sysfs as the kernel documents it (Documentation/ABI/testing/sysfs-block, sysfs-block-dm) for a host
# with one NetApp LUN over two FC paths (sdb, sdc) under dm-multipath, and a virtio disk.
VPD80 = "\x00\x80\x00\x0c80BTc$DmK4mX"  # SPC-4 unit serial number page: 4-byte header, then the serial
SYSFS = {
    "/sys/block/dm-0/dm/uuid": "mpath-3600a098038303053453f463045727a4d\n",
    "/sys/block/dm-0/dm/name": "db2data\n",
    "/sys/block/dm-0/queue/nr_requests": "256\n",
    "/sys/block/dm-1/dm/uuid": "LVM-Xk3T4q\n",
    "/sys/block/dm-1/queue/nr_requests": "256\n",
    "/sys/block/sdb/device/wwid": "naa.600a098038303053453f463045727a4d\n",
    "/sys/block/sdb/device/queue_depth": "32\n", "/sys/block/sdc/device/queue_depth": "64\n",
    "/sys/block/sdb/device/vpd_pg80": VPD80, "/sys/block/sdc/device/vpd_pg80": VPD80,
    "/sys/block/sdc/device/wwid": "naa.600a098038303053453f463045727a4d\n",
    "/sys/block/sdb/device/vendor": "NETAPP  \n", "/sys/block/sdb/queue/nr_requests": "64\n",
    "/sys/block/vda/serial": "db2-os\n", "/sys/block/vda/queue/nr_requests": "256\n",
    "/sys/class/block/vda1/partition": "1\n",
}
SLAVES = {"/sys/block/dm-0/slaves/sdb", "/sys/block/dm-0/slaves/sdc", "/sys/block/dm-1/slaves/vda1"}


def test_identities_and_multipath_maps():
    ids = identities(SYSFS, SLAVES)
    assert ids["dm-0"] == Identity("multipath", "3600a098038303053453f463045727a4d", None, ("sdb", "sdc"))
    assert ids["dm-0"].naa == ids["sdb"].naa == "naa.600a098038303053453f463045727a4d"  # as ESXi names the LUN
    assert ids["sdb"].serial == "80BTc$DmK4mX" and ids["sdb"].type == "disk"
    assert ids["dm-1"].type == "dm" and ids["dm-1"].naa is None
    assert ids["vda"] == Identity("disk", None, "db2-os") and ids["vda1"].type == "partition"
    assert ids["dm-0"].tags() == {"type": "multipath", "wwid": "3600a098038303053453f463045727a4d",
                                  "naa": "naa.600a098038303053453f463045727a4d"}
    assert queue_limit("dm-0", ids["dm-0"], SYSFS) == (96, "paths")  # each path has its own LUN queue
    assert queue_limit("sdb", ids["sdb"], SYSFS) == (32, "queue_depth")
    assert queue_limit("dm-1", ids["dm-1"], SYSFS) == (256, "nr_requests")
    assert vpd_serial("\x00\x80") is None and vpd_serial(None) is None


def test_facts_carry_the_join_keys(sshd):
    c = collector(sshd)
    facts = {(f.kind, f.tags.get("device")): f.data for f in c.facts(Fetched(SYSFS, SLAVES), 1)}
    dm0 = facts["storage_block_device", "dm-0"]
    assert dm0["naa"] == "naa.600a098038303053453f463045727a4d" and dm0["paths"] == ["sdb", "sdc"]
    assert dm0["queue_depth"] == 96 and dm0["dm_name"] == "db2data" and dm0["type"] == "multipath"
    assert facts["storage_block_device", "sdb"]["vendor"] == "NETAPP"
    assert ("storage_block_device", "vda1") not in facts


@pytest.mark.parametrize("script, message", [
    ('N=$(sed -n "1s/^N=//p"); printf "\\n%s P /sys/block\\n" "$N"\n', "file missing (is this Linux?)"),
    ("echo '% Access denied'\n", "printed no records"),
])
async def test_no_diskstats_or_garbage_is_recorded_not_raised(sshd, broken_sh, script, message):  # noqa: F811
    broken_sh(script)
    c = collector(sshd)
    out = Capture()
    await Runtime([c, SelfCollector()], [out]).run_once()
    me = {s.tags["collector"]: s.fields for s in out.samples if s.measurement == "db2vtop_collector"}
    assert me[c.name]["status"] == "error" and message in me[c.name]["last_error"]
    assert me["self"]["status"] == "ok"


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.sampled_from(sorted(SYSFS)), st.text(max_size=40)), st.sets(st.sampled_from(
    sorted(SLAVES | {"/sys/block/dm-0/slaves", "/sys/block/x"}))))
def test_fuzzed_sysfs_never_raises(files, paths):
    c = LinuxStorageCollector(LinuxStorageConfig(name="s", ssh="t"), target=None)  # type: ignore[arg-type]
    for fact in c.facts(Fetched(dict(SYSFS, **files), paths), 1):
        assert fact.tags["storage"] == "s"
    for dev, ident in c.ids.items():
        limit, _ = queue_limit(dev, ident, dict(SYSFS, **files))
        assert limit is None or limit > 0


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=200), st.text(max_size=60))
def test_fuzzed_diskstats_raise_only_the_collectors_error(diskstats, uptime):
    c = LinuxStorageCollector(LinuxStorageConfig(name="s", ssh="t"), target=None)  # type: ignore[arg-type]
    with contextlib.suppress(CollectorError):
        c.samples(Fetched({"/proc/diskstats": diskstats, "/proc/uptime": uptime}), 1)
        c.samples(Fetched({"/proc/diskstats": diskstats, "/proc/uptime": "99999999.0 1"}), 2)
