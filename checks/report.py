"""The report of a benchmark run, and how it compares with a baseline run.

For every stack and layer, the run's figures (p50, p95, max and mean over the run of what the
collectors stored; the unit follows from the field's name, agent/core/schema.py), the findings
opened during the run and the cross-layer verdict over it. With a baseline, each figure beside
the baseline's, its change in percent, and the layers whose figures moved most.

The figures are the figure table's (checks/figures.py) and each stack's series are its entities'
(checks/topology.py `resolve`), read through one CachedSource (`rows_of`: one range scan each, shared
by stacks that share a host), never a whole measurement, and a large fleet's stacks are shared out
to a few processes: decoding the samples is most of the work (bench/report.py: 100 stacks, 1 h).
A figure that several series feed (a guest's disks, a VM's virtual disks) is combined at
each sample time first (rates summed, latencies their worst, ratios their mean), then summarised
over the run. Host figures count only while the stack's VM ran on that host (vMotion), and a
host's LUN figures only for the LUNs behind the VM's disks.
"""

from __future__ import annotations

import gc
import math
import time
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from statistics import fmean
from typing import Any

from db2vtop.agent.core.config import StackConfig
from db2vtop.agent.core.model import Finding, severity_rank
from db2vtop.agent.core.runs import Run
from db2vtop.agent.core.source import CachedSource, Row, Source
from db2vtop.agent.core.store import Store
from db2vtop.checks.figures import COMBINE, LAYERS, REPORTED, Figure
from db2vtop.checks.topology import StackEntities, resolve
from db2vtop.checks.triage import finding_json
from db2vtop.checks.verdict import PLACED, stack_verdict

#: the report's figures (the figure table's, checks/figures.py), and them by id
FIGURES = REPORTED
FIGURE_BY_ID = {f.id: f for f in FIGURES}


# --- statistics -----------------------------------------------------------------------

