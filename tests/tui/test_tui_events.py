"""vCenter's events on the Stack screen, seen through a real terminal (pty + VT emulator): `◆` on the time axis
and the verdict's line naming them, `E` hides and shows them, panel `e` lists them.

The recorded fleet of the TUI's tests (tests/infra/tui_fixture.py) with five events of its first five minutes, as the
vSphere collector stores them (agent/core/events.py): HA restarted db2prod01 on esx01.lab, it was reconfigured
and snapshotted, its LUN went slow on esx01.lab, and DRS moved app0003 onto esx01.lab.
"""

from __future__ import annotations

import pytest

from db2vtop.agent.core.events import event_annotation
from db2vtop.agent.core.store import Store
from tests.infra.pty_term import Terminal
from tests.infra.tui_fixture import T0, Fleet, S, build_store, write_config
from tests.tui.test_tui_terminal import ROOT, check, db2vtop, env_for

LUN = Fleet().naa(0)  # behind db2prod01's disk
EVENTS = [  # (seconds into the recording, kind, type, summary, entities); none at 120 s, where a marker is
    (40, "ha", "VmRestartedOnAlternateHostEvent", "HA restarted db2prod01 on esx01.lab (it ran on esx02.lab)",
     {"vm": "db2prod01", "host": "esx01.lab", "source_host": "esx02.lab"}),
    (75, "reconfigure", "VmReconfiguredEvent", "db2prod01 reconfigured: 16 vCPUs", {"vm": "db2prod01",
                                                                                  "host": "esx01.lab"}),
    (135, "snapshot", "TaskEvent", "a snapshot of db2prod01 started", {"vm": "db2prod01", "host": "esx01.lab"}),
    (160, "storage", "esx.problem.scsi.device.io.latency.high",
     f"esx01.lab: device {LUN} I/O latency rose from 1.2 ms to 38.0 ms",
     {"host": "esx01.lab", "lun": LUN, "datastore": "ds-data01"}),
    (200, "migration", "DrsVmMigratedEvent", "DRS moved app0003 from esx02.lab onto esx01.lab",
     {"vm": "app0003", "host": "esx01.lab", "source_host": "esx02.lab"}),
]
DRS = EVENTS[-1][3]


@pytest.fixture
def recorded(tmp_path):
    store = build_store(tmp_path / "fleet.db")
    with Store(store, writer=True) as s:
        s.write(annotations=[event_annotation(T0 + at * S, "vc1", kind, type_, summary, who)
                             for at, kind, type_, summary, who in EVENTS])
    return store, write_config(tmp_path / "stacks.toml", Fleet())


def _axis_marks(screen: str) -> int:
    """`◆` on the screen besides the legend's (the two time axes' and the verdict's events line)."""
    return screen.count("◆") - screen.count("◆ vCenter ")


def test_vcenter_events_on_the_time_axis_hidden_by_a_key_and_listed(tmp_path, recorded):
    store, config = recorded
    term = Terminal([*db2vtop(), "replay", "--store", str(store), "-c", str(config)], 160, 45, truecolor=False,
                    env=env_for(tmp_path / "home"), cwd=ROOT)
    try:
        term.wait(lambda s: " Fleet " in s and "prod01" in s, 30, "the Fleet with data")
        term.send("2")
        screen = term.wait(lambda s: "stack prod01" in s and "5 vCenter events" in s, 30, "the stack's events")
        check(term, "Stack with vCenter events")
        assert DRS.split(" from ")[0] in screen  # the newest two named under the verdict
        axis = next(line for line in screen.splitlines() if "◆ vCenter" in line)
        assert axis.count("◆") == 1 + 5 * 2, axis  # the legend's, then each event on both time axes
        term.send("E")
        screen = term.wait(lambda s: _axis_marks(s) == 0, 15, "the events hidden")  # axes and the verdict's line
        assert "5 vCenter events" not in screen
        check(term, "Stack with vCenter events hidden", message="vCenter events hidden")
        term.send("E")
        term.wait(lambda s: _axis_marks(s) == 1 + 5 * 2, 15, "the events shown again")
        term.send("e")
        screen = term.wait(lambda s: "e vCenter events" in s and "5 in the window" in s, 15, "panel e")
        check(term, "Stack panel e", flashes={"vCenter events shown"})
        for _, kind, type_, summary, _ in EVENTS:
            assert summary in screen and type_ in screen and kind in screen, summary
        term.send("q")
        assert term.exited(15) == 0
    finally:
        term.close()
