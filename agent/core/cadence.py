"""When a source that reports every so often has gone quiet: one rule for every view and the checks.

A series is stale once its source has missed three of its own sampling periods (plus one, for
samples stamped a period before they arrive, as vCenter's realtime samples are). The period is
measured from the data itself, never assumed: a source nobody configured a period for still has one.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import pairwise
from statistics import median
from typing import Any

STALE_INTERVALS = 3
#: the least age that is ever stale: sub-second periods do not make a busy second look like an outage
MIN_STALE_S = 10.0


def is_stale(age_s: float | None, interval_s: float | None) -> bool:
    """Missed cycles: three periods, plus one for samples stamped a period before they arrive.
    A period not known yet (one sample so far) is not judged: any fixed guess would be wrong for
    some source."""
    if age_s is None or not interval_s:
        return False
    return age_s > stale_age_s(interval_s)


def stale_age_s(interval_s: float) -> float:
    """The age past which a source sampling every `interval_s` is stale (`is_stale`)."""
    return max((STALE_INTERVALS + 1) * interval_s, MIN_STALE_S)


def interval_of(points: Sequence[tuple[int, Any]]) -> float | None:
    """The sampling period of (ts ns, value) points, in seconds: the median of the last gaps."""
    gaps = [(b[0] - a[0]) / 1e9 for a, b in pairwise(points[-6:])]
    return median(gaps) if gaps else None
