"""The cross-layer verdict: for one stack, which layer is to blame now, since when, for what else,
and what happened earlier in the window.

Every layer is read on the same 20 s buckets of the window, and each bucket is judged on its own
against the levels of three chains, from the database down:

- memory: host swapping (the VM's or the host's swap-in, or the VM's swapped memory growing),
  ballooning that pushes the guest into swap, and the host reclaiming the VM's memory at all (by its own
  counters a balloon or balloon target, or memory in host swap; without them, its host in the hard memory
  state while the VM's memory is not reserved whole), a cause even where no guest or DB2 data shows its
  effect;
- I/O: DB2 log/read waits ← guest await ← VMDK latency ← host KAVG/QAVG and DAVG ← array LUN
  latency, walked where DB2 waits on I/O (where it does not report, from the layers below): the
  hypervisor's queue (KAVG/QAVG/QUED), the path between host and array (DAVG far above the array's
  own latency), the array, or the guest's own queue;
- CPU: ready time per vCPU, co-stop, guest steal;

and lock waits that take DB2's time while no layer below shows anything are the application's.
Every cause a bucket shows counts; the bucket blames the first by rank: by how much of DB2's time
(or of the VM's) each explains when that is known for all of them, else by how far past its level
each is (memory first: there any amount is a deviation).

Consecutive buckets that blame the same layer make an episode (`gap_buckets` buckets between two
runs of one layer, empty or blaming another, are tolerated; an episode lasts at least
`episode_buckets`). Each episode's chains are walked again on its own figures, the mean and peak
over the episode rather than the window; its causes are every one its buckets show (in at least
`episode_buckets` of them), ranked. The headline is the episode still going at the window's end,
with its start (`since`); the others are earlier episodes. When none is going on, the verdict says
what is known and what is not, never "healthy" by default: a stack without DB2 data says so.

The stack's vCenter events in the window (checks/events.py) come with the verdict, and each episode
names the newest of them at or before its onset: what changed at that minute.

Each episode names its culprits (checks/culprits.py): the co-tenants of what its causes contend for, ranked
by their share of it, the first named in its conclusion.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from statistics import fmean
from typing import Any

from db2vtop.agent.core.cadence import is_stale
from db2vtop.agent.core.config import StackConfig
from db2vtop.agent.core.events import VCenterEvent
from db2vtop.agent.core.model import Finding, Severity
from db2vtop.agent.core.source import Series, Source, derive
from db2vtop.agent.core.units import format_duration
from db2vtop.checks.culprits import RESOURCE_OF, Culprit, clause, culprits
from db2vtop.checks.events import after_text, nearest_before, stack_events
from db2vtop.checks.figures import COMBINE, LAYER_TITLES, ROLES, Figure
from db2vtop.checks.rule import LiveRule
from db2vtop.checks.rules import all_rules
from db2vtop.checks.thresholds import Overrides, verdict_levels
from db2vtop.checks.topology import StackEntities, resolve

BUCKET_NS = 20 * 10**9
BUCKET_S = BUCKET_NS / 1e9
#: entities whose series count only while the VM ran on their host (vMotion)
PLACED = ("host", "lun", "datastore")
Values = dict[str, float | None]  # role -> its value in a bucket, or its mean over buckets

#: the layer each cause blames, how an earlier episode of it is named, and its conclusion
KINDS: dict[str, tuple[str, str, str]] = {
    "host-swap": ("host", "host swapping", "the host is swapping VM memory: host memory is overcommitted"),
    "balloon": ("vm", "ballooning into guest swap",
                "ballooning pushes DB2 memory into guest swap: reserve the VM's memory"),
    "host-memory": ("host", "host memory pressure",
                    "the host is short of memory and reclaims the VM's: reserve the DB VM's memory, move VMs off "
                    "the host"),
    "hypervisor-queue": ("host", "queueing in the hypervisor", "queueing in the hypervisor"),
    "fabric": ("storage-network", "a slow path between host and array",
               "the path between host and array (fabric, HBA, multipathing): the array answers fast, "
               "the host sees it slow"),
    "array": ("storage", "a slow array", "the array is slow"),
    "guest-queue": ("guest", "queueing in the guest", "queueing inside the guest (device queue depth, I/O scheduler)"),
    "db2-io": ("db2", "DB2 waiting on I/O", "DB2 waits on I/O; no layer below it is monitored"),
    "ready": ("host", "host CPU contention", "CPU contention on the host: the VM waits for physical CPUs"),
    "costop": ("vm", "co-stop (too many vCPUs)", "too many vCPUs for the VM's work (co-scheduling stops)"),
    "steal": ("host", "host CPU contention (guest steal)", "CPU contention on the host (the guest sees steal)"),
    "lock": ("db2", "lock contention", "lock contention in the application, the infrastructure is not the cause"),
}
_ORDER = {k: i for i, k in enumerate(KINDS)}  # ties between equal ranks: memory, I/O, CPU, locks
#: each monitored layer of the chains and the roles that show it is monitored (confidence)
_SEEN = (("log_write_ms", "log_disk_wait_pct"), ("guest_write_await_ms",), ("vmdk_write_ms", "ready_pct"),
         ("kavg_ms", "esx_kavg_ms"), ("array_ms",))
#: vCenter's mem.state values
MEM_STATES = {0: "high", 1: "soft", 2: "hard", 3: "low"}
_DB2_ROLES = ("log_write_ms", "log_disk_wait_pct", "read_wait_pct", "direct_read_wait_pct", "lock_wait_pct")
#: a bucket is walked when one of these roles reaches its level (a key of `verdict_levels`; None: any amount above
#: zero), when DB2's read waits together reach `symptom_read_wait_pct`, or when the VM's swapped memory grew
TRIGGERS: tuple[tuple[str, str | None], ...] = (
    ("vm_swapin", None), ("host_swapin", None), ("balloon_bytes", None), ("balloon_target_bytes", None),
    ("vm_swapped_bytes", None), ("host_mem_state", "host_mem_state"),
    ("log_write_ms", "symptom_log_write_ms"), ("log_disk_wait_pct", "symptom_log_disk_wait_pct"),
    ("kavg_ms", "kavg_ms"), ("esx_kavg_ms", "kavg_ms"), ("davg_ms", "device_ms"), ("esx_davg_ms", "device_ms"),
    ("ready_pct", "ready_pct"), ("costop_pct", "costop_pct"), ("guest_steal_pct", "steal_pct"),
    ("lock_wait_pct", "symptom_lock_wait_pct"))


@dataclass
class Cause:
    """One chain a layer's figures complete: what it blames, and how much it weighs against the others."""

    kind: str
    chain: list[str]
    share: float | None  # % of DB2's time (I/O, locks) or of the VM's (CPU) it explains, where known
    excess: float  # how many times its level it is (infinite for memory: any amount is a deviation)
    conclusion: str = ""

    @property
    def layer(self) -> str:
        return KINDS[self.kind][0]

    @property
    def label(self) -> str:
        return KINDS[self.kind][1]

    @property
    def summary(self) -> str:
        conclusion = self.conclusion or KINDS[self.kind][2]
        return " ← ".join(self.chain) + f" ⇒ {conclusion}" if self.chain else conclusion

    def to_json(self) -> dict[str, Any]:
        return {"layer": self.layer, "summary": self.summary, "kind": self.kind,
                "share_pct": None if self.share is None else round(self.share, 2),
                "times_level": None if math.isinf(self.excess) else round(self.excess, 2)}


