"""The `db2vtop_sink` and `db2vtop_alert` self-metrics: a sink's and each alert receiver's health as data, in the
store and in InfluxDB.

Scheduled by the runtime like any collector, so its samples reach every output; a sink's state
changes and the start of dropping come with it as annotations (markers in Grafana).
"""

from __future__ import annotations

import socket

from db2vtop.agent.core.model import ALERT_MEASUREMENT, SINK_MEASUREMENT, Record, Sample
from db2vtop.agent.core.schema import Measurement, fields
from db2vtop.agent.sinks.alerts import Alerter
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
    Measurement(
        ALERT_MEASUREMENT, "An alert receiver's health: the alerts it was told firing, delivery, its spool of changes.",
        {"receiver": "the [[alert]] section's name", "kind": "`alertmanager` or `webhook`",
         "agent": "this machine's host name"},
        fields("firing", "sent", "resolved", "refused", "retries", "resent", "pending",
               state="`ok`, or `failing` (the last delivery failed: its changes wait in the spool)",
               last_error="the last delivery error",
               last_success_ns="when the receiver last took a change or a resend (ns since the epoch)",
               dropped="changes dropped because the spool was full",
               corrupt="changes lost in spool records whose checksum failed",
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


class AlertMonitor(BaseCollector):
    """Each receiver's `db2vtop_alert` sample, every [alerting] interval, and each alert's start and end as an
    annotation (`alert`, named `<alertname> firing|resolved`: Grafana's alert markers)."""

    def __init__(self, alerter: Alerter):
        super().__init__("alerts", alerter.cfg.alerting.interval)
        self.alerter = alerter
        self.agent = socket.gethostname()

    async def collect(self) -> list[Record]:
        records: list[Record] = list(self.alerter.take_events())
        records += [Sample(ALERT_MEASUREMENT, {"receiver": box.cfg.name, "kind": box.cfg.kind, "agent": self.agent},
                           box.snapshot()) for box in self.alerter.outboxes]
        return records
