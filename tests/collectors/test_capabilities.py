"""The collector contract: BaseCollector is collect() (+ describe(), close()); what only some sources do is a
capability their class opts into (collectors/capabilities.py), which the runtime tests for."""

from __future__ import annotations

import asyncio

import pytest

from db2vtop.agent.core.model import Sample
from db2vtop.agent.runtime import Runtime
from db2vtop.collectors.base import BaseCollector
from db2vtop.collectors.capabilities import DescribesVMs, KeepsHistory, Resumes, ResumesLog, Streams

#: what serves only some sources, each now a capability's
NOT_BASE = ("lookback", "describe_vms", "resume", "resumes", "resumes_after", "resume_annotations", "resume_marks",
            "remember", "cycle_timeout", "reaches_back", "history_samples", "history_fields", "handoff", "pace",
            "paced")


class Plain(BaseCollector):
    def __init__(self):
        super().__init__("plain", 60.0, 5.0)

    async def collect(self):
        return [Sample("tick", {"c": self.name}, {"v": 1.0})]


class Capture:
    def __init__(self):
        self.samples: list[Sample] = []

    def submit(self, samples, facts=(), annotations=()):
        self.samples += samples


def test_the_base_contract_holds_nothing_only_some_sources_do():
    assert [m for m in NOT_BASE if hasattr(BaseCollector, m)] == []
    assert {m for cap in (Streams, KeepsHistory, Resumes, ResumesLog, DescribesVMs) for m in dir(cap)} >= set(NOT_BASE)


def test_vsphere_opts_into_every_capability_and_the_other_sources_into_none():
    from db2vtop.collectors.vsphere.collector import VSphereCollector

    every = (Streams, KeepsHistory, Resumes, ResumesLog, DescribesVMs)
    assert all(issubclass(VSphereCollector, cap) for cap in every)
    assert not any(isinstance(Plain(), cap) for cap in every)


def test_a_capability_opted_into_must_be_there():
    class Forgot(BaseCollector, KeepsHistory):
        async def collect(self):
            return []

    with pytest.raises(TypeError, match="lookback"):
        Forgot("forgot", 60.0)  # type: ignore[abstract]


def test_a_collector_that_streams_is_handed_on_during_its_cycle_and_one_that_does_not_is_left_alone():
    class Streaming(BaseCollector, Streams):
        def __init__(self):
            super().__init__("streaming", 60.0, 5.0)

        def cycle_timeout(self):
            return 7.0

        async def collect(self):
            await self.paced()
            assert self.handoff is not None and self.pace is not None
            self.handoff([Sample("part", {"c": self.name}, {"v": 1.0})])
            return []

    plain, streaming, out = Plain(), Streaming(), Capture()
    runtime = Runtime([plain, streaming], [out])
    asyncio.run(runtime._cycle(plain))
    asyncio.run(runtime._cycle(streaming))
    assert not hasattr(plain, "handoff") and streaming.handoff is None and streaming.pace is None
    assert sorted(s.measurement for s in out.samples if s.measurement != "db2vtop_collector") == ["part", "tick"]
    assert [s.fields["status"] for s in out.samples if s.measurement == "db2vtop_collector"] == ["ok", "ok"]

