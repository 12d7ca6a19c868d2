"""admit(): the checks a record from outside passes before the runtime stores it or triage judges it."""

from __future__ import annotations

import math

from db2vtop.agent.core.admit import admit
from db2vtop.agent.core.model import Annotation, Fact, Sample

NOW = 1_800_000_000 * 10**9
LO, HI = NOW - 60 * 10**9, NOW + 60 * 10**9


def test_records_within_the_window_are_taken_by_kind_in_their_order():
    s1, s2 = Sample("m", {"vm": "a"}, {"v": 1.0}, NOW), Sample("m", {"vm": "b"}, {"v": 2}, LO)
    f = Fact("vm", {"vm": "a"}, {"cpus": 4}, HI)
    a = Annotation("marker", "deploy", ts=NOW)
    taken = admit([s1, f, a, s2], LO, HI)
    assert taken.samples == [s1, s2] and taken.facts == [f] and taken.annotations == [a]
    assert taken.refused == [] and taken.refused_samples == 0


def test_a_record_whose_time_or_name_will_not_do_is_refused_with_why():
    early = Sample("m", {}, {"v": 1.0}, LO - 1)
    late = Annotation("marker", "x", ts=HI + 1)
    not_ns = Sample("m", {}, {"v": 1.0}, float(NOW))  # type: ignore[arg-type]
    nameless = Sample("", {}, {"v": 1.0}, NOW)
    no_kind = Fact(None, {}, {}, NOW)  # type: ignore[arg-type]
    taken = admit([early, late, not_ns, nameless, no_kind], LO, HI)
    assert (taken.samples, taken.facts, taken.annotations) == ([], [], [])
    why = dict((id(r), problem) for r, problem in taken.refused)
    assert "is outside" in why[id(early)] and "is outside" in why[id(late)]
    assert why[id(not_ns)].endswith("is not an integer of nanoseconds")
    assert why[id(nameless)] == "name '' is not a string" and why[id(no_kind)] == "name None is not a string"
    assert taken.refused_samples == 3


def test_a_sample_keeps_its_storable_values_and_goes_when_none_is_left():
    mixed = Sample("m", {}, {"ok": 1.0, "nan": math.nan, "big": 2**70, "none": None}, NOW)  # type: ignore[dict-item]
    empty = Sample("m", {}, {"inf": math.inf}, NOW)
    taken = admit([mixed, empty], LO, HI)
    assert taken.samples == [mixed] and mixed.fields == {"ok": 1.0}
    assert taken.refused == []  # an empty sample is not refused (its time was fine): there is nothing to keep


def test_the_runtime_and_triage_take_records_by_it():
    """One copy of the checks: neither the runtime nor triage's look now tests a record's time itself."""
    from db2vtop.agent import gather, runtime

    assert runtime.admit is admit and gather.admit is admit
    for module in (runtime, gather):
        assert not hasattr(module, "record_problem") and not hasattr(module, "clean_fields")
