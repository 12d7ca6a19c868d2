"""Triage's judgement and report: what agent/gather.py gathered, judged in time order by
the same engine the agent runs, so a triage verdict and a live finding never disagree."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from db2vtop.agent.core.config import Config, StackConfig
from db2vtop.agent.core.model import THREAD_MEASUREMENT, Fact, Finding, Severity, severity_rank
from db2vtop.agent.core.source import CachedSource, MemorySource
from db2vtop.checks.catalog import references_of
from db2vtop.checks.evidence import describe
from db2vtop.checks.runner import build_engine
from db2vtop.checks.topology import resolve
from db2vtop.checks.verdict import stack_verdict

EXIT_OK, EXIT_WARNING, EXIT_CRITICAL, EXIT_UNKNOWN = 0, 1, 2, 3


@dataclass
class TriageResult:
    generated_at: int
    lookback_s: float
    findings: list[Finding]
    verdicts: list[dict[str, Any]] = field(default_factory=list)
    sources: dict[str, str] = field(default_factory=dict)  # source -> "ok: ..." or the error
    samples: int = 0
    healthy: int = 0  # stacks judged whose verdict blames no layer (left out of `verdicts` unless targeted)
    threads: list[dict[str, Any]] = field(default_factory=list)  # the recording agents' threads in trouble

    @property
    def failed_sources(self) -> dict[str, str]:
        """Sources that could not be read: what they would have judged is unknown."""
        return {k: v for k, v in self.sources.items() if not v.startswith("ok")}

    @property
    def exit_status(self) -> int:
        """Monitoring-plugin order: a known critical outranks a blind spot, which outranks warning/OK.

        An unreadable store hides every subject's history and a failed collector its own subjects, which
        no other source judges (sources do not overlap), so "no deviation" cannot be claimed: UNKNOWN.
        """
        open_ = [f.severity for f in self.findings if f.resolved_at is None]
        if Severity.CRITICAL in open_:
            return EXIT_CRITICAL
        if self.failed_sources:
            return EXIT_UNKNOWN
        if Severity.WARNING in open_:
            return EXIT_WARNING
        return EXIT_OK


def judge(cfg: Config, samples: list[Any], facts: list[Fact], sources: dict[str, str], lookback_s: float,
          now: int, stacks: list[StackConfig] | None = None, targeted: bool = False,
          recorded: Sequence[Finding] = ()) -> TriageResult:
    """Everything gathered, judged in time order by the engine the agent runs. A verdict for each of
    `stacks` (default: the configured ones); targeted (`--vm`, `--stack`), only those stacks' findings
    count and every verdict is shown, else the configured stacks and those with a layer to blame are
    shown and the healthy inferred ones counted. `recorded`: findings agents stored that this pass did
    not find itself (its own judgement of a rule and subject wins)."""
    engine = build_engine(cfg)
    since = now - int(lookback_s * 1e9)
    engine.feed(facts=facts)
    samples.sort(key=lambda s: s.ts)
    engine.feed(samples)
    changed = {f.key: f for f in engine.changes()}
    for f in engine.open_findings():
        changed[f.key] = f
    for f in recorded:
        changed.setdefault(f.key, f)
    findings = sorted(changed.values(), key=lambda f: (f.resolved_at is not None, severity_rank(f.severity),
                                                       f.rule, sorted(f.subject.items())))
    stacks = cfg.stack if stacks is None else stacks
    source = CachedSource(MemorySource(samples, facts))
    entities = [resolve(source, s, since, now) for s in stacks]
    judged = [stack_verdict(source, e.stack, since, now, cfg.checks, e) for e in entities]
    if targeted:
        findings = [f for f in findings if any(e.owns(f.subject) for e in entities)]
    configured = {s.name for s in cfg.stack}  # asked for by name in the config: always shown
    shown = [v for v in judged if targeted or v.layer is not None or v.stack in configured]
    shown.sort(key=lambda v: ({"high": 0, "medium": 1, "low": 2}.get(v.confidence, 3), v.stack))
    verdicts = [v.to_json() for v in shown]
    return TriageResult(now, lookback_s, findings, verdicts, sources=sources, samples=len(samples),
                        healthy=len([v for v in judged if v.layer is None]), threads=threads_in_trouble(samples))


def threads_in_trouble(samples: list[Any]) -> list[dict[str, Any]]:
    """The newest `db2vtop_thread` state of each agent's thread that is not clean (retrying, failed, or
    records set aside): what the history the store or InfluxDB holds may be missing, and why."""
    newest: dict[tuple[str, str], Any] = {}
    for s in samples:
        if s.measurement == THREAD_MEASUREMENT:
            newest[(s.tags.get("agent", ""), s.tags.get("thread", ""))] = s  # samples are in time order
    out = []
    for (agent, thread), s in sorted(newest.items()):
        f = s.fields
        if f.get("state", "ok") != "ok" or f.get("set_aside", 0):
            out.append({"agent": agent, "thread": thread, "state": f.get("state"), "set_aside": f.get("set_aside", 0),
                        "retries": f.get("retries", 0), "last_error": f.get("last_error", ""), "at": _iso(s.ts)})
    return out


def could_not_run(result: TriageResult) -> str | None:
    """Why a triage has nothing to stand on (no data from anywhere), else None."""
    if result.samples == 0 and not any(s.startswith("ok") for s in result.sources.values()):
        errors = "; ".join(f"{k}: {v}" for k, v in result.sources.items()) or "no store and no source configured"
        return f"no data to judge ({errors})"
    return None


def _iso(ns: int | None) -> str | None:
    return None if ns is None else datetime.fromtimestamp(ns / 1e9, UTC).isoformat(timespec="seconds")


def finding_json(f: Finding) -> dict[str, Any]:
    return {"rule": f.rule, "severity": f.severity, "subject": f.subject, "summary": f.summary,
            "evidence": f.evidence, "why": f.why, "fix": f.fix, "references": f.references,
            "first_seen": _iso(f.first_seen), "last_seen": _iso(f.last_seen), "resolved_at": _iso(f.resolved_at)}


def to_json(r: TriageResult) -> dict[str, Any]:
    return {"generated_at": _iso(r.generated_at), "lookback_s": r.lookback_s,
            "status": ("OK", "WARNING", "CRITICAL", "UNKNOWN")[r.exit_status],
            "failed_sources": r.failed_sources, "findings": [finding_json(f) for f in r.findings],
            "verdicts": r.verdicts, "healthy_stacks": r.healthy, "sources": r.sources, "agent_threads": r.threads}


def _subject(f: Finding) -> str:
    return " ".join(f"{k}={v}" for k, v in f.subject.items() if k != "layer")


def to_text(r: TriageResult, markdown: bool = False) -> str:
    open_ = [f for f in r.findings if f.resolved_at is None]
    past = [f for f in r.findings if f.resolved_at is not None]
    counts = {s: sum(1 for f in open_ if f.severity == s) for s in Severity}
    head = "# db2vtop triage" if markdown else "db2vtop triage"
    lines = [head, "", f"generated {_iso(r.generated_at)}, lookback {r.lookback_s:g}s, {r.samples} samples judged; "
             f"open: {counts['critical']} critical, {counts['warning']} warning, {counts['info']} info", ""]
    for k, v in r.failed_sources.items():
        lines += [("**UNKNOWN**" if markdown else "UNKNOWN") + f": source {k} could not be read ({v}); "
                  "what it would show is not judged", ""]
    if r.healthy:
        lines += [f"{r.healthy} stack(s) judged healthy: no layer to blame", ""]
    for v in r.verdicts:
        blame = f"blame: {v['layer']}" if v["layer"] else "no layer to blame"
        where = f"; VM {v['vm']} of vCenter {v['vcenter']}" if v.get("vm") and v.get("vcenter") else ""
        lines += [("## " if markdown else "") + f"Verdict for stack {v['stack']} ({blame}, confidence "
                  f"{v['confidence']}, {v['buckets']} buckets of 20 s{where})", "", v["summary"], ""]
    for title, group in (("Findings", open_), ("Resolved within the window", past)):
        if not group:
            continue
        lines += [("## " if markdown else "") + title, ""]
        for f in group:
            sev = f.severity.upper()
            lines.append(f"- **{sev}** `{f.rule}` ({f.subject.get('layer')}: {_subject(f)}): {f.summary}" if markdown
                         else f"[{sev}] {f.rule} ({f.subject.get('layer')}: {_subject(f)}): {f.summary}")
            pad = "  " if markdown else "    "
            lines.append(f"{pad}seen {_iso(f.first_seen)} .. {_iso(f.last_seen)}, "
                         f"{f.evidence.get('samples', 1)} samples")
            if evidence := describe(f.evidence):
                lines.append(f"{pad}evidence: {evidence}")
            lines.append(f"{pad}why: {f.why}")
            if f.fix:
                lines.append(f"{pad}fix: {f.fix}")
            lines.append(f"{pad}ref: {'; '.join(references_of(f.rule, f.references))}")
        lines.append("")
    if not r.findings and not r.failed_sources:
        lines += ["No deviation from the documented practices in the lookback window.", ""]
    lines += [("## " if markdown else "") + "Sources", ""]
    lines += [f"- {k}: {v}" for k, v in r.sources.items()] or ["- none"]
    if r.threads:  # the agent that recorded the history had trouble keeping it
        lines += ["", ("## " if markdown else "") + "Agent threads in trouble", ""]
        lines += [f"- {t['agent']} {t['thread']}: {t['state']}, {t['set_aside']} set aside, {t['retries']} retries"
                  + (f"; last: {t['last_error']}" if t["last_error"] else "") + f" (at {t['at']})" for t in r.threads]
    return "\n".join(lines) + "\n"

