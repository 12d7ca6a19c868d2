"""Unisphere for PowerMax REST performance metrics per storage group.

`POST /univmax/restapi/performance/StorageGroup/keys {"symmetrixId"}` lists storage
groups (`storageGroupInfo[].storageGroupId`); `POST .../StorageGroup/metrics` with
`{symmetrixId, storageGroupId, startDate, endDate (epoch ms), dataFormat: "Average",
metrics: [...]}` answers `resultList.result[]`, one object per diagnostic interval (5 min)
with a `timestamp` in ms. Response times are in ms, throughput in MB/s (metric names as
Dell's Unisphere REST documentation and the powermax-splunk-addon use them).
"""

from __future__ import annotations

from typing import Any

from db2vtop.agent.core.model import FieldValue
from db2vtop.collectors.storage.common import StorageFormatError, number, rate_fields

METRICS = {"HostIOs": ("total_iops", 1.0), "HostReads": ("read_iops", 1.0), "HostWrites": ("write_iops", 1.0),
           "HostMBReads": ("read_bytes_per_s", 2.0**20), "HostMBWritten": ("write_bytes_per_s", 2.0**20)}
LATENCY = {"ResponseTime": ("avg_latency_ms", "HostIOs"), "ReadResponseTime": ("read_latency_ms", "HostReads"),
           "WriteResponseTime": ("write_latency_ms", "HostWrites")}
WINDOW_S = 300.0  # Unisphere's diagnostic interval
KEYS_PATH = "/univmax/restapi/performance/StorageGroup/keys"
METRICS_PATH = "/univmax/restapi/performance/StorageGroup/metrics"


def request(sid: str, group: str, start_ms: int, end_ms: int) -> dict:
    return {"symmetrixId": sid, "storageGroupId": group, "startDate": start_ms, "endDate": end_ms,
            "dataFormat": "Average", "metrics": [*METRICS, *LATENCY]}


def _checked(body: Any, what: str) -> dict:
    if not isinstance(body, dict):
        raise StorageFormatError(f"Unisphere {what}: expected a JSON object, got {str(body)[:80]!r}")
    if isinstance(body.get("message"), str):  # Unisphere reports refusals in a 200 body too
        raise StorageFormatError(f"Unisphere {what}: {body['message'][:300]}")
    return body


def groups(body: Any) -> list[str]:
    info = _checked(body, "StorageGroup/keys").get("storageGroupInfo")
    if not isinstance(info, list):
        raise StorageFormatError("Unisphere StorageGroup/keys: no storageGroupInfo list")
    return [str(i["storageGroupId"]) for i in info if isinstance(i, dict) and i.get("storageGroupId")]


def latest(body: Any, group: str, min_ops: int) -> tuple[int, dict[str, FieldValue]] | None:
    """(timestamp ms, fields) of the newest interval, or None when Unisphere has none yet."""
    result = _checked(body, f"metrics of {group}").get("resultList", {})
    items = result.get("result") if isinstance(result, dict) else None
    if not isinstance(items, list):
        raise StorageFormatError(f"Unisphere metrics of {group}: no resultList.result list")
    items = [i for i in items if isinstance(i, dict) and "timestamp" in i]
    if not items:
        return None
    newest = max(items, key=lambda i: number(i["timestamp"], f"{group} timestamp"))
    fields = rate_fields(newest.get, METRICS, LATENCY, 1.0, WINDOW_S, min_ops, group)
    return int(number(newest["timestamp"], f"{group} timestamp")), fields
