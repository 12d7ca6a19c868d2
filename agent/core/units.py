"""Human-written durations and sizes ("20s", "7d", "1GiB") as seconds and bytes."""

from __future__ import annotations

import math
import re

_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)\s*(ms|s|m|h|d|w)")
_DURATION_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kKmMgGtT]i?[bB]?|[bB])?\s*$")
_SIZE_UNITS = {"": 1, "b": 1, "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12,
               "ki": 2**10, "mi": 2**20, "gi": 2**30, "ti": 2**40}


def parse_duration(text: str | int | float) -> float:
    """Seconds from "1h30m", "20s", "250ms", "7d" or a plain number of seconds.

    Always a finite number >= 0: NaN, infinities and numbers too large for a float
    (TOML allows `nan`, `inf` and 5,000-digit integers) raise ValueError like any typo.
    """
    if isinstance(text, bool):
        raise ValueError("a boolean is not a duration")
    if isinstance(text, int | float):
        return _finite(text, "duration")
    s = text.strip().lower().replace(" ", "")
    if not s:
        raise ValueError("empty duration")
    try:
        value = float(s)
    except ValueError:
        pos, total = 0, 0.0
        for m in _DURATION_PART.finditer(s):
            if m.start() != pos:
                break
            total += float(m.group(1)) * _DURATION_UNITS[m.group(2)]
            pos = m.end()
        if pos != len(s) or pos == 0:
            raise ValueError(f"not a duration: {text!r}") from None
        value = total
    return _finite(value, "duration")


def _finite(value: int | float, what: str) -> float:
    try:
        number = float(value)
    except OverflowError:  # an int beyond float range
        raise ValueError(f"a {what} too large") from None
    if not math.isfinite(number):
        raise ValueError(f"a {what} must be a finite number")
    if number < 0:
        raise ValueError(f"a {what} cannot be negative")
    return number


def parse_size(text: str | int) -> int:
    """Bytes from "1GiB", "500MB", "64k" or a plain number of bytes."""
    if isinstance(text, bool):
        raise ValueError("a boolean is not a size")
    if isinstance(text, int):
        if text < 0:
            raise ValueError("a size cannot be negative")
        return text
    m = _SIZE.match(text)
    if not m:
        raise ValueError(f"not a size: {text!r}")
    unit = (m.group(2) or "").lower().rstrip("b")
    return int(_finite(float(m.group(1)) * _SIZE_UNITS[unit], "size"))


def format_duration(seconds: float) -> str:
    """Short form used in messages and the template: 20s, 5m, 1h30m, 7d."""
    if seconds < 1:
        return f"{round(seconds * 1000)}ms"
    out, rest = [], round(seconds)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if rest >= size:
            out.append(f"{rest // size}{unit}")
            rest %= size
    return "".join(out) or "0s"


def format_bytes(n: float) -> str:
    """Binary units the way free(1) -h prints them: 512B, 3.2KiB, 1.5GiB."""
    value = float(n)
    if abs(value) < 1024:
        return f"{value:.0f}B"
    for unit in ("KiB", "MiB", "GiB"):
        value /= 1024
        if abs(value) < 1024:
            return f"{value:.1f}{unit}"
    return f"{value / 1024:.1f}TiB"
