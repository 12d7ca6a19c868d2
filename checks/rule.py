"""What a rule is: a practice from the catalog plus the code that judges data against it.

Live rules judge one sample at a time (the engine adds persistence and hysteresis);
static rules judge the current facts as a whole (configuration, inventory). A rule says
which measurements or fact kinds it needs and which config section provides them, so
`db2vtop rules` can tell whether it is observable with the current configuration.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from db2vtop.agent.core.config import StackConfig
from db2vtop.agent.core.model import Fact, FieldValue
from db2vtop.agent.core.source import Row
from db2vtop.checks.catalog import Practice, practices

Thresholds = dict[str, float | int | str | bool]
#: what a figure is (a tuple: `int | float` is built anew at each call, four times the cost in a rule judging
#: every sample of 10,000 VMs)
NUMBER = (int, float)


def is_number(value: Any) -> bool:
    """A figure: an int or float, never a bool (an int to isinstance)."""
    return isinstance(value, NUMBER) and value.__class__ is not bool


@dataclass
class Judgement:
    """A rule's judgement of one subject: severity None means the practice is met (a stack's cross-layer
    verdict is checks/verdict.py's StackVerdict)."""

    subject: dict[str, str]
    severity: str | None
    summary: str = ""
    values: dict[str, FieldValue] = field(default_factory=dict)


class FactIndex:
    """Current facts by kind, for rules that need configuration context."""

    def __init__(self, stacks: Sequence[StackConfig] = (), db2_vm: Callable[[Fact], bool] | None = None) -> None:
        self.by_kind: dict[str, dict[tuple, Fact]] = {}
        self.stacks = list(stacks)  # how the layers of each database join (config [[stack]])
        self.db2_vm = db2_vm  # which VMs are DB2 VMs (checks/topology.db2_vm_selector); None: all
        #: (kind, tag) -> tag value -> the facts with it, in order; made by find(), dropped when the kind changes
        self._by_tag: dict[tuple[str, str], dict[str, list[Fact]]] = {}

    def add(self, facts: Iterable[Fact]) -> set[str]:
        changed, touched = set(), set()
        for f in facts:
            touched.add(f.kind)
            key = tuple(sorted(f.tags.items()))
            if f.removed:
                if self.by_kind.get(f.kind, {}).pop(key, None) is not None:
                    changed.add(f.kind)
                continue
            known = self.by_kind.setdefault(f.kind, {}).get(key)
            if known is None or known.data != f.data:
                changed.add(f.kind)
            self.by_kind[f.kind][key] = f
        for k in [k for k in self._by_tag if k[0] in touched]:
            del self._by_tag[k]
        return changed

    def of(self, kind: str) -> list[Fact]:
        return list(self.by_kind.get(kind, {}).values())

    def find(self, kind: str, **tags: str) -> Fact | None:
        """The first fact of `kind` whose tags include all of `tags` (looked up by the first tag: a live rule
        asks this for each sample of a 10,000-VM vCenter)."""
        first, value = next(iter(tags.items()), ("", None))
        if value is None:  # no tag, or one that must be absent: the plain scan
            return next((f for f in self.by_kind.get(kind, {}).values()
                         if all(f.tags.get(k) == v for k, v in tags.items())), None)
        index = self._by_tag.get((kind, first))
        if index is None:
            index = self._by_tag[(kind, first)] = {}
            for f in self.by_kind.get(kind, {}).values():
                if first in f.tags:
                    index.setdefault(f.tags[first], []).append(f)
        for f in index.get(value, ()):
            if all(f.tags.get(k) == v for k, v in tags.items()):
                return f
        return None


class Rule:
    id: str
    layer: str
    #: measurement or fact kind -> the config section whose collector provides it
    needs: dict[str, str] = {}
    #: threshold defaults; every key can be overridden per rule and per stack in config.
    #: A key's type and range follow from its name and default (see `limit`); a
    #: warn_X / crit_X pair is kept in the order its defaults have.
    defaults: Thresholds = {}
    #: (low, high) for a key whose measure departs from its name's usual range
    limits: dict[str, tuple[float, float]] = {}
    #: (lower key, higher key) pairs beyond warn_X / crit_X that must stay in order
    ordered: tuple[tuple[str, str], ...] = ()
    fix: str = ""

    @property
    def practice(self) -> Practice:
        return practices()[self.id]

    @property
    def judged(self) -> str:
        """How: `live` (each sample) or `static` (the current facts); `db2vtop rules` lists it as its kind."""
        return "live" if isinstance(self, LiveRule) else "static"

    def why(self) -> str:
        p = self.practice
        return f"{p.practice}. Reference value: {p.figure}."


