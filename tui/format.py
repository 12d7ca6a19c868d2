"""Compact number formatting for panes: the units are in the column headers' spirit."""

from __future__ import annotations

_BLOCKS = " ▁▂▃▄▅▆▇█"


def spark(values: list[float], width: int = 20, top: float | None = None) -> str:
    """A text sparkline for table cells (Textual's Sparkline widget is for panes)."""
    values = values[-width:]
    if not values:
        return ""
    high = top if top is not None else max(values)
    if high <= 0:
        return _BLOCKS[1] * len(values)
    return "".join(_BLOCKS[max(1, min(8, round(v / high * 8)))] for v in values)


def rate(v: float) -> str:
    """Bytes per second in binary units, e.g. 1.5M/s."""
    for unit in ("", "K", "M", "G"):
        if abs(v) < 1024:
            return f"{v:.0f}{unit}/s" if unit == "" else f"{v:.1f}{unit}/s"
        v /= 1024
    return f"{v:.1f}T/s"


def num(v: float, digits: int = 1) -> str:
    return f"{v:.{digits}f}"


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
    return f"{seconds / 3600:.1f}h ago"
