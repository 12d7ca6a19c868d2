"""Turn a Config into the collectors the runtime schedules and the sinks it feeds."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

from agent.config import Config
from collectors.base import BaseCollector
from collectors.guest.local import LocalGuestCollector
from collectors.selfmon import SelfCollector

if TYPE_CHECKING:
    from agent.sinks.influx import InfluxSink

log = logging.getLogger(__name__)


def build_collectors(cfg: Config, sinks: Sequence[InfluxSink] = ()) -> list[BaseCollector]:
    collectors: list[BaseCollector] = [SelfCollector()]
    if cfg.guest.enabled:
        collectors.append(LocalGuestCollector(cfg.guest))
    for section in ("vcenter", "db2", "storage", "esxtop"):
        if getattr(cfg, section):
            log.warning("[[%s]] sections are not collected by this version of db2vtop yet", section)
    if sinks:
        from agent.sinks.monitor import SinkMonitor

        collectors += [SinkMonitor(s) for s in sinks]
    return collectors


def build_sink(cfg: Config) -> InfluxSink | None:
    """The InfluxDB sink when [influxdb] is configured; it resumes its spool from disk."""
    if cfg.influxdb is None:
        return None
    from agent.sinks.influx import InfluxSink

    return InfluxSink(cfg.influxdb)
