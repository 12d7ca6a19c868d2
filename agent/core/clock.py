"""Time the agent can trust: the system clock, checked against the monotonic clock.

Every time db2vtop stamps on what it records (its own samples, the window it asks a source for, the
clock skew a source's times are held to, the store's retention) comes from here. The system clock can
be stepped under a running agent (an NTP step, a VM resumed with a stale clock, `date -s`), and what is
stamped with it then lands days off: a jump forward past `retention` made the store delete its whole
history within seconds, and a step back stamped samples in the hour already recorded. The monotonic
clock (CLOCK_BOOTTIME, which counts a host's suspend too) is never stepped, so the difference between
the two changes only when the system clock is stepped:

- a step of less than `TOLERANCE_NS` is followed (NTP's small corrections);
- a jump forward is logged, and time goes on by the monotonic clock meanwhile, so a jump that comes
  back (a wrong date set and undone) never reaches a timestamp; one that holds for `SETTLE_S` is taken
  for the time (a VM resumed after a long suspend) and logged again;
- a step back is logged and never followed: time goes on by the monotonic clock until the system clock
  catches up with it, so nothing is stamped before what was already recorded.

`RetentionClock` is the store's: it only ever moves with the monotonic clock, from the newest data the
store held when it opened, so no jump of the system clock, taken or not, can make retention delete.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime

from db2vtop.agent.core.units import format_duration

log = logging.getLogger(__name__)

#: a change of the system clock against the monotonic one smaller than this is followed as it is
TOLERANCE_NS = 1_000_000_000
#: how long a jump forward must hold before it is taken for the time
SETTLE_S = 300.0


def monotonic_ns() -> int:
    """A clock no one can step: CLOCK_BOOTTIME where there is one (it goes on through a suspend)."""
    return time.clock_gettime_ns(_MONOTONIC)


_MONOTONIC = getattr(time, "CLOCK_BOOTTIME", time.CLOCK_MONOTONIC)


def iso_utc(ns: int) -> str:
    return datetime.fromtimestamp(ns / 1e9, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Clock:
    """The system clock as db2vtop uses it: `now_ns()`, with jumps held off (see the module's text).
    Thread-safe; cheap on the path where nothing jumped (two clock reads)."""

    def __init__(self, wall: Callable[[], int] = time.time_ns, mono: Callable[[], int] = monotonic_ns,
                 settle_s: float = SETTLE_S):
        self._wall, self._mono, self.settle_ns = wall, mono, int(settle_s * 1e9)
        self._lock = threading.Lock()
        self._offset = wall() - mono()  # the trusted time minus the monotonic clock
        self._jump = 0  # how far the system clock is from the trusted time (0: in step)
        self._jumped_at = 0  # monotonic time the jump was first seen
        self.jumps = 0  # jumps seen since the start

    @property
    def jumped_ns(self) -> int:
        """How far the system clock is from the time db2vtop keeps (0 when in step)."""
        return self._jump

    def now_ns(self) -> int:
        wall, mono = self._wall(), self._mono()
        off = wall - mono
        if not self._jump and abs(off - self._offset) <= TOLERANCE_NS:
            self._offset = off  # in step: small corrections are followed
            return wall
        with self._lock:
            return self._judge(wall, mono, off)

    def now(self) -> float:
        """now_ns() in seconds, as time.time() gives it."""
        return self.now_ns() / 1e9

    def _judge(self, wall: int, mono: int, off: int) -> int:
        jump = off - self._offset
        trusted = mono + self._offset
        if abs(jump) <= TOLERANCE_NS:
            if self._jump:
                log.warning("the system clock is back in step with the monotonic clock (after %s off): db2vtop "
                            "follows it again", format_duration((mono - self._jumped_at) / 1e9))
            self._offset, self._jump = off, 0
            return wall
        if not self._jump or abs(jump - self._jump) > TOLERANCE_NS:  # a jump, or another one
            self._jump, self._jumped_at = jump, mono
            self.jumps += 1
            if jump > 0:
                log.warning("the system clock jumped %s forward (it says %s, the monotonic clock %s): db2vtop keeps "
                            "the monotonic clock's time, so nothing is stamped in the future and the store's "
                            "retention deletes nothing early; it takes the system clock's time if that holds for %s",
                            format_duration(jump / 1e9), iso_utc(wall), iso_utc(trusted),
                            format_duration(self.settle_ns / 1e9))
            else:
                log.warning("the system clock went %s back (it says %s, the monotonic clock %s): db2vtop keeps the "
                            "monotonic clock's time until the system clock catches up, so nothing is stamped before "
                            "what it has already recorded", format_duration(-jump / 1e9), iso_utc(wall),
                            iso_utc(trusted))
            return trusted
        if jump > 0 and mono - self._jumped_at >= self.settle_ns:
            log.warning("the system clock has held its new time (%s ahead) for %s: db2vtop takes it as the time "
                        "from now on", format_duration(jump / 1e9), format_duration(self.settle_ns / 1e9))
            self._offset, self._jump = off, 0
            return wall
        return trusted


class RetentionClock:
    """The time the store's retention counts from: `start_ns` (the newest data the store held when it
    opened, or the time then if that is earlier) moved on by the monotonic clock only, and never past
    the trusted time. A jump of the system clock, even one taken for the time, never lets retention
    delete: it takes effect at the next start."""

    def __init__(self, start_ns: int, clock: Clock | None = None, mono: Callable[[], int] = monotonic_ns):
        self._clock = clock or CLOCK
        self._mono = mono
        self._start, self._mono0 = start_ns, mono()

    def now_ns(self) -> int:
        return min(self._start + self._mono() - self._mono0, self._clock.now_ns())


#: the process's clock: agent/core/model.py now_ns() reads it
CLOCK = Clock()
