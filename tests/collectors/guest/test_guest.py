"""The guest collector: parsers on this machine's real /proc, iostat's arithmetic by hand,
against the real iostat under a real dd load, and fuzzed input that only ever raises
the collector's own error."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from db2vtop.collectors.base import CollectorError
from db2vtop.collectors.guest import procfs
from db2vtop.collectors.guest.config import GuestConfig
from db2vtop.collectors.guest.local import LocalGuestCollector, read_files
from db2vtop.collectors.guest.metrics import cpu_fields, disk_fields, guest_facts, guest_samples
from db2vtop.collectors.guest.procfs import DiskCounters, ProcFormatError, parse_vmstat, snapshot


def real_snapshot():
    return snapshot(read_files(procfs.SNAPSHOT_FILES + procfs.SNAPSHOT_GLOBS))


def test_real_proc_parses():
    s = real_snapshot()
    assert s.uptime_s > 0 and "cpu" in s.cpu and len(s.cpu) == os.cpu_count() + 1
    assert s.meminfo["MemTotal"] > 0 and s.meminfo["MemTotal"] % 1024 == 0
    assert "pgmajfault" in s.vmstat
    assert s.disks and s.nets and "lo" in s.nets
    assert s.thp_enabled in ("always", "madvise", "never", "")


def test_disk_math_is_iostats():
    """Hand-computed: 2 s window, 100 reads of 1 MiB total in 250 ms, 1.5 s busy, 3 s queue-weighted."""
    p = DiskCounters(1000, 10, 50000, 4000, 500, 0, 8000, 900, 0, 20000, 70000)
    c = DiskCounters(1100, 30, 52048, 4250, 540, 4, 8800, 1100, 3, 21500, 73000)
    f = disk_fields(p, c, 2.0)
    assert f == pytest.approx({
        "read_iops": 50.0, "write_iops": 20.0, "read_bytes_per_s": 524288.0, "write_bytes_per_s": 204800.0,
        "read_merges_per_s": 10.0, "write_merges_per_s": 2.0, "read_await_ms": 2.5, "write_await_ms": 5.0,
        "read_request_bytes": 10485.76, "write_request_bytes": 10240.0, "queue_size": 1.5, "util_pct": 75.0,
        "in_flight": 3})
    assert disk_fields(c, p, 2.0) is None  # counters went back: a reset, not a negative rate
    idle = disk_fields(p, p, 2.0)
    assert idle["read_await_ms"] == 0.0 and idle["util_pct"] == 0.0


def test_cpu_math():
    prev = (1000,) * 10
    cur = (1050, 1000, 1020, 1100, 1020, 1005, 1005, 1000, 1010, 1000)  # user includes 10 of guest
    f = cpu_fields(prev, cur)
    assert f == pytest.approx({"user_pct": 20.0, "nice_pct": 0.0, "system_pct": 10.0, "irq_pct": 2.5,
                               "softirq_pct": 2.5, "iowait_pct": 10.0, "steal_pct": 0.0, "guest_pct": 5.0,
                               "idle_pct": 50.0, "busy_pct": 40.0})
    assert sum(v for k, v in f.items() if k != "busy_pct") == pytest.approx(100.0)
    assert cpu_fields(prev, prev) is None


def test_memory_and_swap_rates():
    s1, s2 = real_snapshot(), real_snapshot()
    s2.uptime_s = s1.uptime_s + 2.0
    s1.vmstat.update(pswpin=100, pswpout=0, pgmajfault=10)
    s2.vmstat.update(pswpin=110, pswpout=4, pgmajfault=30)
    (mem,) = [x for x in guest_samples(s1, s2, "g", 1, 4096) if x.measurement == "guest_mem"]
    assert mem.fields["swap_in_bytes_per_s"] == 20480.0 and mem.fields["swap_out_bytes_per_s"] == 8192.0
    assert mem.fields["major_faults_per_s"] == 10.0
    m = s2.meminfo
    assert mem.fields["used_bytes"] == m["MemTotal"] - m["MemAvailable"]
    assert mem.fields["thp_mode"] == s2.thp_enabled


@pytest.fixture
def loop_device(tmp_path):
    if os.geteuid() != 0 or not shutil.which("losetup"):
        pytest.skip("needs root and losetup to put a private block device under load")
    backing = tmp_path / "disk.img"
    with open(backing, "wb") as f:
        f.truncate(512 * 2**20)
    dev = subprocess.run(["losetup", "-f", "--show", str(backing)], capture_output=True, text=True)
    if dev.returncode != 0:
        pytest.skip(f"no loop device: {dev.stderr.strip()}")
    path = dev.stdout.strip()
    yield path
    subprocess.run(["losetup", "-d", path], check=False)


def dd(device: str, mib: int, seek: int = 0) -> subprocess.Popen:
    return subprocess.Popen(["dd", "if=/dev/zero", f"of={device}", "bs=1M", f"count={mib}", f"seek={seek}",
                             "oflag=direct", "status=none"])


def test_write_bytes_match_what_dd_wrote(loop_device):
    name = Path(loop_device).name
    before = real_snapshot()
    assert dd(loop_device, 128).wait() == 0
    after = real_snapshot()
    (disk,) = [s for s in guest_samples(before, after, "g", 1, 4096) if s.tags.get("device") == name]
    written = disk.fields["write_bytes_per_s"] * (after.uptime_s - before.uptime_s)
    assert written == pytest.approx(128 * 2**20, rel=0.05)
    assert disk.fields["read_bytes_per_s"] == 0.0 and disk.tags["type"] == "disk"


def test_matches_real_iostat_on_the_same_interval(loop_device):
    if not shutil.which("iostat"):
        pytest.fail("iostat (Debian sysstat) is missing; run tests/infra/install-deps.sh")
    name = Path(loop_device).name
    load = subprocess.Popen(["sh", "-c", f"while :; do dd if=/dev/zero of={loop_device} bs=64k count=4000 "
                                         "oflag=direct status=none; done"])
    try:
        time.sleep(0.5)  # steady state
        before = real_snapshot()
        out = subprocess.run(["iostat", "-dxk", "-y", "-o", "JSON", "1", "1", name], capture_output=True,
                             text=True, check=True).stdout
        after = real_snapshot()
    finally:
        load.kill()
        load.wait()
    (theirs,) = json.loads(out)["sysstat"]["hosts"][0]["statistics"][0]["disk"]
    (ours,) = [s.fields for s in guest_samples(before, after, "g", 1, 4096) if s.tags.get("device") == name]
    assert theirs["w/s"] > 50, "the load did not reach the device"
    pairs = {"write_iops": "w/s", "read_iops": "r/s", "write_await_ms": "w_await", "queue_size": "aqu-sz",
             "util_pct": "util"}
    for ours_key, their_key in pairs.items():
        assert ours[ours_key] == pytest.approx(theirs[their_key], rel=0.10, abs=0.05), ours_key
    assert ours["write_bytes_per_s"] / 1024 == pytest.approx(theirs["wkB/s"], rel=0.10)
    assert ours["write_request_bytes"] / 1024 == pytest.approx(theirs["wareq-sz"], rel=0.05)


async def test_local_collector_cycle_and_facts():
    c = LocalGuestCollector(GuestConfig(interval=1.0, devices_exclude=["loop*"]))
    await c.start()
    await asyncio.sleep(0.2)
    samples = await c.collect()
    kinds = {s.measurement for s in samples}
    assert {"guest_cpu", "guest_mem", "guest_net"} <= kinds
    assert all(s.tags["guest"] == c.guest for s in samples)
    assert not any(s.tags.get("device", "").startswith("loop") for s in samples)
    facts = await c.describe()
    by_kind = {}
    for f in facts:
        by_kind.setdefault(f.kind, []).append(f)
    (g,) = by_kind["guest"]
    assert g.data["cpus"] == os.cpu_count() and g.data["memory_bytes"] > 0 and g.data["kernel"] == os.uname().release
    assert any(f.data["mtu"] for f in by_kind["guest_net_interface"])
    assert all(not f.tags["device"].startswith("loop") for f in by_kind["guest_block_device"])
    assert any(f.tags["mountpoint"] == "/" for f in by_kind.get("guest_mount", []))
    await c.close()


async def test_unreadable_proc_is_a_collector_error(monkeypatch):
    c = LocalGuestCollector(GuestConfig())
    monkeypatch.setattr("db2vtop.collectors.guest.local.read_files", lambda *a: {"/proc/stat": "garbage"})
    with pytest.raises(CollectorError, match="/proc/"):
        await c.start()
    await c.close()


def test_facts_from_sysfs_texts():
    files = {
        "/proc/sys/kernel/hostname": "db2prod01\n", "/sys/block/sda/queue/nr_requests": "256\n",
        "/sys/block/sda/device/queue_depth": "64\n", "/sys/block/sda/queue/rotational": "0\n",
        "/sys/block/sda/queue/scheduler": "[none] mq-deadline\n", "/sys/block/sda/size": "2097152\n",
        "/sys/block/sda/device/vendor": "VMware  \n", "/sys/block/sda/sda1/start": "2048\n",
        "/sys/block/sda/device/../../scsi_host/host0/proc_name": "vmw_pvscsi\n",
        "/sys/class/net/ens192/mtu": "9000\n", "/sys/class/net/ens192/device/driver": "vmxnet3",
        "/sys/class/net/ens192/speed": "-1\n",
        "/proc/mounts": "/dev/sdb1 /db2/data xfs rw,noatime 0 0\nproc /proc proc rw 0 0\n"
                        "nas:/vol/log /db2/log nfs rw,hard,vers=3 0 0\n",
    }
    facts = {(f.kind, tuple(sorted(f.tags.items()))): f.data for f in guest_facts(files, "db2prod01", 1)}
    sda = facts[("guest_block_device", (("device", "sda"), ("guest", "db2prod01")))]
    assert sda["queue_depth"] == 64 and sda["nr_requests"] == 256 and sda["rotational"] is False
    assert sda["scheduler"] == "none" and sda["size_bytes"] == 2**30 and sda["driver"] == "vmw_pvscsi"
    assert sda["vendor"] == "VMware" and sda["partitions"] == {"sda1": 2048}
    nic = facts[("guest_net_interface", (("guest", "db2prod01"), ("interface", "ens192")))]
    assert nic == {"mtu": 9000, "speed_mbps": None, "driver": "vmxnet3", "operstate": None}
    mounts = {k[1][1][1]: v for k, v in facts.items() if k[0] == "guest_mount"}
    assert mounts == {"/db2/data": {"source": "/dev/sdb1", "fstype": "xfs", "options": "rw,noatime"},
                      "/db2/log": {"source": "nas:/vol/log", "fstype": "nfs", "options": "rw,hard,vers=3"}}


REAL = read_files(procfs.SNAPSHOT_FILES)


def test_a_non_ascii_digit_in_vmstat_is_skipped_not_a_crash():
    """Found by the fuzz test below: str.isdigit() accepts "²", int() does not."""
    assert parse_vmstat("pgfault ²\npgmajfault 12\n") == {"pgmajfault": 12}


@settings(max_examples=400, deadline=None)
@given(st.sampled_from(sorted(REAL)), st.data())
def test_fuzzed_proc_files_raise_only_proc_format_error(path, data):
    """Corrupt one file (truncate, splice garbage, replace tokens); parsing may succeed or raise
    ProcFormatError, nothing else, and a successful parse yields finite numbers."""
    text = REAL[path]
    mode = data.draw(st.sampled_from(["truncate", "garbage", "token", "empty"]))
    if mode == "truncate":
        text = text[: data.draw(st.integers(0, len(text)))]
    elif mode == "garbage":
        at = data.draw(st.integers(0, len(text)))
        text = text[:at] + data.draw(st.text(max_size=40)) + text[at:]
    elif mode == "token":
        tokens = text.split(" ")
        i = data.draw(st.integers(0, len(tokens) - 1))
        tokens[i] = data.draw(st.sampled_from(["-1", "x", "1e400", "", "18446744073709551616", "nan", ":"]))
        text = " ".join(tokens)
    else:
        text = ""
    files = dict(REAL, **{path: text})
    try:
        s = snapshot(files)
    except ProcFormatError:
        return
    later = dataclasses.replace(s, uptime_s=s.uptime_s + 1.0)
    for sample in guest_samples(s, later, "g", 1, 4096):
        for v in sample.fields.values():
            assert not isinstance(v, float) or v == v
