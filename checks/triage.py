"""`db2vtop triage`: one pass over recent history and one fresh look, then findings.

History comes from the store (whatever an agent recorded in the lookback window) and
from collectors that can look back themselves (vCenter keeps an hour of 20 s samples);
every configured source is also read once now. Everything is judged in time order by
the same engine the agent runs, so a triage verdict and a live finding never disagree.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from db2vtop.agent.core.config import Config
from db2vtop.agent.core.model import Fact, Finding, Sample
from db2vtop.agent.store import Store, StoreError
from db2vtop.checks.runner import build_engine
from db2vtop.checks.verdict import RowIndex, stack_verdicts
from db2vtop.collectors.base import BaseCollector

SEVERITY_ORDER = {"critical": 0, "warning": 1, "info": 2}
EXIT_OK, EXIT_WARNING, EXIT_CRITICAL, EXIT_UNKNOWN = 0, 1, 2, 3


@dataclass
class TriageResult:
    generated_at: int
    lookback_s: float
    findings: list[Finding]
    verdicts: list[dict[str, Any]] = field(default_factory=list)
    sources: dict[str, str] = field(default_factory=dict)  # source -> "ok: ..." or the error
    samples: int = 0

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
        if "critical" in open_:
            return EXIT_CRITICAL
        if self.failed_sources:
            return EXIT_UNKNOWN
        if "warning" in open_:
            return EXIT_WARNING
        return EXIT_OK


async def _fresh(c: BaseCollector, lookback_s: float,
                 vms: set[str] | None) -> tuple[list[Sample], list[Fact], str]:
    """One look at a source now (plus its own history where it keeps one)."""
    samples: list[Sample] = []
    facts: list[Fact] = []
    try:
        await asyncio.wait_for(c.start(), c.timeout)
        await asyncio.sleep(c.first_delay)
        facts = await asyncio.wait_for(c.describe(), c.timeout)
        records = await asyncio.wait_for(c.collect(), c.timeout)
        records += await asyncio.wait_for(c.lookback(lookback_s, vms), max(c.timeout, 60.0))
        samples = [r for r in records if isinstance(r, Sample)]
        status = f"ok: {len(samples)} samples, {len(facts)} facts"
    except TimeoutError:
        status = f"error: timed out after {c.timeout:g}s"
    except Exception as e:  # every failure is reported in the result, never raised
        status = f"error: {e}" if str(e) else f"error: {type(e).__name__}"
    finally:
        with contextlib.suppress(Exception):
            await c.close()
    return samples, facts, status


def run_triage(cfg: Config, store_path: Path, lookback_s: float,
               progress: Callable[[str], None] = lambda _m: None, now_ns: int | None = None) -> TriageResult:
    from db2vtop.agent.assemble import build_collectors  # collectors are only built when triage runs

    engine = build_engine(cfg)
    now = now_ns if now_ns is not None else time.time_ns()
    since = now - int(lookback_s * 1e9)
    sources: dict[str, str] = {}
    samples: list[Any] = []
    facts: list[Fact] = []
    if store_path.exists():
        progress(f"reading the last {lookback_s:g}s from {store_path}")
        try:
            with Store(store_path) as store:
                facts += store.facts()
                for m in store.measurements():
                    samples += store.rows(m, since, now)
            sources["store"] = f"ok: {len(samples)} samples"
        except StoreError as e:
            sources["store"] = f"error: {e}"
    collectors = [c for c in build_collectors(cfg) if c.name != "self"]  # no store: no marker inbox
    if collectors:
        progress("collecting now from " + ", ".join(c.name for c in collectors))

        async def gather() -> list[tuple[list[Sample], list[Fact], str]]:
            vms = {s.vm for s in cfg.stack if s.vm} or None  # the stacks' VMs, or all when none is named
            return await asyncio.gather(*(_fresh(c, lookback_s, vms) for c in collectors))

        for c, (s, f, status) in zip(collectors, asyncio.run(gather()), strict=True):
            samples += s
            facts += f
            sources[c.name] = status
    progress(f"checking {len(samples)} samples and {len(facts)} facts")
    engine.feed(facts=facts)
    samples.sort(key=lambda s: s.ts)
    engine.feed(samples)
    changed = {f.key: f for f in engine.changes()}
    for f in engine.open_findings():
        changed[f.key] = f
    findings = sorted(changed.values(), key=lambda f: (f.resolved_at is not None, SEVERITY_ORDER[f.severity],
                                                       f.rule, sorted(f.subject.items())))
    verdicts = [v.to_json() for v in stack_verdicts(RowIndex(samples), cfg.stack, since, now)]
    return TriageResult(now, lookback_s, findings, verdicts, sources=sources, samples=len(samples))


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
            "verdicts": r.verdicts, "sources": r.sources}


def _subject(f: Finding) -> str:
    return " ".join(f"{k}={v}" for k, v in f.subject.items() if k != "layer")


def to_text(r: TriageResult, markdown: bool = False) -> str:
    open_ = [f for f in r.findings if f.resolved_at is None]
    past = [f for f in r.findings if f.resolved_at is not None]
    counts = {s: sum(1 for f in open_ if f.severity == s) for s in SEVERITY_ORDER}
    head = "# db2vtop triage" if markdown else "db2vtop triage"
    lines = [head, "", f"generated {_iso(r.generated_at)}, lookback {r.lookback_s:g}s, {r.samples} samples judged; "
             f"open: {counts['critical']} critical, {counts['warning']} warning, {counts['info']} info", ""]
    for k, v in r.failed_sources.items():
        lines += [("**UNKNOWN**" if markdown else "UNKNOWN") + f": source {k} could not be read ({v}); "
                  "what it would show is not judged", ""]
    for v in r.verdicts:
        blame = f"blame: {v['layer']}" if v["layer"] else "no layer to blame"
        lines += [("## " if markdown else "") + f"Verdict for stack {v['stack']} ({blame}, confidence "
                  f"{v['confidence']}, {v['buckets']} buckets of 20 s)", "", v["summary"], ""]
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
            lines.append(f"{pad}why: {f.why}")
            if f.fix:
                lines.append(f"{pad}fix: {f.fix}")
            lines.append(f"{pad}ref: {'; '.join(f.references)}")
        lines.append("")
    if not r.findings and not r.failed_sources:
        lines += ["No deviation from the documented practices in the lookback window.", ""]
    lines += [("## " if markdown else "") + "Sources", ""]
    lines += [f"- {k}: {v}" for k, v in r.sources.items()] or ["- none"]
    return "\n".join(lines) + "\n"

