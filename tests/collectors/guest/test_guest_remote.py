"""The remote Linux guest over a real sshd on 127.0.0.1, against this machine's real /proc
read locally: same files, same parsers, same figures; one round trip per cycle; dd accuracy."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from db2vtop.agent.core.model import Sample
from db2vtop.agent.runtime import Runtime
from db2vtop.collectors.guest import procfs
from db2vtop.collectors.guest.config import RemoteGuestConfig
from db2vtop.collectors.guest.local import read_files
from db2vtop.collectors.guest.metrics import guest_facts
from db2vtop.collectors.guest.remote import LinuxPlatform, RemoteGuestCollector
from db2vtop.collectors.selfmon import SelfCollector
from db2vtop.collectors.ssh import SSHTarget
from db2vtop.collectors.ssh.config import SSHConfig
from tests.collectors.guest.test_guest import dd, loop_device  # noqa: F401 - the fixture
from tests.infra.sshd import SSHServer


def target(sshd: SSHServer) -> SSHTarget:
    cfg = sshd.ssh_config()
    return SSHTarget(SSHConfig(**{**cfg, "key_file": Path(cfg["key_file"]), "known_hosts": Path(cfg["known_hosts"])}))


def collector(sshd: SSHServer, **cfg) -> RemoteGuestCollector:
    return RemoteGuestCollector(RemoteGuestConfig(ssh="db2prod01", **cfg), target(sshd))


class Capture:
    def __init__(self):
        self.samples, self.facts = [], []

    def submit(self, samples=(), facts=(), annotations=()):
        self.samples += samples
        self.facts += facts


async def test_remote_snapshot_is_the_local_one(sshd):
    """Fetched over SSH between two local reads: every counter lies between them, facts are equal."""
    c = collector(sshd)
    await c.start()
    assert isinstance(c.platform, LinuxPlatform) and c.platform.page_size == 4096
    before = procfs.snapshot(read_files(procfs.SNAPSHOT_FILES + procfs.SNAPSHOT_GLOBS))
    remote = procfs.snapshot((await c.run_blocking(c.fetch, c.bundle(False))).files)
    after = procfs.snapshot(read_files(procfs.SNAPSHOT_FILES + procfs.SNAPSHOT_GLOBS))
    assert before.uptime_s <= remote.uptime_s <= after.uptime_s
    assert remote.cpu.keys() == before.cpu.keys() and remote.disks.keys() == before.disks.keys()
    assert remote.nets.keys() == before.nets.keys() and remote.partitions == before.partitions
    assert remote.meminfo["MemTotal"] == before.meminfo["MemTotal"]
    for dev, counters in remote.disks.items():
        for field in ("rd_ios", "wr_ios", "rd_sectors", "wr_sectors", "io_ticks"):
            assert getattr(before.disks[dev], field) <= getattr(counters, field) <= getattr(after.disks[dev], field)
    for name, jiffies in remote.cpu.items():  # user, nice, system (idle and iowait may step back on NO_HZ)
        assert sum(before.cpu[name][:3]) <= sum(jiffies[:3]) <= sum(after.cpu[name][:3])

    facts = await c.describe()
    local = guest_facts(read_files(procfs.FACT_GLOBS, procfs.FACT_LINK_GLOBS), "db2prod01", 0,
                        c.cfg.devices_exclude, c.cfg.interfaces_exclude)
    assert {(f.kind, str(f.tags)): f.data for f in facts} == {(f.kind, str(f.tags)): f.data for f in local}
    await c.close()


async def test_cycles_are_one_round_trip_on_one_connection(sshd):
    c = collector(sshd, interval=1.0, timeout=10.0)  # a round trip is one deadline, session to exit status: a busy
    # machine (a load of 14) took more than the interval's 1 s for one
    logins = sshd.log.read_text().count("Accepted publickey")
    await c.start()
    sshd.clear_commands()
    kinds = set()
    for i in range(4):
        await asyncio.sleep(0.6)
        if i == 0 or i == 2:
            c.facts_stale = True
        facts = await c.describe() if c.facts_due() else []
        c.facts_done()
        samples = await c.collect()
        assert (i in (0, 2)) == bool(facts)
        kinds |= {s.measurement for s in samples}
    assert sshd.commands() == ["sh -s"] * 4  # facts cycles included
    assert {"guest_cpu", "guest_mem", "guest_net"} <= kinds
    assert c.target.connects == 1 and sshd.log.read_text().count("Accepted publickey") - logins == 1
    samples = await c.collect()
    assert all(s.tags["guest"] == "db2prod01" for s in samples)
    await c.close()


async def test_write_throughput_matches_dd_within_5_percent(sshd, loop_device):  # noqa: F811
    name = Path(loop_device).name
    c = collector(sshd, devices_exclude=[])

    def kernel_sectors_written() -> int:
        return procfs.parse_diskstats(Path("/proc/diskstats").read_text())[name].wr_sectors

    before = kernel_sectors_written()
    await c.start()
    start = c.platform.prev.uptime_s
    assert await asyncio.to_thread(dd(loop_device, 128).wait) == 0
    samples = await c.collect()
    window = c.platform.prev.uptime_s - start
    kernel_bytes = (kernel_sectors_written() - before) * 512
    (disk,) = [s for s in samples if s.measurement == "guest_disk" and s.tags["device"] == name]
    written = disk.fields["write_bytes_per_s"] * window
    assert written == pytest.approx(kernel_bytes, rel=0.05) and written == pytest.approx(128 * 2**20, rel=0.05)
    assert disk.fields["read_bytes_per_s"] == 0.0
    await c.close()


async def test_late_baseline_waits_for_a_full_window(sshd):
    """If start() failed (host down), the first cycle only takes the baseline. (The command's deadline is its
    own: by default the interval, a second, which a first SSH login on a loaded machine can take whole.)"""
    c = collector(sshd, interval=1.0, timeout=10.0)
    assert await c.collect() == []  # detection + baseline
    await asyncio.sleep(0.7)
    assert any(s.measurement == "guest_cpu" for s in await c.collect())
    await c.close()


@pytest.fixture
def broken_sh(sshd):
    """A `sh` first on the remote PATH, so the bundle's `sh -s` runs it instead."""
    def install(script: str) -> None:
        sshd.shim("sh", "#!/bin/dash\n" + script)

    yield install
    (sshd.shims / "sh").unlink(missing_ok=True)


