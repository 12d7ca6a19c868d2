"""The check engine: feeds samples and facts through the rules and keeps findings.

A live condition opens a finding when at least `samples` of the last `window` samples
breach (default 3 of 5), and clears only after `clear_samples` clean samples in a row
(default 5): a value flapping around its threshold opens one finding, not many.
Static rules open and clear with the facts they judge. Findings never duplicate while
open; `changes()` hands new, updated and resolved findings to the store and sinks.

A live finding whose subject stops reporting (a guest unreachable, a collector removed from the
config) is marked stale once its source has missed its cycles (agent/core/cadence.py), rather than
staying open as if current; its next sample makes it current again. An engine that starts where
history is kept (the store's recent samples, vCenter's realtime hour) judges that history first
(`start_from`, `history_samples`), so its first judgement is the one a long-running engine, and
triage, would make.
"""

from __future__ import annotations

import json
from array import array
from collections import deque
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, field
from statistics import median

from db2vtop.agent.core.cadence import is_stale
from db2vtop.agent.core.config import ConfigError, StackConfig, shown
from db2vtop.agent.core.model import Fact, Finding, Sample, canonical_tags, worse
from db2vtop.agent.core.source import MemorySource, Row, Series
from db2vtop.agent.core.text import did_you_mean
from db2vtop.checks.rule import (
    FactIndex,
    Judgement,
    Limit,
    LiveRule,
    PerFactRule,
    Rule,
    StaticRule,
    Thresholds,
    limit,
    order_of,
    thresholds_of,
)
from db2vtop.checks.thresholds import of_rule
from db2vtop.checks.topology import StackEntities, resolve

#: subjects whose canonical tags are remembered (a 10,000-VM vCenter has about 10,000 of its VMs' and hosts')
SUBJECTS_KEPT = 50_000
#: the longest history a source keeps that it may hand on again after `start_from` (vCenter's realtime hour)
HISTORY_NS = 3600 * 10**9


@dataclass
class _Track:
    """Persistence state of one live rule for one subject."""

    recent: deque = field(default_factory=lambda: deque(maxlen=5))
    clean_run: int = 0
    first_bad_ts: int | None = None
    samples: int = 0
    finding: Finding | None = None
    last_ts: int = 0  # the newest sample judged
    measurement: str = ""  # of the newest sample
    gaps: deque = field(default_factory=lambda: deque(maxlen=5))  # between the newest samples: its period


