"""Triage's judgement and report: what agent/gather.py gathered, judged in time order by
the same engine the agent runs, so a triage verdict and a live finding never disagree.

Each finding says when it opened within the lookback and, if its condition ended, when it
resolved (a resolved one does not raise the exit status); one whose entity stopped reporting is
stale since its last sample. Each verdict is the stack's episodes over the lookback
(checks/verdict.py): the one going on now, with its start, and the earlier ones, with the stack's
vCenter events. With nothing to judge (no sample of any layer and no configuration read), triage is
UNKNOWN and says so first.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from db2vtop.agent.core.columns import ColumnSource
from db2vtop.agent.core.config import CoreConfig, StackConfig
from db2vtop.agent.core.events import VCenterEvent, vcenter_events
from db2vtop.agent.core.model import THREAD_MEASUREMENT, Fact, Finding, Severity, severity_rank
from db2vtop.agent.core.source import CachedSource
from db2vtop.agent.core.text import plural
from db2vtop.agent.core.units import format_duration
from db2vtop.checks.catalog import references_of
from db2vtop.checks.culprits import READS as CULPRIT_READS
from db2vtop.checks.culprits import culprit_text, tenants
from db2vtop.checks.evidence import describe
from db2vtop.checks.figures import TABLE
from db2vtop.checks.runner import build_engine
from db2vtop.checks.topology import VM_PLACEMENT, resolve
from db2vtop.checks.verdict import BUCKET_NS, clock, earlier_text, iso, onset_text, stack_verdict

EXIT_OK, EXIT_WARNING, EXIT_CRITICAL, EXIT_UNKNOWN = 0, 1, 2, 3
#: the blamed stacks the first line names (the others counted)
HEADLINE_STACKS = 3
STATUS = ("OK", "WARNING", "CRITICAL", "UNKNOWN")
#: what the layers are judged from: the verdict's figures (the live rules' measurements are the engine's)
_FIGURES = {f.measurement for f in TABLE}


@dataclass
class TriageResult:
    generated_at: int
    lookback_s: float
    findings: list[Finding]
    verdicts: list[dict[str, Any]] = field(default_factory=list)
    sources: dict[str, str] = field(default_factory=dict)  # source -> "ok: ..." or the error
    samples: int = 0
    healthy: int = 0  # stacks judged whose verdict blames no layer in the lookback (left out unless targeted)
    blind: str | None = None  # why nothing could be judged (no layer's data in the lookback)
    threads: list[dict[str, Any]] = field(default_factory=list)  # the recording agents' threads in trouble
    events: list[VCenterEvent] = field(default_factory=list)  # vCenter's events of the lookback (see judge)

    @property
    def failed_sources(self) -> dict[str, str]:
        """Sources that could not be read: what they would have judged is unknown."""
        return {k: v for k, v in self.sources.items() if not v.startswith("ok")}

    @property
    def current(self) -> list[Finding]:
        """Open and current: not resolved, its entity still reporting."""
        return [f for f in self.findings if f.resolved_at is None and f.stale_since is None]

    @property
    def exit_status(self) -> int:
        """Monitoring-plugin order: a known critical outranks a blind spot, which outranks warning/OK.

        An unreadable store hides every subject's history and a failed collector its own subjects, which
        no other source judges (sources do not overlap), so "no deviation" cannot be claimed: UNKNOWN.
        Only current findings count: a resolved condition has ended, a stale one is no longer seen.
        """
        if self.blind is not None:
            return EXIT_UNKNOWN
        now = [f.severity for f in self.current]
        if Severity.CRITICAL in now:
            return EXIT_CRITICAL
        if self.failed_sources:
            return EXIT_UNKNOWN
        if Severity.WARNING in now:
            return EXIT_WARNING
        return EXIT_OK


def kept_fields(cfg: CoreConfig) -> dict[str, frozenset[str] | None]:
    """What triage keeps of each measurement's samples as they arrive: the fields the live rules read, the
    verdict's figures (and the I/O that gates them), what its culprits read and where a VM ran (None: every
    field; an agent's thread states are kept whole)."""
    keep = build_engine(cfg).history_fields()
    wanted = [(f.measurement, {f.field, *f.gate}) for f in TABLE] + [
        (m, set(names)) for m, names in (*VM_PLACEMENT.items(), *CULPRIT_READS.items())]
    for m, names in wanted:
        if m not in keep or keep[m] is not None:
            keep[m] = frozenset(keep.get(m) or frozenset()) | names
    keep[THREAD_MEASUREMENT] = None
    return keep


