"""What a rule is: a practice from the catalog plus the code that judges data against it.

Live rules judge one sample at a time (the engine adds persistence and hysteresis);
static rules judge the current facts as a whole (configuration, inventory). A rule says
which measurements or fact kinds it needs and which config section provides them, so
`db2vtop rules` can tell whether it is observable with the current configuration.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from db2vtop.agent.core.config import StackConfig
from db2vtop.agent.core.model import Fact, FieldValue
from db2vtop.agent.core.store import Row
from db2vtop.checks.catalog import Practice, practices

Thresholds = dict[str, float | int | str | bool]


@dataclass
class Verdict:
    """A rule's judgement of one subject: severity None means the practice is met."""

    subject: dict[str, str]
    severity: str | None
    summary: str = ""
    values: dict[str, FieldValue] = field(default_factory=dict)


class FactIndex:
    """Current facts by kind, for rules that need configuration context."""

    def __init__(self, stacks: Sequence[StackConfig] = ()) -> None:
        self.by_kind: dict[str, dict[tuple, Fact]] = {}
        self.stacks = list(stacks)  # how the layers of each database join (config [[stack]])

    def add(self, facts: Iterable[Fact]) -> set[str]:
        changed = set()
        for f in facts:
            key = tuple(sorted(f.tags.items()))
            known = self.by_kind.setdefault(f.kind, {}).get(key)
            if known is None or known.data != f.data:
                changed.add(f.kind)
            self.by_kind[f.kind][key] = f
        return changed

    def of(self, kind: str) -> list[Fact]:
        return list(self.by_kind.get(kind, {}).values())

    def find(self, kind: str, **tags: str) -> Fact | None:
        """The fact of `kind` whose tags include all of `tags`."""
        for f in self.by_kind.get(kind, {}).values():
            if all(f.tags.get(k) == v for k, v in tags.items()):
                return f
        return None


class Rule:
    id: str
    layer: str
    #: measurement or fact kind -> the config section whose collector provides it
    needs: dict[str, str] = {}
    #: threshold defaults; every key can be overridden per rule and per stack in config
    defaults: Thresholds = {}
    fix: str = ""

    @property
    def practice(self) -> Practice:
        return practices()[self.id]

    @property
    def kind(self) -> str:
        return "live" if isinstance(self, LiveRule) else "static"

    def why(self) -> str:
        p = self.practice
        return f"{p.practice}. Figure: {p.figure}."


class LiveRule(Rule):
    """Judges each sample of one measurement; the engine decides when a condition is sustained."""

    measurement: str
    #: tags of a sample that identify the subject (the entity the finding is about)
    subject_tags: tuple[str, ...] = ()
    defaults: Thresholds = {"samples": 3, "window": 5, "clear_samples": 5}

    def subject(self, row: Row) -> dict[str, str]:
        return {"layer": self.layer, **{k: row.tags[k] for k in self.subject_tags if k in row.tags}}

    def judge(self, row: Row, t: Thresholds, facts: FactIndex) -> Verdict | None:
        """A verdict for this sample, or None when the sample says nothing about the rule."""
        raise NotImplementedError


class StaticRule(Rule):
    """Judges configuration: every call sees all current facts."""

    def judge_facts(self, facts: FactIndex, t: Thresholds) -> list[Verdict]:
        raise NotImplementedError


class PerFactRule(StaticRule):
    """One verdict per fact of `fact_kind`: `problem` says what departs from the practice.

    It returns a sentence (the practice is not met), None (met) or False (these facts
    cannot tell); `evidence` names the fact fields shown with the finding.
    """

    fact_kind: str
    severity: str = "warning"
    evidence: tuple[str, ...] = ()

    def problem(self, fact: Fact, t: Thresholds) -> str | bool | None:
        raise NotImplementedError

    def entities(self, facts: FactIndex) -> list[Fact]:
        return facts.of(self.fact_kind)

    def judge_facts(self, facts: FactIndex, t: Thresholds) -> list[Verdict]:
        out = []
        for f in self.entities(facts):
            problem = self.problem(f, t)
            if problem is False:
                continue
            name = " ".join(v for k, v in f.tags.items() if k not in ("vcenter", "kind"))
            out.append(Verdict({"layer": self.layer, **f.tags}, self.severity if problem else None,
                               f"{name}: {problem}" if problem else "", {k: f.data.get(k) for k in self.evidence}))
        return out


def pct(part: float, whole: float) -> float:
    return part * 100.0 / whole if whole else 0.0


def as_float(value: Any, default: float = 0.0) -> float:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else default
