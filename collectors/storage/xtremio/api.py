"""XMS REST API v3 requests and the samples they become.

`GET /api/json/v3/types/<type>?full=1&prop=...` answers `{"<type>": [ {...}, ... ],
"links": [...]}` with every requested property of every object in one request
(XtremIO RESTful API 3.x guide; the same objects telegraf's `inputs.xtremio` reads one
by one). Numbers often arrive as JSON strings, sometimes as numbers: both are accepted.
Units: IOPS per second, bandwidth in KB/s, latency in microseconds, capacities in KB.
"""

from __future__ import annotations

from typing import Any

from db2vtop.agent.core.model import FieldValue
from db2vtop.collectors.storage.common import StorageFormatError, rate_fields

PERF = {  # property -> (field, factor)
    "iops": ("total_iops", 1.0), "rd-iops": ("read_iops", 1.0), "wr-iops": ("write_iops", 1.0),
    "rd-bw": ("read_bytes_per_s", 1024.0), "wr-bw": ("write_bytes_per_s", 1024.0),
}
LATENCY = {"avg-latency": ("avg_latency_ms", "iops"), "rd-latency": ("read_latency_ms", "rd-iops"),
           "wr-latency": ("write_latency_ms", "wr-iops")}
CLUSTER = {"data-reduction-ratio": ("data_reduction_ratio", 1.0), "compression-factor": ("compression_ratio", 1.0),
           "dedup-ratio": ("dedup_ratio", 1.0), "free-ud-ssd-space-in-percent": ("free_ssd_pct", 1.0),
           "ud-ssd-space": ("physical_capacity_bytes", 1024.0), "ud-ssd-space-in-use": ("physical_used_bytes", 1024.0),
           "logical-space-in-use": ("logical_used_bytes", 1024.0)}
VOLUME = {"logical-space-in-use": ("logical_used_bytes", 1024.0)}

VOLUME_PROPS = ("name", "sys-name", "naa-name", *PERF, *LATENCY, *VOLUME)
VOLUME_FACT_PROPS = ("name", "sys-name", "naa-name", "vol-size", "lb-size")
CLUSTER_PROPS = ("name", *PERF, *LATENCY, *CLUSTER)


def path(resource: str, props: tuple[str, ...]) -> str:
    return f"/api/json/v3/types/{resource}?full=1" + "".join(f"&prop={p}" for p in props)


def objects(body: Any, resource: str) -> list[dict]:
    items = body.get(resource) if isinstance(body, dict) else None
    if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
        raise StorageFormatError(f"XMS {resource}: expected {{\"{resource}\": [...]}}, got {str(body)[:80]!r}")
    return items


def name_of(obj: dict, resource: str) -> str:
    name = obj.get("name")
    if not isinstance(name, str) or not name:
        raise StorageFormatError(f"XMS {resource}: an object without a name: {str(obj)[:80]!r}")
    return name


def perf_fields(obj: dict, extra: dict[str, tuple[str, float]], window_s: float, min_ops: int,
                what: str) -> dict[str, FieldValue]:
    """Rates and latencies of one cluster or volume (latency in microseconds)."""
    return rate_fields(obj.get, {**PERF, **extra}, LATENCY, 0.001, window_s, min_ops, what)


def naa(obj: dict) -> str | None:
    value = obj.get("naa-name")
    if isinstance(value, str) and value.strip():
        return "naa." + value.strip().lower()
    return None
