"""What pages: the alerts a moment's verdicts and open findings make (docs/alerts.md).

One alert per stack episode — the layer a verdict blames now, since its onset — and one per critical finding no
episode carries. An episode of a shared layer is one alert for every stack it slows: an array or a datastore
that is slow (the storage layers) is one alert naming the VMs behind it, a host that starves them (CPU, memory,
its queues) one alert naming the VMs on it; an episode of a stack's own layers (its VM, guest, DB2) is that
stack's. So an alert's identity (`key`, and its labels, which are Alertmanager's identity) never holds the list
of VMs, which grows and shrinks while the trouble lasts: the VMs are in its annotations and triage command.

This module only judges; agent/sinks/alerts.py keeps the alerts over time (a condition that clears is resolved
once it has stayed clear, so a flapping one pages once) and delivers them.
"""

from __future__ import annotations

import hashlib
import shlex
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from db2vtop.agent.core.model import Finding, Severity, canonical_tags
from db2vtop.checks.culprits import culprit_text
from db2vtop.checks.figures import ROLES
from db2vtop.checks.rule import LiveRule
from db2vtop.checks.rules import all_rules
from db2vtop.checks.topology import StackEntities
from db2vtop.checks.verdict import KINDS, StackVerdict, iso

EPISODE, FINDING = "DB2StackEpisode", "DB2CriticalFinding"
#: the labels every alert may carry (Alertmanager's identity: none of them changes while an alert lasts)
LABELS = ("alertname", "severity", "stack", "vm", "vcenter", "host", "layer", "rule", "datastore", "array")
#: the verdict's layers whose trouble is shared by every stack on the entity blamed
SHARED = ("host", "storage", "storage-network")
SEVERITIES = (Severity.CRITICAL.value, Severity.WARNING.value)
_VERDICT_REFS = ("db2vtop documentation, docs/checks.md, The verdict",
                 "VMware KB 1008205, Using esxtop to identify storage performance issues for ESX/ESXi")
#: live rules whose figures the verdict's chains read: a critical finding of one is the episode's to page
_READ = {fig.measurement for figs in ROLES.values() for fig in figs}
_CARRIED = frozenset(r.id for r in all_rules() if isinstance(r, LiveRule) and r.measurement in _READ)


@dataclass
class Alert:
    """One alert at one moment: what a receiver is told (labels and annotations as Alertmanager takes them)."""

    key: str  # its identity over time
    labels: dict[str, str]
    annotations: dict[str, str]
    starts_at: int  # ns: the episode's onset, the finding's first sample
    vms: list[str] = field(default_factory=list)
    stacks: list[str] = field(default_factory=list)

    @property
    def severity(self) -> str:
        return self.labels["severity"]

    @property
    def layer(self) -> str:
        return self.labels.get("layer", "")

    @property
    def fingerprint(self) -> str:
        """A short stable id of its identity (the webhook's `fingerprint`)."""
        return hashlib.sha256(self.key.encode()).hexdigest()[:16]

    def digest(self) -> tuple:
        """What a receiver is told again when it changes: the labels, the VMs and stacks it names."""
        return tuple(sorted(self.labels.items())), tuple(self.vms), tuple(self.stacks)

    def to_json(self) -> dict[str, Any]:
        return {"key": self.key, "fingerprint": self.fingerprint, "labels": self.labels,
                "annotations": self.annotations, "startsAt": iso_ms(self.starts_at), "vms": self.vms,
                "stacks": self.stacks}

    @classmethod
    def from_json(cls, doc: Mapping[str, Any], starts_at: int) -> Alert:
        return cls(str(doc["key"]), dict(doc["labels"]), dict(doc["annotations"]), starts_at,
                   list(doc.get("vms") or ()), list(doc.get("stacks") or ()))


def iso_ms(ns: int | None) -> str | None:
    """RFC 3339 UTC to the millisecond, as Alertmanager writes its times."""
    if ns is None:
        return None
    text = iso(ns)
    assert text is not None
    return text.replace("+00:00", f".{ns // 10**6 % 1000:03d}Z")


def triage_command(vms: Iterable[str], stacks: Iterable[str] = ()) -> str:
    """The command that shows the rest: one `--vm` per VM, else one `--stack` per stack."""
    vms, stacks = sorted(set(vms)), sorted(set(stacks))
    args = [a for vm in vms for a in ("--vm", vm)] or [a for s in stacks for a in ("--stack", s)]
    return shlex.join(["db2vtop", "triage", *args])


def _blamed(v: StackVerdict, ent: StackEntities) -> tuple[str, str, dict[str, str]]:
    """(what the episode blames, its name, the labels naming it) for a verdict blaming a layer now."""
    layer = v.layer or ""
    vcenter = {"vcenter": ent.vcenter} if ent.vcenter else {}
    if layer in ("storage", "storage-network"):
        if ent.arrays:
            name = ",".join(sorted(ent.arrays))
            return "array", name, {"array": name}
        stores = sorted({ds for ds in ent.luns.values() if ds}) or sorted(ent.luns)
        if stores:
            name = ",".join(stores)
            return "datastore", name, {**vcenter, "datastore": name}
    if layer in SHARED:
        host = ent.host_at(v.until) or ent.host
        if host:
            return "host", host, {**vcenter, "host": host}
    own = {**vcenter, "stack": v.stack}
    if ent.vm:
        own["vm"] = ent.vm
    return "stack", v.stack, own


def _verdict_text(v: StackVerdict, key: str) -> list[dict[str, Any]]:
    """The verdict's `culprits` or `events` when it carries them (docs: the triage JSON), else none."""
    found = v.to_json().get(key)
    return [x for x in found if isinstance(x, dict)] if isinstance(found, list) else []


