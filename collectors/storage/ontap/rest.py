"""ONTAP over its REST API (ONTAP 9.7+), for sites where the monitoring host may not SSH to the cluster.

`GET /api/storage/volumes?fields=metric` (and luns, cluster/nodes) returns ONTAP's own
averages over `metric.duration` (e.g. PT15S): IOPS, throughput in bytes/s, latency in
microseconds (docs.netapp.com/us-en/ontap-automation/rest/performance_metrics.html).
The same minimum-operations rule as the CLI path applies to latencies.

Collections are read as plain JSON through the arrays' bounded client (storage/restclient.py: one
whole-call deadline and `max_response_bytes` per request), a page of PAGE_RECORDS records at a time
following ONTAP's `_links.next.href`, at most MAX_RECORDS records of a kind: an answer from outside
can cost no more memory or time than that, whatever it holds.
"""

from __future__ import annotations

import logging
import re
from typing import Any
from urllib.parse import urlencode

from db2vtop.agent.core.model import Annotation, FieldValue
from db2vtop.collectors.storage.common import StorageFormatError, optional_number, rate_fields
from db2vtop.collectors.storage.ontap.config import OntapConfig
from db2vtop.collectors.storage.ontap.metrics import CounterRow, FactRow, Key, naa_for_serial, volume_of
from db2vtop.collectors.storage.restclient import RestClient

log = logging.getLogger(__name__)

VOLUME_FIELDS = "name,svm.name,metric"
LUN_FIELDS = "name,svm.name,metric"
NODE_FIELDS = "name,metric"
#: the collection each record kind is read from (ONTAP 9 REST API reference)
PATHS = {"Volume": "/api/storage/volumes", "Lun": "/api/storage/luns", "Node": "/api/cluster/nodes",
         "Aggregate": "/api/storage/aggregates", "Port": "/api/network/ethernet/ports",
         "Igroup": "/api/protocols/san/igroups"}
#: records asked for per page (ONTAP's max_records), and the most of one kind read (a cluster holds at most
#: some tens of thousands of volumes or LUNs)
PAGE_RECORDS = 1000
MAX_RECORDS = 200_000
MAX_PAGES = 1000
_DURATION = re.compile(r"^PT(?:(\d{1,6})H)?(?:(\d{1,6})M)?(?:(\d{1,9}(?:\.\d{1,9})?)S)?$")


def duration_s(value: Any) -> float:
    m = _DURATION.match(value) if isinstance(value, str) else None
    if not m or not any(m.groups()):
        raise StorageFormatError(f"ONTAP REST: metric.duration {str(value)[:20]!r} is not an ISO 8601 duration")
    h, mnt, s = m.groups()
    return int(h or 0) * 3600 + int(mnt or 0) * 60 + float(s or 0)  # digits bounded by the pattern


def _next_page(body: dict, resource: str) -> str | None:
    """The path of the next page ONTAP links to, if any: a path on the same server, nothing else."""
    href = _get(body, "_links.next.href")
    if href is None:
        return None
    if not isinstance(href, str) or not href.startswith("/api/") or len(href) > 4096:
        raise StorageFormatError(f"ONTAP REST: {resource}: a next page at {str(href)[:80]!r}, not a path of this "
                                 "server's /api")
    return href


def _get(d: dict, path: str) -> Any:
    for part in path.split("."):
        if not isinstance(d, dict):
            return None
        d = d.get(part)
    return d


RATES = {f"iops.{k}": (f"{k}_iops", 1.0) for k in ("total", "read", "write", "other")} | {
    f"throughput.{k}": (f"{k}_bytes_per_s", 1.0) for k in ("read", "write")}
LATENCIES = {f"latency.{k}": (f"{'avg' if k == 'total' else k}_latency_ms", f"iops.{k}")
             for k in ("total", "read", "write", "other")}


def perf_fields(metric: Any, min_ops: int, what: str) -> dict[str, FieldValue] | None:
    """Fields of one `metric` object (latency in microseconds); None unless ONTAP marked it "ok"."""
    if not isinstance(metric, dict) or metric.get("status") != "ok":
        return None
    window = duration_s(metric.get("duration"))
    return rate_fields(lambda p: _get(metric, p), RATES, LATENCIES, 0.001, window, min_ops, what)


