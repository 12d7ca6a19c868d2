"""One threshold resolver (checks/thresholds.py): rule defaults < `[checks.RULE]` < `[stack.checks.RULE]`, the same
for the check engine, the display levels and the verdict; a stack's levels made once for what its overrides say."""

from db2vtop.agent.core.config import StackConfig
from db2vtop.checks.engine import Engine
from db2vtop.checks.rule import thresholds_of
from db2vtop.checks.rules import all_rules
from db2vtop.checks.scales import Level
from db2vtop.checks.thresholds import levels, merged, of_rule, rule_thresholds, verdict_levels

READY = next(r for r in all_rules() if r.id == "cpu-ready")


def test_a_stack_wins_over_the_config_which_wins_over_the_defaults():
    config = {"cpu-ready": {"warn_pct": 3.0, "crit_pct": 20.0}}
    stack = {"cpu-ready": {"warn_pct": 2.0}, "other-rule": {"warn_pct": 1.0}}
    assert of_rule(READY)["warn_pct"] == 5.0 and of_rule(READY)["window"] == 5  # its own and the live ones
    assert of_rule(READY, config) == {**thresholds_of(READY), "warn_pct": 3.0, "crit_pct": 20.0}
    assert of_rule(READY, config, stack) == {**thresholds_of(READY), "warn_pct": 2.0, "crit_pct": 20.0}
    assert of_rule(READY, None, stack)["crit_pct"] == 10.0
    assert merged(config, stack)["cpu-ready"] == {"warn_pct": 2.0, "crit_pct": 20.0}
    assert config == {"cpu-ready": {"warn_pct": 3.0, "crit_pct": 20.0}}  # what it was given is left alone


def test_by_rule_id_is_each_rules_own_thresholds():
    """The levels' view by rule id holds what the engine judges each rule with, every side of an id included."""
    config = {"cpu-ready": {"warn_pct": 3.0}}
    by_id = rule_thresholds(config)
    for rule in all_rules():
        assert of_rule(rule, config).items() <= by_id[rule.id].items(), rule.id


def test_the_engine_the_levels_and_the_verdict_agree():
    config = {"cpu-ready": {"warn_pct": 3.0}}
    stack = StackConfig(name="s", checks={"cpu-ready": {"warn_pct": 2.0}})
    assert Engine(all_rules(), config).thresholds(READY, {})["warn_pct"] == 3.0
    assert levels(config)["ready"] == Level(3.0, 10.0)
    assert levels(config, stack)["ready"] == Level(2.0, 10.0) and levels(None, stack)["ready"] == Level(2.0, 10.0)
    assert verdict_levels(StackConfig(name="plain"), config)["ready_pct"] == 3.0
    assert verdict_levels(stack, config)["ready_pct"] == 2.0


def test_a_stacks_levels_are_made_once_and_never_outlive_its_config():
    config = {"cpu-ready": {"warn_pct": 3.0}}
    stack = StackConfig(name="s", checks={"cpu-ready": {"warn_pct": 2.0}})
    first = levels(config, stack)
    assert levels({"cpu-ready": {"warn_pct": 3.0}}, StackConfig(name="t", checks=dict(stack.checks))) is first
    stack.checks["cpu-ready"] = {"warn_pct": 1.0}  # a changed config: other levels, never the ones kept
    assert levels(config, stack) is not first and levels(config, stack)["ready"].warn == 1.0
    mine = verdict_levels(stack, config)
    mine["ready_pct"] = 99.0  # the caller's copy
    assert verdict_levels(stack, config)["ready_pct"] == 1.0
