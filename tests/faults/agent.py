"""A real `db2vtop agent` process under a fault, and what the tests read back afterwards.

"Nothing lost" is checked the strict way the shutdown tests use: the runtime submits each guest
cycle's samples together with the `db2vtop_collector` sample that says the cycle went well, so
every ok cycle recorded must have its CPU sample in the store, and the seconds covered must have
no hole wider than a few intervals across the fault.
"""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from db2vtop.agent.core.model import SELF_MEASUREMENT
from db2vtop.agent.core.store import Store, StoreError
from tests.conftest import ROOT

AGENT = [sys.executable, "-m", "db2vtop.agent"]

#: a small process between the test and the command whose peak RSS is measured: a child exec'd straight from the
#: test's process has that process's own peak in its ru_maxrss (the kernel takes the old address space's high-water
#: mark at exec, and a vfork child's old one is its parent's), so an xdist worker that once held 500 MB failed every
#: memory bound measured after
_LAUNCH = ("import os, resource, subprocess, sys\n"
           "limit = int(sys.argv[2])\n"
           "def cap(): resource.setrlimit(resource.RLIMIT_AS, (limit, limit))\n"
           "p = subprocess.Popen(sys.argv[3:], preexec_fn=cap if limit else None)\n"
           "_, status, usage = os.wait4(p.pid, 0)\n"
           "open(sys.argv[1], 'w').write(f'{os.waitstatus_to_exitcode(status)} {usage.ru_maxrss}')\n")


def run_measured(argv: list[str], log: Path, env: dict[str, str], timeout: float = 300,
                 address_space: int = 0) -> tuple[int, float]:
    """Run `argv` (its output into `log`), capped at `address_space` bytes if given: its exit status and its own peak
    RSS in MB; it must end by `timeout`."""
    usage = log.with_suffix(".usage")
    with open(log, "wb") as f:
        launcher = subprocess.Popen([sys.executable, "-c", _LAUNCH, str(usage), str(address_space), *argv], cwd=ROOT,
                                    stdout=f, stderr=f, env=env, start_new_session=True)
    try:
        launcher.wait(timeout)
    except subprocess.TimeoutExpired:
        os.killpg(launcher.pid, signal.SIGKILL)
        launcher.wait()
        raise AssertionError(f"{argv[3:]} did not end within {timeout:g}s:\n"
                             f"{log.read_text(errors='replace')[-3000:]}") from None
    status, rss_kb = usage.read_text().split()
    return int(status), int(rss_kb) / 1024


@dataclass
class Agent:
    proc: subprocess.Popen
    log: Path
    store: Path

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def log_of_exit(self, status: int, expected: int = 0) -> str:
        """Its log, once its exit status is the one expected (the log's end is the message where it is not)."""
        log = self.text()
        assert status == expected, log[-3000:]
        return log

    def wait(self, timeout: float = 60) -> int:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(f"the agent did not end within {timeout:g}s:\n{self.text()[-3000:]}") from None

    def stop(self, timeout: float = 60) -> int:
        self.proc.send_signal(signal.SIGTERM)
        return self.wait(timeout)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)


def write_config(path: Path, store: Path, guest: str = "1s", extra: str = "") -> Path:
    path.write_text(f'[store]\npath = "{store}"\n[guest]\ninterval = "{guest}"\n{extra}')
    return path


def start(cfg: Path, store: Path, log: Path, *args: str, command: str = "agent",
          env: dict[str, str] | None = None, preexec=None) -> Agent:
    with open(log, "ab") as f:
        proc = subprocess.Popen([*AGENT, command, "-c", str(cfg), *args], cwd=ROOT, stdout=f, stderr=f,
                                env={**os.environ, **(env or {})}, preexec_fn=preexec)
    return Agent(proc, log, store)


def guest_times(store: Path) -> list[int]:
    """The timestamps (ns) of the local guest's total-CPU samples, in order, one per sample: a whole second
    can hold two of them (a 1 s grid that sits on the edge of a second: 12.002 and 12.983) and none the next."""
    try:
        with Store(store) as s:
            return sorted(r.ts for r in s.rows("guest_cpu", 0) if r.tags.get("cpu") == "total")
    except StoreError:  # not there yet
        return []


def guest_seconds(store: Path) -> list[int]:
    """The seconds with a total-CPU sample of the local guest, in order."""
    return sorted({t // 10**9 for t in guest_times(store)})


def wait_seconds(store: Path, n: int, timeout: float = 60) -> list[int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        seen = guest_seconds(store)
        if len(seen) >= n:
            return seen
        time.sleep(0.2)
    raise AssertionError(f"fewer than {n} guest samples in {store} after {timeout:g}s")


def wait_past(store: Path, t: float, timeout: float = 30) -> None:
    """Until the store holds a guest sample later than `t` (a time.time()), or the timeout."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and (guest_seconds(store) or [0])[-1] < t:
        time.sleep(0.2)


def nothing_lost(store: Path, max_gap_s: float = 3.5) -> list[int]:
    """Every ok guest cycle has its samples, and the samples have no hole: returns their seconds."""
    with Store(store) as s:
        ok = [r for r in s.rows(SELF_MEASUREMENT, 0) if r.tags["collector"] == "guest" and r.fields["status"] == "ok"]
        cpu = [r for r in s.rows("guest_cpu", 0) if r.tags.get("cpu") == "total"]
    assert ok and len(cpu) == len(ok), (len(cpu), len(ok))
    seconds = sorted(r.ts / 1e9 for r in cpu)
    holes = [(a, b) for a, b in itertools.pairwise(seconds) if b - a > max_gap_s]
    assert not holes, f"samples missing between {holes}"
    return [int(x) for x in seconds]
