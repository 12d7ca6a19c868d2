"""The Findings screen's data: the findings open at the cursor, and those resolved in the window."""

from __future__ import annotations

from dataclasses import dataclass

from db2vtop.agent.core.model import Annotation, Finding, severity_rank
from db2vtop.tui.data import Reader, Status, load_status, open_at


def finding_order(f: Finding) -> tuple:
    return severity_rank(f.severity), f.rule, sorted(f.subject.items())


@dataclass
class FindingsView:
    now_ns: int
    window_s: float
    open: list[Finding]
    resolved: list[Finding]
    collectors: list[Status]
    markers: list[Annotation]


def load_findings(reader: Reader, since: int, now_ns: int) -> FindingsView:
    """Findings open at the cursor's time, and those resolved within the window."""
    every = reader.every_finding(ttl_s=0.0)
    open_ = open_at(every, now_ns)
    resolved = [f for f in every if f.resolved_at is not None and since <= f.resolved_at <= now_ns]
    return FindingsView(now_ns, (now_ns - since) / 1e9, sorted(open_, key=finding_order),
                        sorted(resolved, key=finding_order), load_status(reader, now_ns),
                        reader.annotations(since, now_ns))
