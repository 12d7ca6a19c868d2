"""The collection pipeline, wired once: collectors → runtime → store writer, check runner, sinks.

`agent` and `watch` both run it (watch inside the TUI), so a change to how results flow
(the check runner's resume, a sink, the marker inbox) reaches both. Closing order matters:
the check runner first, so its last finding changes still reach the store and the sink.

The check engine starts from history, as triage does: the store's recent samples are judged
before the first cycle's, and each collector whose source keeps history (vCenter's realtime hour)
reaches back in its first cycle for as many samples as the live rules need to open or clear a
finding, so the first Fleet frame and `db2vtop triage` agree.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from db2vtop.agent.assemble import build_alerter, build_collectors, build_sink, fact_check
from db2vtop.agent.core.clock import CLOCK
from db2vtop.agent.core.config import CoreConfig
from db2vtop.agent.core.source import Row
from db2vtop.agent.core.store import Store, StoreWriter
from db2vtop.agent.core.supervise import Supervisor
from db2vtop.agent.runtime import Runtime
from db2vtop.agent.sinks.spool import SpoolError
from db2vtop.checks.engine import Engine
from db2vtop.checks.runner import CheckRunner, build_engine
from db2vtop.collectors.base import BaseCollector
from db2vtop.collectors.capabilities import KeepsHistory, Resumes, ResumesLog

if TYPE_CHECKING:  # the sink's modules (line protocol, the InfluxDB reader) only with [influxdb]: build_sink
    from db2vtop.agent.sinks.alerts import Alerter
    from db2vtop.agent.sinks.influx import InfluxSink

log = logging.getLogger(__name__)

T = TypeVar("T")

#: the most of the store's history the check engine starts from
HISTORY_MAX_S = 3600.0
#: rows of that history read and judged at a time (in time slices)
HISTORY_BATCH = 10_000


class Pipeline:
    """One store writer for the process's life; the check runner, sink and runtime are rebuilt
    on a reload. Opening raises StoreLockedError when another process writes the store.

    Every thread of it runs under one supervisor (agent/core/supervise.py): whoever runs the
    pipeline (the agent's service) stops it when one of them cannot go on."""

    def __init__(self, cfg: CoreConfig, store_path: Path):
        self.cfg = cfg
        self.supervisor = Supervisor()
        self.writer = StoreWriter(store_path, cfg.store.retention, supervisor=self.supervisor)
        self.sink: InfluxSink | None = None
        self.alerter: Alerter | None = None
        self.checks: CheckRunner | None = None
        self._closing = threading.Lock()  # the agent's watchdog may close it from its own thread
        self._closed = False
        try:
            self.sink = build_sink(cfg, store_path, self.supervisor)
            self.alerter = build_alerter(cfg, store_path, self.supervisor)
            self._start(build_engine(cfg))
        except BaseException:
            self.close()
            raise

    @property
    def sinks(self) -> list[InfluxSink]:
        return [self.sink] if self.sink else []

    @property
    def outputs(self) -> list:
        """Where the check runner's findings go besides the store: the sink and the alerts."""
        return [*self.sinks, *([self.alerter] if self.alerter else [])]

    def _start(self, engine: Engine) -> None:
        """The check runner and the collectors that can, resumed from the store on the writer's thread
        (after queued batches)."""
        self.checks = CheckRunner(engine, [self.writer, *self.outputs], self.supervisor)
        collectors = build_collectors(self.cfg, self.writer.path, self.sinks, self.alerter)
        self.checks.declared = {c.name: c.declared for c in collectors if c.declared}
        needed, fields = engine.history_samples(), engine.history_fields()
        for c in collectors:
            if isinstance(c, KeepsHistory):  # its first cycle reaches back as far as the live rules need
                c.history_samples, c.history_fields = needed, fields
        self.writer.call(lambda store: self._resume(store, collectors, engine))
        self.runtime = Runtime(collectors, [self.writer, self.checks, *self.outputs], fact_check(self.cfg),
                               self.supervisor, self.cfg.store.max_clock_skew)

    def _resume(self, store: Store, collectors: list[BaseCollector], engine: Engine) -> None:
        """One read of the stored facts serves the check runner and the collectors that resume from them; the
        store's samples of the last few cycles of the slowest collector are the check engine's history, read
        on its own thread and connection."""
        assert self.checks is not None
        facts = store.facts()
        span_s = min(engine.history_samples() * max((c.interval for c in collectors), default=0.0), HISTORY_MAX_S)
        now = CLOCK.now_ns()

        def newest(measurement: str) -> Iterator[tuple[dict[str, str], int]]:
            """(tags, newest ts) of each series of the measurement with a sample in the last hour."""
            found = dict(store.newest(measurement, now - int(HISTORY_MAX_S * 1e9), now))
            return ((s.tags, found[s.id]) for s in store.series(measurement) if s.id in found)

        # what a collector hands on again itself in its first cycle (vCenter's realtime hour) is not read twice;
        # one that resumes after the samples the store holds hands on none of them again: they are read here
        again = {m for c in collectors if isinstance(c, KeepsHistory) and c.history_samples > 1
                 and not c.resume_marks(newest) for m in c.reaches_back}
        measurements = sorted(engine.live_measurements() & set(store.measurements()) - again)
        fields = engine.history_fields()
        path = store.path

        def history() -> Iterator[list[Row]]:
            """The span in time slices, each every measurement's rows of it: a 10,000-VM store's history is
            held a slice at a time (about HISTORY_BATCH rows), never whole."""
            since = now - int(span_s * 1e9)
            with Store(path) as reader:
                rows = sum(reader.series_count(m) for m in measurements) * engine.history_samples()
                step = (now - since) // max(1, min(-(-rows // HISTORY_BATCH), engine.history_samples())) + 1
                yield from ([r for part in parts for r in part] for parts in zip(
                    *(reader.slices(m, since, now, step, fields.get(m)) for m in measurements), strict=True))

        self.checks.resume(store, facts, history)
        for c in collectors:
            if isinstance(c, Resumes) and c.resumes:
                c.resume([f for f in facts if f.kind in c.resumes])
        # a log read on after the newest stored (vCenter's events): what the store would accept, no older
        readers = [c for c in collectors if isinstance(c, ResumesLog) and c.resumes_after]
        logs = sorted({k for c in readers for k in c.resumes_after})
        stored = store.annotations_of(logs, now - int(self.cfg.store.max_clock_skew * 1e9), now) if logs else []
        for c in readers:
            c.resume_annotations([a for a in stored if a.event in c.resumes_after])

    def reload(self, new: CoreConfig, engine: Engine) -> None:
        """Apply a re-read config: collectors and checks anew, the sink only if [influxdb] changed
        (its spool stays on disk); [store] changes wait for a restart."""
        if self.checks is not None:
            self.checks.close()
            self.checks = None
        if new.store != self.cfg.store:
            log.warning("reload: [store] changes take effect at the next restart")
        if new.influxdb != self.cfg.influxdb:
            new = self._reload_sink(new)
        if (new.alert, new.alerting, new.checks, new.stack) != (self.cfg.alert, self.cfg.alerting, self.cfg.checks,
                                                                 self.cfg.stack):
            new = self._reload_alerter(new)
        self.cfg = new
        self._start(engine)

    def _reload_sink(self, new: CoreConfig) -> CoreConfig:
        old = self.cfg.influxdb
        if self.sink is not None:
            self.sink.close(timeout=0)
        if new.influxdb and old and new.influxdb.spool_dir != old.spool_dir:
            log.warning("reload: spool_dir changed; points spooled in %s are sent after a restart with the old "
                        "spool_dir", old.spool_dir)
        self.sink, new = self._rebuilt(build_sink, new, "InfluxDB sink", "[influxdb]", replace(new, influxdb=old))
        return new

    def _reload_alerter(self, new: CoreConfig) -> CoreConfig:
        """The alerts anew from the new config: what each receiver waits for stays in its spool, and the
        state file keeps what each was told (a receiver no longer configured is told nothing more)."""
        if self.alerter is not None:
            self.alerter.close(timeout=0)
            self.alerter = None
        self.alerter, new = self._rebuilt(build_alerter, new, "alerts", "[[alert]] sections",
                                          replace(new, alert=self.cfg.alert, alerting=self.cfg.alerting))
        return new

    def _rebuilt(self, build: Callable[[CoreConfig, Path, Supervisor], T], new: CoreConfig, what: str, sections: str,
                 previous: CoreConfig) -> tuple[T, CoreConfig]:
        """What `build` makes of the new config, or, when that fails (its spool cannot be opened), of the one
        before, said in the log: the config then goes on as `previous` (the new one with the old `sections`)."""
        try:
            return build(new, self.writer.path, self.supervisor), new
        except (SpoolError, OSError) as e:
            log.error("reload: %s: %s; keeping the previous %s", what, e, sections)
            return build(self.cfg, self.writer.path, self.supervisor), previous

    def close(self, deliver: bool = True) -> None:
        """Everything flushed; `deliver`: the sink's and the alert receivers' backlogs get their flush_timeout to
        be delivered (else they stay spooled for the next start)."""
        with self._closing:
            if self._closed:
                return
            self._closed = True
            if self.checks is not None:
                self.checks.close()  # first: its last finding changes still reach the store and the sink
                self.checks = None
            if self.sink is not None:
                self.sink.close(None if deliver else 0)
                self.sink = None
            if self.alerter is not None:
                flush = self.cfg.influxdb.flush_timeout if self.cfg.influxdb else 10.0
                self.alerter.close(flush if deliver else 0)
                self.alerter = None
            self.writer.close()
