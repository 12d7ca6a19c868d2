"""What only some sources do, each opted into by a collector's class beside BaseCollector.

A collector is BaseCollector (collectors/base.py): `collect()`, with `describe()` and `close()`. Whoever runs
it (the runtime, the pipeline, triage's look now) tests for each of these with isinstance and uses it only
where a collector has it; none of them is a default that does nothing.

- `Streams`: a cycle hands its records on in parts as they are ready, each part once the outputs allow
  (vCenter: a 10,000-VM cycle need not be held whole); such a cycle may run longer than `timeout`.
- `KeepsHistory`: its source keeps samples of its own (vCenter's realtime hour): a first cycle reaches back
  into them, a look back reads them, and after a restart it goes on after the samples the store holds.
- `Resumes`: after a restart, it goes on from the facts the last run stored (not reading them all again).
- `ResumesLog`: it reads a log of its source (vCenter's events) on after the newest entry the store holds.
- `DescribesVMs`: it can read the facts of named VMs only (triage of one VM).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Iterable

from db2vtop.agent.core.model import Annotation, Fact, Record, canonical_tags


class Streams(ABC):
    #: the collector's own cycle timeout (BaseCollector)
    timeout: float
    #: set by the runtime while a cycle runs: takes records the cycle has ready before collect() returns, so
    #: a cycle of a large source (10,000 VMs' samples) need not hold them all until its end. Facts of an
    #: entity go before its samples (live rules read them).
    handoff: Callable[[list[Record | Fact]], None] | None = None
    #: set by the runtime with handoff: awaited before asking the source for more, it waits while the
    #: outputs are behind (back-pressure: a large source's cycle is held to what they take)
    pace: Callable[[], Awaitable[None]] | None = None

    async def paced(self) -> None:
        """Wait, if the runtime says so, until what this cycle handed on is taken (see `pace`)."""
        if self.pace is not None:
            await self.pace()

    def cycle_timeout(self) -> float:
        """How long the next cycle may run: `timeout`, unless the collector knows it is a longer one (a first
        cycle held to the outputs' pace)."""
        return self.timeout


class KeepsHistory(ABC):
    #: the measurements whose history its first cycle hands on itself (with history_samples): whoever judges
    #: them need not read them from the store at a restart as well
    reaches_back: frozenset[str] = frozenset()
    #: samples of its own history its first cycle reaches back for (set by whoever runs it: as many as the
    #: judging of its samples needs to start from)
    history_samples: int = 0
    #: measurement -> the fields of it that history is needed for (None: all of them); a measurement not named
    #: needs none. None: every field of every measurement (set by whoever runs it or looks back)
    history_fields: dict[str, frozenset[str] | None] | None = None

    @abstractmethod
    async def lookback(self, seconds: float, vms: Iterable[str] | None = None,
                       emit: Callable[[list[Record]], object] | None = None) -> list[Record]:
        """Samples of the past `seconds` its source keeps, for triage; `vms` narrows it to the VMs that matter
        (a whole vCenter's hour can be millions of samples). With `emit`, a source that reads it in parts hands
        each part there as it comes and returns the rest."""

    @abstractmethod
    def resume_marks(self, newest: Callable[[str], Iterable[tuple[dict[str, str], int]]]) -> bool:
        """Where the last run's samples end: `newest` gives a measurement's series in the store, each as (tags,
        its newest sample's ts). True when the collector will ask its source only for samples after those (its
        first cycle then hands on no history the store holds: whoever judges them reads that from the store)."""


class Resumes(ABC):
    #: the fact kinds it resumes from (the store's, handed in before start())
    resumes: tuple[str, ...] = ()
    #: BaseCollector's: kind -> the entities (canonical tags -> tags) the last whole read of that kind reported
    _reported: dict[str, dict[str, dict[str, str]]]

    @abstractmethod
    def resume(self, facts: Iterable[Fact]) -> None:
        """The facts of `resumes` kinds the last run stored, before start(): a source whose facts are costly to
        read (vCenter's device lists) reads again only what changed since."""

    def remember(self, facts: Iterable[Fact]) -> None:
        """Entities reported before (a resumed run's stored facts): BaseCollector.removals() compares with
        them."""
        for f in facts:
            self._reported.setdefault(f.kind, {})[canonical_tags(f.tags)] = f.tags


class ResumesLog(ABC):
    #: annotation kinds whose log it reads on after the newest the store holds (vCenter's events)
    resumes_after: tuple[str, ...] = ()

    @abstractmethod
    def resume_annotations(self, stored: list[Annotation]) -> None:
        """The annotations of `resumes_after` kinds the store holds (those within the clock skew the store
        accepts), before start(): it goes on after the newest, reading none twice."""


class DescribesVMs(ABC):
    @abstractmethod
    async def describe_vms(self, vms: Iterable[str]) -> list[Fact]:
        """Facts for triage of the named VMs, its read narrowed to them."""