def judge(cfg: CoreConfig, samples: ColumnSource | Iterable[Any], facts: list[Fact], sources: dict[str, str],
          lookback_s: float, now: int, stacks: list[StackConfig] | None = None, targeted: bool = False,
          recorded: Sequence[Finding] = (), unread: Collection[str] = ()) -> TriageResult:
    """Everything gathered, judged in time order by the engine the agent runs (fed a slice of time at a
    time from the columns the samples were kept in as they came). A verdict for each of
    `stacks` (default: the configured ones); targeted (`--vm`, `--stack`), only those stacks' findings
    count and every verdict is shown, else the configured stacks and those with a layer to blame are
    shown and the healthy inferred ones counted. `recorded`: findings agents stored that this pass did
    not find itself (its own judgement of a rule and subject wins). `unread`: the measurements only sources
    that could not be read now write: their findings are stale once their subject's period has passed since
    its last sample, as the agent would have found them."""
    if not isinstance(samples, ColumnSource):
        kept = ColumnSource(kept_fields(cfg))
        kept.add(samples)
        samples = kept
    engine = build_engine(cfg)
    since = now - int(lookback_s * 1e9)
    engine.feed(facts=facts)
    live = engine.live_measurements()
    quiet = engine.quiet([s for m in live for s in samples.series(m)], samples.column, samples.newest_ts)
    for rows in samples.in_time_order(live, skip=quiet):  # a healthy fleet's series need no judging
        engine.feed(rows)
    engine.mark_stale(now, unread)
    changed = {f.key: f for f in engine.changes()}
    for f in engine.open_findings():
        changed[f.key] = f
    for f in recorded:
        changed.setdefault(f.key, f)
    findings = list(changed.values())
    seen = samples.count(_FIGURES | engine.live_measurements())
    blind = None if seen or facts else (f"nothing to judge in the last {format_duration(lookback_s)}: no guest, "
                                        "VM, host, DB2 or storage data")
    stacks = cfg.stack if stacks is None else stacks
    samples.set_facts(facts)
    source = CachedSource(samples)
    entities = [resolve(source, s, since, now) for s in stacks]
    configured = {s.name for s in cfg.stack}  # asked for by name in the config: always shown
    verdicts = []
    shared: dict = {}  # the figures of a host's series, read once for its VMs' stacks
    for e in entities:
        v = stack_verdict(source, e.stack, since, now, cfg.checks, e, shared=shared)
        verdicts.append(v)
        if v.layer is not None and not any(f.severity != Severity.INFO and f.resolved_at is None
                                           and f.stale_since is None and e.owns(f.subject) for f in findings):
            findings.append(v.as_finding())  # type: ignore[arg-type]  # blamed now: never without a finding
    findings.sort(key=lambda f: (f.resolved_at is not None, f.stale_since is not None, severity_rank(f.severity),
                                 f.rule, sorted(f.subject.items())))
    # a stack with an episode in the lookback is shown, ended or not: an incident that is over is still news
    shown = []
    for v, e in zip(verdicts, entities, strict=True):
        if targeted or v.layer is not None or v.episodes or v.stack in configured:
            v.note_findings(f for f in findings if e.owns(f.subject))
            shown.append(v)
    if targeted:
        findings = [f for f in findings if any(e.owns(f.subject) for e in entities)]
    shown.sort(key=lambda v: (v.layer is None, {"high": 0, "medium": 1, "low": 2}.get(v.confidence, 3), v.stack))
    return TriageResult(now, lookback_s, findings, [v.to_json() for v in shown], sources=sources, samples=seen,
                        healthy=len([v for v in verdicts if v.layer is None and not v.episodes]), blind=blind,
                        threads=threads_in_trouble(samples.rows(THREAD_MEASUREMENT)),
                        events=triage_events(source, since, now, verdicts if targeted else None))


