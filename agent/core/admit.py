"""What a record from outside passes before it is stored or judged: one set of checks for the agent's
runtime (each cycle's records) and triage's look now (a source's records and its own history).

A record is taken when its time is an integer of nanoseconds within the window given (now give or take
the clock skew allowed; triage's reaches back over its lookback too) and its name a string; else it is
refused, with why. A sample's values are cleaned of what no store can hold (clean_fields), one by one,
and a sample left with none is dropped: there is nothing of it to keep.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

from db2vtop.agent.core.model import Annotation, Fact, Record, Sample, clean_fields, record_problem


class Admitted(NamedTuple):
    """Records by kind, as admit() took them, and those it refused, each with why."""

    samples: list[Sample]
    facts: list[Fact]
    annotations: list[Annotation]
    refused: list[tuple[Record | Fact, str]]

    @property
    def refused_samples(self) -> int:
        return sum(type(r) is Sample for r, _ in self.refused)


def admit(records: Iterable[Record | Fact], earliest_ns: int, latest_ns: int) -> Admitted:
    """The records that may be stored or judged, by kind, in their order (see the module's doc)."""
    samples: list[Sample] = []
    facts: list[Fact] = []
    annotations: list[Annotation] = []
    refused: list[tuple[Record | Fact, str]] = []
    for r in records:
        # the common case inline (a cycle of a large vCenter has a hundred thousand samples); record_problem
        # says why for the rest
        ts, t = r.ts, type(r)
        name = r.measurement if t is Sample else r.event if t is Annotation else r.kind
        if not (type(ts) is int and earliest_ns <= ts <= latest_ns and type(name) is str and name):
            problem = record_problem(r, earliest_ns, latest_ns)
            if problem is not None:
                refused.append((r, problem))
                continue
        if t is Sample:
            r.fields = clean_fields(r.fields)
            if r.fields:
                samples.append(r)
        elif t is Fact:  # a collector that follows changes hands facts in with its samples
            facts.append(r)
        else:
            annotations.append(r)
    return Admitted(samples, facts, annotations, refused)