@dataclass
class Episode:
    """Consecutive buckets that blame one layer: from `start` to `end` (None while it goes on)."""

    layer: str
    start: int
    last: int  # the end of its last bucket (known while it goes on too)
    end: int | None
    causes: list[Cause]  # its layer's cause first, then the others its buckets show, ranked
    figures: dict[str, tuple[float, float]]  # role -> (mean, peak) over the episode
    buckets: int
    confidence: str
    culprits: list[Culprit] = field(default_factory=list)  # who takes what its causes contend for, ranked
    event: VCenterEvent | None = None  # the stack's newest vCenter event at or before its onset

    @property
    def blames(self) -> str | None:
        """The co-tenant it blames first (a VM, or a LUN behind the same adapter); None when that is the VM."""
        first = self.culprits[0] if self.culprits else None
        return None if first is None or first.own else first.vm or first.lun

    @property
    def summary(self) -> str:
        return self.causes[0].summary

    @property
    def chain(self) -> list[str]:
        return self.causes[0].chain

    def to_json(self) -> dict[str, Any]:
        return {"layer": self.layer, "summary": self.summary, "start": iso(self.start), "end": iso(self.end),
                "figures": {k: {"mean": round(m, 3), "peak": round(float(p), 3)} for k, (m, p) in self.figures.items()},
                "chain": self.chain, "causes": [c.to_json() for c in self.causes], "buckets": self.buckets,
                "confidence": self.confidence, "culprits": [c.to_json() for c in self.culprits],
                "event": self.event.to_json() if self.event else None}