def triage_events(source: CachedSource, since: int, now: int, verdicts: list[Any] | None) -> list[VCenterEvent]:
    """vCenter's events of the lookback: every one, or (`--vm`, `--stack`) those of the stacks asked for."""
    if verdicts is None:
        return vcenter_events(source.annotations(since, now))
    mine = {(e.ts, e.type, e.summary): e for v in verdicts for e in v.events}
    return sorted(mine.values(), key=lambda e: e.ts)


def co_tenants(source: ColumnSource, stacks: list[StackConfig], since: int, now: int, cfg: CoreConfig,
               ) -> tuple[set[str], int]:
    """The VMs the culprits of these stacks' verdicts would rank that nothing gathered has samples of (triage
    of one VM reads only its own hour), and from when: the first episode that needs them."""
    view = CachedSource(source)
    out: set[str] = set()
    start = now
    for st in stacks:
        e = resolve(view, st, since, now)
        for ep in stack_verdict(view, st, since, now, cfg.checks, e).episodes:
            hosts = {h for b in range(ep.start, ep.last, BUCKET_NS) if (h := e.host_at(b))}
            found = tenants(e, [c.kind for c in ep.causes], hosts)
            if found:
                out |= found
                start = min(start, ep.start)
    have = view.by_tag("vsphere_vm", "vm")
    return {vm for vm in out if vm not in have}, start


def threads_in_trouble(samples: Iterable[Any]) -> list[dict[str, Any]]:
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
                        "retries": f.get("retries", 0), "last_error": f.get("last_error", ""), "at": iso(s.ts)})
    return out


def could_not_run(result: TriageResult) -> str | None:
    """Why a triage has nothing to stand on (no data from anywhere), else None."""
    if result.samples == 0 and not any(s.startswith("ok") for s in result.sources.values()):
        errors = "; ".join(f"{k}: {v}" for k, v in result.sources.items()) or "no store and no source configured"
        return f"no data to judge ({errors})"
    return result.blind


def finding_json(f: Finding) -> dict[str, Any]:
    return {"rule": f.rule, "severity": f.severity, "subject": f.subject, "summary": f.summary,
            "evidence": f.evidence, "why": f.why, "fix": f.fix, "references": f.references,
            "first_seen": iso(f.first_seen), "last_seen": iso(f.last_seen), "resolved_at": iso(f.resolved_at),
            "stale_since": iso(f.stale_since)}


def to_json(r: TriageResult) -> dict[str, Any]:
    return {"generated_at": iso(r.generated_at), "lookback_s": r.lookback_s, "status": STATUS[r.exit_status],
            "unknown": r.blind, "failed_sources": r.failed_sources, "findings": [finding_json(f) for f in r.findings],
            "verdicts": r.verdicts, "healthy_stacks": r.healthy, "sources": r.sources, "agent_threads": r.threads,
            "events": [e.to_json() for e in r.events]}


def _subject(f: Finding) -> str:
    return " ".join(f"{k}={v}" for k, v in f.subject.items() if k != "layer")


def _stale_text(stale: Sequence[Finding]) -> str:
    """"1 critical, 2 warning findings stale since 05:05 UTC": those no source renewed, from the oldest."""
    counts = [f"{n} {sev}" for sev in (Severity.CRITICAL, Severity.WARNING)
              if (n := sum(1 for f in stale if f.severity == sev))]
    if not counts:
        return ""
    since = min(f.stale_since for f in stale if f.stale_since is not None)
    return f"{', '.join(counts)} finding{'s' if len(stale) != 1 else ''} stale since {clock(since, True)}"


