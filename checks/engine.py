"""The check engine: feeds samples and facts through the rules and keeps findings.

A live condition opens a finding when at least `samples` of the last `window` samples
breach (default 3 of 5), and clears only after `clear_samples` clean samples in a row
(default 5): a value flapping around its threshold opens one finding, not many.
Static rules open and clear with the facts they judge. Findings never duplicate while
open; `changes()` hands new, updated and resolved findings to the store and sinks.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from db2vtop.agent.core.config import ConfigError, StackConfig, shown
from db2vtop.agent.core.model import Fact, Finding, Sample, canonical_tags, worse
from db2vtop.agent.core.source import MemorySource, Row
from db2vtop.checks.rule import (
    FactIndex,
    Limit,
    LiveRule,
    Rule,
    StaticRule,
    Thresholds,
    Verdict,
    limit,
    order_of,
    thresholds_of,
)
from db2vtop.checks.topology import StackEntities, resolve


@dataclass
class _Track:
    """Persistence state of one live rule for one subject."""

    recent: deque = field(default_factory=lambda: deque(maxlen=5))
    clean_run: int = 0
    first_bad_ts: int | None = None
    samples: int = 0
    finding: Finding | None = None


class Engine:
    def __init__(self, rules: Sequence[Rule], overrides: dict[str, dict] | None = None,
                 stacks: Sequence[StackConfig] = (), db2_vm: Callable[[Fact], bool] | None = None):
        self.rules = list(rules)
        self.overrides = overrides or {}
        self.stacks = list(stacks)
        self.facts = FactIndex(stacks, db2_vm)
        self._scoped: list[StackEntities] | None = None  # the entities of the stacks with their own thresholds
        self._live: dict[str, list[LiveRule]] = {}
        for r in self.rules:
            if isinstance(r, LiveRule):
                self._live.setdefault(r.measurement, []).append(r)
        self._tracks: dict[tuple[str, str], _Track] = {}
        self._static: dict[str, Finding] = {}
        self._changed: dict[str, Finding] = {}

    # --- thresholds -------------------------------------------------------------------

    def thresholds(self, rule: Rule, subject: dict[str, str]) -> Thresholds:
        """Rule defaults < [checks.RULE] < [stack.checks.RULE] of the stack the subject is in."""
        t = thresholds_of(rule)
        t.update(self.overrides.get(rule.id, {}))
        for entities in self._stack_entities():
            if entities.owns(subject):
                t.update(entities.stack.checks.get(rule.id, {}))
        return t

    def _stack_entities(self) -> list[StackEntities]:
        """What each stack with `[stack.checks]` holds, resolved from the current facts (checks/topology.py)."""
        if self._scoped is None:
            source = MemorySource(facts=[f for by in self.facts.by_kind.values() for f in by.values()])
            self._scoped = [resolve(source, s, 0, 0) for s in self.stacks if s.checks]
        return self._scoped

    # --- feeding ----------------------------------------------------------------------

    def feed(self, samples: Iterable[Sample | Row] = (), facts: Iterable[Fact] = ()) -> None:
        facts = list(facts)
        changed_kinds = self.facts.add(facts)
        if changed_kinds:
            self._scoped = None
        for f in facts:
            if f.removed:
                self._forget(f)
        if changed_kinds:
            self._judge_static(changed_kinds)
        for s in samples:
            for rule in self._live.get(s.measurement, ()):
                self._judge_live(rule, s)

    def _forget(self, gone: Fact) -> None:
        """An entity is gone (a VM deleted or renamed): no sample will clear its live findings, so they
        resolve now, and its tracks go. Its subject is any whose tags include all of the removed fact's."""
        for key, track in list(self._tracks.items()):
            subject = json.loads(key[1])
            if all(subject.get(k) == v for k, v in gone.tags.items()):
                if track.finding is not None:
                    self._resolve(track.finding, gone.ts)
                del self._tracks[key]

    def _judge_live(self, rule: LiveRule, row: Sample | Row) -> None:
        subject = rule.subject(row)  # type: ignore[arg-type]
        t = self.thresholds(rule, subject)
        if t.get("enabled") is False:
            return
        verdict = rule.judge(row, t, self.facts)  # type: ignore[arg-type]
        if verdict is None:
            return
        key = (rule.id, canonical_tags(verdict.subject))
        track = self._tracks.get(key)
        if track is None:
            if verdict.severity is None:  # a clean subject needs no state: most of a healthy fleet
                return
            track = self._tracks[key] = _Track(recent=deque(maxlen=int(t["window"])))
        track.recent.append(verdict.severity)
        track.samples += 1
        if verdict.severity is None:
            track.clean_run += 1
            if track.finding is None:
                if not any(track.recent):  # all clean again: the same as no track at all
                    del self._tracks[key]
            elif track.clean_run >= int(t["clear_samples"]):
                self._resolve(track.finding, row.ts)
                track.finding, track.first_bad_ts = None, None
            return
        track.clean_run = 0
        if track.first_bad_ts is None:
            track.first_bad_ts = row.ts
            track.samples = 1
        breaches = sum(1 for s in track.recent if s is not None)
        severity = None
        for s in track.recent:
            severity = worse(severity, s)
        if track.finding is not None:
            self._refresh(track.finding, rule, verdict, severity, row.ts, t, track.samples)
        elif breaches >= int(t["samples"]):
            track.finding = self._open(rule, verdict, severity, track.first_bad_ts, row.ts, t, track.samples)

    def _judge_static(self, changed_kinds: set[str]) -> None:
        for rule in self.rules:
            if not isinstance(rule, StaticRule) or not changed_kinds & set(rule.needs):
                continue
            base = self.thresholds(rule, {})
            if base.get("enabled") is False:
                continue
            seen = set()
            for v in rule.judge_facts(self.facts, base):
                t = self.thresholds(rule, v.subject)
                if t.get("enabled") is False:
                    continue
                if t != base:  # a stack overrides this rule: judge that subject with its thresholds
                    v = next((w for w in rule.judge_facts(self.facts, t) if w.subject == v.subject), v)
                key = f"{rule.id} {canonical_tags(v.subject)}"
                if v.severity is None:
                    continue
                seen.add(key)
                ts = self._facts_ts(rule)
                found = self._static.get(key)
                if found is None:
                    self._static[key] = self._open(rule, v, v.severity, ts, ts, t, 1)
                else:
                    self._refresh(found, rule, v, v.severity, ts, t, found.evidence.get("samples", 1))
            for key in [k for k in self._static if k.startswith(rule.id + " ") and k not in seen]:
                self._resolve(self._static.pop(key), self._facts_ts(rule))

    def _facts_ts(self, rule: Rule) -> int:
        return max((f.ts for kind in rule.needs for f in self.facts.of(kind)), default=0)

    # --- findings ---------------------------------------------------------------------

    def _open(self, rule: Rule, v: Verdict, severity: str, first: int, last: int, t: Thresholds,
              samples: int) -> Finding:
        f = Finding(rule.id, severity, v.subject, v.summary, self._evidence(v, first, last, t, samples),
                    rule.why(), rule.fix, list(rule.practice.references), first, last)
        self._changed[f.key] = f
        return f

    def _refresh(self, f: Finding, rule: Rule, v: Verdict, severity: str, ts: int, t: Thresholds,
                 samples: int) -> None:
        if severity != f.severity or v.summary != f.summary or ts > f.last_seen:
            f.severity, f.summary, f.last_seen = severity, v.summary, max(ts, f.last_seen)
            f.evidence = self._evidence(v, f.first_seen, f.last_seen, t, samples)
            self._changed[f.key] = f

    def _resolve(self, f: Finding, ts: int) -> None:
        f.resolved_at = max(ts, f.last_seen)
        self._changed[f.key] = f

    @staticmethod
    def _evidence(v: Verdict, first: int, last: int, t: Thresholds, samples: int) -> dict:
        return {"values": v.values, "window": {"from_ns": first, "to_ns": last}, "samples": samples,
                "thresholds": {k: x for k, x in t.items() if k not in ("samples", "window", "clear_samples")}}

    def changes(self) -> list[Finding]:
        """Findings opened, updated or resolved since the last call."""
        out = list(self._changed.values())
        self._changed.clear()
        return out

    def open_findings(self) -> list[Finding]:
        live = [t.finding for t in self._tracks.values() if t.finding is not None]
        return live + list(self._static.values())

    def adopt(self, findings: Iterable[Finding]) -> None:
        """Continue findings left open by an earlier run (so a restart does not duplicate them)."""
        by_rule = {r.id: r for r in self.rules}
        for f in findings:
            rule = by_rule.get(f.rule)
            if isinstance(rule, StaticRule):
                self._static[f.key] = f
            elif isinstance(rule, LiveRule):
                t = self.thresholds(rule, f.subject)
                track = _Track(recent=deque([f.severity] * int(t["window"]), maxlen=int(t["window"])),
                               first_bad_ts=f.first_seen, samples=f.evidence.get("samples", 1), finding=f)
                self._tracks[(f.rule, canonical_tags(f.subject))] = track


