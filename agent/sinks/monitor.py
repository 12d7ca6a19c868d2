"""The `db2vtop_sink` self-metric: a sink's health as data, in the store and in InfluxDB.

Scheduled by the runtime like any collector, so its samples reach every output; state
changes and the start of dropping come with it as annotations (markers in Grafana).
"""

from __future__ import annotations

import socket

from db2vtop.agent.core.model import SINK_MEASUREMENT, Record, Sample
from db2vtop.agent.core.schema import Measurement, fields
from db2vtop.agent.sinks.influx import InfluxSink
from db2vtop.collectors.base import BaseCollector

MEASUREMENT = SINK_MEASUREMENT
MEASUREMENTS = (
    Measurement(
        MEASUREMENT, "A sink's health: delivery, spool backlog and errors.",
        {"sink": "the sink", "agent": "this machine's host name"},
        fields("sent", "batches", "retries", "pending", "spooled", "spool_bytes",
               state="`starting`, `ok`, `retrying`, `auth_error` or `error`", last_error="the last delivery error",
               last_success_ns="when a batch was last delivered (ns since the epoch)",
               dropped="points dropped because the spool was full",
               corrupt="points lost in spool records whose checksum failed (skipped, the rest delivered)",
               dead_lettered="points the server refused for good (kept aside, not retried)",
               text=("state", "last_error")),
    ),
)


class SinkMonitor(BaseCollector):
    def __init__(self, sink: InfluxSink):
        super().__init__(f"sink-{sink.name}", sink.cfg.stats_interval)
        self.sink = sink
        self.tags = {"sink": sink.name, "agent": socket.gethostname()}

    async def collect(self) -> list[Record]:
        records: list[Record] = list(self.sink.take_events())
        records.append(Sample(MEASUREMENT, self.tags, self.sink.snapshot()))
        return records
