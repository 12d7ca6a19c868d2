"""Severity is defined once (agent/core/model.py) and every consumer orders by it."""

from db2vtop.agent.core.model import Finding, Severity, severity_rank, worse
from db2vtop.agent.core.store import Store
from db2vtop.tui.data import worst


def finding(severity: str, rule: str = "balloon-zero", ts: int = 1) -> Finding:
    return Finding(rule, severity, {"layer": "vm", "vm": rule}, "summary", {}, "why", "fix", [], ts, ts)


def test_order_worse_and_unknown_words():
    assert [s.value for s in sorted(Severity, key=severity_rank)] == ["critical", "warning", "info"]
    assert worse("info", "critical") == worse("critical", "warning") == "critical"
    assert worse(None, "info") == "info" and worse("warning", None) == "warning" and worse(None, None) is None
    assert severity_rank("bogus") > severity_rank("info") and severity_rank(None) == severity_rank("bogus")


def test_a_stored_finding_keeps_the_plain_word_and_its_order(store_path):
    with Store(store_path, writer=True) as w:
        w.write(findings=[finding(Severity.INFO, "a"), finding(Severity.CRITICAL, "b"), finding("warning", "c")])
    with Store(store_path) as r:
        stored = r.findings()
    assert {f.rule: f.severity for f in stored} == {"a": "info", "b": "critical", "c": "warning"}
    assert worst(stored).rule == "b"
