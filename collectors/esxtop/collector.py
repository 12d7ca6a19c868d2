"""The [[esxtop]] collector: one `esxtop -b -a -d D -n 1` over SSH per cycle.

This is the 2-second path vCenter's 20-second realtime samples cannot give, and the only
source of remote NUMA memory (N%L). Samples are tagged host = the [[esxtop]] section's
name (name it as vSphere names the host so a stack can join them) plus vm (the VM's
display name) or device (the LUN's NAA id, as vSphere's canonicalName).

The first output of a host (and of every host name, or set of columns, it reports later: an
upgrade) is recorded as the `esxtop_host` fact: the objects its header exports and the
counters of the ones read here, with the NUMA columns found among them, so a release whose
names differ shows up as a finding (rule numa-locality) instead of NUMA fields that silently
never arrive.
"""

from __future__ import annotations

import logging
from typing import Any

from db2vtop.agent.core.clock import CLOCK
from db2vtop.agent.core.model import Fact, Record, Sample
from db2vtop.collectors.base import BaseCollector, CollectorError
from db2vtop.collectors.esxtop.batch import BatchSample, header_objects, parse_batch
from db2vtop.collectors.esxtop.config import EsxtopConfig
from db2vtop.collectors.ssh import SSHTarget

log = logging.getLogger(__name__)


class EsxtopCollector(BaseCollector):
    def __init__(self, cfg: EsxtopConfig, target: SSHTarget):
        super().__init__(f"esxtop:{cfg.name}", cfg.interval, cfg.timeout)
        self.cfg, self.target = cfg, target
        self.last: BatchSample | None = None
        self.header: dict[str, Any] | None = None  # the esxtop_host fact's data, from the host's first output

    def argv(self) -> list[str]:
        return ["esxtop", "-b", "-a", "-d", f"{self.cfg.delay:g}", "-n", "1"]

    def _run(self, known: dict[str, Any] | None) -> tuple[BatchSample, list[str] | None]:
        """This cycle's sample, and the header's objects when its host or columns are not those `known`."""
        r = self.target.run(self.argv(), timeout=self.timeout)
        if r.rc != 0:
            err = r.stderr.decode("utf-8", errors="replace").strip()[:200]
            if r.rc == 127:
                raise CollectorError(f"esxtop {self.cfg.name}: esxtop is not on the remote PATH (is "
                                     f"{self.target.where} an ESXi host?): {err}")
            raise CollectorError(f"esxtop {self.cfg.name}: esxtop exited {r.rc}: {err or 'no message'}")
        text = r.text()
        batch = parse_batch(text)
        new = known is None or batch.host != known["esxtop_hostname"] or batch.columns != known["columns"]
        return batch, (header_objects(text) if new else None)

    async def collect(self) -> list[Record]:
        batch, objects = await self.run_blocking(self._run, self.header)
        if objects is not None:
            self._new_host(batch, objects)
        self.last = batch
        ts = CLOCK.now_ns()
        host = self.cfg.name
        out: list[Record] = [Sample("esxtop_vm", {"host": host, "vm": vm}, fields, ts)
                             for vm, fields in batch.vms.items()]
        out += [Sample("esxtop_device", {"host": host, "device": dev}, fields, ts)
                for dev, fields in batch.devices.items()]
        return out

    def _new_host(self, batch: BatchSample, objects: list[str]) -> None:
        self.header = {"esxtop_hostname": batch.host, "objects": objects, "columns": batch.columns,
                       "numa_columns": batch.numa_columns}
        self.facts_stale = True  # describe() on the next cycle records it
        if not batch.numa_columns:
            seen = batch.columns.get("Group Memory")
            log.warning("esxtop %s: NUMA columns not found in esxtop output of %s (columns seen: %s)", self.cfg.name,
                        batch.host, ", ".join(seen) if seen else "no Group Memory columns")

    async def describe(self) -> list[Fact]:
        """The name the host gives itself in esxtop's columns (may be "localhost") and what its header holds."""
        if self.header is None:
            return []
        return [Fact("esxtop_host", {"host": self.cfg.name}, dict(self.header), CLOCK.now_ns())]

    async def close(self) -> None:
        await super().close()
        self.target.close()