class LiveRule(Rule):
    """Judges each sample of one measurement; the engine decides when a condition is sustained."""

    measurement: str
    #: tags of a sample that identify the subject (the entity the finding is about)
    subject_tags: tuple[str, ...] = ()
    #: which side of its entity it judges, where rules of one id judge several (KAVG and QAVG of a LUN): its
    #: subject's `aspect` tag, so each side is a finding of its own; "" for none
    aspect: str = ""
    defaults: Thresholds = {"samples": 3, "window": 5, "clear_samples": 5}
    limits = {"samples": (1, 1000), "window": (1, 1000), "clear_samples": (1, 1000)}
    ordered = (("samples", "window"),)

    #: fields it reads beyond `field`/`fields`/`gate` (tests/checks/test_rules_reads.py holds judge() to them)
    reads_also: tuple[str, ...] = ()

    def subject(self, row: Row) -> dict[str, str]:
        out, tags = {"layer": self.layer}, row.tags
        for k in self.subject_tags:
            if k in tags:
                out[k] = tags[k]
        if self.aspect:
            out["aspect"] = self.aspect
        return out

    def reads(self) -> frozenset[str] | None:
        """The fields of a sample it reads, from its declaration (`field`, `fields`, `gate`, `reads_also`);
        None when it declares none (it may read any). A source that keeps history hands on again only these
        for the check engine's start (the rest of a sample's history is asked for by nobody)."""
        gate = getattr(self, "gate", None)
        names = {getattr(self, "field", None), *getattr(self, "fields", ()), *(gate[:1] if gate else ()),
                 *self.reads_also} - {None}
        return frozenset(names) if names else None  # type: ignore[arg-type]

    def judge(self, row: Row, t: Thresholds, facts: FactIndex) -> Judgement | None:
        """A judgement of this sample, or None when the sample says nothing about the rule."""
        raise NotImplementedError

    def screen(self, t: Thresholds) -> Screen | None:
        """What a sample must show for this rule to find it breaching: (field, level, below) each, one of which
        holds (the field at or above its level, at or below it with `below`); None when it cannot tell. The
        engine fed a whole history at once (triage) leaves out the series whose samples none holds."""
        return None


#: a live rule's screen: (field, level, below) tests, one of which a breaching sample passes
Screen = tuple[tuple[str, float, bool], ...]
#: the smallest value above zero: "any amount breaches"
ABOVE_ZERO = math.ulp(0.0)


class StaticRule(Rule):
    """Judges configuration: every call sees all current facts."""

    def judge_facts(self, facts: FactIndex, t: Thresholds) -> list[Judgement]:
        raise NotImplementedError


class PerFactRule(StaticRule):
    """One judgement per fact of `fact_kind`: `problem` says what departs from the practice.

    It returns a sentence (the practice is not met), None (met) or False (these facts
    cannot tell); `evidence` names the fact fields shown with the finding.
    """

    fact_kind: str
    severity: str = "warning"
    evidence: tuple[str, ...] = ()

    def problem(self, fact: Fact, t: Thresholds) -> str | bool | None:
        raise NotImplementedError

    def judges(self, fact: Fact, facts: FactIndex) -> bool:
        """Whether this rule is about that fact (all of its kind unless a rule narrows it)."""
        return True

    def judge_facts(self, facts: FactIndex, t: Thresholds) -> list[Judgement]:
        return self.judge_some(facts, t, facts.of(self.fact_kind))

    def judge_some(self, facts: FactIndex, t: Thresholds, some: list[Fact]) -> list[Judgement]:
        """Judgements of `some` facts of the kind (the engine passes those that changed)."""
        out = []
        for f in some:
            if not self.judges(f, facts):
                continue
            problem = self.problem(f, t)
            if problem is False:
                continue
            if not problem:  # met: nothing to say, and nothing to show
                out.append(Judgement({"layer": self.layer, **f.tags}, None))
                continue
            name = " ".join(v for k, v in f.tags.items() if k not in ("vcenter", "kind"))
            out.append(Judgement({"layer": self.layer, **f.tags}, self.severity_of(f, t), f"{name}: {problem}",
                               {k: f.data.get(k) for k in self.evidence}))
        return out

    def severity_of(self, fact: Fact, t: Thresholds) -> str:
        """The severity of a fact's problem (`severity`, unless a rule grades them)."""
        return self.severity


