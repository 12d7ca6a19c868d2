"""A live rule declared as a table: one field against warn/critical thresholds."""

from __future__ import annotations

from db2vtop.agent.core.source import Row
from db2vtop.checks.rule import FactIndex, Judgement, LiveRule, Screen, Thresholds, as_float, is_number


class ThresholdRule(LiveRule):
    """`field` of `measurement` against defaults[warn_key] / defaults[crit_key].

    `gate` = (field, threshold key): the sample only counts when that field reaches the
    threshold (Harvest's minimum-IOPS rule: an idle LUN's latency means nothing).
    `where` filters on tags (e.g. kind = "xtremio").
    """

    field: str
    label: str
    unit: str = ""
    warn_key: str = "warn"
    crit_key: str = "crit"
    higher_is_worse: bool = True
    gate: tuple[str, str] | None = None
    where: dict[str, str] = {}

    def screen(self, t: Thresholds) -> Screen:
        return ((self.field, as_float(t[self.warn_key]), not self.higher_is_worse),)

    def judge(self, row: Row, t: Thresholds, facts: FactIndex) -> Judgement | None:
        value = row.fields.get(self.field)
        if not is_number(value):
            return None
        if any(row.tags.get(k) != v for k, v in self.where.items()):
            return None
        if self.gate is not None and as_float(row.fields.get(self.gate[0])) < as_float(t[self.gate[1]]):
            return None
        warn, crit = as_float(t[self.warn_key]), as_float(t.get(self.crit_key, float("inf")) if
                                                          self.higher_is_worse else t.get(self.crit_key, float("-inf")))
        v = float(value)
        if self.higher_is_worse:
            severity = "critical" if v >= crit else "warning" if v >= warn else None
        else:
            severity = "critical" if v <= crit else "warning" if v <= warn else None
        what = " ".join(f"{k}={row.tags[k]}" for k in self.subject_tags if k in row.tags)
        return Judgement(self.subject(row), severity, f"{what}: {self.label} {v:.4g}{self.unit}",
                       {self.field: v, **({self.gate[0]: row.fields.get(self.gate[0])} if self.gate else {})})
