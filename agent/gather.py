"""`db2vtop triage`: one pass over recent history and one fresh look, then the judgement.

History comes from the store (whatever an agent recorded in the lookback window) and
from collectors that can look back themselves (vCenter keeps an hour of 20 s samples);
every configured source is also read once now. checks/triage.py judges what is gathered.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any, NamedTuple

from db2vtop.agent.assemble import build_collectors
from db2vtop.agent.core.admit import admit
from db2vtop.agent.core.clock import CLOCK
from db2vtop.agent.core.columns import ColumnSource
from db2vtop.agent.core.config import CoreConfig
from db2vtop.agent.core.influx_source import InfluxSource
from db2vtop.agent.core.model import Annotation, Fact, Finding, Sample
from db2vtop.agent.core.source import CachedSource
from db2vtop.agent.core.store import Store, StoreError
from db2vtop.agent.core.text import did_you_mean, plural
from db2vtop.checks.topology import infer_stacks, pick
from db2vtop.checks.triage import TriageResult, co_tenants, judge, kept_fields
from db2vtop.collectors.base import BaseCollector
from db2vtop.collectors.capabilities import DescribesVMs, KeepsHistory


async def _fresh(c: BaseCollector, lookback_s: float, vms: set[str] | None, facts_only: bool = False,
                 keep: Callable[[list[Sample]], object] | None = None,
                 note: Callable[[list[Annotation]], object] | None = None) -> tuple[list[Sample], list[Fact], str]:
    """One look at a source now (plus its own history where it keeps one); `facts_only`: what it describes.
    With `keep`, its samples go there as they come (vCenter's hour page by page), none are returned; with
    `note`, its annotations (vCenter's events in the look back)."""
    samples: list[Sample] = []
    facts: list[Fact] = []
    counts = [0, 0]  # samples kept, samples left out

    limit: asyncio.Timeout | None = None  # the look back's: the time spent keeping its pages is not its

    def take(records: list[Any]) -> None:
        started = time.monotonic()
        now, skew = CLOCK.now_ns(), int(c.clock_skew_s * 1e9)
        taken = admit(records, now - int(lookback_s * 1e9) - skew, now + skew)
        if note is not None:
            note(taken.annotations)
        counts[0] += len(taken.samples)
        counts[1] += taken.refused_samples
        if keep is None:
            samples.extend(taken.samples)
        else:
            keep(taken.samples)
        if limit is not None and limit.when() is not None:
            limit.reschedule(limit.when() + time.monotonic() - started)  # type: ignore[operator]

    try:
        await asyncio.wait_for(c.start(), c.timeout)
        await asyncio.sleep(c.first_delay)
        narrows = bool(vms) and isinstance(c, DescribesVMs)
        facts = await asyncio.wait_for(c.describe_vms(vms) if narrows else c.describe(), c.timeout)
        if facts_only:
            return [], facts, f"ok: {len(facts)} facts"
        keeps_history = isinstance(c, KeepsHistory)
        if keeps_history:
            async with asyncio.timeout(max(c.timeout, 60.0)) as limit:
                take(await c.lookback(lookback_s, vms, emit=take))
            limit = None
        # a source that keeps its own history gives "now" with it: for named VMs, that hour is all we need. The
        # look now comes after the hour: each series' samples arrive in time order (none to sort again)
        if not (vms and keeps_history):
            take(await asyncio.wait_for(c.collect(), c.timeout))
        bad = counts[1]
        status = f"ok: {plural(counts[0], 'sample')}, {plural(len(facts), 'fact')}" + (
            f", {plural(bad, 'sample')} left out (time outside the lookback and clock skew)" if bad else "")
    except TimeoutError:
        status = f"error: timed out after {c.timeout:g}s"
    except Exception as e:  # every failure is reported in the result, never raised
        status = f"error: {e}" if str(e) else f"error: {type(e).__name__}"
    return samples, facts, status


class NoSuchTargetError(ValueError):
    """A `--vm` or `--stack` that no configured or inferred stack has."""


def bare_vm(cfg: CoreConfig, name: str) -> str:
    """A `--vm` without its vCenter (`vc-prod/db01` -> `db01`): what the vSphere collectors look for."""
    vcenter, sep, vm = name.partition("/")
    return vm if sep and vcenter in {v.name for v in cfg.vcenter} else name


class Look(NamedTuple):
    """What one look at every configured source found: its samples (none when kept elsewhere), facts, each
    source's status ("ok: ..." or "error: ...") and the measurements and fact kinds only sources that failed
    write (`unread`: nothing renewed them now)."""

    samples: list[Sample]
    facts: list[Fact]
    sources: dict[str, str]
    unread: frozenset[str]


def look_now(cfg: CoreConfig, lookback_s: float = 0.0, vms: set[str] | None = None,
             progress: Callable[[str], None] = lambda _m: None, facts_only: bool = False,
             keep: ColumnSource | None = None, history_only: bool = False) -> Look:
    """Every configured source read once now, at once (`vms`: only those VMs' realtime hour); with
    `facts_only`, only what each describes (what `db2vtop stacks` infers stacks from); with `history_only`,
    only the sources that keep their own history. With `keep`, the samples are kept there as they come, each
    source's after the ones before it (rank 1, 2, ...), and the annotations they bring (vCenter's events in
    the look back)."""
    samples: list[Sample] = []
    facts: list[Fact] = []
    sources: dict[str, str] = {}
    collectors = [c for c in build_collectors(cfg) if c.name != "self"  # no store: no marker inbox
                  and (not history_only or isinstance(c, KeepsHistory))]
    if not collectors:
        return Look(samples, facts, sources, frozenset())
    for c in collectors:
        c.clock_skew_s = cfg.store.max_clock_skew
        if keep is not None and isinstance(c, KeepsHistory):  # a look back asks only for what is kept of it
            c.history_fields = keep.kept
    progress(("describing " if facts_only else "collecting now from ") + ", ".join(c.name for c in collectors))

    async def gather() -> list[tuple[list[Sample], list[Fact], str]]:
        try:
            return await asyncio.gather(*(
                _fresh(c, lookback_s, vms, facts_only, None if keep is None else partial(keep.add, rank=rank),
                       None if keep is None else keep.add_annotations)
                for rank, c in enumerate(collectors, 1)))
        finally:  # after all of them: collectors of one host share its SSH connection
            for c in collectors:
                with contextlib.suppress(Exception):
                    await c.close()

    read: set[str] = set()
    failed: set[str] = set()
    for c, (s, f, status) in zip(collectors, asyncio.run(gather()), strict=True):
        samples += s
        facts += f
        sources[c.name] = status
        (read if status.startswith("ok") else failed).update(c.declared)
    return Look(samples, facts, sources, frozenset(failed - read))


def run_triage(cfg: CoreConfig, store_path: Path, lookback_s: float,
               progress: Callable[[str], None] = lambda _m: None, now_ns: int | None = None,
               vms: Sequence[str] = (), stacks: Sequence[str] = (), source: str = "store",
               store_named: bool = False) -> TriageResult:
    """With source "influxdb" the history is every agent's, read from [influxdb], and the findings
    those agents recorded in the lookback count too. A store named on the command line (`store_named`)
    that does not exist is a source that could not be read: its history is what was asked for. The
    config's store missing is only history nobody recorded (triage with nothing but a vCenter)."""
    now = now_ns if now_ns is not None else CLOCK.now_ns()
    since = now - int(lookback_s * 1e9)
    sources: dict[str, str] = {}
    samples = ColumnSource(kept_fields(cfg))
    facts: list[Fact] = []
    recorded: list[Finding] = []
    fleet = source == "influxdb" and cfg.influxdb is not None
    if fleet or store_path.exists():
        name = "influxdb" if fleet else "store"
        progress(f"reading the last {lookback_s:g}s from {cfg.influxdb.url if fleet and cfg.influxdb else store_path}")
        try:
            with InfluxSource(cfg.influxdb) if fleet and cfg.influxdb else Store(store_path) as reader:
                facts += reader.facts()
                for m in reader.measurements():
                    samples.add(reader.rows(m, since, now))
                samples.add_annotations(reader.annotations(since, now))
                if fleet:
                    recorded = [f for f in reader.findings(open_only=False) if f.last_seen >= since]
            sources[name] = f"ok: {plural(len(samples), 'sample')}"
        except StoreError as e:
            sources[name] = f"error: {e}"
    elif store_named:
        sources["store"] = f"error: no store at {store_path}"
    else:
        sources["store"] = f"ok: none at {store_path} (nothing recorded there)"
    looked = look_now(cfg, lookback_s, {bare_vm(cfg, v) for v in vms} or None, progress, keep=samples)
    facts += looked.facts
    sources.update(looked.sources)
    samples.set_facts(facts)
    found = [i for i in infer_stacks(cfg, CachedSource(samples)) if i.rule != "guest"]
    chosen, missing = pick(found, vms, stacks)
    if missing:
        known = {n for i in found for n in (i.stack.name, i.stack.vm) if n}
        near = "".join(did_you_mean(m, known) for m in missing)
        raise NoSuchTargetError(f"no stack or VM named {', '.join(missing)}{near}; db2vtop stacks lists them")
    if vms or stacks:  # one VM's hour: the co-tenants its verdict's culprits rank are read too, from its episodes
        extra, start = co_tenants(samples, [i.stack for i in chosen], since, now, cfg)
        if extra:
            progress(f"reading {plural(len(extra), 'co-tenant VM')} of the contended resources")
            more = look_now(cfg, min(lookback_s, (now - start) / 1e9 + 60), extra, progress, keep=samples,
                            history_only=True)
            facts += more.facts
            samples.set_facts(facts)
            for name, status in more.sources.items():
                sources[name] = f"{sources.get(name, 'ok')}; co-tenants: {status}"
    progress(f"checking {plural(len(samples), 'sample')} and {plural(len(facts), 'fact')}, "
             f"{plural(len(chosen), 'stack')}")
    return judge(cfg, samples, facts, sources, lookback_s, now, [i.stack for i in chosen], bool(vms or stacks),
                 recorded, looked.unread)
