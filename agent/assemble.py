"""Turn a Config into the collectors the runtime schedules."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

from agent.config import Config
from collectors.base import BaseCollector
from collectors.guest.local import LocalGuestCollector
from collectors.markers import MarkerInbox
from collectors.selfmon import SelfCollector

if TYPE_CHECKING:
    from collectors.ssh import SSHTarget

log = logging.getLogger(__name__)


def build_collectors(cfg: Config, store_path: Path | None = None) -> list[BaseCollector]:
    """The collectors of a config; with the store's path, also its marker inbox."""
    collectors: list[BaseCollector] = [SelfCollector()]
    if store_path is not None:
        collectors.append(MarkerInbox(store_path))
    if cfg.guest.enabled:
        collectors.append(LocalGuestCollector(cfg.guest))
    targets: dict[str, SSHTarget] = {}

    def target(name: str) -> SSHTarget:
        """One shared connection per [[ssh]] target, whichever collectors use it."""
        from collectors.ssh import SSHTarget

        if name not in targets:
            targets[name] = SSHTarget(next(s for s in cfg.ssh if s.name == name))
        return targets[name]

    for d in cfg.db2:
        from collectors.db2.collector import Db2Collector
        from collectors.db2.transport import ClpTransport, DriverTransport

        if d.transport == "clp":
            assert d.ssh is not None  # the config loader requires it
            transport = ClpTransport(d, target(d.ssh))
        else:
            host = d.host or next(s.host for s in cfg.ssh if s.name == d.ssh)
            transport = DriverTransport(d, host)
        collectors.append(Db2Collector(d, transport))
    for section in ("vcenter", "storage", "esxtop"):
        if getattr(cfg, section):
            log.warning("[[%s]] sections are not collected by this version of db2vtop yet", section)
    return collectors