def headline(r: TriageResult) -> str:
    """The first line: the status and why, for the one line read at 3 a.m. A source that could not be
    read is named in it whatever the status (first when it makes the status UNKNOWN), and so are the
    findings only it could have renewed, stale now."""
    status = STATUS[r.exit_status]
    if r.blind is not None:
        return f"{status}: {r.blind}"
    counts = {s: sum(1 for f in r.current if f.severity == s) for s in Severity}
    parts = [f"{counts['critical']} critical, {counts['warning']} warning open"]
    failed = r.failed_sources
    if failed:
        # a collector's failure first: the store missing is what `triage -c` meets before any agent ran
        (k, v), more = min(failed.items(), key=lambda kv: kv[0] == "store"), len(failed) - 1
        down = f"source {k} could not be read ({v.removeprefix('error: ')})" + (f" (and {more} more)" if more else "")
        if status == "UNKNOWN":
            parts.insert(0, down + "; what it would show is not judged")
        else:
            parts.append(down)
    if stale := _stale_text([f for f in r.findings if f.resolved_at is None and f.stale_since is not None]):
        parts.insert(1 if status == "UNKNOWN" and failed else len(parts), stale)
    blamed = [v for v in r.verdicts if v["layer"]]
    for v in blamed[:HEADLINE_STACKS]:
        text = f"stack {v['stack']}: {v['layer']} {onset_text(v)}".rstrip()
        if v.get("culprits"):
            c = v["culprits"][0]
            text += f", {c['vm'] or c['lun']} {c['share_pct']:.0f} % of the {c['resource']}"
        parts.append(text)
    if len(blamed) > HEADLINE_STACKS:
        parts.append(f"{len(blamed) - HEADLINE_STACKS} more stacks blamed")
    return f"{status}: {'; '.join(parts)}"


def verdict_lines(v: dict[str, Any], now: int, markdown: bool = False) -> list[str]:
    """A verdict as text: its headline, the causes beside it, the earlier episodes and what is not known."""
    blame = f"blame: {v['layer']} {onset_text(v)}".rstrip() if v["layer"] else "no layer to blame now"
    where = f"; VM {v['vm']} of vCenter {v['vcenter']}" if v.get("vm") and v.get("vcenter") else ""
    lines = [("## " if markdown else "") + f"Verdict for stack {v['stack']} ({blame}, confidence "
             f"{v['confidence']}, {v['buckets']} buckets of 20 s{where})", "", v["summary"]]
    lines += [f"  also: {c['layer']}: {c['summary']}" for c in v["causes"][1:]]
    if v.get("culprits"):
        lines.append("  culprits: " + "; ".join(culprit_text(c) for c in v["culprits"]))
    earlier = earlier_text(v["episodes"], now)
    if earlier and v["layer"]:  # with nothing blamed now, the summary lists them already
        lines.append(f"  earlier: {earlier}")
    if v.get("not_known"):
        lines.append("  not known: " + "; ".join(v["not_known"]))
    events = v.get("events") or []
    lines += [f"  vCenter {e['time'].replace('+00:00', 'Z')} {e['summary']}" for e in events[-EVENTS_LISTED:]]
    if len(events) > EVENTS_LISTED:
        lines.append(f"  (and {len(events) - EVENTS_LISTED} older vCenter events: --format json has them all)")
    return [*lines, ""]


#: vCenter events listed in the text, under a verdict and on their own (the JSON has them all)
EVENTS_LISTED = 20