def validate_overrides(rules: Sequence[Rule], file: str, overrides: dict[str, dict], where: str = "checks",
                       base: dict[str, dict] | None = None) -> None:
    """[checks.RULE] keys name a rule and one of its thresholds, each of the type and within the
    range of what it measures, and keep warn/crit pairs in order; raises ConfigError.

    `base` holds the overrides these apply over ([checks] beneath [stack.checks]), so the
    order is checked on the values the rule will really use.
    """
    by_id: dict[str, list[Rule]] = {}
    for r in rules:  # one id may have several rules (a static and a live side, several layers)
        by_id.setdefault(r.id, []).append(r)
    for rule_id, keys in overrides.items():
        same = by_id.get(rule_id)
        if same is None:
            raise ConfigError(file, f"{where}.{rule_id}", "no such rule; `db2vtop rules` lists them")
        limits = {"enabled": Limit(bool)}
        for r in same:
            for key in thresholds_of(r):
                limits[key] = limits[key].widest(limit(r, key)) if key in limits else limit(r, key)
        for key, value in keys.items():
            if key not in limits:
                raise ConfigError(file, f"{where}.{rule_id}.{key}",
                                  "unknown threshold; expected one of " + ", ".join(sorted(limits)))
            if not limits[key].accepts(value):
                raise ConfigError(file, f"{where}.{rule_id}.{key}",
                                  f"{shown(value)} is not valid; expected {limits[key].expected()}")
        for r in same:
            _check_order(r, {**thresholds_of(r), **(base or {}).get(rule_id, {}), **keys}, keys,
                         f"{where}.{rule_id}", file)


def _check_order(rule: Rule, t: Thresholds, given: dict, where: str, file: str) -> None:
    for low, high, strict in order_of(rule):
        a, b = t[low], t[high]
        if a < b or (a == b and not strict):
            continue
        why = "" if not strict else (" (lower is worse for this rule: its warning level is above the critical one)"
                                     if low.startswith("crit_") else " (the warning level is below the critical one)")
        if low in given or high not in given:
            raise ConfigError(file, f"{where}.{low}", f"{shown(a)} is not valid; expected "
                                                     f"{'below' if strict else 'at most'} {high} ({shown(b)}){why}")
        raise ConfigError(file, f"{where}.{high}", f"{shown(b)} is not valid; expected "
                                                   f"{'above' if strict else 'at least'} {low} ({shown(a)}){why}")