def _culprit(items: Sequence[dict[str, Any]]) -> str:
    """The first three culprits as triage lists them: `etl-7 (esx12) 72.0 % of the CPU of esx12, 59.9 GHz`."""
    more = f" (+{len(items) - 3} more)" if len(items) > 3 else ""
    return "; ".join(culprit_text(c) for c in items[:3]) + more


def _share(c: dict[str, Any]) -> float:
    share = c.get("share_pct")
    return float(share) if isinstance(share, int | float) else 0.0


def _merged(items: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The culprits of several stacks' verdicts, each co-tenant of a resource once (the ten VMs of a slow
    datastore each rank the same co-tenants): its largest share kept, the largest first."""
    best: dict[tuple[Any, Any, Any], dict[str, Any]] = {}
    for c in items:
        key = (c.get("vcenter"), c.get("vm") or c.get("lun"), c.get("resource"))
        if key not in best or _share(c) > _share(best[key]):
            best[key] = c
    return sorted(best.values(), key=lambda c: -_share(c))


def _events(items: Sequence[dict[str, Any]]) -> str:
    shown = [f"{e.get('time') or ''} {e.get('summary') or e.get('type') or ''}".strip() for e in items[-3:]]
    more = f" (+{len(items) - 3} earlier)" if len(items) > 3 else ""
    return "; ".join(shown) + more


def episode_alerts(judged: Iterable[tuple[StackVerdict, StackEntities]]) -> dict[str, Alert]:
    """One alert per episode going on now: the verdicts blaming one shared entity make one alert."""
    groups: dict[str, list[tuple[StackVerdict, StackEntities, dict[str, str]]]] = {}
    for v, ent in judged:
        if v.layer is None or v.since is None:
            continue
        kind, name, labels = _blamed(v, ent)
        scope = "" if kind == "array" else ent.vcenter or ""  # host, datastore and VM names are a vCenter's
        groups.setdefault(f"episode {v.layer} {kind}={scope}/{name}", []).append((v, ent, labels))
    out = {}
    for key, members in groups.items():
        members.sort(key=lambda m: (m[0].since or 0, m[0].stack))
        first, ent, named = members[0]
        vms = sorted({e.vm for _, e, _ in members if e.vm})
        stacks = sorted({v.stack for v, _, _ in members})
        severity = Severity.CRITICAL if any(v.confidence in ("high", "medium") for v, _, _ in members) \
            else Severity.WARNING
        culprits = _merged([c for v, _, _ in members for c in _verdict_text(v, "culprits")])
        events = list({canonical_tags({k: str(x) for k, x in e.items()}): e  # one event of several stacks: once
                       for v, _, _ in members for e in _verdict_text(v, "events")}.values())
        events.sort(key=lambda e: str(e.get("time") or ""))
        label = KINDS[first.causes[0].kind][1] if first.causes else first.layer
        who = f"{len(stacks)} stacks ({', '.join(vms or stacks)})" if len(stacks) > 1 else \
            f"stack {first.stack}" + (f" (VM {ent.vm})" if ent.vm else "")
        labels = {"alertname": EPISODE, "severity": severity.value, "layer": first.layer or "",
                  "rule": "stack-verdict", **named}
        out[key] = Alert(key, labels, {
            "summary": f"{label} slows {who}: {first.summary}",
            "since": iso(min(v.since or 0 for v, _, _ in members)) or "",
            "culprit": _culprit(culprits), "events": _events(events),
            "fix": "Follow the chain: the layer named is the first that adds most of the time; "
                   + (first.causes[0].summary if first.causes else ""),
            "reference": "; ".join(_VERDICT_REFS), "triage": triage_command(vms, stacks),
            "vms": ", ".join(vms), "stacks": ", ".join(stacks)},
            min(v.since or 0 for v, _, _ in members), vms, stacks)
    return out


def finding_alerts(findings: Iterable[Finding], judged: Sequence[tuple[StackVerdict, StackEntities]],
                   stack_of_vm: Mapping[tuple[str | None, str], str]) -> dict[str, Alert]:
    """One alert per open, current critical finding that no episode going on now carries (a live rule whose
    figures the verdict reads, on an entity of a stack whose verdict blames a layer now)."""
    blaming = [ent for v, ent in judged if v.layer is not None]
    out = {}
    for f in findings:
        if f.severity != Severity.CRITICAL or f.resolved_at is not None or f.stale_since is not None:
            continue
        if f.rule in _CARRIED and any(ent.owns(f.subject) for ent in blaming):
            continue
        subject = f.subject
        vm, vcenter = subject.get("vm"), subject.get("vcenter")
        stack = stack_of_vm.get((vcenter, vm)) or stack_of_vm.get((None, vm)) if vm else None
        labels = {"alertname": FINDING, "severity": Severity.CRITICAL.value, "layer": subject.get("layer", ""),
                  "rule": f.rule, **{k: subject[k] for k in ("vcenter", "vm", "host") if subject.get(k)}}
        if stack:
            labels["stack"] = stack
        entity = ", ".join(f"{k} {v}" for k, v in sorted(subject.items()) if k != "layer")
        key = "finding " + f.key
        out[key] = Alert(key, labels, {
            "summary": f"{f.rule} is critical on {entity}: {f.summary}", "since": iso(f.first_seen) or "",
            "culprit": "", "events": "", "fix": f.fix, "reference": "; ".join(f.references),
            "triage": triage_command([vm] if vm else [], [stack] if stack else []),
            "vms": vm or "", "stacks": stack or ""}, f.first_seen, [vm] if vm else [], [stack] if stack else [])
    return out