def event_lines(r: TriageResult, markdown: bool) -> list[str]:
    """The newest vCenter events of the lookback no verdict above listed, oldest first: what else changed."""
    listed = {(e["time"], e["type"], e["summary"]) for v in r.verdicts for e in v.get("events") or ()}
    rest = [e for e in r.events if (e.to_json()["time"], e.type, e.summary) not in listed]
    if not rest:
        return []
    shown = rest[-EVENTS_LISTED:]
    more = f" (the newest {len(shown)} of {len(rest)})" if len(rest) > len(shown) else ""
    lines = [("## " if markdown else "") + f"Other vCenter events{more}", ""]
    lines += [f"- {iso(e.ts)} {e.kind}: {e.summary}" for e in shown]
    return [*lines, ""]


def _finding_lines(f: Finding, markdown: bool) -> list[str]:
    sev = f.severity.upper()
    pad = "  " if markdown else "    "
    head = (f"- **{sev}** `{f.rule}` ({f.subject.get('layer')}: {_subject(f)}): {f.summary}" if markdown
            else f"[{sev}] {f.rule} ({f.subject.get('layer')}: {_subject(f)}): {f.summary}")
    samples = plural(f.evidence.get("samples", 1), "sample")
    if f.resolved_at is not None:
        when = f"opened {iso(f.first_seen)}, resolved {iso(f.resolved_at)}, {samples}"
    elif f.stale_since is not None:
        when = f"opened {iso(f.first_seen)}, stale since {iso(f.stale_since)}: no sample of it since"
    else:
        when = f"open since {iso(f.first_seen)}, last seen {iso(f.last_seen)}, {samples}"
    lines = [head, f"{pad}{when}"]
    if evidence := describe(f.evidence):
        lines.append(f"{pad}evidence: {evidence}")
    lines.append(f"{pad}why: {f.why}")
    if f.fix:
        lines.append(f"{pad}fix: {f.fix}")
    return [*lines, f"{pad}ref: {'; '.join(references_of(f.rule, f.references))}"]


def to_text(r: TriageResult, markdown: bool = False) -> str:
    current = r.current
    stale = [f for f in r.findings if f.resolved_at is None and f.stale_since is not None]
    past = [f for f in r.findings if f.resolved_at is not None]
    counts = {s: sum(1 for f in current if f.severity == s) for s in Severity}
    lines = [("# " if markdown else "") + f"db2vtop triage: {headline(r)}", "",
             f"generated {iso(r.generated_at)}, lookback {r.lookback_s:g}s, {r.samples} samples judged; "
             f"open: {counts['critical']} critical, {counts['warning']} warning, {counts['info']} info", ""]
    for k, v in r.failed_sources.items():
        lines += [("**UNKNOWN**" if markdown else "UNKNOWN") + f": source {k} could not be read ({v}); "
                  "what it would show is not judged", ""]
    if r.healthy:
        lines += [f"{plural(r.healthy, 'stack')} with no layer to blame in the lookback", ""]
    for v in r.verdicts:
        lines += verdict_lines(v, r.generated_at, markdown)
    lines += event_lines(r, markdown)
    for title, group in (("Findings", current), ("Stale: open when their entity stopped reporting", stale),
                         ("Resolved within the window", past)):
        if not group:
            continue
        lines += [("## " if markdown else "") + title, ""]
        for f in group:
            lines += _finding_lines(f, markdown)
        lines.append("")
    if not r.findings and not r.failed_sources and r.blind is None:
        lines += ["No deviation from the documented practices in the lookback window.", ""]
    lines += [("## " if markdown else "") + "Sources", ""]
    lines += [f"- {k}: {v}" for k, v in r.sources.items()] or ["- none"]
    if r.threads:  # the agent that recorded the history had trouble keeping it
        lines += ["", ("## " if markdown else "") + "Agent threads in trouble", ""]
        lines += [f"- {t['agent']} {t['thread']}: {t['state']}, {t['set_aside']} set aside, {t['retries']} retries"
                  + (f"; last: {t['last_error']}" if t["last_error"] else "") + f" (at {t['at']})" for t in r.threads]
    return "\n".join(lines) + "\n"
