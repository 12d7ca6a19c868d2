"""The agent's own clock stepped under it: the real agent under libfaketime (Debian's libfaketime, its
multithreaded variant, the monotonic clocks left real), its system clock moved from a file the test
writes, with the local guest every second and a vCenter (the simulator) every 20 s.

Before: 8 days forward for 30 s (12 s here: the store's retention steps every 10 s) deleted the store's
whole history (the retention step counted 7 days back from the jumped clock: every row of the minutes
before it was gone), stamped the samples of the jump 8 days ahead, and wrote "gap" annotations in the
future; a step back of an hour stamped samples in the hour already recorded; nothing was logged. Now the
agent keeps time by the monotonic clock while its system clock is off and says so when it jumps and when
it is back, and retention never counts from a jump.
"""

from __future__ import annotations

import itertools
import os
import shutil
import time
from pathlib import Path

import pytest

from db2vtop.agent.core.store import Store
from tests.faults.agent import guest_times, nothing_lost, start, wait_past, wait_seconds, write_config
from tests.faults.test_vcenter import ENV, SCENARIO
from tests.infra.vsphere_sim import Simulator

LIBFAKETIME = Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1")
S = 10**9


def faked(offset_file: Path) -> dict[str, str]:
    """The environment that puts the agent's CLOCK_REALTIME at real time + the offset in `offset_file`
    ("+8d", "-1h", "+0"), read again every second; CLOCK_MONOTONIC and CLOCK_BOOTTIME stay real."""
    return {"LD_PRELOAD": str(LIBFAKETIME), "FAKETIME_TIMESTAMP_FILE": str(offset_file),
            "FAKETIME_CACHE_DURATION": "1", "FAKETIME_DONT_FAKE_MONOTONIC": "1"}


def set_offset(offset_file: Path, offset: str) -> None:
    tmp = offset_file.with_suffix(".new")
    tmp.write_text(offset + "\n")
    os.replace(tmp, offset_file)


@pytest.mark.skipif(not LIBFAKETIME.exists() or shutil.which("faketime") is None,
                    reason="needs Debian's libfaketime (tests/infra/install-deps.sh)")
def test_a_clock_jumped_8_days_ahead_then_an_hour_back_deletes_and_rewrites_nothing(tmp_path):
    offset = tmp_path / "offset"
    set_offset(offset, "+0")
    with Simulator.of(SCENARIO, tmp_path) as sim:
        store = tmp_path / "m.db"
        cfg = write_config(tmp_path / "config.toml", store, extra=(
            f'[[vcenter]]\nname = "vc1"\nurl = "{sim.url}"\nuser = "monitor"\npassword_env = "VC_TEST_PASSWORD"\n'
            'verify_tls = false\n'))
        began = time.time()
        agent = start(cfg, store, tmp_path / "agent.log", env={**ENV, **faked(offset)})
        try:
            wait_seconds(store, 5)
            before = guest_times(store)
            jumped = time.time()
            set_offset(offset, "+8d")
            time.sleep(12)  # the store's retention steps every 10 s
            set_offset(offset, "+0")
            wait_past(store, time.time() + 3)
            stepped = time.time()
            set_offset(offset, "-1h")
            time.sleep(4)
            set_offset(offset, "+0")
            wait_past(store, time.time() + 3)
        finally:
            status = agent.stop()
        ended = time.time()
    log = agent.log_of_exit(status)
    stored = guest_times(store)
    assert set(before) <= set(stored), "rows stored before the jump were deleted"
    seconds = nothing_lost(store)  # and none missing around either step
    assert seconds[0] < jumped - 2 and seconds[-1] > stepped + 6
    # every sample is stamped with the real time: none 8 days ahead, none in the hour already recorded
    assert all(began * S - S < t < ended * S + S for t in stored), [t / S for t in stored if not
                                                                     began * S - S < t < ended * S + S][:5]
    with Store(store) as s:
        vm = sorted(r.ts for r in s.rows("vsphere_vm", 0) if r.tags.get("vm") == "db01")
        gaps = [a for a in s.annotations() if a.event == "gap"]
        latest = s.time_range()
    # vCenter's 20 s samples went on through both, none missing, none ahead of the real time
    assert vm and vm[-1] < ended * S and {b - a for a, b in itertools.pairwise(vm)} == {20 * S}, vm
    assert not gaps, [a.text for a in gaps]  # nothing expired in vCenter: the agent's hour never moved
    assert latest is not None and latest[1] < ended * S + S
    assert log.count("the system clock jumped 8d forward") == 1, log[-3000:]
    assert log.count("the system clock went 1h back") == 1, log[-3000:]
    # the second "back in step" within a minute of the first is the log's repeat filter's to count
    assert "the system clock is back in step with the monotonic clock" in log, log[-3000:]