class OntapRest:
    """ONTAP's REST API over one bounded client; records are read as plain dicts."""

    def __init__(self, cfg: OntapConfig, timeout: float):
        self.cfg = cfg
        self.client = RestClient(cfg, timeout)

    @property
    def round_trips(self) -> int:
        return self.client.round_trips

    def close(self) -> None:
        self.client.close()

    def records(self, resource: str, fields: str) -> list[dict]:
        """Every record of one kind, page by page."""
        query = {"fields": fields, "max_records": str(PAGE_RECORDS)}
        if self.cfg.vserver and resource in ("Volume", "Lun", "Igroup"):
            query["svm.name"] = self.cfg.vserver
        path: str | None = f"{PATHS[resource]}?{urlencode(query)}"
        out: list[dict] = []
        pages = 0
        while path is not None:
            pages += 1
            body = self.client.request("GET", path)
            found = body.get("records") if isinstance(body, dict) else None
            if not isinstance(found, list) or not all(isinstance(r, dict) for r in found):
                raise StorageFormatError(f"ONTAP REST: {resource} answer not understood: expected "
                                         f"{{\"records\": [...]}}, got {str(body)[:80]!r}")
            out += found
            if len(out) > MAX_RECORDS or pages >= MAX_PAGES:
                raise StorageFormatError(f"ONTAP REST: {resource}: more than {min(len(out), MAX_RECORDS)} records "
                                         f"in {pages} pages; stopped reading")
            path = _next_page(body, resource)
        return out

    def rows(self, lun_tags: dict[Key, dict[str, str]]) -> tuple[list[CounterRow], list[Annotation], list[str]]:
        """ONTAP's own averages; no counter resets or missing counters to report (ONTAP flags those in
        metric.status)."""
        min_ops = self.cfg.min_ops_for_latency
        out: list[CounterRow] = []
        for v in self.records("Volume", VOLUME_FIELDS):
            name, svm = str(v.get("name", "")), str(_get(v, "svm.name") or "")
            fields = perf_fields(v.get("metric"), min_ops, f"volume {name}")
            if fields:
                out.append(CounterRow("storage_volume", {"vserver": svm, "volume": name}, fields))
        for lun in self.records("Lun", LUN_FIELDS):
            path, svm = str(lun.get("name", "")), str(_get(lun, "svm.name") or "")
            fields = perf_fields(lun.get("metric"), min_ops, f"lun {path}")
            if fields:
                tags = {"vserver": svm, "volume": volume_of(path), "lun": path, **lun_tags.get((svm, path), {})}
                out.append(CounterRow("storage_lun", tags, fields))
        for node in self.records("Node", NODE_FIELDS):
            metric = node.get("metric")
            if isinstance(metric, dict) and metric.get("status") == "ok":
                cpu = optional_number(metric.get("processor_utilization"), "node processor_utilization")
                if cpu is not None:
                    out.append(CounterRow("storage_node", {"node": str(node.get("name", ""))}, {"cpu_busy_pct": cpu}))
        return out, [], []

    def facts(self) -> tuple[list[FactRow], dict[Key, dict[str, str]]]:
        out: list[FactRow] = []
        vol_size: dict[tuple[str, str], float | None] = {}
        for v in self.records("Volume", "name,svm.name,aggregates.name,size,space.snapshot.reserve_percent,"
                                        "snapshot_policy.name,guarantee.type,access_time_enabled"):
            key = (str(_get(v, "svm.name") or ""), str(v.get("name", "")))
            vol_size[key] = optional_number(v.get("size"), "volume size")
            aggrs = v.get("aggregates") or [{}]
            out.append(FactRow("storage_volume", {"vserver": key[0], "volume": key[1]}, {
                "aggregate": aggrs[0].get("name") if isinstance(aggrs[0], dict) else None,
                "size_bytes": vol_size[key],
                "snapshot_reserve_pct": optional_number(_get(v, "space.snapshot.reserve_percent"), "reserve"),
                "snapshot_policy": _get(v, "snapshot_policy.name"), "atime_update": v.get("access_time_enabled"),
                "space_guarantee": _get(v, "guarantee.type")}))
        luns = self.records("Lun", "name,svm.name,location.volume.name,serial_number,os_type,space.size,"
                                   "space.guarantee.requested")
        totals: dict[tuple[str, str], float] = {}
        for lun in luns:
            key = (str(_get(lun, "svm.name") or ""), str(_get(lun, "location.volume.name") or ""))
            totals[key] = totals.get(key, 0.0) + (optional_number(_get(lun, "space.size"), "lun size") or 0.0)
        lun_tags: dict[Key, dict[str, str]] = {}
        for lun in luns:
            svm, path = str(_get(lun, "svm.name") or ""), str(lun.get("name", ""))
            volume = str(_get(lun, "location.volume.name") or volume_of(path))
            serial = str(lun.get("serial_number") or "")
            ids = naa_for_serial(serial)
            tags = {"serial": serial, "serial_hex": ids[0], "naa": ids[1]} if ids else {}
            lun_tags[(svm, path)] = tags
            vsize, total = vol_size.get((svm, volume)), totals.get((svm, volume), 0.0)
            out.append(FactRow("storage_lun", {"vserver": svm, "volume": volume, "lun": path, **tags}, {
                "size_bytes": optional_number(_get(lun, "space.size"), "lun size"), "ostype": lun.get("os_type"),
                "space_reserve": _get(lun, "space.guarantee.requested"), "volume_size_bytes": vsize,
                "luns_in_volume_bytes": total,
                "volume_to_luns_ratio": round(vsize / total, 3) if vsize and total else None}))
        for a in self.records("Aggregate", "name,node.name,block_storage.primary.raid_type,"
                                           "block_storage.primary.raid_size"):
            size = optional_number(_get(a, "block_storage.primary.raid_size"), "raid_size")
            out.append(FactRow("storage_aggregate", {"aggregate": str(a.get("name", ""))}, {
                "node": _get(a, "node.name"), "raid_type": _get(a, "block_storage.primary.raid_type"),
                "raid_group_size": int(size) if size is not None else None}))
        for p in self.records("Port", "name,node.name,mtu"):
            mtu = optional_number(p.get("mtu"), "port mtu")
            tags = {"node": str(_get(p, "node.name") or ""), "port": str(p.get("name", ""))}
            out.append(FactRow("storage_port", tags, {"mtu": int(mtu) if mtu is not None else None}))
        for g in self.records("Igroup", "name,svm.name,protocol,os_type,initiators.name"):
            inits = [i.get("name") for i in g.get("initiators") or [] if isinstance(i, dict) and i.get("name")]
            out.append(FactRow("storage_igroup", {"vserver": str(_get(g, "svm.name") or ""),
                                                  "igroup": str(g.get("name", ""))},
                               {"protocol": g.get("protocol"), "ostype": g.get("os_type"), "initiators": inits}))
        return out, lun_tags

