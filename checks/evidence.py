"""A finding's evidence in words a reader uses: values in their units, each with the threshold it was judged by.

Units follow from the field names (the collectors' declared convention, `agent.core.schema.unit_of`:
`_bytes`, `_pct`, `_ms`, `_per_s`...), so `balloon_bytes=6442450944.0, pct_of_vm_memory=9.38` with
`crit_pct_of_vm_memory=5` reads `balloon 6.0GiB, 9.4 % of vm memory (critical at 5 %)`. A threshold
names the value it applies to by the rest of its key after `warn_`/`crit_`/`min_`/`max_`; one that
matches no value is listed after the values, in its own unit.
"""

from __future__ import annotations

from typing import Any

from db2vtop.agent.core.schema import unit_of
from db2vtop.agent.core.units import format_bytes

LEVELS = (("warn_", "warning"), ("crit_", "critical"), ("min_", "at least"), ("max_", "at most"))


def _unit(key: str) -> str:
    return "%" if key.startswith("pct_") or key == "pct" else unit_of(key)


def _label(key: str) -> str:
    """`mem_balloon_bytes` -> `mem balloon`; `pct_of_vm_memory` -> `of vm memory` (the % goes before it)."""
    for suffix in ("_bytes_per_s", "_per_s", "_pct", "_ms", "_us", "_bytes", "_iops", "_mhz"):
        if key.endswith(suffix):
            key = key[: -len(suffix)]
            break
    if key.startswith("pct_"):
        key = key[4:]
    return key.replace("_", " ")


def amount(key: str, value: Any) -> str:
    """One value in its unit: 6.0GiB, 9.4 %, 12.0 ms, 1,450/s; text and flags as they are."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return str(value)
    unit = _unit(key)
    if unit == "bytes":
        return format_bytes(value)
    if unit == "bytes/s":
        return format_bytes(value) + "/s"
    number = f"{value:,.0f}" if abs(value) >= 100 or float(value).is_integer() else f"{value:.3g}"
    return {"%": f"{number} %", "ms": f"{number} ms", "µs": f"{number} µs", "per second": f"{number}/s",
            "I/O per second": f"{number} IOPS", "MHz": f"{number} MHz"}.get(unit, number)


def _threshold_target(key: str) -> tuple[str, str] | None:
    for prefix, word in LEVELS:
        if key.startswith(prefix):
            return key[len(prefix):], word
    return None


def describe(evidence: dict[str, Any]) -> str:
    """`values` and `thresholds` of a finding's evidence as one line of text."""
    values = {k: v for k, v in (evidence.get("values") or {}).items() if v is not None}
    thresholds = dict(evidence.get("thresholds") or {})
    beside: dict[str, list[str]] = {}
    rest: list[str] = []
    for key, limit in thresholds.items():
        target = _threshold_target(key)
        if target is None:
            rest.append(f"{_label(key)} {amount(key, limit)}")
            continue
        name, word = target
        match = name if name in values else next(
            (v for v in values if v.endswith("_" + name) or (_unit(v) == _unit(name) and _unit(name) and
                                                               sum(_unit(x) == _unit(name) for x in values) == 1)),
            None)
        text = f"{word} at {amount(name, limit)}"
        if match is None:
            rest.append(f"{_label(name) or 'threshold'}: {text}" if _label(name) else text)
        else:
            beside.setdefault(match, []).append(text)
    parts = []
    for key, v in values.items():
        label = _label(key)
        shown = f"{amount(key, v)} {label}".strip() if _unit(key) == "%" and key.startswith("pct") else \
            f"{label} {amount(key, v)}".strip()
        if key in beside:
            shown += f" ({', '.join(beside[key])})"
        parts.append(shown)
    line = ", ".join(parts)
    if rest:
        line += ("; " if line else "") + "thresholds: " + ", ".join(rest)
    return line
