"""Turn a Config into the collectors the runtime schedules and the sinks it feeds.

Every source's collectors come from its Input in the registry (collectors/registry.py): its
package imports its heavy modules only when its section is configured (the agent's RSS budget),
and every collector that reads a host shares that [[ssh]] target's connection.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from db2vtop.agent.core.config import CoreConfig, spool_of
from db2vtop.agent.core.paths import state_dir
from db2vtop.agent.core.schema import FactCheck, Measurement, Schema
from db2vtop.agent.core.supervise import Supervisor
from db2vtop.collectors.base import BaseCollector
from db2vtop.collectors.markers import MarkerInbox
from db2vtop.collectors.registry import INPUTS
from db2vtop.collectors.selfmon import SelfCollector
from db2vtop.collectors.ssh import Targets

if TYPE_CHECKING:
    from db2vtop.agent.sinks.alerts import Alerter
    from db2vtop.agent.sinks.influx import InfluxSink

log = logging.getLogger(__name__)

class _Wiring:
    """What each Input's build gets: the config and its shared [[ssh]] targets."""

    def __init__(self, cfg: Any):
        self.cfg = cfg
        self.ssh = Targets(cfg.ssh)


def build_collectors(cfg: CoreConfig, store_path: Path | None = None, sinks: Sequence[InfluxSink] = (),
                     alerter: Alerter | None = None) -> list[BaseCollector]:
    """The collectors of a config; with the store's path, also its marker inbox; a monitor per sink, and one of
    the alert receivers."""
    collectors: list[BaseCollector] = [SelfCollector()]
    if store_path is not None:
        collectors.append(MarkerInbox(store_path))
    wiring = _Wiring(cfg)
    for i in INPUTS:
        made = i.collectors(cfg, wiring)
        if made:
            declared = frozenset(d.name for schema in i.declarations().values()
                                 for d in (*schema.measurements, *schema.facts))
            for c in made:
                c.declared = declared
        collectors += made
    if sinks:
        from db2vtop.agent.sinks.monitor import SinkMonitor

        collectors += [SinkMonitor(s) for s in sinks]
    if alerter is not None:
        from db2vtop.agent.sinks.monitor import AlertMonitor

        collectors.append(AlertMonitor(alerter))
    return collectors


def build_alerter(cfg: CoreConfig, store_path: Path, supervisor: Supervisor | None = None) -> Alerter | None:
    """The alerts' judge and receivers when [[alert]] sections are configured; each resumes its spool."""
    if not cfg.alert:
        return None
    from db2vtop.agent.sinks.alerts import Alerter

    return Alerter(cfg, store_path, supervisor)


def build_sink(cfg: CoreConfig, store_path: Path, supervisor: Supervisor | None = None) -> InfluxSink | None:
    """The InfluxDB sink when [influxdb] is configured; it resumes its spool from disk (spool_dir, or
    beside the store)."""
    if cfg.influxdb is None:
        return None
    from db2vtop.agent.sinks.influx import InfluxSink

    influx = cfg.influxdb
    if influx.spool_dir is None:
        influx = replace(influx, spool_dir=spool_of(store_path))
        old = state_dir() / "spool"  # where db2vtop spooled before the spool followed the store
        if any(old.glob("seg-*.spool")):
            log.warning("influxdb: %s holds points an older db2vtop spooled; this agent spools to %s. To send "
                        "them, set [influxdb] spool_dir = \"%s\", or move its seg-*.spool and cursor files there "
                        "while no agent runs", old, influx.spool_dir, old)
    return InfluxSink(influx, supervisor)


def catalog() -> dict[str, Schema]:
    """Every declaration, by where its docs live: a collector package's path under collectors/
    ("storage/ontap"), or `self` for the agent's own measurements (runtime, self-monitor, sinks)."""
    from db2vtop.agent import runtime
    from db2vtop.agent.sinks import monitor
    from db2vtop.collectors import selfmon

    out = {package.removeprefix("db2vtop.collectors.").replace(".", "/"): schema
           for i in INPUTS for package, schema in i.declarations().items() if schema.measurements or schema.facts}
    out["self"] = Schema((*runtime.MEASUREMENTS, *selfmon.MEASUREMENTS, *monitor.MEASUREMENTS))
    return out


def measurement_catalog() -> dict[str, tuple[Measurement, ...]]:
    """Every declared measurement, by where its docs live (see `catalog`)."""
    return {where: schema.measurements for where, schema in catalog().items()}


def fact_check(cfg: CoreConfig | None = None) -> FactCheck:
    """The fact kinds the sources of `cfg` declare (every source's without one): what the runtime checks
    their facts against. Only the configured sources' declarations are read: the agent's start-up."""
    inputs = [i for i in INPUTS if cfg is None or i.sections(cfg)]
    return FactCheck(k for schema in {p: s for i in inputs for p, s in i.declarations().items()}.values()
                     for k in schema.facts)