def pct(part: float, whole: float) -> float:
    return part * 100.0 / whole if whole else 0.0


def as_float(value: Any, default: float = 0.0) -> float:
    return float(value) if isinstance(value, NUMBER) and value.__class__ is not bool else default


# --- what a threshold may be set to -----------------------------------------------------

#: the measure a threshold's name says (its words), with the range that measure can take;
#: the first match wins
_MEASURES: tuple[tuple[str, str, float, float], ...] = (
    (r"_per_s$", "a rate per second", 0, 1e12),
    (r"(^|_)pct(_|$)", "a percentage", 0, 100),
    (r"(^|_)ms$", "a number of milliseconds", 0, 3_600_000),
    (r"(^|_)bytes$", "a number of bytes", 0, 2**60),
    (r"(^|_)ratio$", "a ratio", 0, 1e6),
    (r"(^|_)iops$", "a number of I/O operations per second", 0, 1e9),
)


@dataclass(frozen=True)
class Limit:
    """The type and range one threshold accepts, inferred from its name and default."""

    type_: type  # bool, str, int (a count) or float (a measure)
    what: str = ""
    low: float = 0
    high: float = 0

    def accepts(self, value: Any) -> bool:
        if self.type_ in (bool, str):
            return isinstance(value, self.type_)
        if isinstance(value, bool) or not isinstance(value, int if self.type_ is int else NUMBER):
            return False
        return self.low <= value <= self.high  # NaN compares false: refused

    def expected(self) -> str:
        if self.type_ is bool:
            return "true or false"
        if self.type_ is str:
            return "a string"
        return f"{self.what} from {_number(self.low)} to {_number(self.high)}"

    def widest(self, other: Limit) -> Limit:
        """One id, several rules declaring the key: what any of them accepts."""
        if self.type_ is other.type_ or {self.type_, other.type_} == {int, float}:
            type_ = float if float in (self.type_, other.type_) else self.type_
            return Limit(type_, self.what, min(self.low, other.low), max(self.high, other.high))
        return self


def _number(x: float) -> str:
    return f"{int(x):,}" if float(x).is_integer() else f"{x:g}"


def thresholds_of(rule: Rule) -> Thresholds:
    """Every threshold a rule reads: the live rules' persistence keys and its own defaults."""
    return {**LiveRule.defaults, **rule.defaults} if isinstance(rule, LiveRule) else dict(rule.defaults)


def limit(rule: Rule, key: str) -> Limit:
    """What `key` of `rule` accepts: the default's type; for numbers the range of the measure
    the key's name says (`_pct` 0-100, `_ms`, `_per_s`, `_bytes` >= 0), else a count >= 0."""
    default = thresholds_of(rule)[key]
    if isinstance(default, bool | str):
        return Limit(type(default))
    measure = next(((what, low, high) for pattern, what, low, high in _MEASURES if re.search(pattern, key)), None)
    type_ = int if measure is None and isinstance(default, int) else float
    what, low, high = measure or (("a whole number", 0, 1e9) if type_ is int else ("a number", 0, 1e12))
    low, high = rule.limits.get(key, (low, high))
    return Limit(type_, what, low, high)


def order_of(rule: Rule) -> list[tuple[str, str, bool]]:
    """(lower key, higher key, strictly) pairs the rule's thresholds must keep: each warn_X /
    crit_X pair in the order of its defaults (critical above warning where higher is worse,
    below it where lower is worse), then the rule's declared `ordered` pairs."""
    t = thresholds_of(rule)
    out = []
    for key, value in t.items():
        crit = "crit_" + key[len("warn_"):]
        if key.startswith("warn_") and crit in t and is_number(value) and value != t[crit]:
            out.append((key, crit, True) if value < t[crit] else (crit, key, True))
    return out + [(a, b, False) for a, b in rule.ordered]
