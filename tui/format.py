"""Compact number formatting for panes and tables; a missing value is "—", never 0."""

from __future__ import annotations

from db2vtop.agent.core.units import format_bytes

NONE = "—"


def rate(v: float | None) -> str:
    """Bytes per second in binary units, as sizes are written: 0B/s, 221.5KiB/s, 1.5MiB/s."""
    return NONE if v is None else f"{format_bytes(v)}/s"


def num(v: float | None, digits: int = 1) -> str:
    return NONE if v is None else f"{v:.{digits}f}"


def size(v: float | None) -> str:
    return NONE if v is None else format_bytes(v)


def bar(pct: float, width: int = 10) -> str:
    filled = max(0.0, min(pct, 100.0)) / 100 * width
    full = int(filled)
    part = " ▏▎▍▌▋▊▉"[int((filled - full) * 8)] if full < width else ""
    return ("█" * full + part).ljust(width)


def ago(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f}s ago"
    if seconds < 5400:
        return f"{seconds / 60:.0f}m ago"
    if seconds < 3 * 86400:
        return f"{seconds / 3600:.1f}h ago"
    return f"{seconds / 86400:.0f}d ago"


NUMBERS = (int, float)  # exact types: a bool is not a number here


def value(fields: dict, name: str) -> float | None:
    """A numeric field, or None when the sample does not carry it (left out, not zero)."""
    v = fields.get(name)
    return float(v) if type(v) in NUMBERS else None  # exact types: a bool is not a number here