@pytest.mark.parametrize("script, message", [
    ("echo 'Welcome to AcmeOS'\n", "printed no records"),
    ("echo oops >&2; exit 2\n", "the remote sh exited 2: oops"),
])
async def test_garbage_and_exit_status_are_recorded_not_raised(sshd, broken_sh, script, message):
    c = collector(sshd, os="linux")
    broken_sh(script)
    out = Capture()
    rt = Runtime([c, SelfCollector()], [out])
    await rt.run_once()
    me = {s.tags["collector"]: s.fields for s in out.samples if s.measurement == "db2vtop_collector"}
    assert me[c.name]["status"] == "error" and message in me[c.name]["last_error"]
    assert me["self"]["status"] == "ok"  # the runtime went on


async def test_unsupported_os_and_missing_proc_files(sshd, broken_sh):
    c = collector(sshd)
    broken_sh('N=$(sed -n "1s/^N=//p"); printf "\\n%s C uname\\nPlan9\\n\\n%s R uname 0\\n" "$N" "$N"\n')
    out = Capture()
    await Runtime([c], [out]).run_once()
    (me,) = [s for s in out.samples if s.measurement == "db2vtop_collector"]
    assert "unsupported OS 'Plan9'" in me.fields["last_error"] and 'os = "linux"' in me.fields["last_error"]
    assert not [s for s in out.samples if isinstance(s, Sample) and s.measurement.startswith("guest_")]
