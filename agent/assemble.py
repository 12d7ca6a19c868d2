"""Turn a Config into the collectors the runtime schedules and the sinks it feeds.

Collector modules are imported only when their section is configured (the agent's RSS
budget), and every collector that reads a host shares that [[ssh]] target's connection.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from db2vtop.agent.core.config import Config, DB2Config, RemoteGuestConfig, StorageConfig
from db2vtop.agent.core.schema import Measurement
from db2vtop.collectors.base import BaseCollector
from db2vtop.collectors.guest.local import LocalGuestCollector
from db2vtop.collectors.markers import MarkerInbox
from db2vtop.collectors.selfmon import SelfCollector

if TYPE_CHECKING:
    from db2vtop.agent.sinks.influx import InfluxSink


class SSHTargets:
    """One SSHTarget per [[ssh]] section, made on first use: the collectors of a host share its connection."""

    def __init__(self, cfg: Config):
        self.sections = {s.name: s for s in cfg.ssh}
        self.made: dict[str, Any] = {}

    def __call__(self, name: str | None) -> Any:
        if name is None:
            return None
        if name not in self.made:
            from db2vtop.collectors.ssh import SSHTarget  # paramiko only when something is remote

            self.made[name] = SSHTarget(self.sections[name])
        return self.made[name]


def build_collectors(cfg: Config, store_path: Path | None = None,
                     sinks: Sequence[InfluxSink] = ()) -> list[BaseCollector]:
    """The collectors of a config; with the store's path, also its marker inbox; a monitor per sink."""
    collectors: list[BaseCollector] = [SelfCollector()]
    if store_path is not None:
        collectors.append(MarkerInbox(store_path))
    if cfg.guest.enabled:
        collectors.append(LocalGuestCollector(cfg.guest))
    targets = SSHTargets(cfg)
    collectors += remote_collectors(cfg, targets)
    collectors += [_storage_collector(s, targets) for s in cfg.storage]
    collectors += [_db2_collector(d, cfg, targets) for d in cfg.db2]
    if cfg.vcenter:
        from db2vtop.collectors.vsphere.collector import VSphereCollector  # imported only when configured

        collectors.extend(VSphereCollector(v) for v in cfg.vcenter)
    if sinks:
        from db2vtop.agent.sinks.monitor import SinkMonitor

        collectors += [SinkMonitor(s) for s in sinks]
    return collectors


def remote_collectors(cfg: Config, targets: SSHTargets) -> list[BaseCollector]:
    """Remote guests ([[remote_guest]], and each [[stack]] guest without one) and esxtop."""
    out: list[BaseCollector] = []
    guests = list(cfg.remote_guest)
    named = {g.ssh for g in guests}
    for st in cfg.stack:
        if st.guest is not None and st.guest not in named:
            guests.append(RemoteGuestConfig(ssh=st.guest))
            named.add(st.guest)
    if guests:
        from db2vtop.collectors.guest.remote import RemoteGuestCollector

        out += [RemoteGuestCollector(g, targets(g.ssh)) for g in guests]
    if cfg.esxtop:
        from db2vtop.collectors.esxtop.collector import EsxtopCollector

        out += [EsxtopCollector(e, targets(e.ssh)) for e in cfg.esxtop]
    return out


def _storage_collector(s: StorageConfig, targets: SSHTargets) -> BaseCollector:
    ssh = targets(s.ssh) if s.effective_transport == "ssh" else None
    if s.kind == "linux":
        from db2vtop.collectors.storage.linux import LinuxStorageCollector

        return LinuxStorageCollector(s, ssh)
    if s.kind == "ontap":
        from db2vtop.collectors.storage.ontap.collector import OntapCollector

        return OntapCollector(s, ssh)
    if s.kind == "xtremio":
        from db2vtop.collectors.storage.xtremio.collector import XtremioCollector

        return XtremioCollector(s)
    from db2vtop.collectors.storage.powermax.collector import PowermaxCollector

    return PowermaxCollector(s, ssh)


def _db2_collector(d: DB2Config, cfg: Config, targets: SSHTargets) -> BaseCollector:
    from db2vtop.collectors.db2.collector import Db2Collector
    from db2vtop.collectors.db2.transport import ClpTransport, DriverTransport

    if d.transport == "clp":
        return Db2Collector(d, ClpTransport(d, targets(d.ssh)))
    host = d.host or next(s.host for s in cfg.ssh if s.name == d.ssh)
    return Db2Collector(d, DriverTransport(d, host))


def build_sink(cfg: Config) -> InfluxSink | None:
    """The InfluxDB sink when [influxdb] is configured; it resumes its spool from disk."""
    if cfg.influxdb is None:
        return None
    from db2vtop.agent.sinks.influx import InfluxSink

    return InfluxSink(cfg.influxdb)


def measurement_catalog() -> dict[str, tuple[Measurement, ...]]:
    """Every declared measurement, by where its docs live: a collector package, or `self` for the
    agent's own (runtime, self-monitor, sinks). Imported here, the one place that knows them all."""
    from db2vtop.agent import runtime
    from db2vtop.agent.core.schema import load
    from db2vtop.agent.sinks import monitor
    from db2vtop.collectors import selfmon
    from db2vtop.collectors.vsphere import schema as vsphere

    return {"guest": load("db2vtop.collectors.guest"), "vsphere": vsphere.MEASUREMENTS,
            "db2": load("db2vtop.collectors.db2"), "storage": load("db2vtop.collectors.storage"),
            "esxtop": load("db2vtop.collectors.esxtop"),
            "self": (*runtime.MEASUREMENTS, *selfmon.MEASUREMENTS, *monitor.MEASUREMENTS)}
