"""The levels the TUI colours by and the verdict judges with: each scale names the thresholds of a rule
it is read from, after the user's `[checks.RULE]` overrides (checks/thresholds.py makes them): an
override that moves a finding also recolours the screen and moves the verdict. No level is written
anywhere else (tests/agent/core/test_read_model.py looks for one).

`Levels` is a value: the app has it made once from its config and hands it down to every view."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

#: the smallest value above zero: "any amount is a deviation" (balloon, host swap, drops)
ANY = math.ulp(0.0)


@dataclass(frozen=True)
class Scale:
    """A display level: `rule`'s `warn` and `crit` thresholds; a warn of None with `any_warns`
    means any value above zero warns (the practices that say "zero")."""

    rule: str
    warn: str | None = None
    crit: str | None = None
    any_warns: bool = False
    below: bool = False  # lower is worse (a hit ratio)


SCALES: dict[str, Scale] = {
    "ready": Scale("cpu-ready", "warn_pct", "crit_pct"),
    "steal": Scale("stack-verdict", None, "steal_pct"),  # the guest's steal at which the verdict blames the host
    "costop": Scale("vcpu-no-excess", "warn_pct", "crit_pct"),
    "limited": Scale("cpu-limit-none", "warn_pct", "crit_pct"),
    "cpu_busy": Scale("host-cpu-ceiling", "warn_pct", "crit_pct"),
    "mem_state": Scale("host-mem-state", "warn_state", "crit_state"),
    "balloon": Scale("balloon-zero", any_warns=True),
    "host_swap": Scale("host-swap-zero", any_warns=True),
    "guest_swap": Scale("guest-swap-zero", None, "crit_bytes_per_s", any_warns=True),
    "io_latency": Scale("guest-io-latency", "warn_ms", "crit_ms"),  # what the guest waits: await, VMDK, GAVG
    "kavg": Scale("disk-queue-saturation", "warn_kavg_ms", "crit_kavg_ms"),
    "qavg": Scale("disk-queue-saturation", "warn_qavg_ms", "crit_qavg_ms"),
    "queued": Scale("disk-queue-saturation", "warn_queued", "crit_queued"),
    "queue_used": Scale("disk-queue-saturation", "warn_pct", "crit_pct"),
    "queue_full": Scale("disk-queue-saturation", "warn_queue_full_per_s", "crit_queue_full_per_s"),
    "array_latency": Scale("na-perf-latency", "warn_ms", "crit_ms"),
    "log_write": Scale("db2-log-space", "warn_write_ms", "crit_write_ms"),
    "log_used": Scale("db2-log-space", "warn_pct", "crit_pct"),
    "log_buffer_full": Scale("db2-log-space", "warn_buffer_full_per_s", "crit_buffer_full_per_s"),
    "hit_ratio": Scale("db2-bp-warm", "warn_pct", "crit_pct", below=True),
    # shares of DB2's request time at which the verdict counts a symptom
    "log_disk_wait": Scale("stack-verdict", "symptom_log_disk_wait_pct"),
    "read_wait": Scale("stack-verdict", "symptom_read_wait_pct"),
    "lock_wait": Scale("stack-verdict", "symptom_lock_wait_pct"),
    "nonzero": Scale("", any_warns=True),  # drops and errors: no practice sets a level, any is worth seeing
}


@dataclass(frozen=True)
class Level:
    """A scale's warn and crit values; with `below`, values at or under them are the bad ones."""

    warn: float | None = None
    crit: float | None = None
    below: bool = False

    def grade(self, v: float | None) -> str | None:
        """"crit", "warn" or None for a value."""
        if v is None:
            return None
        crit, warn = self.crit, self.warn
        if self.below:
            return "crit" if crit is not None and v < crit else "warn" if warn is not None and v < warn else None
        return "crit" if crit is not None and v >= crit else "warn" if warn is not None and v >= warn else None


NO_LEVEL = Level()


@dataclass(frozen=True)
class Levels:
    """Every scale's level after the user's overrides, and those overrides (the verdict applies them per
    stack). Immutable: built once where the config is read, passed down."""

    by_scale: Mapping[str, Level] = field(default_factory=lambda: MappingProxyType({}))
    overrides: Mapping[str, Mapping[str, Any]] = field(default_factory=lambda: MappingProxyType({}))

    def __getitem__(self, scale: str) -> Level:
        return self.by_scale[scale]

    def of(self, scale: str | None) -> Level:
        """The level of a figure's scale (checks/figures.py `level`); none for a figure without one."""
        return self.by_scale[scale] if scale is not None else NO_LEVEL