class Engine:
    def __init__(self, rules: Sequence[Rule], overrides: dict[str, dict] | None = None,
                 stacks: Sequence[StackConfig] = (), db2_vm: Callable[[Fact], bool] | None = None):
        self.rules = list(rules)
        self.overrides = overrides or {}
        self.stacks = list(stacks)
        self.facts = FactIndex(stacks, db2_vm)
        self._scoped: list[StackEntities] | None = None  # the entities of the stacks with their own thresholds
        self._canon: dict[tuple, str] = {}  # a subject's items -> its canonical tags
        self._plain: dict[int, Thresholds] = {}  # id(rule) -> its thresholds, where no stack has its own
        self._live: dict[str, list[LiveRule]] = {}
        for r in self.rules:
            if isinstance(r, LiveRule):
                self._live.setdefault(r.measurement, []).append(r)
        #: rule id -> subject's canonical tags -> its track (a rule without any: its clean samples need no lookup)
        self._tracks: dict[str, dict[str, _Track]] = {}
        self._static: dict[str, Finding] = {}
        self._changed: dict[str, Finding] = {}
        self._judged: dict[str, dict[str, int]] = {}  # measurement -> tags -> the newest ts of history judged
        self._judged_until = -1
        self._newest: dict[str, int] = {}  # live measurement -> its newest sample's ts
        self._lag: dict[str, tuple[int, int]] = {}  # measurement -> (newest ts, how long after it it was judged)

    # --- thresholds -------------------------------------------------------------------

    def thresholds(self, rule: Rule, subject: dict[str, str] | Callable[[], dict[str, str]]) -> Thresholds:
        """Rule defaults < [checks.RULE] < [stack.checks.RULE] of the stack the subject is in (checks/thresholds.py;
        `subject` may be a function that makes it: only asked where a stack has thresholds of its own). Without
        such stacks, one dict per rule (read only: each sample of 10,000 VMs asks)."""
        scoped = self._stack_entities()
        if not scoped:
            t = self._plain.get(id(rule))
            if t is None:
                t = self._plain[id(rule)] = of_rule(rule, self.overrides)
            return t
        if callable(subject):
            subject = subject()
        return of_rule(rule, self.overrides, *(e.stack.checks for e in scoped if e.owns(subject)))

    def _stack_entities(self) -> list[StackEntities]:
        """What each stack with `[stack.checks]` holds, resolved from the current facts (checks/topology.py)."""
        if self._scoped is None and not any(s.checks for s in self.stacks):
            self._scoped = []
        if self._scoped is None:
            source = MemorySource(facts=[f for by in self.facts.by_kind.values() for f in by.values()])
            self._scoped = [resolve(source, s, 0, 0) for s in self.stacks if s.checks]
        return self._scoped

    # --- feeding ----------------------------------------------------------------------

    def live_measurements(self) -> set[str]:
        """The measurements the live rules judge."""
        return set(self._live)

    def history_fields(self) -> dict[str, frozenset[str] | None]:
        """Live measurement -> the fields its rules read (None: any): all a source that keeps history needs to
        hand on again for `start_from`."""
        out: dict[str, frozenset[str] | None] = {}
        for measurement, rules in self._live.items():
            reads = [r.reads() for r in rules]
            out[measurement] = None if None in reads else frozenset().union(*reads)  # type: ignore[arg-type]
        return out

    def history_samples(self) -> int:
        """How many of a subject's latest samples the live rules need to judge it as an engine that had
        run all along: enough to open a finding (`window`) and to clear it (`clear_samples`)."""
        n = 0
        for rules in self._live.values():
            for rule in rules:
                for own in [{}, *(s.checks for s in self.stacks)]:
                    t = of_rule(rule, self.overrides, own)
                    n = max(n, int(t["window"]) + int(t["clear_samples"]))
        return n

    def quiet(self, series: Iterable[Series], column: Callable[[int, str], Sequence], newest: Callable[[int], int],
              ) -> set[int]:
        """The series (ids) whose samples no live rule of their measurement could find breaching, by the rules'
        screens: for an engine fed a whole history at once (triage), each of their samples would be a clean
        verdict of a subject without a track, nothing to judge. A series shares its fate with every other of
        the same subject (a VM that moved has a series per host: one that breached needs the other's clean
        samples to resolve). None where a stack has thresholds of its own. Their newest times count as judged."""
        if self._stack_entities():
            return set()
        verdicts: dict[tuple[str, str], list[tuple[int, bool]]] = {}
        of_series: dict[int, list[tuple[str, str]]] = {}
        measurement = {}
        for s in series:
            rules = self._live.get(s.measurement)
            if not rules:
                continue
            measurement[s.id] = s.measurement
            for rule in rules:
                t = self.thresholds(rule, {})
                tests = None if t.get("enabled") is False else rule.screen(t)
                calm = t.get("enabled") is False or (tests is not None and not any(
                    _passes(column(s.id, name), level, below) for name, level, below in tests))
                key = (rule.id, self._canonical(rule.subject(Row(0, s.measurement, s.tags, {}))))
                verdicts.setdefault(key, []).append((s.id, calm))
                of_series.setdefault(s.id, []).append(key)
        loud = {key for key, found in verdicts.items() if not all(calm for _, calm in found)}
        out = {sid for sid, keys in of_series.items() if not loud.intersection(keys)}
        for sid in out:
            m = measurement[sid]
            self._newest[m] = max(self._newest.get(m, 0), newest(sid))
        return out

    def start_from(self, history: Iterable[Sample | Row]) -> None:
        """Judge the history a source keeps before anything new, in time order. A sample judged here is not
        judged again when a source hands it on later (vCenter's first cycle reaching back over what the store
        holds already)."""
        rows = sorted(history, key=lambda r: r.ts)
        self.feed(rows)
        keys: dict[int, str] = {}  # a series' rows share one tags dict: its canonical text made once
        for r in rows:
            key = keys.get(id(r.tags))
            if key is None:
                key = keys[id(r.tags)] = canonical_tags(r.tags)
            self._judged.setdefault(r.measurement, {})[key] = r.ts  # in time order: the newest stays
            self._judged_until = max(self._judged_until, r.ts)

    def _new(self, s: Sample | Row) -> bool:
        """Not a sample of the history judged already."""
        if s.ts > self._judged_until:
            return True
        judged = self._judged.get(s.measurement)
        if judged is None:  # no history of it judged (vCenter's realtime counters: not read from the store)
            return True
        done = judged.get(canonical_tags(s.tags))
        return done is None or s.ts > done

    def feed(self, samples: Iterable[Sample | Row] = (), facts: Iterable[Fact] = ()) -> None:
        facts = list(facts)
        changed_kinds = self.facts.add(facts)
        if changed_kinds:
            self._scoped = None
        for f in facts:
            if f.removed:
                self._forget(f)
        if changed_kinds:
            self._judge_static(changed_kinds, facts)
        judged = bool(self._judged)
        newest = self._newest
        for s in samples:
            rules = self._live.get(s.measurement)
            if rules and (not judged or self._new(s)):
                if s.ts > newest.get(s.measurement, 0):
                    newest[s.measurement] = s.ts
                for rule in rules:
                    self._judge_live(rule, s)

    def _forget(self, gone: Fact) -> None:
        """An entity is gone (a VM deleted or renamed): no sample will clear its live findings, so they
        resolve now, and its tracks go. Its subject is any whose tags include all of the removed fact's."""
        for tracks in self._tracks.values():
            for key, track in list(tracks.items()):
                subject = json.loads(key)
                if all(subject.get(k) == v for k, v in gone.tags.items()):
                    if track.finding is not None:
                        self._resolve(track.finding, gone.ts)
                    del tracks[key]

    def _canonical(self, subject: dict[str, str]) -> str:
        """canonical_tags of a subject, remembered: every sample of every VM asks it for each of its rules, and
        the subjects are far fewer than the samples (a VM's rules share theirs)."""
        try:
            items = tuple(subject.items())
            key = self._canon.get(items)
        except TypeError:  # a value that cannot be a dict key
            return canonical_tags(subject)
        if key is None:
            if len(self._canon) >= SUBJECTS_KEPT:
                self._canon.clear()
            key = self._canon[items] = canonical_tags(subject)
        return key

    def _judge_live(self, rule: LiveRule, row: Sample | Row) -> None:
        # each sample of 10,000 VMs, for each of its rules: the thresholds of a rule no stack overrides are one dict
        t = self._plain.get(id(rule)) if self._scoped == [] else None
        if t is None:
            t = self.thresholds(rule, lambda: rule.subject(row))  # type: ignore[arg-type]
        if t.get("enabled") is False:
            return
        verdict = rule.judge(row, t, self.facts)  # type: ignore[arg-type]
        if verdict is None:
            return
        tracks = self._tracks.get(rule.id)
        if verdict.severity is None and not tracks:  # a clean subject needs no state: most of a healthy fleet
            return
        key = self._canonical(verdict.subject)
        track = tracks.get(key) if tracks else None
        if track is None:
            if verdict.severity is None:
                return
            track = self._tracks.setdefault(rule.id, {})[key] = _Track(recent=deque(maxlen=int(t["window"])))
        track.recent.append(verdict.severity)
        track.samples += 1
        if row.ts > track.last_ts:
            if track.last_ts:
                track.gaps.append(row.ts - track.last_ts)
            track.last_ts, track.measurement = row.ts, row.measurement
            if track.finding is not None and track.finding.stale_since is not None:  # reporting again
                track.finding.evidence = {k: x for k, x in track.finding.evidence.items() if k != "stale_since_ns"}
                self._changed[track.finding.key] = track.finding
        if verdict.severity is None:
            track.clean_run += 1
            if track.finding is None:
                if not any(track.recent):  # all clean again: the same as no track at all
                    del self._tracks[rule.id][key]
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

    def _judge_static(self, changed_kinds: set[str], brought: list[Fact]) -> None:
        """Judge the static rules whose fact kinds changed. A per-fact rule whose only changed kind is its own
        judges just the facts this feed brought (a reconfigured VM among 10,000, a facts pass handed on page by
        page); any other rule judges all current facts."""
        for rule in self.rules:
            if not isinstance(rule, StaticRule) or not changed_kinds & set(rule.needs):
                continue
            only = None
            if isinstance(rule, PerFactRule) and changed_kinds & set(rule.needs) == {rule.fact_kind}:
                # the last version of each entity brought (a batch may hold two of one)
                only = list({tuple(sorted(f.tags.items())): f for f in brought if f.kind == rule.fact_kind}.values())
            self._judge_rule(rule, only)

    def _judge_rule(self, rule: StaticRule, only: list[Fact] | None) -> None:
        """One static rule over all current facts, or (`only`, a per-fact rule) over those facts: the findings
        of the subjects judged open, change or resolve."""
        base = self.thresholds(rule, {})
        if base.get("enabled") is False:
            return

        def judge(t: Thresholds) -> list[Judgement]:
            if only is None:
                return rule.judge_facts(self.facts, t)
            assert isinstance(rule, PerFactRule)
            return rule.judge_some(self.facts, t, [f for f in only if not f.removed])
        ts = self._facts_ts(rule)
        seen = set()
        for v in judge(base):
            t = self.thresholds(rule, v.subject)
            if t.get("enabled") is False:
                continue
            if t != base:  # a stack overrides this rule: judge that subject with its thresholds
                v = next((w for w in judge(t) if w.subject == v.subject), v)
            if v.severity is None:
                continue
            key = f"{rule.id} {canonical_tags(v.subject)}"
            seen.add(key)
            found = self._static.get(key)
            if found is None:
                self._static[key] = self._open(rule, v, v.severity, ts, ts, t, 1)
            else:
                self._refresh(found, rule, v, v.severity, ts, t, found.evidence.get("samples", 1))
        judged = None if only is None else {tuple(sorted(f.tags.items())) for f in only}
        for key in [k for k, f in self._static.items() if k.startswith(rule.id + " ") and k not in seen
                    and (judged is None or _entity_of(f.subject) in judged)]:
            self._resolve(self._static.pop(key), ts)

    def _facts_ts(self, rule: Rule) -> int:
        return max((f.ts for kind in rule.needs for f in self.facts.of(kind)), default=0)

    # --- findings ---------------------------------------------------------------------

    def _open(self, rule: Rule, v: Judgement, severity: str, first: int, last: int, t: Thresholds,
              samples: int) -> Finding:
        f = Finding(rule.id, severity, v.subject, v.summary, self._evidence(v, first, last, t, samples),
                    rule.why(), rule.fix, list(rule.practice.references), first, last)
        self._changed[f.key] = f
        return f

    def _refresh(self, f: Finding, rule: Rule, v: Judgement, severity: str, ts: int, t: Thresholds,
                 samples: int) -> None:
        if severity != f.severity or v.summary != f.summary or ts > f.last_seen:
            f.severity, f.summary, f.last_seen = severity, v.summary, max(ts, f.last_seen)
            f.evidence = self._evidence(v, f.first_seen, f.last_seen, t, samples)
            self._changed[f.key] = f

    def _resolve(self, f: Finding, ts: int) -> None:
        f.resolved_at = max(ts, f.last_seen)
        self._changed[f.key] = f

    @staticmethod
    def _evidence(v: Judgement, first: int, last: int, t: Thresholds, samples: int) -> dict:
        return {"values": v.values, "window": {"from_ns": first, "to_ns": last}, "samples": samples,
                "thresholds": {k: x for k, x in t.items() if k not in ("samples", "window", "clear_samples")}}

    def changes(self) -> list[Finding]:
        """Findings opened, updated or resolved since the last call."""
        out = list(self._changed.values())
        self._changed.clear()
        return out

    def mark_stale(self, now_ns: int, unread: Collection[str] = ()) -> None:
        """Live findings whose subject has missed its source's cycles since its last sample (the period its
        own samples kept) are stale since that sample; no sample of it will clear them while it is silent.

        Time is the source's own: a measurement's samples arrive some time after their stamp (vCenter's
        20-60 s, a clock apart from ours), measured when its newest sample is judged (the caller says when:
        right after each feed), and a subject's silence is counted from there. A source that stops reporting
        altogether keeps that delay, so its subjects go stale on our clock. `unread`: measurements and fact
        kinds no source could be asked for now (its sources down): a measurement's newest sample's age is
        silence, not delay, and a finding judged from facts of an unread kind is stale (`_mark_static_stale`)."""
        if self._judged and now_ns - self._judged_until > HISTORY_NS:  # no source hands on samples that old
            self._judged.clear()
        for m, ts in self._newest.items():
            if m in unread:
                self._lag[m] = (ts, 0)
            elif self._lag.get(m, (None, 0))[0] != ts:
                self._lag[m] = (ts, max(0, now_ns - ts))
        for track in (track for tracks in self._tracks.values() for track in tracks.values()):
            f = track.finding
            if f is None or f.stale_since is not None or not track.last_ts:
                continue
            period = median(track.gaps) / 1e9 if track.gaps else _period(f)
            lag = self._lag.get(track.measurement, (0, 0))[1]
            if is_stale((now_ns - lag - track.last_ts) / 1e9, period):
                f.evidence = {**f.evidence, "stale_since_ns": track.last_ts}
                self._changed[f.key] = f
        self._mark_static_stale(frozenset(unread))

    def _mark_static_stale(self, unread: frozenset[str]) -> None:
        """A finding judged from facts (a static rule) is stale while a fact kind its rule needs is `unread`:
        the facts it stands on are the last ones stored, and only that source could renew them. It is stale
        since it was last judged, and current again once its sources are read."""
        needs = {r.id: set(r.needs) for r in self.rules if isinstance(r, StaticRule)}
        for f in self._static.values():
            down = bool(needs.get(f.rule, set()) & unread)
            if down == (f.stale_since is not None):
                continue
            f.evidence = ({**f.evidence, "stale_since_ns": f.last_seen} if down else
                          {k: x for k, x in f.evidence.items() if k != "stale_since_ns"})
            self._changed[f.key] = f

    def open_findings(self) -> list[Finding]:
        live = [t.finding for tracks in self._tracks.values() for t in tracks.values() if t.finding is not None]
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
                               first_bad_ts=f.first_seen, samples=f.evidence.get("samples", 1), finding=f,
                               last_ts=f.last_seen)
                self._tracks.setdefault(f.rule, {})[canonical_tags(f.subject)] = track