@dataclass
class StackVerdict:
    stack: str
    layer: str | None  # the layer to blame now; None when nothing is blamed now or too little is known
    summary: str
    confidence: str  # high | medium | low | none
    chain: list[str] = field(default_factory=list)
    samples: int = 0
    buckets: int = 0
    figures: dict[str, float] = field(default_factory=dict)  # the ongoing episode's means, else the window's
    vm: str | None = None
    vcenter: str | None = None  # the VM's: a stack's identity (VM names repeat across vCenters)
    since: int | None = None  # the ongoing episode's start
    #: it was going on at the first bucket judged already: it began at `since` or before (onset_text)
    since_before: bool = False
    episodes: list[Episode] = field(default_factory=list)  # oldest first
    causes: list[Cause] = field(default_factory=list)  # the ongoing episode's, ranked
    not_known: list[str] = field(default_factory=list)  # what the verdict could not see
    until: int = 0  # the moment judged (the window's end)
    events: list[VCenterEvent] = field(default_factory=list)  # the stack's vCenter events in the window

    @property
    def culprits(self) -> list[Culprit]:
        """The ongoing episode's culprits, else the latest episode's: the last contention the verdict blames."""
        return self.episodes[-1].culprits if self.episodes else []

    def to_json(self) -> dict:
        return {"stack": self.stack, "vm": self.vm, "vcenter": self.vcenter, "layer": self.layer,
                "summary": self.summary, "confidence": self.confidence, "chain": self.chain, "samples": self.samples,
                "buckets": self.buckets, "figures": self.figures, "since": iso(self.since),
                "since_before": self.since_before,
                "episodes": [e.to_json() for e in self.episodes], "causes": [c.to_json() for c in self.causes],
                "culprits": [c.to_json() for c in self.culprits], "not_known": self.not_known,
                "until": iso(self.until), "events": [e.to_json() for e in self.events]}

    def note_events(self, events: list[VCenterEvent], reached: list[VCenterEvent] | None = None) -> None:
        """The stack's vCenter events: kept, and each episode's newest one at or before its onset named in the
        text (the ongoing episode's after its summary, the earlier ones' in the list of earlier episodes).
        `reached`: the events of the longer look back that found the ongoing episode's onset before the window."""
        self.events = events
        if not (events or reached) or not self.episodes:
            return
        for e in self.episodes:
            e.event = nearest_before(events, e.start, BUCKET_NS, e.blames)
        if reached is not None:
            last = self.episodes[-1]
            last.event = nearest_before(reached, last.start, BUCKET_NS, last.blames)
        ongoing = self.episodes[-1] if self.episodes[-1].end is None else None
        head, sep, _ = self.summary.partition("; earlier:")
        if ongoing is not None and ongoing.event is not None:
            after = after_text(ongoing.event.summary, ongoing.event.ts, ongoing.start)
            self.summary += f"; since {clock(ongoing.start, True)}, {after}"
        elif sep and ongoing is None:
            self.summary = f"{head}; earlier: {earlier_text([e.to_json() for e in self.episodes], self.until)}"

    def as_finding(self) -> Finding | None:
        """The blame now as a finding of `stack-verdict` (a warning): for a stack whose own current findings
        leave the blamed layer uncovered (a DB2 symptom below any rule's level, a device between the verdict's
        level and the published one), so a blamed layer is always a finding."""
        if self.layer is None or self.since is None:
            return None
        rule = next(r for r in all_rules() if r.id == "stack-verdict")
        named = {k: v for k, v in (("vm", self.vm), ("vcenter", self.vcenter)) if v}
        subject = {"layer": "stack", "stack": self.stack, **named}
        summary = f"{self.stack}: {self.layer} blamed {since_text(self.since, self.until)}: {self.summary}"
        evidence = {"values": dict(self.figures), "window": {"from_ns": self.since, "to_ns": self.until},
                    "samples": self.buckets, "thresholds": {}}
        return Finding(rule.id, Severity.WARNING, subject, summary, evidence, rule.why(), rule.fix,
                       list(rule.practice.references), self.since, self.until)

    def note_findings(self, findings: Iterable[Finding]) -> None:
        """With nothing blamed now, the stack's open critical findings are named with why the verdict does
        not blame them: never "healthy" beside one."""
        if self.layer is not None or self.confidence == "none":
            return
        critical = [f for f in findings if f.severity == Severity.CRITICAL and f.resolved_at is None
                    and f.stale_since is None]
        if not critical:
            return
        first = sorted(critical, key=lambda f: (f.rule, f.first_seen))[0]
        more = f" (and {len(critical) - 1} more critical)" if len(critical) > 1 else ""
        head = self.summary.split("; earlier:", 1)
        earlier = f"; earlier:{head[1]}" if len(head) > 1 else ""
        self.summary = (f"no layer blamed now, yet {first.rule} is critical: {first.summary}{more}; not blamed "
                        f"because {_not_blamed(first)}{earlier}")


def iso(ns: int | None) -> str | None:
    """ISO-8601 UTC, to the second."""
    return None if ns is None else datetime.fromtimestamp(ns / 1e9, UTC).isoformat(timespec="seconds")


def clock(ns: int, utc: bool) -> str:
    """HH:MM of a moment, in UTC (with its name) or local time."""
    when = datetime.fromtimestamp(ns / 1e9, UTC if utc else None)
    return when.strftime("%H:%M") + (" UTC" if utc else "")


def since_text(since: int | str | None, until: int | str | None, utc: bool = True, before: bool = False) -> str:
    """"since 05:05 UTC, 3m" for a verdict blaming a layer now (times in ns or ISO-8601), else ""; `before`
    (the episode was going on when the judged data begins): "since before 05:05 UTC (≥ 3m)", never the
    edge of a window taken for the onset."""
    start, end = _ns(since), _ns(until)
    if start is None:
        return ""
    if before:
        return f"since before {clock(start, utc)} (≥ {span((end or start) - start)})"
    return f"since {clock(start, utc)}, {span((end or start) - start)}"


def onset_text(verdict: StackVerdict | Mapping[str, Any], utc: bool = True) -> str:
    """The onset of a verdict's ongoing episode as every view says it (since_text), from the verdict or its
    JSON: one wording of one onset on the Stack screen, in triage and in the report."""
    if isinstance(verdict, StackVerdict):
        return since_text(verdict.since, verdict.until, utc, verdict.since_before)
    return since_text(verdict["since"], verdict["until"], utc, bool(verdict.get("since_before")))


def span(ns: int) -> str:
    """A duration as people say it: seconds under two minutes, else whole minutes (3m, 1h5m)."""
    seconds = max(0.0, ns / 1e9)
    return format_duration(round(seconds / 60) * 60 if seconds >= 120 else round(seconds))


def _ns(when: int | str | None) -> int | None:
    if when is None or isinstance(when, int):
        return when
    return int(datetime.fromisoformat(when).timestamp()) * 10**9


def earlier_text(episodes: Sequence[dict[str, Any]], until: int | str | None, utc: bool = True) -> str:
    """The ended episodes (as in the JSON), newest first: "host CPU contention 04:10–04:40 UTC, ended 20m ago"."""
    now = _ns(until) or 0
    out = []
    for e in reversed(episodes):
        start, end = _ns(e["start"]), _ns(e["end"])
        if start is None or end is None:
            continue
        label = KINDS[e["causes"][0]["kind"]][1] if e.get("causes") else e["layer"]
        first = (e.get("culprits") or [None])[0]
        who = f" ({first['vm'] or first['lun']} {first['share_pct']:.0f} %)" if first else ""
        after = ""
        if e.get("event") and (at := _ns(e["event"]["time"])) is not None:
            after = f" ({after_text(e['event']['summary'], at, start)})"
        out.append(f"{label} {clock(start, utc).removesuffix(' UTC')}–{clock(end, utc)}{who}{after}, "
                   f"ended {span(now - end)} ago")
    return "; ".join(out)


