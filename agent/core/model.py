"""The records that flow from collectors to the store, sinks and checks.

A Sample has the InfluxDB line-protocol shape so the embedded store and InfluxDB hold
the same thing; a Fact is slowly changing configuration that checks compare against
practices; an Annotation marks a moment (benchmark marker, counter reset).
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, Protocol

from db2vtop.agent.core.clock import CLOCK

FieldValue = int | float | str | bool
SELF_MEASUREMENT = "db2vtop_collector"  # the runtime's sample of each collector cycle
SINK_MEASUREMENT = "db2vtop_sink"  # each agent's InfluxDB sink: delivery, backlog, errors
ALERT_MEASUREMENT = "db2vtop_alert"  # each agent's alert receivers: firing, delivery, backlog
AGENT_MEASUREMENT = "db2vtop_agent"  # each agent's own process: its cost
THREAD_MEASUREMENT = "db2vtop_thread"  # each agent thread's health (agent/core/supervise.py)


def now_ns() -> int:
    """The time records are stamped with: the system clock, held against jumps (agent/core/clock.py)."""
    return CLOCK.now_ns()


def canonical_tags(tags: dict[str, str]) -> str:
    """One text per tag set, so a series has exactly one key in the store."""
    return json.dumps(tags, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


@dataclass(slots=True)
class Sample:
    measurement: str
    tags: dict[str, str]
    fields: dict[str, FieldValue]
    ts: int = field(default_factory=now_ns)


#: the whole data of a removal version (Fact.removal)
REMOVED: dict[str, Any] = {"_removed": True}


@dataclass(slots=True)
class Fact:
    """Configuration of one entity (a VM, a disk, a DB2 database) at a time.

    `kind` names the entity type, `tags` identify the entity, `data` holds its settings.
    The store keeps a new version only when `data` changes.
    """

    kind: str
    tags: dict[str, str]
    data: dict[str, Any]
    ts: int = field(default_factory=now_ns)

    @classmethod
    def removal(cls, kind: str, tags: dict[str, str], ts: int | None = None) -> Fact:
        """The version that says the entity is gone (a VM deleted or renamed, a host removed): current facts
        leave it out and the checks resolve its findings; its history keeps it."""
        return cls(kind, dict(tags), dict(REMOVED), now_ns() if ts is None else ts)

    @property
    def removed(self) -> bool:
        return self.data == REMOVED


#: strings up to this long are interned in facts: names, states and types a fleet repeats thousands of times
SHORT_TEXT = 64


def shared_strings(data: Any) -> Any:
    """`data` (a fact's nested dicts and lists) with its short strings interned, in place: the same value in
    thousands of facts (a power state, a controller type, a datastore) is then held once."""
    items = data.items() if isinstance(data, dict) else enumerate(data) if isinstance(data, list) else ()
    for k, v in items:
        if type(v) is str:
            if len(v) <= SHORT_TEXT:
                data[k] = sys.intern(v)
        elif isinstance(v, dict | list):
            shared_strings(v)
    return data


@dataclass(slots=True)
class Annotation:
    """A point event on the shared time axis: a marker, a counter reset, a restart. `event` says which
    (stored and sent as its `kind`)."""

    event: str
    name: str
    tags: dict[str, str] = field(default_factory=dict)
    text: str = ""
    ts: int = field(default_factory=now_ns)


Record = Sample | Annotation

class Severity(StrEnum):
    """A finding's severity, worst first. A StrEnum: stored, sent and compared as its plain word."""

    CRITICAL = "critical"
    WARNING = "warning"
    INFO = "info"

    @property
    def rank(self) -> int:
        """0 for the worst: sort keys put critical first."""
        return _RANK[self]


_RANK = {s: i for i, s in enumerate(Severity)}


def severity_rank(severity: str | None) -> int:
    """Sort key of a stored severity word; anything unknown sorts after info."""
    return _RANK.get(severity, len(_RANK)) if severity else len(_RANK)  # type: ignore[call-overload]


def worse(a: str | None, b: str | None) -> str | None:
    """The more severe of two severities (None = fine)."""
    if a is None or b is None:
        return a if b is None else b
    return a if severity_rank(a) <= severity_rank(b) else b


@dataclass(slots=True)
class Finding:
    """A departure from a documented practice, open until its condition clears."""

    rule: str
    severity: Severity
    subject: dict[str, str]  # "layer" plus the entity's tags
    summary: str
    evidence: dict[str, Any]
    why: str
    fix: str
    references: list[str]
    first_seen: int
    last_seen: int
    resolved_at: int | None = None

    @property
    def key(self) -> str:
        """One open finding per rule and subject."""
        return self.rule + " " + canonical_tags(self.subject)

    @property
    def stale_since(self) -> int | None:
        """When its entity last reported, once its source has missed its cycles since (checks/engine.py):
        still open, no longer current."""
        ts = self.evidence.get("stale_since_ns")
        return ts if isinstance(ts, int) and not isinstance(ts, bool) else None


class Output(Protocol):
    """Where results go: the store writer, sinks such as InfluxDB, the check runner.

    submit() must not block: each output queues and works on its own thread.
    """

    def submit(self, samples: Iterable[Sample] = (), facts: Iterable[Fact] = (),
               annotations: Iterable[Annotation] = (), findings: Iterable[Finding] = ()) -> None: ...


INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
#: how far from now a time read from outside (a source's clock, a marker file) may be, by default
CLOCK_SKEW_S = 86400.0


def storable(v: object) -> bool:
    """Whether a time-series store can hold this value (see clean_fields)."""
    if isinstance(v, float):
        return math.isfinite(v)
    if isinstance(v, int) and not isinstance(v, bool):
        return INT64_MIN <= v <= INT64_MAX
    return isinstance(v, str | bool)


def clean_fields(fields: dict[str, FieldValue]) -> dict[str, FieldValue]:
    """Drop values no time-series store can hold: NaN, infinities, None, integers outside 64 bits,
    anything but a number, a bool or a string. The same dict when it holds none (nearly always): a cycle
    of a large vCenter has a hundred thousand samples, each would be copied."""
    for v in fields.values():  # the exact types inline: a call per value cost more than the test
        t = v.__class__
        if t is float:
            if v - v != 0.0:  # NaN and infinities give NaN
                break
        elif t is int:
            if not INT64_MIN <= v <= INT64_MAX:
                break
        elif not storable(v):
            break
    else:
        return fields
    return {k: v for k, v in fields.items() if storable(v)}


def record_problem(r: Sample | Annotation | Fact, earliest_ns: int, latest_ns: int) -> str | None:
    """Why a record from outside cannot be taken as it is, else None: its time must be an integer of
    nanoseconds within [earliest_ns, latest_ns] (now give or take the clock skew allowed) and its name a
    string. Values are cleaned separately (clean_fields): one bad value costs only itself."""
    ts = r.ts
    if type(ts) is not int:
        return f"time {ts!r} is not an integer of nanoseconds"
    if not earliest_ns <= ts <= latest_ns:
        return f"time {_iso_or_raw(ts)} is outside {_iso_or_raw(earliest_ns)} .. {_iso_or_raw(latest_ns)}"
    name = r.measurement if type(r) is Sample else r.event if type(r) is Annotation else r.kind
    if type(name) is not str or not name:
        return f"name {name!r} is not a string"
    return None


def describe_record(r: Sample | Annotation | Fact) -> str:
    """One line naming a record, for the log line that says it was set aside."""
    if isinstance(r, Sample):
        return f"sample {r.measurement} {r.tags} at {r.ts!r}"
    if isinstance(r, Annotation):
        return f"annotation {r.event} {r.name!r} at {r.ts!r}"
    if isinstance(r, Fact):
        return f"fact {r.kind} {r.tags} at {r.ts!r}"
    return f"{type(r).__name__} {r!r}"


def _iso_or_raw(ns: int) -> str:
    try:
        return datetime.fromtimestamp(ns / 1e9, UTC).isoformat(timespec="seconds")
    except (OverflowError, ValueError, OSError):
        return str(ns)