def _passes(values: Sequence, level: float, below: bool) -> bool:
    """Whether a value of a column reaches a screen's level (a column of one numeric type is compared at C
    speed; its placeholders for missing values are 0, which can only make it pass)."""
    if not values:
        return False
    if isinstance(values, array):
        return (min(values) <= level) if below else (max(values) >= level)
    numbers = [v for v in values if type(v) is int or type(v) is float]
    return bool(numbers) and ((min(numbers) <= level) if below else (max(numbers) >= level))


def _entity_of(subject: dict[str, str]) -> tuple:
    """The tags of the entity a finding's subject names (its layer aside), as FactIndex keys them."""
    return tuple(sorted((k, v) for k, v in subject.items() if k != "layer"))


def _period(f: Finding) -> float | None:
    """The period of a finding's samples from its evidence (an adopted finding has no samples of this run):
    its window over the samples in it."""
    window, n = f.evidence.get("window") or {}, f.evidence.get("samples", 1)
    span = (window.get("to_ns") or 0) - (window.get("from_ns") or 0)
    return span / (n - 1) / 1e9 if isinstance(n, int) and n > 1 and span > 0 else None


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
            raise ConfigError(file, f"{where}.{rule_id}",
                              "no such rule" + did_you_mean(rule_id, by_id) + "; `db2vtop rules` lists them")
        limits = {"enabled": Limit(bool)}
        for r in same:
            for key in thresholds_of(r):
                limits[key] = limits[key].widest(limit(r, key)) if key in limits else limit(r, key)
        for key, value in keys.items():
            if key not in limits:
                raise ConfigError(file, f"{where}.{rule_id}.{key}", f"unknown threshold{did_you_mean(key, limits)}; "
                                  "expected one of " + ", ".join(sorted(limits)))
            if not limits[key].accepts(value):
                raise ConfigError(file, f"{where}.{rule_id}.{key}",
                                  f"{shown(value)} is not valid; expected {limits[key].expected()}")
        for r in same:
            _check_order(r, of_rule(r, base, {rule_id: keys}), keys,
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
