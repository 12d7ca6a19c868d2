"""The `db2vtop_sink` self-metric: a sink's health as data, in the store and in InfluxDB.

Scheduled by the runtime like any collector, so its samples reach every output; state
changes and the start of dropping come with it as annotations (markers in Grafana).
"""

from __future__ import annotations

import socket

from db2vtop.agent.core.model import Record, Sample
from db2vtop.agent.sinks.influx import InfluxSink
from db2vtop.collectors.base import BaseCollector

MEASUREMENT = "db2vtop_sink"


class SinkMonitor(BaseCollector):
    def __init__(self, sink: InfluxSink):
        super().__init__(f"sink-{sink.name}", sink.cfg.stats_interval)
        self.sink = sink
        self.tags = {"sink": sink.name, "agent": socket.gethostname()}

    async def collect(self) -> list[Record]:
        records: list[Record] = list(self.sink.take_events())
        records.append(Sample(MEASUREMENT, self.tags, self.sink.snapshot()))
        return records
