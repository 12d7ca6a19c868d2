"""What the array collectors share: their error type, tags, number parsing and facts.

Every array sample carries `storage` (the [[storage]] name) and `kind` (its vendor, as [[storage]]
says it) so a stack can join it to the VM's datastores; entity tags (volume, lun, naa, device) are
added per vendor.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any

from db2vtop.agent.core.model import Fact, FieldValue, Sample
from db2vtop.collectors.base import BaseCollector, CollectorError
from db2vtop.collectors.storage.config import StorageSection


class StorageFormatError(CollectorError):
    """An array answered with something its documented format does not allow."""


class StorageCollector(BaseCollector):
    complete_facts = True

    def __init__(self, cfg: StorageSection):
        super().__init__(f"storage:{cfg.name}", cfg.interval, cfg.timeout)
        self.cfg = cfg
        self.base_tags = {"storage": cfg.name, "kind": cfg.kind}

    def samples(self, rows: Iterable[tuple[str, dict[str, str], dict[str, FieldValue], int]]) -> list[Sample]:
        """(measurement, tags, fields, ts) as samples; one with a figure no array can produce is set aside
        and counted (the `db2vtop_thread` health), never stored: see `implausible`."""
        out = []
        for measurement, tags, fields, ts in rows:
            why = implausible(fields)
            if why is None:
                out.append(Sample(measurement, {**self.base_tags, **tags}, fields, ts))
            else:
                who = ", ".join(f"{k}={v}" for k, v in tags.items() if k not in ("naa", "serial"))
                self.supervisor.set_aside(self.thread, f"{measurement} {who}", why)
        return out

    def fact(self, kind: str, tags: dict[str, str], data: dict[str, Any], ts: int) -> Fact:
        return Fact(kind, {**self.base_tags, **tags}, data, ts)


#: what no one volume, LUN, device or node of an array does: a rate or latency past these comes from a
#: broken or hostile counter (a wrap, a jump, hundreds of digits), not from the array's work
MAX_IOPS = 1e8  # I/O (or queue-full events) per second
MAX_BYTES_PER_S = 1e12  # 1 TB/s
MAX_LATENCY_MS = 3_600_000.0  # an hour
_LIMITS = (("_latency_ms", MAX_LATENCY_MS), ("_bytes_per_s", MAX_BYTES_PER_S), ("_iops", MAX_IOPS),
           ("_per_s", MAX_IOPS), ("_pct", 100.0))


def implausible(fields: dict[str, FieldValue]) -> str | None:
    """Why these figures cannot be an array's (not finite, negative, or past what the hardware can do), or None."""
    for name, v in fields.items():
        if isinstance(v, bool) or not isinstance(v, int | float):
            continue
        if not math.isfinite(v) or v < 0:
            return f"{name} = {v!r} is not a rate, latency or share"
        limit = next((lim for suffix, lim in _LIMITS if name.endswith(suffix)), None)
        if limit is not None and v > limit:
            return f"{name} = {v:g} is more than any array does ({limit:g}): a counter wrapped, jumped or is broken"
    return None


def number(value: Any, what: str) -> float:
    """A finite number from a JSON number or a numeric string (XtremIO sends both)."""
    if isinstance(value, bool):
        raise StorageFormatError(f"{what}: {value!r} is not a number")
    if isinstance(value, int | float):
        result = float(value)
    elif isinstance(value, str):
        try:
            result = float(value.strip())
        except ValueError:
            raise StorageFormatError(f"{what}: {value[:40]!r} is not a number") from None
    else:
        raise StorageFormatError(f"{what}: {type(value).__name__} is not a number")
    if not math.isfinite(result):
        raise StorageFormatError(f"{what}: {value!r} is not a finite number")
    return result


def optional_number(value: Any, what: str) -> float | None:
    """Like number(), but absent values ("", "N/A", null) are None rather than an error."""
    if value is None or (isinstance(value, str) and value.strip() in ("", "N/A", "-")):
        return None
    return number(value, what)


def rate_fields(get: Callable[[str], Any], rates: dict[str, tuple[str, float]],
                latencies: dict[str, tuple[str, str]], latency_to_ms: float, window_s: float, min_ops: int,
                what: str) -> dict[str, FieldValue]:
    """Fields from an array's own per-second averages.

    `rates` maps a property to (field, factor); `latencies` maps a latency property to
    (field, the IOPS property it averages over). A latency is kept only when that IOPS
    times the window the array averaged over reaches `min_ops` (and is above zero).
    """
    out: dict[str, FieldValue] = {}
    for prop, (field, factor) in rates.items():
        v = optional_number(get(prop), f"{what} {prop}")
        if v is not None:
            out[field] = round(v * factor, 4)
    for prop, (field, base) in latencies.items():
        lat = optional_number(get(prop), f"{what} {prop}")
        ops = optional_number(get(base), f"{what} {base}")
        if lat is not None and ops is not None and ops > 0 and ops * window_s >= min_ops:
            out[field] = round(lat * latency_to_ms, 4)
    return out