def _not_blamed(f: Finding) -> str:
    """Why a critical finding is not the verdict's: configuration, a figure the chains do not read, or a
    level the chains do not reach where it shows."""
    live = [r for r in all_rules() if r.id == f.rule and isinstance(r, LiveRule)]
    if not live:
        return "it is configuration, which no bucket of samples shows"
    read = {fig.measurement for figs in ROLES.values() for fig in figs}
    off = sorted({r.measurement for r in live} - read)
    if len(off) == len({r.measurement for r in live}):
        return f"the verdict's chains do not read {', '.join(off)}"
    return "the chains that read it do not reach their levels in the same buckets (no symptom above it)"


# --- the figures on buckets -------------------------------------------------------------------


class _Buckets:
    """The stack's figures on 20 s buckets, read once per verdict through its entities."""

    def __init__(self, entities: StackEntities, min_iops: float = 0.0, memo: dict | None = None):
        self.entities = entities
        self.min_iops = min_iops  # a figure's `gate`: the I/O a device does for its latency to count
        self.memo = memo  # a series' bucket means over the window, by (series, field): shared by the stacks of a host
        self.samples = 0

    def role(self, figures: tuple[Figure, ...]) -> dict[int, float]:
        """The first of a role's figures that has samples."""
        for fig in figures:
            found = self.figure(fig)
            if found:
                return found
        return {}

    def figure(self, fig: Figure) -> dict[int, float]:
        """bucket -> value: the mean of each series in the bucket, then the figure's `combine` across series.
        A host's series count only for the buckets in which the VM ran on that host."""
        ent = self.entities
        placed = fig.entity in PLACED
        found: list[dict[int, float]] = []
        for s in ent.select(fig.entity, fig.measurement, fig.where):
            whole = not placed or ent.always_there(s.tags)
            key = (s.id, fig.field, ent.since, ent.until, self.min_iops if fig.gate else 0.0)
            hit = self.memo.get(key) if whole and self.memo is not None else None
            if hit is not None:
                means, n = hit
            else:
                window = ent.source.window(s.id, fig.field, ent.since, ent.until)
                if not whole:  # the VM moved in the window: each sample by the host it ran on then
                    tags, at = s.tags, ent.ran_there
                    window = [(ts, v) for ts, v in window if at(tags, ts)]
                if fig.gate and self.min_iops > 0:
                    busy, least = self._busy(s, fig.gate), self.min_iops
                    window = [(ts, v) for ts, v in window if busy.get(ts, least) >= least]
                means, n = _bucket_means(window)
                if whole and self.memo is not None and placed:
                    self.memo[key] = (means, n)
            if n:
                self.samples += n
                found.append(means)
        if len(found) <= 1:
            return found[0] if found else {}
        per_bucket: dict[int, list[float]] = defaultdict(list)
        for means in found:
            for b, x in means.items():
                per_bucket[b].append(x)
        combine = COMBINE[fig.combine]
        return {b: vs[0] if len(vs) == 1 else combine(vs) for b, vs in per_bucket.items()}

    def _busy(self, s: Series, fields: tuple[str, ...]) -> dict[int, float]:
        """time -> the sum of the fields at it (the I/O a device did then); a time without them is not in it
        (a source that does not give them: judged as before)."""
        ent = self.entities
        out: dict[int, float] = defaultdict(float)
        for name in fields:
            for ts, v in ent.source.window(s.id, name, ent.since, ent.until):
                if type(v) is float or type(v) is int:
                    out[ts] += v
        return out


def _bucket_means(window: Sequence[tuple[int, Any]]) -> tuple[dict[int, float], int]:
    """bucket -> the mean of a series' numbers in it (not bools, not text), and how many numbers there were. A
    window comes in time order (each bucket's points one run); one that does not is taken the long way."""
    out: dict[int, float] = {}
    cur, total, k, n = -1, 0.0, 0, 0
    for ts, v in window:
        if type(v) is float or type(v) is int:
            b = ts // BUCKET_NS
            if b == cur:
                total += v
                k += 1
            elif b > cur:
                if k:
                    out[cur] = total / k if k > 1 else total
                cur, total, k = b, v, 1
            else:
                return _unordered_means(window)
            n += 1
    if k:
        out[cur] = total / k if k > 1 else total
    return out, n


