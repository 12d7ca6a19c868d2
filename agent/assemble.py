"""Turn a Config into the collectors the runtime schedules."""

from __future__ import annotations

import logging
from pathlib import Path

from agent.config import Config
from collectors.base import BaseCollector
from collectors.guest.local import LocalGuestCollector
from collectors.markers import MarkerInbox
from collectors.selfmon import SelfCollector

log = logging.getLogger(__name__)


def build_collectors(cfg: Config, store_path: Path | None = None) -> list[BaseCollector]:
    """The collectors of a config; with the store's path, also its marker inbox."""
    collectors: list[BaseCollector] = [SelfCollector()]
    if store_path is not None:
        collectors.append(MarkerInbox(store_path))
    if cfg.guest.enabled:
        collectors.append(LocalGuestCollector(cfg.guest))
    if cfg.vcenter:
        from collectors.vsphere.collector import VSphereCollector  # pyvmomi only when configured

        collectors.extend(VSphereCollector(v) for v in cfg.vcenter)
    for section in ("db2", "storage", "esxtop"):
        if getattr(cfg, section):
            log.warning("[[%s]] sections are not collected by this version of db2vtop yet", section)
    return collectors
