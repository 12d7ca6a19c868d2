"""Levels live in the rules' thresholds only: the TUI and the verdict read them (checks/scales.py)."""

import re

from db2vtop.checks.scales import SCALES, Level, levels, rule_thresholds
from tests.conftest import ROOT


def test_no_level_is_written_outside_the_rules():
    """A number in a Thresholds(...) of the TUI, or a comparison with a number in the verdict, is a
    level that an override would not move."""
    found = []
    for path in sorted((ROOT / "tui").rglob("*.py")):
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if re.search(r"Thresholds\([^)]*\d", line):
                found.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
    verdict = ROOT / "checks" / "verdict.py"
    for n, line in enumerate(verdict.read_text().splitlines(), 1):
        if re.search(r"[<>]=?\s*(?!0\b)\d", line) and "layers_seen" not in line:
            found.append(f"checks/verdict.py:{n}: {line.strip()}")
    assert found == []


def test_every_scale_names_thresholds_its_rule_has():
    t = rule_thresholds()
    for name, s in SCALES.items():
        if s.rule:
            assert all(k is None or k in t[s.rule] for k in (s.warn, s.crit)), name


def test_an_override_moves_the_level():
    assert levels()["ready"] == Level(5.0, 10.0)
    assert levels({"cpu-ready": {"warn_pct": 2}})["ready"] == Level(2.0, 10.0)