def _unordered_means(window: Sequence[tuple[int, Any]]) -> tuple[dict[int, float], int]:
    points: dict[int, list[float]] = defaultdict(list)
    for ts, v in window:
        if type(v) is float or type(v) is int:
            points[ts // BUCKET_NS].append(v)
    return {b: vs[0] if len(vs) == 1 else fmean(vs) for b, vs in points.items()}, sum(map(len, points.values()))


def _max(*values: float | None) -> float | None:
    known = [x for x in values if x is not None]
    return max(known) if known else None


def _sum(*values: float | None) -> float | None:
    known = [x for x in values if x is not None]
    return math.fsum(known) if known else None


def _times(value: float, level: float) -> float:
    """How many times its level a value is."""
    return value / level if level > 0 else math.inf


def _fmt(x: float | None, unit: str) -> str:
    return "n/a" if x is None else f"{x:.1f}{unit}"


# --- the chains ---------------------------------------------------------------------------


def _io_kinds(v: Values, t: dict[str, float]) -> list[tuple[str, float | None, float]]:
    """Where the I/O chain puts the time DB2 (or the guest) waits: each layer that adds latency past its
    level, with the share of DB2's time it explains and how far past its level it is. Nothing without a
    symptom in the chain."""
    log_ms, log_wait = v["log_write_ms"], v["log_disk_wait_pct"]
    read_wait = _sum(v["read_wait_pct"], v["direct_read_wait_pct"])
    io_bound = ((log_ms or 0) >= t["symptom_log_write_ms"] or (log_wait or 0) >= t["symptom_log_disk_wait_pct"]
                or (read_wait or 0) >= t["symptom_read_wait_pct"])
    kernel, device = _max(v["kavg_ms"], v["esx_kavg_ms"]), _max(v["davg_ms"], v["esx_davg_ms"])
    if not (io_bound or (kernel or 0) >= t["kavg_ms"] or (device or 0) >= t["device_ms"]):
        return []
    if not io_bound and (log_ms is not None or log_wait is not None or read_wait is not None):
        return []  # DB2 reports and does not wait on I/O: a queue below it is not what slows it
    queue, qued, array = v["qavg_ms"], v["esx_qued"], v["array_ms"]
    guest = _max(v["guest_write_await_ms"], v["guest_read_await_ms"])
    vmdk = _max(v["vmdk_write_ms"], v["vmdk_read_ms"])
    waited = _sum(log_wait, read_wait)  # DB2's time in I/O waits, % of its time
    top = next((x for x in (log_ms, guest, vmdk) if x), None) or (kernel or 0) + (device or 0)

    def share(part: float) -> float | None:
        return None if waited is None or not top else waited * min(max(part / top, 0.0), 1.0)

    out: list[tuple[str, float | None, float]] = []
    if (kernel or 0) >= t["kavg_ms"] or (queue or 0) >= t["qavg_ms"] or (qued or 0) >= t["esx_qued"]:
        out.append(("hypervisor-queue", share(_max(kernel, queue) or 0), max(
            _times(kernel or 0, t["kavg_ms"]), _times(queue or 0, t["qavg_ms"]), _times(qued or 0, t["esx_qued"]))))
    if device is not None and device >= t["slow_ms"] and array is not None and array < device / t["fabric_ratio"]:
        out.append(("fabric", share(device - array), _times(device, t["slow_ms"])))
    elif (slow := _max(device, array)) is not None and slow >= t["slow_ms"]:
        out.append(("array", share(array if array is not None else slow), _times(slow, t["slow_ms"])))
    if guest is not None and vmdk is not None and guest > t["guest_queue_ratio"] * vmdk + t["guest_queue_ms"]:
        level = t["guest_queue_ratio"] * vmdk + t["guest_queue_ms"]
        out.append(("guest-queue", share(guest - vmdk), _times(guest, level)))
    if (log_ms is not None or log_wait is not None) and guest is None and vmdk is None and kernel is None \
            and device is None and array is None:
        out.append(("db2-io", waited, max(_times(log_ms or 0, t["symptom_log_write_ms"]),
                                          _times(log_wait or 0, t["symptom_log_disk_wait_pct"]))))
    return out


def _scores(v: Values, t: dict[str, float], growing: bool) -> list[tuple[str, float | None, float]]:
    """Every cause these values show (kind, share of the time it explains, times its level), ranked."""
    out: list[tuple[str, float | None, float]] = []
    if (v["vm_swapin"] or 0) > 0 or (v["host_swapin"] or 0) > 0 or growing:
        out.append(("host-swap", None, math.inf))
    if (v["balloon_bytes"] or 0) > 0 and (v["guest_swap_in"] or 0) > 0:
        out.append(("balloon", None, math.inf))
    elif not out and _reclaimed(v, t):
        out.append(("host-memory", None, math.inf))
    out += _io_kinds(v, t)
    ready, costop, steal = v["ready_pct"], v["costop_pct"], v["guest_steal_pct"]
    if ready is not None and ready >= t["ready_pct"]:  # vsphere_vm gives ready and co-stop per vCPU
        out.append(("ready", ready, _times(ready, t["ready_pct"])))
    if costop is not None and costop >= t["costop_pct"]:
        out.append(("costop", costop, _times(costop, t["costop_pct"])))
    if steal is not None and steal >= t["steal_pct"]:
        out.append(("steal", steal, _times(steal, t["steal_pct"])))
    lock = v["lock_wait_pct"]
    if not out and lock is not None and lock >= t["symptom_lock_wait_pct"]:
        out.append(("lock", lock, _times(lock, t["symptom_lock_wait_pct"])))
    return ranked(out)


def _reclaimed(v: Values, t: dict[str, float]) -> bool:
    """The host reclaims the VM's memory: by its own counters a balloon or its target, or memory in host swap;
    without them, its host's memory state at its level (left out for a VM whose memory is reserved whole)."""
    own = (v["balloon_bytes"], v["balloon_target_bytes"], v["vm_swapped_bytes"])
    if any(x is not None for x in own):
        return any((x or 0) > 0 for x in own)
    return (v["host_mem_state"] or 0) >= t["host_mem_state"]


def ranked(causes: list[Any]) -> list[Any]:
    """Causes by how much of DB2's (or the VM's) time each explains when that is known for all of them, else
    by how far past its level each is; equal ones in the chains' order (memory, I/O, CPU, locks)."""
    def parts(c: Any) -> tuple[str, float | None, float]:
        return (c.kind, c.share, c.excess) if isinstance(c, Cause) else c

    by_share = all(parts(c)[1] is not None for c in causes)
    return sorted(causes, key=lambda c: (-(parts(c)[1] if by_share else parts(c)[2]), _ORDER[parts(c)[0]]))


def _chain(kind: str, v: Values, t: dict[str, float], hosts: str) -> tuple[list[str], str]:
    """A cause's chain of figures (the values given: an episode's means) and its conclusion."""
    mib = 2**20
    if kind == "host-swap":
        return [f"VM swap-in {_fmt((v['vm_swapin'] or 0) / mib, ' MiB/s')}",
                f"swapped {_fmt((v['vm_swapped_bytes'] or 0) / mib, ' MiB')}",
                f"host swap-in {_fmt((v['host_swapin'] or 0) / mib, ' MiB/s')}"], ""
    if kind == "balloon":
        return [f"guest swap-in {_fmt((v['guest_swap_in'] or 0) / mib, ' MiB/s')}",
                f"balloon {_fmt((v['balloon_bytes'] or 0) / mib, ' MiB')}"], ""
    if kind == "host-memory":
        shown = [f"{label} {_fmt(x / mib, ' MiB')}" for label, x in (
            ("balloon", v["balloon_bytes"]), ("balloon target", v["balloon_target_bytes"]),
            ("swapped", v["vm_swapped_bytes"])) if x]
        if v["host_mem_state"]:  # soft or worse: "high" is plenty of free memory
            state = round(v["host_mem_state"])
            shown.append(f"host memory state {MEM_STATES.get(state, str(state))}")
        return shown, ""
    if kind == "ready":
        return [f"CPU ready {v['ready_pct'] or 0:.1f}% per vCPU", f"co-stop {_fmt(v['costop_pct'], '%')}"], ""
    if kind == "costop":
        return [f"co-stop {v['costop_pct'] or 0:.1f}% per vCPU"], ""
    if kind == "steal":
        return [f"guest steal {v['guest_steal_pct'] or 0:.1f}%"], ""
    if kind == "lock":
        return [f"lock wait {v['lock_wait_pct'] or 0:.0f}% of DB2 time"], ""
    chain = []
    if v["log_write_ms"] is not None:
        chain.append(f"log write {_fmt(v['log_write_ms'], ' ms/IO')}")
    elif v["log_disk_wait_pct"] is not None:
        chain.append(f"log disk wait {_fmt(v['log_disk_wait_pct'], '%')} of DB2 time")
    if kind == "db2-io":
        return chain, ""
    guest = _max(v["guest_write_await_ms"], v["guest_read_await_ms"])
    if guest is not None:
        chain.append(f"guest await {_fmt(guest, ' ms')}")
    vmdk = _max(v["vmdk_write_ms"], v["vmdk_read_ms"])
    if vmdk is not None:
        chain.append(f"VMDK latency {_fmt(vmdk, ' ms')}")
    kernel, device = _max(v["kavg_ms"], v["esx_kavg_ms"]), _max(v["davg_ms"], v["esx_davg_ms"])
    if kernel is not None or device is not None:
        host = f"host {hosts} KAVG {_fmt(kernel, ' ms')}" if hosts else f"host KAVG {_fmt(kernel, ' ms')}"
        if v["qavg_ms"] is not None:
            host += f", QAVG {_fmt(v['qavg_ms'], ' ms')}"
        if v["esx_qued"] is not None:
            host += f", QUED {v['esx_qued']:.0f}"
        host += f", DAVG {_fmt(device, ' ms')}"
        chain.append(host)
    if v["array_ms"] is not None:
        chain.append(f"array LUN {_fmt(v['array_ms'], ' ms')}")
    depth = v["esx_dqlen"] or v["queue_depth"]
    if kind == "hypervisor-queue" and depth:
        return chain, f"{KINDS[kind][2]} (LUN queue depth {depth:.0f})"
    return chain, ""


# --- the verdict ------------------------------------------------------------------------------


#: how far back from the moment judged the onset of the episode going on then is looked for, whatever the
#: window (the Stack screen's few minutes, a run's span): vCenter's realtime hour, triage's default lookback,
#: so every view gives one onset for one incident
ONSET_REACH_NS = 3600 * 10**9


def stack_verdict(source: Source, stack: StackConfig, since_ns: int, until_ns: int,
                  overrides: Overrides | None = None, entities: StackEntities | None = None, *,
                  shared: dict | None = None) -> StackVerdict:
    """The verdict over [since, until] (`entities`: the stack's, when the caller resolved them already;
    `shared`: what the verdicts of one judgement over data that does not change share, a host's figures).

    The episode going on at `until` that was going on at the window's first bucket already began then or
    before: its start is looked for back to ONSET_REACH_NS before `until`, as a longer view of the same
    data (triage's lookback) finds it; found nowhere, `since_before` says it began then or earlier."""
    ent = entities if entities is not None else resolve(source, stack, since_ns, until_ns)
    out = _judged(stack, ent, until_ns, overrides, shared)
    reach_ns = until_ns - ONSET_REACH_NS
    reached: list[VCenterEvent] | None = None
    if out.since_before and reach_ns < since_ns:
        longer_ent = resolve(source, stack, reach_ns, until_ns)
        longer = _judged(stack, longer_ent, until_ns, overrides, None)
        if longer.layer == out.layer and longer.since is not None and out.since is not None \
                and longer.since <= out.since:
            out.since, out.since_before = longer.since, longer.since_before
            out.episodes[-1].start = longer.since  # the ongoing one: `since` is its start
            reached = stack_events(longer_ent)
    out.note_events(stack_events(ent), reached)
    return out


def _judged(stack: StackConfig, ent: StackEntities, until_ns: int, overrides: Overrides | None,
            shared: dict | None) -> StackVerdict:
    t = verdict_levels(stack, overrides)
    r = _Buckets(ent, t["min_iops"], shared)
    f = {role: r.role(figs) for role, figs in ROLES.items()}
    if _reserved(ent):  # the host's memory state does not reach memory reserved whole
        f["host_mem_state"] = {}
    out = _judge(stack.name, f, r.samples, lambda b: ent.host_at(b * BUCKET_NS + BUCKET_NS // 2), t, until_ns,
                 lambda kinds, lo, hi: culprits(ent, kinds, lo, hi, t, BUCKET_NS, shared))
    out.vm, out.vcenter = ent.vm, ent.vcenter
    return out


def _reserved(ent: StackEntities) -> bool:
    """The VM's memory is reserved whole (its reservation at its size, or locked to it)."""
    facts = ent.source.facts("vsphere_vm")

    def build() -> set[tuple[str | None, str]]:
        out = set()
        for f in facts:
            d = f.data
            size, reserved = d.get("memory_mb") or 0, d.get("mem_reservation_mb") or 0
            if d.get("mem_reservation_locked_to_max") or (size > 0 and reserved >= size):
                out.add((f.tags.get("vcenter"), f.tags.get("vm", "")))
        return out

    whole = derive(ent.source, "memory-reserved", (facts,), build)
    return (ent.vcenter, ent.vm or "") in whole or (None, ent.vm or "") in whole


def _figures(f: dict[str, dict[int, float]], lo: int, hi: int) -> dict[str, tuple[float, float]]:
    """role -> (mean, peak) over the buckets lo..hi."""
    out = {}
    for role, series in f.items():
        if not series:
            continue
        inside = lo <= min(series) and max(series) <= hi  # the whole window, most often
        values = list(series.values()) if inside else [x for b, x in series.items() if lo <= b <= hi]
        if values:
            out[role] = (fmean(values), max(values))
    return out


def _means(figures: dict[str, tuple[float, float]]) -> Values:
    return {role: figures[role][0] if role in figures else None for role in ROLES}


def _confidence(v: Values, buckets: int, t: dict[str, float]) -> str:
    seen = sum(1 for keys in _SEEN if any(v[k] is not None for k in keys))
    return "high" if buckets >= t["confident_buckets"] and seen >= 3 else "medium" if seen >= 2 else "low"


def _runs(layer_at: list[str | None], gap: int) -> list[tuple[str | None, int, int]]:
    """(layer, first, last) runs of equal layers; a run of at most `gap` between two runs of one layer joins
    them."""
    runs: list[tuple[str | None, int, int]] = []
    for i, layer in enumerate(layer_at):
        if runs and runs[-1][0] == layer:
            runs[-1] = (layer, runs[-1][1], i)
        else:
            runs.append((layer, i, i))
    merged: list[tuple[str | None, int, int]] = []
    for run in runs:
        if (len(merged) >= 2 and run[0] is not None and merged[-2][0] == run[0]
                and merged[-1][2] - merged[-1][1] + 1 <= gap):
            merged[-2:] = [(run[0], merged[-2][1], run[2])]
        elif merged and merged[-1][0] == run[0]:
            merged[-1] = (run[0], merged[-1][1], run[2])
        else:
            merged.append(run)
    return merged


Named = Callable[[list[str], int, int], list[Culprit]]  # (an episode's causes, start, end) -> its culprits


def _judge(name: str, f: dict[str, dict[int, float]], samples: int, host_of: Callable[[int], str | None],
           t: dict[str, float], until: int, named: Named | None = None) -> StackVerdict:
    all_buckets = sorted(set().union(*f.values()))
    if len(all_buckets) < t["min_buckets"]:
        return StackVerdict(name, None, f"not enough data to judge ({len(all_buckets)} of {t['min_buckets']:.0f} "
                            "20 s buckets needed)", "none", samples=samples, buckets=len(all_buckets), until=until)
    first, last = all_buckets[0], all_buckets[-1]
    growth = _growing(f["vm_swapped_bytes"])
    scored = _per_bucket(f, t, growth)
    layer_at: list[str | None] = [None] * (last - first + 1)
    for b, kinds in scored.items():
        layer_at[b - first] = KINDS[kinds[0][0]][0]
    gap, least = int(t["gap_buckets"]), int(t["episode_buckets"])
    stale = is_stale((until - (last + 1) * BUCKET_NS) / 1e9, BUCKET_S)
    episodes = []
    for layer, lo, hi in _runs(layer_at, gap):
        if layer is None or hi - lo + 1 < least:
            continue
        going = not stale and hi + gap >= last - first
        episodes.append(_episode(layer, first + lo, first + hi, going, f, scored, growth, host_of, t, least))
    if named is not None:
        for e in episodes:
            _name_culprits(e, named)
    ongoing = episodes[-1] if episodes and episodes[-1].end is None else None
    window = _figures(f, first, last)
    v = _means(window)
    not_known = _not_known(f, stale, last)
    if ongoing is not None:
        return StackVerdict(name, ongoing.layer, ongoing.summary, ongoing.confidence, ongoing.chain, samples,
                            ongoing.buckets, {k: round(m, 3) for k, (m, _) in ongoing.figures.items()},
                            since=ongoing.start, since_before=ongoing.start == first * BUCKET_NS,
                            episodes=episodes, causes=ongoing.causes, not_known=not_known, until=until)
    if any(v[k] is not None for k in _DB2_ROLES):
        summary = "no layer stands out: DB2 and the infrastructure below it look healthy"
    else:
        summary = "no layer stands out in what is monitored; no DB2 data for this stack"
    if stale:
        summary = f"no sample since {clock((last + 1) * BUCKET_NS, True)}: {summary}"
    earlier = earlier_text([e.to_json() for e in episodes], until)
    if earlier:
        summary += f"; earlier: {earlier}"
    return StackVerdict(name, None, summary, _confidence(v, len(all_buckets), t), [], samples, len(all_buckets),
                        {k: round(m, 3) for k, (m, _) in window.items()}, episodes=episodes, not_known=not_known,
                        until=until)


def _name_culprits(e: Episode, named: Named) -> None:
    """The episode's culprits, the first named in its conclusion."""
    e.culprits = named([c.kind for c in e.causes], e.start, e.last)
    first = e.causes[0]
    if e.culprits and e.culprits[0].contended == RESOURCE_OF.get(first.kind):
        head = (first.conclusion or KINDS[first.kind][2]).split(":", 1)[0]
        first.conclusion = f"{head}: {clause(e.culprits)}"


def _growing(swapped: dict[int, float]) -> set[int]:
    """The buckets in which the VM's swapped memory grew since the bucket before it with a value."""
    out, before = set(), None
    for b in sorted(swapped):
        if before is not None and swapped[b] > before:
            out.add(b)
        before = swapped[b]
    return out


def _per_bucket(f: dict[str, dict[int, float]], t: dict[str, float],
                growth: set[int]) -> dict[int, list[tuple[str, float | None, float]]]:
    """bucket -> the causes it shows, ranked; only the buckets where some chain reaches a level are walked."""
    reads = {b: (f["read_wait_pct"].get(b) or 0) + (f["direct_read_wait_pct"].get(b) or 0)
             for b in f["read_wait_pct"].keys() | f["direct_read_wait_pct"].keys()}
    candidates = growth | {b for b, x in reads.items() if x >= t["symptom_read_wait_pct"]}
    for role, level in TRIGGERS:
        series = f[role]
        at = t[level] if level else 0.0
        if not series or (max(series.values()) < at if level else max(series.values()) <= 0):
            continue  # most roles of most stacks, at C speed
        candidates |= {b for b, x in series.items() if (x >= at if level else x > 0)}
    out = {}
    for b in candidates:
        found = _scores({role: series.get(b) for role, series in f.items()}, t, b in growth)
        if found:
            out[b] = found
    return out


def _episode(layer: str, lo: int, hi: int, going: bool, f: dict[str, dict[int, float]],
             scored: dict[int, list[tuple[str, float | None, float]]], growth: set[int],
             host_of: Callable[[int], str | None], t: dict[str, float], least: int) -> Episode:
    """An episode's causes walked again on its own figures: every cause its buckets show in at least `least`
    of them (its layer's most frequent always), ranked, the best of its own layer first."""
    figures = _figures(f, lo, hi)
    v = _means(figures)
    shown = Counter(kind for b in range(lo, hi + 1) for kind, _, _ in scored.get(b, ()))
    mine = max((k for k in shown if KINDS[k][0] == layer), key=lambda k: (shown[k], -_ORDER[k]))
    hosts = "/".join(sorted({h for b in range(lo, hi + 1) if b in scored and (h := host_of(b))}))
    growing = any(b in growth for b in range(lo, hi + 1))
    now = {kind: (share, excess) for kind, share, excess in _scores(v, t, growing)}
    causes = []
    for kind in [k for k, n in shown.items() if n >= least or k == mine]:
        share, excess = now.get(kind) or _mean_score(kind, lo, hi, scored)
        chain, conclusion = _chain(kind, v, t, hosts)
        causes.append(Cause(kind, chain, share, excess, conclusion))
    causes = ranked(causes)
    first = next(c for c in causes if c.layer == layer)
    causes.sort(key=lambda c: c is not first)  # its own layer's best cause first (the sort is stable)
    buckets = sum(1 for b in range(lo, hi + 1) if b in scored)
    confidence = "low" if first.kind == "db2-io" else _confidence(v, hi - lo + 1, t)
    return Episode(layer, lo * BUCKET_NS, (hi + 1) * BUCKET_NS, None if going else (hi + 1) * BUCKET_NS, causes,
                   figures, buckets, confidence)


def _mean_score(kind: str, lo: int, hi: int,
                scored: dict[int, list[tuple[str, float | None, float]]]) -> tuple[float | None, float]:
    """A cause's weight over the buckets that showed it (its figures' means may fall under its level)."""
    found = [(s, e) for b in range(lo, hi + 1) for k, s, e in scored.get(b, ()) if k == kind]
    shares = [s for s, _ in found]
    return (fmean(shares) if None not in shares else None), fmean(e for _, e in found)


def _not_known(f: dict[str, dict[int, float]], stale: bool, last: int) -> list[str]:
    """What the verdict could not see: the layers without data, DB2 first; data that stopped."""
    seen = {ROLES[role][0].layer for role, series in f.items() if series}
    out = [] if "db2" in seen else ["no DB2 data for this stack"]
    missing = [LAYER_TITLES[x] for x in ("guest", "vm", "host", "storage") if x not in seen]
    if missing:
        out.append("no data from " + ", ".join(missing))
    if stale:
        out.append(f"no sample since {iso((last + 1) * BUCKET_NS)}")
    return out
