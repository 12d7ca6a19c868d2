"""The ONTAP collector: raw counters over SSH (default) or ONTAP's REST metrics."""

from __future__ import annotations

import time

from db2vtop.agent.core.model import Annotation, Fact, Record, now_ns
from db2vtop.collectors.ssh import SSHTarget
from db2vtop.collectors.storage.common import StorageCollector, StorageFormatError
from db2vtop.collectors.storage.ontap.cli import (
    FACT_COMMANDS,
    OntapCommandError,
    check_errors,
    fact_line,
    parse_fields,
    perf_line,
)
from db2vtop.collectors.storage.ontap.config import OntapConfig
from db2vtop.collectors.storage.ontap.metrics import CounterRow, FactRow, Key, Snapshot, facts, rows, snapshot
from db2vtop.collectors.storage.ontap.rest import OntapRest


class OntapSSH:
    """The clustershell over one SSH target: one round trip per cycle, one per fact table."""

    def __init__(self, cfg: OntapConfig, target: SSHTarget, timeout: float):
        self.cfg, self.target, self.timeout = cfg, target, timeout
        self.prev: Snapshot | None = None
        self.round_trips = 0

    def _run(self, line: str, what: str, refusals: list[str] | None = None) -> str:
        """The output of one line; an `Error:` it prints is raised, or kept in `refusals` when given."""
        self.round_trips += 1
        r = self.target.run_line(line, timeout=self.timeout, what=what)
        text = r.text()
        if refusals is None:
            check_errors(text, what)
        else:
            refusals += [f"ONTAP refused part of {what}: {ln.strip()[:300]}" for ln in text.splitlines()
                         if ln.lstrip().startswith("Error:")]
        if r.rc != 0 and not text.strip():
            err = r.stderr.decode("utf-8", "replace").strip()[:300]
            raise OntapCommandError(f"ONTAP {what} ended with status {r.rc}: {err or 'no output'}")
        return text

    def rows(self, lun_tags: dict[Key, dict[str, str]]) -> tuple[list[CounterRow], list[Annotation], list[str]]:
        """This cycle's rows and resets, and what went missing: commands the cluster refused (the objects
        the others printed still count) and counters it left out."""
        sent = time.monotonic()
        refusals: list[str] = []
        text = self._run(perf_line(), "statistics show -raw", refusals)
        cur = snapshot(text, (sent + time.monotonic()) / 2)  # the counters were read between send and receipt
        if not cur.objects:
            if refusals:
                raise OntapCommandError(refusals[0].replace("refused part of", "refused"))
            raise StorageFormatError("ONTAP statistics show -raw printed no Object: blocks "
                                     f"(first line: {text.strip().splitlines()[0][:80] if text.strip() else 'none'!r})")
        prev, self.prev = self.prev, cur
        if prev is None:
            return [], [], refusals
        found, resets, gaps = rows(prev, cur, self.cfg.min_ops_for_latency, lun_tags, self.cfg.vserver)
        return found, resets, refusals + gaps

    def facts(self) -> tuple[list[FactRow], dict[Key, dict[str, str]]]:
        tables = {what: parse_fields(self._run(fact_line(what, self.cfg.vserver), FACT_COMMANDS[what][0]))
                  for what in FACT_COMMANDS}
        return facts(tables)


class OntapCollector(StorageCollector):
    def __init__(self, cfg: OntapConfig, target: SSHTarget | None = None):
        super().__init__(cfg)
        self.first_delay = min(cfg.interval, 5.0)  # the SSH path needs a baseline sample first
        if cfg.effective_transport == "ssh":
            if target is None:
                raise ValueError("the ssh transport needs an SSHTarget")
            self.source: OntapSSH | OntapRest = OntapSSH(cfg, target, self.timeout)
        else:
            self.source = OntapRest(cfg, self.timeout)
        self.lun_tags: dict[Key, dict[str, str]] = {}

    @property
    def round_trips(self) -> int:
        return self.source.round_trips

    async def _rows(self) -> tuple[list[CounterRow], list[Annotation]]:
        found, resets, problems = await self.run_blocking(self.source.rows, self.lun_tags)
        for p in problems:
            self.problem(p)
        return found, resets

    async def start(self) -> None:
        if isinstance(self.source, OntapSSH):
            await self._rows()

    async def collect(self) -> list[Record]:
        found, resets = await self._rows()
        ts = now_ns()
        out: list[Record] = [*self.samples((r.measurement, r.tags, r.fields, ts) for r in found)]
        for a in resets:
            a.tags = {**self.base_tags, **a.tags}
            a.ts = ts
            out.append(a)
        return out

    async def describe(self) -> list[Fact]:
        found, self.lun_tags = await self.run_blocking(self.source.facts)
        ts = now_ns()
        return [self.fact(f.kind, f.tags, f.data, ts) for f in found]

    async def close(self) -> None:
        if isinstance(self.source, OntapRest):
            self.source.close()
        await super().close()
