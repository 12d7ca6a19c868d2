"""Levels live in the rules' thresholds only: the TUI and the verdict read them (checks/scales.py,
checks/thresholds.py); that no level is written as a number elsewhere is tests/agent/core/test_read_model.py's."""

from db2vtop.checks.scales import SCALES, Level
from db2vtop.checks.thresholds import levels, rule_thresholds


def test_every_scale_names_thresholds_its_rule_has():
    t = rule_thresholds()
    for name, s in SCALES.items():
        if s.rule:
            assert all(k is None or k in t[s.rule] for k in (s.warn, s.crit)), name


def test_an_override_moves_the_level():
    assert levels()["ready"] == Level(5.0, 10.0)
    assert levels({"cpu-ready": {"warn_pct": 2}})["ready"] == Level(2.0, 10.0)
