"""Turn a Config into the collectors the runtime schedules."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from agent.config import Config, StorageConfig
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
    targets: dict[str, Any] = {}  # one shared SSH connection per [[ssh]] target

    def target(name: str | None) -> Any:
        from collectors.ssh import SSHTarget
        if name is None:
            return None
        if name not in targets:
            targets[name] = SSHTarget(next(s for s in cfg.ssh if s.name == name))
        return targets[name]

    for storage in cfg.storage:
        array = _array_collector(storage, target)
        if array is None:
            log.warning("[[storage]] %s: kind %r is not collected by this version of db2vtop yet",
                        storage.name, storage.kind)
        else:
            collectors.append(array)
    for section in ("vcenter", "db2", "esxtop"):
        if getattr(cfg, section):
            log.warning("[[%s]] sections are not collected by this version of db2vtop yet", section)
    return collectors


def _array_collector(s: StorageConfig, target: Any) -> BaseCollector | None:
    """The collector for a storage array, imported only when configured (agent RSS budget)."""
    ssh = target(s.ssh) if s.effective_transport == "ssh" else None
    if s.kind == "ontap":
        from collectors.storage.ontap.collector import OntapCollector
        return OntapCollector(s, ssh)
    if s.kind == "xtremio":
        from collectors.storage.xtremio.collector import XtremioCollector
        return XtremioCollector(s)
    if s.kind == "powermax":
        from collectors.storage.powermax.collector import PowermaxCollector
        return PowermaxCollector(s, ssh)
    return None
