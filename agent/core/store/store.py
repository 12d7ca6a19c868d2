"""`Store`: one connection to the store's file and its rooms, a Source (agent/core/source.py) to readers and the
writer's one way in. The rooms share the connection and its field sets: `StoreFile` (files.py) opens the file,
`Writing` (writing.py) stores batches, `Sealing` (sealing.py) seals closed spans and applies retention, `Reading`
(reading.py) answers the reads."""

from __future__ import annotations

import sqlite3
from collections.abc import Collection, Iterable, Iterator, Sequence
from pathlib import Path

from db2vtop.agent.core.model import Annotation, Fact, FieldValue, Finding, Sample
from db2vtop.agent.core.source import Columns, Row, Series
from db2vtop.agent.core.store.encoding import Fieldsets
from db2vtop.agent.core.store.files import StoreFile
from db2vtop.agent.core.store.reading import Reading
from db2vtop.agent.core.store.sealing import Sealing
from db2vtop.agent.core.store.writing import Writing


class Store:
    """One connection to the store, a Source (agent/core/source.py). `writer=True` takes the process-wide
    writer lock."""

    def __init__(self, path: Path, *, writer: bool = False):
        self.file = StoreFile(path, writer=writer)
        self.path = self.file.path
        self.writer = writer
        self.fieldsets = Fieldsets(self.file.db)
        self.reading = Reading(self.file, self.fieldsets)
        self.writing = Writing(self.file.db, self.fieldsets)
        self.sealing = Sealing(self.file, self.fieldsets, self.writing.forget_series, self.reading.forget_chunk)

    @property
    def db(self) -> sqlite3.Connection:
        return self.file.db

    def close(self) -> None:
        self.file.close()
        for room in (self.fieldsets, self.reading, self.writing, self.sealing):
            room.db = None  # type: ignore[assignment]

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- writing (writing.py) and upkeep (sealing.py) ----------------------------------

    def write(self, samples: Sequence[Sample] = (), facts: Sequence[Fact] = (),
              annotations: Sequence[Annotation] = (), findings: Sequence[Finding] = ()) -> None:
        self.writing.write(samples, facts, annotations, findings)

    def enforce_retention(self, cutoff_ns: int, budget: int = 20000) -> int:
        return self.sealing.enforce_retention(cutoff_ns, budget)

    def seal_step(self, before_ns: int, budget: int = 20000) -> tuple[int, bool]:
        return self.sealing.seal_step(before_ns, budget)

    def compact(self) -> int:
        return self.sealing.compact()

    def release_free_pages(self) -> None:
        self.sealing.release_free_pages()

    # --- reading (reading.py) ------------------------------------------------------------

    def measurements(self) -> list[str]:
        return self.reading.measurements()

    def series(self, measurement: str | None = None) -> list[Series]:
        return self.reading.series(measurement)

    def series_count(self, measurement: str) -> int:
        return self.reading.series_count(measurement)

    def series_version(self) -> int:
        return self.reading.series_version()

    def rows(self, measurement: str, since_ns: int = 0, until_ns: int | None = None) -> Iterator[Row]:
        return self.reading.rows(measurement, since_ns, until_ns)

    def slices(self, measurement: str, since_ns: int, until_ns: int, step_ns: int,
               fields: Iterable[str] | None = None) -> Iterator[list[Row]]:
        return self.reading.slices(measurement, since_ns, until_ns, step_ns, fields)

    def rows_of(self, series: Iterable[Series], since_ns: int = 0, until_ns: int | None = None) -> Iterator[Row]:
        return self.reading.rows_of(series, since_ns, until_ns)

    def latest(self, measurement: str, since_ns: int = 0, until_ns: int | None = None,
               fields: Collection[str] | None = None) -> list[Row]:
        return self.reading.latest(measurement, since_ns, until_ns, fields)

    def present_at(self, measurement: str, until_ns: int) -> dict[int, int]:
        return self.reading.present_at(measurement, until_ns)

    def latest_columns(self, measurement: str, until_ns: int, fields: Collection[str]) -> Columns | None:
        return self.reading.latest_columns(measurement, until_ns, fields)

    def latest_of(self, series: Iterable[Series], since_ns: int = 0, until_ns: int | None = None,
                  fields: Collection[str] | None = None) -> list[Row]:
        return self.reading.latest_of(series, since_ns, until_ns, fields)

    def newest(self, measurement: str, since_ns: int, until_ns: int) -> list[tuple[int, int]]:
        return self.reading.newest(measurement, since_ns, until_ns)

    def window(self, series_id: int, field_name: str, since_ns: int,
               until_ns: int | None = None) -> list[tuple[int, FieldValue]]:
        return self.reading.window(series_id, field_name, since_ns, until_ns)

    def time_range(self) -> tuple[int, int] | None:
        return self.reading.time_range()

    def facts(self, kind: str | None = None) -> list[Fact]:
        return self.reading.facts(kind)

    def fact_history(self, kind: str, tags: dict[str, str]) -> list[Fact]:
        return self.reading.fact_history(kind, tags)

    def annotations(self, since_ns: int = 0, until_ns: int | None = None) -> list[Annotation]:
        return self.reading.annotations(since_ns, until_ns)

    def annotations_of(self, kinds: Collection[str], since_ns: int = 0,
                       until_ns: int | None = None) -> list[Annotation]:
        return self.reading.annotations_of(kinds, since_ns, until_ns)

    def findings(self, open_only: bool = True) -> list[Finding]:
        return self.reading.findings(open_only)
