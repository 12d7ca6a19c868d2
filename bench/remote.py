"""Remote collectors: SSH round trips per cycle, parse cost, and the esxtop parser at scale.

Runs a real sshd on 127.0.0.1 (tests/infra/sshd.py) and prints one JSON object:
- remote_guest: cycles, SSH commands per cycle (from sshd's own log of received commands),
  logins over the whole run (one connection held across cycles), cycle wall time, and the
  local parse cost of one cycle (bundle framing + procfs snapshot + guest samples; target <= 5 ms);
- linux_storage: the same counts for the [[storage]] kind = "linux" collector;
- esxtop: `esxtop -b -a` CSV of 500 VMs and 200 LUNs (tests/infra/esxtop_fixture.py) parsed (target <= 100 ms).

    .venv/bin/python bench/remote.py
"""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from db2vtop.collectors.esxtop.batch import parse_batch
from db2vtop.collectors.guest.config import RemoteGuestConfig
from db2vtop.collectors.guest.remote import LinuxPlatform, RemoteGuestCollector
from db2vtop.collectors.ssh import SSHTarget
from db2vtop.collectors.ssh.bundle import Bundle, parse
from db2vtop.collectors.ssh.config import SSHConfig
from db2vtop.collectors.storage.linux.collector import LinuxStorageCollector
from db2vtop.collectors.storage.linux.config import LinuxStorageConfig
from tests.infra.esxtop_fixture import batch_csv, fleet
from tests.infra.sshd import SSHServer

CYCLES = 10


def ms(seconds: list[float]) -> dict[str, float]:
    return {"median_ms": round(statistics.median(seconds) * 1000, 3), "max_ms": round(max(seconds) * 1000, 3)}


def logins(sshd: SSHServer) -> int:
    return sshd.log.read_text().count("Accepted publickey")


async def cycles(sshd: SSHServer, c, every_facts: int = 5) -> dict:
    """CYCLES cycles as the runtime runs them (describe() when facts are due, then collect())."""
    before = logins(sshd)
    await c.start()
    sshd.clear_commands()
    walls = []
    for i in range(CYCLES):
        await asyncio.sleep(0.5)
        if i % every_facts == 0:
            c.facts_stale = True
        t0 = time.perf_counter()
        if c.facts_due():
            await c.describe()
            c.facts_done()
        await c.collect()
        walls.append(time.perf_counter() - t0)
    commands = sshd.commands()
    await c.close()
    return {"cycles": CYCLES, "facts_cycles": CYCLES // every_facts, "ssh_commands": len(commands),
            "ssh_commands_per_cycle": len(commands) / CYCLES, "distinct_commands": sorted(set(commands)),
            "logins": logins(sshd) - before, "connections": c.target.connects, "cycle_wall": ms(walls)}


def guest_parse_cost(target: SSHTarget) -> dict:
    """One cycle's local work on a real remote answer: framing, procfs snapshot, samples."""
    platform = LinuxPlatform("g", RemoteGuestConfig(ssh="g"), 4096)
    bundle = platform.bundle(facts=False)
    answers = []
    for _ in range(2 + 20):
        nonce = Bundle.nonce()
        answers.append((nonce, target.run(["sh", "-s"], stdin=bundle.script(nonce)).stdout))
    platform.baseline(parse(answers[0][1], answers[0][0]))
    times = []
    for nonce, out in answers[1:]:
        t0 = time.perf_counter()
        samples = platform.samples(parse(out, nonce), 1)
        times.append(time.perf_counter() - t0)
    return {"bytes_per_cycle": len(answers[-1][1]), "samples_per_cycle": len(samples), **ms(times[1:])}


def esxtop_parse(vms: int = 500, devices: int = 200) -> dict:
    vm_list, dev_list = fleet(vms, devices)
    text = batch_csv("esx01.example.com", vm_list, dev_list)
    times = []
    for _ in range(7):
        t0 = time.perf_counter()
        batch = parse_batch(text)
        times.append(time.perf_counter() - t0)
    assert len(batch.vms) == vms and len(batch.devices) == devices
    return {"vms": vms, "devices": devices, "columns": text.split("\r\n", 1)[0].count('","') + 1,
            "csv_bytes": len(text), **ms(times)}


async def main() -> None:
    with tempfile.TemporaryDirectory() as root:
        sshd = SSHServer(Path(root))
        sshd.setup()
        sshd.start()
        try:
            cfg = sshd.ssh_config()
            ssh = SSHConfig(**{**cfg, "key_file": Path(cfg["key_file"]), "known_hosts": Path(cfg["known_hosts"])})
            guest = RemoteGuestCollector(RemoteGuestConfig(ssh="bench", interval=1.0), SSHTarget(ssh))
            storage = LinuxStorageCollector(LinuxStorageConfig(name="bench", ssh="bench", interval=1.0),
                                            SSHTarget(ssh))
            result = {"remote_guest": await cycles(sshd, guest), "linux_storage": await cycles(sshd, storage)}
            t = SSHTarget(ssh)
            result["remote_guest"]["parse"] = guest_parse_cost(t)
            t.close()
        finally:
            sshd.stop()
    result["esxtop"] = esxtop_parse()
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    asyncio.run(main())
