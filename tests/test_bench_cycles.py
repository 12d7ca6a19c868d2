"""bench/vsphere_vs_telegraf.py measures each tool's steady CPU one cycle at a time, cut at the tool's own quiet
moment, and takes the median: a tool's figure must not depend on where its schedule falls in the minute, nor on
one period of other work on the shared machine (the simulator's CPU moved by a third between runs before)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("vsphere_vs_telegraf", ROOT / "bench" / "vsphere_vs_telegraf.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def sampled(bench, phase_s: float, busy_s: float, cpu: float, vcenter: float, slow: dict[int, float],
            periods: int) -> list[tuple[float, float, float]]:
    """Half-second samples of a tool whose cycle starts `phase_s` into each period and spends `cpu` (the
    simulator `vcenter`) spread over `busy_s`; cycle k costs `slow[k]` times as much."""
    out, own, sim, t = [], 0.0, 0.0, 1000.0
    step = bench.SAMPLE_S
    for i in range(int(periods * bench.INTERVAL_S / step)):
        into = (i * step - phase_s) % bench.INTERVAL_S   # a cycle may run on past the period's end
        if i * step >= phase_s and into < busy_s:
            f = slow.get(int((i * step - phase_s) // bench.INTERVAL_S), 1.0) * step / busy_s
            own, sim = own + cpu * f, sim + vcenter * f
        out.append((t + i * step, own, sim))
    return out


@pytest.mark.parametrize("phase_s", [0.0, 7.0, 12.5, 19.0])
def test_each_window_holds_one_whole_cycle_wherever_the_schedule_falls(bench, phase_s):
    own, vc = bench.per_cycle(sampled(bench, phase_s, 3.0, 0.8, 0.4, {}, 6), 5)
    assert [round(x, 6) for x in own] == [0.8] * 5
    assert [round(x, 6) for x in vc] == [0.4] * 5


def test_one_slow_period_does_not_move_the_median(bench):
    own, vc = bench.per_cycle(sampled(bench, 4.0, 2.0, 0.8, 0.4, {2: 3.0}, 6), 5)
    assert sorted(round(x, 6) for x in vc) == [0.4, 0.4, 0.4, 0.4, 1.2]
    assert bench.statistics.median(vc) == pytest.approx(0.4)
    assert bench.statistics.median(own) == pytest.approx(0.8)
