"""The XtremIO collector: two XMS requests per cycle (clusters, volumes)."""

from __future__ import annotations

from db2vtop.agent.core.model import Fact, Record, now_ns
from db2vtop.collectors.storage.common import StorageCollector, optional_number
from db2vtop.collectors.storage.restclient import RestClient
from db2vtop.collectors.storage.xtremio.api import (
    CLUSTER,
    CLUSTER_PROPS,
    VOLUME,
    VOLUME_FACT_PROPS,
    VOLUME_PROPS,
    naa,
    name_of,
    objects,
    path,
    perf_fields,
)
from db2vtop.collectors.storage.xtremio.config import XtremioConfig


class XtremioCollector(StorageCollector):
    def __init__(self, cfg: XtremioConfig):
        super().__init__(cfg)
        self.client = RestClient(cfg, self.timeout)

    @property
    def round_trips(self) -> int:
        return self.client.round_trips

    def _read(self) -> list[tuple[str, dict[str, str], dict]]:
        # assumed: XMS rates average over about our interval; no document says (README, "Checked against")
        window, min_ops = self.cfg.interval, self.cfg.min_ops_for_latency
        out = []
        for c in objects(self.client.request("GET", path("clusters", CLUSTER_PROPS)), "clusters"):
            name = name_of(c, "clusters")
            out.append(("storage_cluster", {"cluster": name},
                        perf_fields(c, CLUSTER, window, min_ops, f"cluster {name}")))
        for v in objects(self.client.request("GET", path("volumes", VOLUME_PROPS)), "volumes"):
            name = name_of(v, "volumes")
            tags = {"cluster": str(v.get("sys-name") or ""), "volume": name}
            if naa(v):
                tags["naa"] = naa(v)
            out.append(("storage_volume", tags, perf_fields(v, VOLUME, window, min_ops, f"volume {name}")))
        return out

    async def collect(self) -> list[Record]:
        found = await self.run_blocking(self._read)
        ts = now_ns()
        return [*self.samples((m, tags, fields, ts) for m, tags, fields in found if fields)]

    def _facts(self) -> list[tuple[str, dict[str, str], dict]]:
        out = []
        for v in objects(self.client.request("GET", path("volumes", VOLUME_FACT_PROPS)), "volumes"):
            name = name_of(v, "volumes")
            size_kb = optional_number(v.get("vol-size"), f"volume {name} vol-size")
            lbs = optional_number(v.get("lb-size"), f"volume {name} lb-size")
            tags = {"cluster": str(v.get("sys-name") or ""), "volume": name}
            if naa(v):
                tags["naa"] = naa(v)
            out.append(("storage_volume", tags, {"size_bytes": int(size_kb * 1024) if size_kb is not None else None,
                                                 "logical_block_size": int(lbs) if lbs is not None else None}))
        return out

    async def describe(self) -> list[Fact]:
        found = await self.run_blocking(self._facts)
        ts = now_ns()
        return [self.fact(k, tags, data, ts) for k, tags, data in found]

    async def close(self) -> None:
        self.client.close()
        await super().close()
