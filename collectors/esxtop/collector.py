"""The [[esxtop]] collector: one `esxtop -b -a -d D -n 1` over SSH per cycle.

This is the 2-second path vCenter's 20-second realtime samples cannot give, and the only
source of remote NUMA memory (N%L). Samples are tagged host = the [[esxtop]] section's
name (name it as vSphere names the host so a stack can join them) plus vm (the VM's
display name) or device (the LUN's NAA id, as vSphere's canonicalName).
"""

from __future__ import annotations

import time

from db2vtop.agent.core.model import Fact, Record, Sample
from db2vtop.collectors.base import BaseCollector, CollectorError
from db2vtop.collectors.esxtop.batch import BatchSample, parse_batch
from db2vtop.collectors.esxtop.config import EsxtopConfig
from db2vtop.collectors.ssh import SSHTarget


class EsxtopCollector(BaseCollector):
    def __init__(self, cfg: EsxtopConfig, target: SSHTarget):
        super().__init__(f"esxtop:{cfg.name}", cfg.interval, cfg.timeout)
        self.cfg, self.target = cfg, target
        self.last: BatchSample | None = None

    def argv(self) -> list[str]:
        return ["esxtop", "-b", "-a", "-d", f"{self.cfg.delay:g}", "-n", "1"]

    def _run(self) -> BatchSample:
        r = self.target.run(self.argv(), timeout=self.timeout)
        if r.rc != 0:
            err = r.stderr.decode("utf-8", errors="replace").strip()[:200]
            if r.rc == 127:
                raise CollectorError(f"esxtop {self.cfg.name}: esxtop is not on the remote PATH (is "
                                     f"{self.target.where} an ESXi host?): {err}")
            raise CollectorError(f"esxtop {self.cfg.name}: esxtop exited {r.rc}: {err or 'no message'}")
        return parse_batch(r.text())

    async def collect(self) -> list[Record]:
        batch = await self.run_blocking(self._run)
        if self.last is None or batch.host != self.last.host:
            self.facts_stale = True  # describe() on the next cycle records the new name
        self.last = batch
        ts = time.time_ns()
        host = self.cfg.name
        out: list[Record] = [Sample("esxtop_vm", {"host": host, "vm": vm}, fields, ts)
                             for vm, fields in batch.vms.items()]
        out += [Sample("esxtop_device", {"host": host, "device": dev}, fields, ts)
                for dev, fields in batch.devices.items()]
        return out

    async def describe(self) -> list[Fact]:
        """The name the host gives itself in esxtop's columns (may be "localhost")."""
        if self.last is None:
            return []
        return [Fact("esxtop_host", {"host": self.cfg.name}, {"esxtop_hostname": self.last.host}, time.time_ns())]

    async def close(self) -> None:
        await super().close()
        self.target.close()