def percentile(ordered: list[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default) of sorted values."""
    if len(ordered) == 1:
        return ordered[0]
    pos = (len(ordered) - 1) * q / 100
    lo = math.floor(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


@dataclass(frozen=True)
class Stat:
    p50: float
    p95: float
    max: float
    mean: float
    samples: int
    series: int

    @classmethod
    def of(cls, values: list[float], series: int) -> Stat:
        ordered = sorted(values)
        return cls(percentile(ordered, 50), percentile(ordered, 95), ordered[-1], fmean(ordered), len(ordered),
                   series)

    def to_json(self, fig: Figure) -> dict[str, Any]:
        return {"label": fig.label, "unit": fig.unit, "p50": _r(self.p50), "p95": _r(self.p95), "max": _r(self.max),
                "mean": _r(self.mean), "samples": self.samples, "series": self.series}


def _r(x: float | None) -> float | None:
    if x is None or not math.isfinite(x):
        return None
    return float(f"{x:.6g}")


# --- the report -----------------------------------------------------------------------

@dataclass
class RunFigures:
    """One run's side of the report."""

    run: Run
    until_ns: int  # the end, or "now" for a run still open
    stacks: dict[str, dict[str, dict[str, Stat]]] = field(default_factory=dict)  # stack > layer > figure
    charts: dict[str, dict[str, list[tuple[float, float]]]] = field(default_factory=dict)  # stack > figure > (s, v)
    entities: dict[str, StackEntities] = field(default_factory=dict)
    findings: list[Finding] = field(default_factory=list)
    finding_stacks: list[list[str]] = field(default_factory=list)
    verdicts: list[dict[str, Any]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        r = self.run
        return {"name": r.name, "label": r.called, "begin": _iso(r.begin_ns), "end": _iso(r.end_ns), "open": r.open,
                "duration_s": round((self.until_ns - r.begin_ns) / 1e9, 3), "command": r.command,
                "exit_status": r.exit_status,
                "stacks": {st: {layer: {k: v.to_json(FIGURE_BY_ID[k]) for k, v in figs.items()}
                                for layer, figs in layers.items()} for st, layers in self.stacks.items()}}


@dataclass
class Moved:
    """A layer of a stack whose figures moved between baseline and run, by how much."""

    stack: str
    layer: str
    score: float  # |log2| of the largest ratio run/baseline among its figures
    figures: list[tuple[str, float | None]]  # (figure id, change of the mean in %), largest first

    def to_json(self) -> dict[str, Any]:
        return {"stack": self.stack, "layer": self.layer, "score": round(self.score, 3),
                "figures": [{"figure": k, "change_pct": _r(c)} for k, c in self.figures]}


@dataclass
class Report:
    generated_at: int
    stacks: list[StackConfig]
    run: RunFigures
    baseline: RunFigures | None = None
    moved: list[Moved] = field(default_factory=list)
    #: stacks the store has that the report does not cover (no --stack named them: VMs without DB2)
    left_out: list[str] = field(default_factory=list)

    def delta(self) -> dict[str, dict[str, dict[str, dict[str, Any]]]]:
        """stack > layer > figure > run and baseline means, change of the mean and of p95 in %."""
        out: dict[str, dict[str, dict[str, dict[str, Any]]]] = {}
        if self.baseline is None:
            return out
        for st in self.stacks:
            mine, theirs = self.run.stacks.get(st.name, {}), self.baseline.stacks.get(st.name, {})
            for layer in LAYERS:
                a, b = mine.get(layer, {}), theirs.get(layer, {})
                for key in [k for k in FIGURE_BY_ID if k in a or k in b]:
                    x, y = a.get(key), b.get(key)
                    out.setdefault(st.name, {}).setdefault(layer, {})[key] = {
                        "unit": FIGURE_BY_ID[key].unit, "run": _r(x.mean) if x else None,
                        "baseline": _r(y.mean) if y else None,
                        "change_pct": _r(change_pct(x.mean, y.mean)) if x and y else None,
                        "p95_change_pct": _r(change_pct(x.p95, y.p95)) if x and y else None}
        return out

    def to_json(self) -> dict[str, Any]:
        runs = [self.run] + ([self.baseline] if self.baseline else [])
        return {"generated_at": _iso(self.generated_at),
                "stacks": [self.run.entities[s.name].to_json() for s in self.stacks if s.name in self.run.entities],
                "run": self.run.to_json(),
                "baseline": self.baseline.to_json() if self.baseline else None,
                "delta": {"stacks": self.delta(), "moved": [m.to_json() for m in self.moved]},
                "findings": [{**finding_json(f), "run": r.run.called, "stacks": stacks}
                             for r in runs for f, stacks in zip(r.findings, r.finding_stacks, strict=True)],
                "verdicts": [v for r in runs for v in r.verdicts], "events": run_events(runs),
                "left_out": self.left_out}


def run_events(runs: list[RunFigures]) -> list[dict[str, Any]]:
    """vCenter's events of the report's stacks in its runs (each verdict's, once), oldest first."""
    found = {(e["time"], e["type"], e["summary"]): e for r in runs for v in r.verdicts for e in v.get("events") or ()}
    return [found[k] for k in sorted(found)]


def _iso(ns: int | None) -> str | None:
    return None if ns is None else datetime.fromtimestamp(ns / 1e9, UTC).isoformat(timespec="milliseconds")


def change_pct(run: float, baseline: float) -> float | None:
    """The change from baseline to run in % of the baseline; None from a zero baseline."""
    if baseline == 0:
        return 0.0 if run == 0 else None
    return (run - baseline) / abs(baseline) * 100


#: a move smaller than this (in the figure's unit) is noise, whatever its ratio: CPU steal 0 -> 0.03 %
#: is not "what changed" (0.5 points of a percentage, half a millisecond, ...)
MOVE_FLOOR = {"%": 0.5, "ms": 0.5, "µs": 500.0, "per second": 1.0, "I/O per second": 1.0,
              "bytes/s": 64 * 1024.0, "bytes": 1024 * 1024.0, "MHz": 10.0}


def moved_enough(unit: str, run: float, baseline: float) -> bool:
    """At least 10 % (the score's cut) and beyond the unit's floor."""
    return abs(run - baseline) >= MOVE_FLOOR.get(unit, 0.0) and moved_score(run, baseline) >= math.log2(1.1)


def moved_score(run: float, baseline: float) -> float:
    """How far a figure moved, symmetric and bounded: |log2| of the ratio, each side lifted by 1 %
    of the larger (so 0 → something scores about 6.7, not infinity, and noise near zero little)."""
    eps = 0.01 * max(abs(run), abs(baseline)) or 1.0
    return abs(math.log2((abs(run) + eps) / (abs(baseline) + eps)))


#: how long after a run's end to look for each series' first sample (vCenter's is 20 s apart)
AFTER_NS = 60 * 10**9


def _covering(rows: list[Row], since: int, until: int) -> list[Row]:
    """The samples whose interval overlaps [since, until]: a sample at `ts` stands for the time since
    the one before it (rates, averages), so those after `since` up to and including the first at or
    after `until`. A run shorter than the collection interval still has its sample."""
    out = []
    for r in rows:
        if r.ts <= since:
            continue
        out.append(r)
        if r.ts >= until:
            break
    return out


class _Reporter:
    def __init__(self, store: Source, overrides: dict[str, dict] | None):
        self.cache = CachedSource(store)
        self.overrides = overrides

    def figures(self, run: Run, until: int, stacks: list[StackConfig]) -> RunFigures:
        out = RunFigures(run, until)
        since = run.begin_ns
        groups: dict[tuple, list[Figure]] = defaultdict(list)
        for fig in FIGURES:
            groups[(fig.measurement, fig.entity, fig.where)].append(fig)
        for st in stacks:
            ent = out.entities[st.name] = resolve(self.cache, st, since, until)
            layers: dict[str, dict[str, Stat]] = {}
            charts: dict[str, list[tuple[float, float]]] = {}
            for figs in groups.values():
                series = ent.select(figs[0].entity, figs[0].measurement, figs[0].where)
                if not series:
                    continue
                rows = self.cache.load(series, since, until + AFTER_NS)
                fed: dict[str, list[tuple[list[int], list[float]]]] = {f.field: [] for f in figs}
                for s in series:
                    mine = _covering(rows[s.id], since, until)
                    if figs[0].entity in PLACED:  # only while the VM ran on this host
                        mine = [r for r in mine if ent.ran_there(s.tags, r.ts)]
                    if not mine:
                        continue
                    times = [r.ts for r in mine]
                    for name, found in fed.items():
                        # a declared number field (tests/docs_check.py): present or not, never text
                        try:
                            found.append((times, [r.fields[name] for r in mine]))
                        except KeyError:  # not in every sample
                            pairs = [(r.ts, v) for r in mine if (v := r.fields.get(name)) is not None]
                            if pairs:
                                found.append(([t for t, _ in pairs], [v for _, v in pairs]))
                for fig in figs:
                    found = fed[fig.field]
                    if not found:
                        continue
                    times, values = found[0] if len(found) == 1 else _combine(found, COMBINE[fig.combine])
                    layers.setdefault(fig.layer, {})[fig.id] = Stat.of(values, len(found))
                    if fig.key:
                        charts[fig.id] = [((t - since) / 1e9, v) for t, v in zip(times, values, strict=True)]
            if layers:
                out.stacks[st.name] = {layer: layers[layer] for layer in LAYERS if layer in layers}
                out.charts[st.name] = charts
            # the verdict reads the same entities' series, from the rows read above; then they go: a fleet's
            # rows all kept until the last stack were most of a report's memory (~340 MB for 100 stacks)
            v = stack_verdict(self.cache, st, since, until, self.overrides, ent)
            out.verdicts.append({**v.to_json(), "run": run.called})
            self.cache.refresh()
        return out


def _combine(found: list[tuple[list[int], list[float]]], how: Callable[[Iterable[float]], float],
             ) -> tuple[list[int], list[float]]:
    """Several series' points as one: `how` of the values at each time."""
    times = found[0][0]
    if all(t == times for t, _ in found[1:]):  # one collection cycle each: the usual case
        return times, [how(vs) for vs in zip(*(v for _, v in found), strict=True)]
    at: dict[int, list[float]] = defaultdict(list)
    for ts_, vs_ in found:
        for ts, v in zip(ts_, vs_, strict=True):
            at[ts].append(v)
    ordered = sorted(at)
    return ordered, [how(at[ts]) for ts in ordered]


def _findings(out: RunFigures, found: list[Finding], stacks: list[StackConfig]) -> None:
    """The findings opened during the run, worst first, with the stacks they belong to (their entities over
    the run)."""
    opened = [f for f in found if out.run.begin_ns <= f.first_seen <= out.until_ns]
    opened.sort(key=lambda f: (severity_rank(f.severity), f.first_seen))
    out.findings = opened
    owners = [out.entities[st.name] for st in stacks if st.name in out.entities]
    out.finding_stacks = [[e.name for e in owners if e.owns(f.subject)] for f in opened]


#: fewer stacks than this are reported in one process
PARALLEL_MIN_STACKS = 16


def _both(store: Source, stacks: list[StackConfig], run: Run, run_until: int, baseline: Run | None,
          base_until: int | None, overrides: dict[str, dict] | None) -> tuple[RunFigures, RunFigures | None]:
    # millions of short-lived rows and tuples, no cycles among them: the cyclic collector would only
    # walk them again and again (a fifth of the time); reference counting frees them
    collecting = gc.isenabled()
    gc.disable()
    try:
        r = _Reporter(store, overrides)
        return (r.figures(run, run_until, stacks),
                r.figures(baseline, base_until, stacks) if baseline is not None and base_until is not None else None)
    finally:
        if collecting:
            gc.enable()


def _part(job: tuple) -> tuple[RunFigures, RunFigures | None]:
    """One worker's share: the figures and verdicts of some stacks, from its own store connection."""
    path, *rest = job
    with Store(path) as store:
        return _both(store, *rest)


def _merge(parts: list[RunFigures], run: Run, until: int, stacks: list[StackConfig]) -> RunFigures:
    out = RunFigures(run, until)
    for p in parts:
        out.stacks.update(p.stacks)
        out.charts.update(p.charts)
        out.entities.update(p.entities)
        out.verdicts += p.verdicts
    order = {st.name: i for i, st in enumerate(stacks)}
    out.stacks = {k: out.stacks[k] for k in sorted(out.stacks, key=order.__getitem__)}
    out.verdicts.sort(key=lambda v: order[v["stack"]])
    return out


def build_report(store: Store, stacks: list[StackConfig], run: Run, baseline: Run | None = None,
                 overrides: dict[str, dict] | None = None, now_ns: int | None = None, workers: int = 1) -> Report:
    """The report of `run` (and its comparison with `baseline`) over `stacks`.

    With `workers` > 1 and many stacks, the stacks are shared out to that many processes, each
    reading its stacks' series over its own connection: reading and decoding samples is most of
    the work, and it is the same work whichever process does it."""
    now = now_ns if now_ns is not None else time.time_ns()
    run_until = run.until(now)
    base_until = baseline.until(now) if baseline is not None else None
    if workers > 1 and len(stacks) >= PARALLEL_MIN_STACKS:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        chunks = [stacks[i::workers] for i in range(workers)]
        jobs = [(store.path, chunk, run, run_until, baseline, base_until, overrides) for chunk in chunks]
        with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork")) as pool:
            parts = list(pool.map(_part, jobs))
        mine = _merge([p[0] for p in parts], run, run_until, stacks)
        theirs = _merge([p[1] for p in parts if p[1] is not None], baseline, base_until, stacks) \
            if baseline is not None and base_until is not None else None
    else:
        mine, theirs = _both(store, stacks, run, run_until, baseline, base_until, overrides)
    found = store.findings(open_only=False)
    report = Report(now, stacks, mine)
    _findings(mine, found, stacks)
    if theirs is not None:
        _findings(theirs, found, stacks)
        report.baseline = theirs
        report.moved = _moved(report)
    return report


def _moved(report: Report) -> list[Moved]:
    """Layers whose figures moved at least 10 % and beyond their unit's floor (mean, baseline to run),
    most first."""
    assert report.baseline is not None
    out = []
    for st in report.stacks:
        mine, theirs = report.run.stacks.get(st.name, {}), report.baseline.stacks.get(st.name, {})
        for layer in LAYERS:
            a, b = mine.get(layer, {}), theirs.get(layer, {})
            scored = sorted(((moved_score(a[k].mean, b[k].mean), k, change_pct(a[k].mean, b[k].mean))
                             for k in a if k in b and moved_enough(FIGURE_BY_ID[k].unit, a[k].mean, b[k].mean)),
                            reverse=True)
            if scored:
                out.append(Moved(st.name, layer, scored[0][0], [(k, c) for _score, k, c in scored[:3]]))
    return sorted(out, key=lambda m: -m.score)
