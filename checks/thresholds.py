"""Which thresholds a rule judges with, in one place: the rule's defaults, then the config's `[checks.RULE]`,
then the `[stack.checks.RULE]` of the stack its subject is in (each key of a later one over the earlier).

The check engine asks `of_rule` for each rule (and each stack a subject is in); the display levels the TUI
colours by (`levels`, over the scales of checks/scales.py) and the verdict's own levels (`verdict_levels`) are
made from `rule_thresholds`, the same precedence by rule id. A stack's levels are made once for what its
overrides say: they are kept by the overrides' content, so a changed config (a reload, another app's) is a new
entry and nothing made from an older one is ever handed out.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any, TypeVar

from db2vtop.agent.core.config import StackConfig
from db2vtop.checks.figures import ROLES
from db2vtop.checks.rule import Rule, Thresholds, thresholds_of
from db2vtop.checks.rules import all_rules
from db2vtop.checks.scales import ANY, SCALES, Level, Levels

#: rule id -> threshold -> value: the config's `[checks]`, or a stack's `[stack.checks]`
Overrides = Mapping[str, Mapping[str, Any]]


def of_rule(rule: Rule, *overrides: Overrides | None) -> Thresholds:
    """The thresholds `rule` judges with: its defaults, then each set of overrides in turn (`[checks]`, then
    the `[stack.checks]` of each stack the subject is in)."""
    t = thresholds_of(rule)
    for o in overrides:
        if o and rule.id in o:
            t.update(o[rule.id])
    return t


def merged(*overrides: Overrides | None) -> dict[str, dict[str, Any]]:
    """Rule id -> its overridden keys, the later sets over the earlier."""
    out: dict[str, dict[str, Any]] = {}
    for o in overrides:
        for rule_id, values in (o or {}).items():
            out.setdefault(rule_id, {}).update(values)
    return out


def rule_thresholds(*overrides: Overrides | None) -> dict[str, dict]:
    """Rule id -> its thresholds: every rule's of that id (a static and a live side) after the overrides."""
    out: dict[str, dict] = {}
    for r in all_rules():
        out.setdefault(r.id, {}).update(thresholds_of(r))
    for rule_id, values in merged(*overrides).items():
        out.setdefault(rule_id, {}).update(values)
    return out


def levels(overrides: Overrides | None = None, stack: StackConfig | None = None) -> Levels:
    """Every scale's level after `[checks]` and, with `stack`, its `[stack.checks]`: made once per content."""
    return _kept(_LEVELS, merged(overrides, stack.checks if stack is not None else None), _levels)


def verdict_levels(stack: StackConfig, overrides: Overrides | None = None) -> dict[str, float]:
    """The verdict's levels for a stack: its own (`stack-verdict`) and, for each of its inputs judged by a rule's
    scale (checks/figures.py `level`), that scale's warning level, after `[checks.RULE]` and then the stack's own
    `[stack.checks.RULE]` (a copy: the caller may change it)."""
    return dict(_kept(_VERDICT, merged(overrides, stack.checks), _verdict_levels))


T = TypeVar("T")
#: what each content of overrides made, by that content: every stack of a fleet asks, most with the same
_LEVELS: dict[str, Levels] = {}
_VERDICT: dict[str, dict[str, float]] = {}
KEPT = 64


def _kept(memo: dict[str, T], given: dict[str, dict[str, Any]], make: Callable[[dict[str, dict[str, Any]]], T]) -> T:
    key = json.dumps(given, sort_keys=True, default=str)
    hit = memo.get(key)
    if hit is None:
        if len(memo) >= KEPT:
            memo.clear()
        hit = memo[key] = make(given)
    return hit


def _levels(given: dict[str, dict[str, Any]]) -> Levels:
    t = rule_thresholds(given)
    out = {}
    for name, s in SCALES.items():
        th = t.get(s.rule, {})
        warn = float(th[s.warn]) if s.warn else (ANY if s.any_warns else None)
        out[name] = Level(warn, float(th[s.crit]) if s.crit else None, s.below)
    frozen = {rule: MappingProxyType(dict(v)) for rule, v in given.items()}
    return Levels(MappingProxyType(out), MappingProxyType(frozen))


def _verdict_levels(given: dict[str, dict[str, Any]]) -> dict[str, float]:
    lv = _kept(_LEVELS, given, _levels)
    rules = rule_thresholds(given)
    own = {k: float(v) for k, v in rules["stack-verdict"].items()}
    shared = {role: warn for role, figs in ROLES.items() if (warn := lv.of(figs[0].level).warn) is not None}
    # the host's memory state from which an unreserved VM's memory is reclaimed (swapped, compressed): hard
    shared["host_mem_state"] = lv["mem_state"].crit or math.inf
    shared["min_iops"] = float(rules["disk-queue-saturation"]["min_iops"])
    return {**own, **shared}
