"""The cross-layer verdict: for one stack, which layer is to blame right now.

Every layer is read on the same 20 s buckets of the window. The buckets where DB2 shows
the symptom (time going to waits, slow log writes) are the ones judged; without DB2 data,
all of them. Then three chains are walked, each from the database down:

- I/O: DB2 log/read waits ← guest await ← VMDK latency ← host KAVG/QAVG and DAVG ← array
  LUN latency. The first layer that adds most of the latency is to blame: the guest's own
  queue, the hypervisor's queue (KAVG/QAVG), the fabric (DAVG far above the array's own
  latency) or the array.
- memory: host swapping, ballooning, guest swapping.
- CPU: ready time per vCPU, co-stop, guest steal.

Lock waits that dominate DB2's time with a healthy infrastructure are the application's.
With too few buckets, or no layer below DB2, the verdict says so instead of guessing.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from statistics import fmean
from typing import Any

from db2vtop.agent.core.config import StackConfig
from db2vtop.agent.core.source import Source, cached
from db2vtop.checks.figures import COMBINE, ROLES, Figure
from db2vtop.checks.scales import levels, rule_thresholds
from db2vtop.checks.topology import StackEntities, resolve

BUCKET_NS = 20 * 10**9
#: entities whose series count only while the VM ran on their host (vMotion)
PLACED = ("host", "lun", "datastore")
Overrides = Mapping[str, Mapping[str, Any]]


@dataclass
class StackVerdict:
    stack: str
    layer: str | None  # the layer to blame; None when nothing is wrong or too little is known
    summary: str
    confidence: str  # high | medium | low | none
    chain: list[str] = field(default_factory=list)
    samples: int = 0
    buckets: int = 0
    figures: dict[str, float] = field(default_factory=dict)
    vm: str | None = None
    vcenter: str | None = None  # the VM's: a stack's identity (VM names repeat across vCenters)

    def to_json(self) -> dict:
        return {"stack": self.stack, "vm": self.vm, "vcenter": self.vcenter, "layer": self.layer,
                "summary": self.summary, "confidence": self.confidence, "chain": self.chain, "samples": self.samples,
                "buckets": self.buckets, "figures": self.figures}


class _Buckets:
    """The stack's figures on 20 s buckets, read once per verdict through its entities."""

    def __init__(self, entities: StackEntities):
        self.entities = entities
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
        at = ent.ran_there if fig.entity in PLACED else None
        combine = COMBINE[fig.combine]
        per_bucket: dict[int, list[float]] = defaultdict(list)
        for s in ent.select(fig.entity, fig.measurement, fig.where):
            points: dict[int, list[float]] = defaultdict(list)
            tags = s.tags
            numbers = [(ts, v) for ts, v in ent.source.window(s.id, fig.field, ent.since, ent.until)
                       if (type(v) is float or type(v) is int) and (at is None or at(tags, ts))]  # not bool, not text
            self.samples += len(numbers)
            for ts, v in numbers:
                points[ts // BUCKET_NS].append(v)
            for b, vs in points.items():
                per_bucket[b].append(vs[0] if len(vs) == 1 else fmean(vs))
        return {b: vs[0] if len(vs) == 1 else combine(vs) for b, vs in per_bucket.items()}


def _over(series: dict[int, float], buckets: Iterable[int]) -> float | None:
    values = [series[b] for b in buckets if b in series]
    return fmean(values) if values else None


def _max(*values: float | None) -> float | None:
    known = [x for x in values if x is not None]
    return max(known) if known else None


def _fmt(v: float | None, unit: str) -> str:
    return "n/a" if v is None else f"{v:.1f}{unit}"


def stack_verdicts(source: Source, stacks: list[StackConfig], since_ns: int, until_ns: int,
                   overrides: Overrides | None = None) -> list[StackVerdict]:
    view = cached(source)  # one series index for every stack
    return [stack_verdict(view, s, since_ns, until_ns, overrides) for s in stacks]


def limits(stack: StackConfig, overrides: Overrides | None = None) -> dict[str, float]:
    """The verdict's levels: its own (`stack-verdict`) and, for each of its inputs judged by a rule's scale
    (checks/figures.py `level`), that scale's warning level, after `[checks.RULE]` and then the stack's own
    `[stack.checks.RULE]` overrides."""
    merged = {rid: dict(v) for rid, v in (overrides or {}).items()}
    for rid, v in stack.checks.items():
        merged.setdefault(rid, {}).update(v)
    lv = levels(merged)
    own = {k: float(v) for k, v in rule_thresholds(merged)["stack-verdict"].items()}
    shared = {role: warn for role, figs in ROLES.items() if (warn := lv.of(figs[0].level).warn) is not None}
    return {**own, **shared}


def stack_verdict(source: Source, stack: StackConfig, since_ns: int, until_ns: int,
                  overrides: Overrides | None = None, entities: StackEntities | None = None) -> StackVerdict:
    """The verdict over [since, until] (`entities`: the stack's, when the caller resolved them already)."""
    ent = entities if entities is not None else resolve(source, stack, since_ns, until_ns)
    r = _Buckets(ent)
    f = {role: r.role(figs) for role, figs in ROLES.items()}
    out = _decide(stack.name, f, r.samples, lambda b: ent.host_at(b * BUCKET_NS + BUCKET_NS // 2),
                  limits(stack, overrides))
    out.vm, out.vcenter = ent.vm, ent.vcenter
    return out


def _decide(name: str, f: dict[str, dict[int, float]], samples: int,
            host_of: Callable[[int], str | None], t: dict[str, float]) -> StackVerdict:
    all_buckets = sorted(set().union(*f.values()))
    if len(all_buckets) < t["min_buckets"]:
        return StackVerdict(name, None, f"not enough data to judge ({len(all_buckets)} of {t['min_buckets']:.0f} "
                            "20 s buckets needed)", "none", samples=samples, buckets=len(all_buckets))
    db2_buckets = sorted(set().union(*(f[k] for k in ("log_disk_wait_pct", "read_wait_pct", "lock_wait_pct",
                                                       "log_write_ms"))))

    def io_symptom(log_ms: float, log_wait: float, read_wait: float) -> bool:
        return (log_ms >= t["symptom_log_write_ms"] or log_wait >= t["symptom_log_disk_wait_pct"]
                or read_wait >= t["symptom_read_wait_pct"])

    symptom = [b for b in db2_buckets
               if io_symptom(f["log_write_ms"].get(b, 0), f["log_disk_wait_pct"].get(b, 0),
                             f["read_wait_pct"].get(b, 0) + f["direct_read_wait_pct"].get(b, 0))
               or f["lock_wait_pct"].get(b, 0) >= t["symptom_lock_wait_pct"]]
    judged = symptom or all_buckets
    v = {k: _over(series, judged) for k, series in f.items()}
    layers_seen = sum(1 for keys in (("log_write_ms", "log_disk_wait_pct"), ("guest_write_await_ms",),
                                     ("vmdk_write_ms", "ready_pct"), ("kavg_ms", "esx_kavg_ms"), ("array_ms",))
                      if any(v[k] is not None for k in keys))
    confidence = "high" if len(judged) >= t["confident_buckets"] and layers_seen >= 3 else \
        "medium" if layers_seen >= 2 else "low"

    def verdict(layer: str, conclusion: str, chain: list[str]) -> StackVerdict:
        summary = " ← ".join(chain) + f" ⇒ {conclusion}"
        figures = {k: round(x, 3) for k, x in v.items() if x is not None}
        return StackVerdict(name, layer, summary, confidence, chain, samples, len(judged), figures)

    # memory first: host swapping hurts everything above it, and explains the rest
    if (v["vm_swapin"] or 0) > 0 or (v["host_swapin"] or 0) > 0 or (v["vm_swapped_bytes"] or 0) > 0:
        chain = [f"VM swap-in {_fmt((v['vm_swapin'] or 0) / 2**20, ' MiB/s')}",
                 f"swapped {_fmt((v['vm_swapped_bytes'] or 0) / 2**20, ' MiB')}",
                 f"host swap-in {_fmt((v['host_swapin'] or 0) / 2**20, ' MiB/s')}"]
        return verdict("host", "the host is swapping VM memory: host memory is overcommitted", chain)
    if (v["balloon_bytes"] or 0) > 0 and (v["guest_swap_in"] or 0) > 0:
        chain = [f"guest swap-in {_fmt(v['guest_swap_in'] / 2**20, ' MiB/s')}",
                 f"balloon {_fmt(v['balloon_bytes'] / 2**20, ' MiB')}"]
        return verdict("vm", "ballooning pushes DB2 memory into guest swap: reserve the VM's memory", chain)

    io_bound = io_symptom(v["log_write_ms"] or 0, v["log_disk_wait_pct"] or 0,
                          (v["read_wait_pct"] or 0) + (v["direct_read_wait_pct"] or 0))
    kernel = _max(v["kavg_ms"], v["esx_kavg_ms"])
    queue = v["qavg_ms"]
    device = _max(v["davg_ms"], v["esx_davg_ms"])
    if io_bound or (kernel or 0) >= t["kavg_ms"] or (device or 0) >= t["device_ms"]:
        chain = []
        if v["log_write_ms"] is not None:
            chain.append(f"log write {_fmt(v['log_write_ms'], ' ms/IO')}")
        elif v["log_disk_wait_pct"] is not None:
            chain.append(f"log disk wait {_fmt(v['log_disk_wait_pct'], '%')} of DB2 time")
        guest_ms = _max(v["guest_write_await_ms"], v["guest_read_await_ms"])
        if guest_ms is not None:
            chain.append(f"guest await {_fmt(guest_ms, ' ms')}")
        vmdk = _max(v["vmdk_write_ms"], v["vmdk_read_ms"])
        if vmdk is not None:
            chain.append(f"VMDK latency {_fmt(vmdk, ' ms')}")
        if kernel is not None or device is not None:
            names = sorted({h for b in judged if (h := host_of(b))})
            host = f"host {'/'.join(names)} KAVG {_fmt(kernel, ' ms')}" if names else f"host KAVG {_fmt(kernel, ' ms')}"
            if queue is not None:
                host += f", QAVG {_fmt(queue, ' ms')}"
            if v["esx_qued"] is not None:
                host += f", QUED {v['esx_qued']:.0f}"
            host += f", DAVG {_fmt(device, ' ms')}"
            chain.append(host)
        if v["array_ms"] is not None:
            chain.append(f"array LUN {_fmt(v['array_ms'], ' ms')}")
        depth = v["esx_dqlen"] or v["queue_depth"]
        if (kernel or 0) >= t["kavg_ms"] or (queue or 0) >= t["qavg_ms"] or (v["esx_qued"] or 0) >= t["esx_qued"]:
            why = "queueing in the hypervisor" + (f" (LUN queue depth {depth:.0f})" if depth else "")
            return verdict("host", why, chain)
        if device is not None and device >= t["slow_ms"]:
            if v["array_ms"] is not None and v["array_ms"] < device / t["fabric_ratio"]:
                return verdict("storage-network", "the path between host and array (fabric, HBA, multipathing): "
                               "the array answers fast, the host sees it slow", chain)
            return verdict("storage", "the array is slow", chain)
        if v["array_ms"] is not None and v["array_ms"] >= t["slow_ms"]:
            return verdict("storage", "the array is slow", chain)
        if guest_ms is not None and vmdk is not None and guest_ms > t["guest_queue_ratio"] * vmdk + t["guest_queue_ms"]:
            return verdict("guest", "queueing inside the guest (device queue depth, I/O scheduler)", chain)
        if chain and len(chain) == 1:
            return StackVerdict(name, "db2", chain[0] + " ⇒ DB2 waits on I/O; no layer below it is monitored",
                                "low", chain, samples, len(judged))

    # vsphere_vm gives ready and co-stop as % of the interval per vCPU
    if (v["ready_pct"] or 0) >= t["ready_pct"]:
        return verdict("host", "CPU contention on the host: the VM waits for physical CPUs",
                       [f"CPU ready {v['ready_pct']:.1f}% per vCPU", f"co-stop {_fmt(v['costop_pct'], '%')}"])
    if (v["costop_pct"] or 0) >= t["costop_pct"]:
        return verdict("vm", "too many vCPUs for the VM's work (co-scheduling stops)",
                       [f"co-stop {v['costop_pct']:.1f}% per vCPU"])
    if (v["guest_steal_pct"] or 0) >= t["steal_pct"]:
        return verdict("host", "CPU contention on the host (the guest sees steal)",
                       [f"guest steal {v['guest_steal_pct']:.1f}%"])
    if (v["lock_wait_pct"] or 0) >= t["symptom_lock_wait_pct"]:
        return verdict("db2", "lock contention in the application, the infrastructure is not the cause",
                       [f"lock wait {v['lock_wait_pct']:.0f}% of DB2 time"])
    return StackVerdict(name, None, "no layer stands out: DB2 and the infrastructure below it look healthy",
                        confidence, [], samples, len(judged),
                        {k: round(x, 3) for k, x in v.items() if x is not None})
