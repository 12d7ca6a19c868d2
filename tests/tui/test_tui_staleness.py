"""Staleness follows each source's own sample period, measured from a real store."""

from __future__ import annotations

from db2vtop.agent.core.model import Sample
from db2vtop.agent.core.store import Store
from db2vtop.checks.thresholds import levels
from db2vtop.tui.data import Reader, TableState
from db2vtop.tui.loaders.fleet import load_fleet

S = 10**9
T0 = 1_700_000_000 * S
PERIOD_S = 20  # vCenter's realtime sample period


def vm_sample(vm: str, ts: int) -> Sample:
    return Sample("vsphere_vm", {"vcenter": "vc1", "vm": vm, "host": "esx01.lab"},
                  {"cpu_ready_pct": 1.0, "cpu_usage_pct": 20.0}, ts)


def guest_sample(guest: str, ts: int) -> Sample:
    return Sample("guest_cpu", {"guest": guest, "cpu": "total"}, {"busy_pct": 10.0}, ts)


def notes(view) -> dict[str, str]:
    """Row name -> its `where` cell, where the age note is written."""
    return {r.cells[1]: str(r.cells[-1]) for r in view.model.rows}  # `where`: the last column


def test_vcenter_rows_a_period_late_are_fresh_and_a_silent_vm_is_stale(tmp_path):
    """Watched live, from the vCenter collector's first cycle on, with one reader (as the TUI's loader)."""
    path = tmp_path / "metrics.db"
    with Store(path, writer=True) as writer, Store(path) as store:
        rd = Reader(store)

        def fleet_at(until: int) -> tuple[dict[str, str], int]:
            rd.begin()
            view = load_fleet(rd, [], until - 600 * S, until, TableState(), 10, levels())
            return notes(view), view.stale

        writer.write([vm_sample(vm, T0) for vm in ("db2prod01", "db2prod02", "db2gone")])
        where, stale = fleet_at(T0 + 27 * S)  # one sample each: the period is not known yet
        assert stale == 0, where

        last = T0 + 30 * PERIOD_S * S
        for k in range(1, 31):  # ten more minutes of 20 s cycles
            ts = T0 + k * PERIOD_S * S
            writer.write([vm_sample(vm, ts) for vm in ("db2prod01", "db2prod02")]
                         + ([vm_sample("db2gone", ts)] if ts <= last - 180 * S else []))  # silent for 3 min
        writer.write([vm_sample("a-new-vm", last)]  # first seen in the last cycle: one sample
                     + [guest_sample("appserver", last - k * 5 * S) for k in range(12)])  # a 5 s source

        # Right after a successful cycle vCenter's newest sample is stamped up to a period and a bit back.
        where, stale = fleet_at(last + 27 * S)
        assert "STALE" not in where["db2prod01"] and "STALE" not in where["a-new-vm"], where
        assert "STALE" in where["db2gone"]
        # The 5 s guest has missed its cycles by then: its own period counts, not vCenter's.
        assert "STALE" in where["appserver"] and stale == 2, where
