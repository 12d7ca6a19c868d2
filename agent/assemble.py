"""Turn a Config into the collectors the runtime schedules."""

from __future__ import annotations

import logging
from typing import Any

from agent.config import Config, RemoteGuestConfig
from collectors.base import BaseCollector
from collectors.guest.local import LocalGuestCollector
from collectors.selfmon import SelfCollector

log = logging.getLogger(__name__)


def build_collectors(cfg: Config) -> list[BaseCollector]:
    collectors: list[BaseCollector] = [SelfCollector()]
    if cfg.guest.enabled:
        collectors.append(LocalGuestCollector(cfg.guest))
    collectors += remote_collectors(cfg)
    for section in ("vcenter", "db2"):
        if getattr(cfg, section):
            log.warning("[[%s]] sections are not collected by this version of db2vtop yet", section)
    for s in cfg.storage:
        if s.kind != "linux":
            log.warning('[[storage]] kind = "%s" is not collected by this version of db2vtop yet', s.kind)
    return collectors


class SSHTargets:
    """One SSHTarget per [[ssh]] section, made on first use: the collectors of a host share its connection."""

    def __init__(self, cfg: Config):
        self.sections = {s.name: s for s in cfg.ssh}
        self.made: dict[str, Any] = {}

    def __call__(self, name: str) -> Any:
        if name not in self.made:
            from collectors.ssh import SSHTarget  # paramiko only when something is remote

            self.made[name] = SSHTarget(self.sections[name])
        return self.made[name]


def remote_collectors(cfg: Config) -> list[BaseCollector]:
    """Remote guests ([[remote_guest]], and each [[stack]] guest without one), Linux storage, esxtop."""
    targets = SSHTargets(cfg)
    out: list[BaseCollector] = []
    guests = list(cfg.remote_guest)
    named = {g.ssh for g in guests}
    for st in cfg.stack:
        if st.guest is not None and st.guest not in named:
            guests.append(RemoteGuestConfig(ssh=st.guest))
            named.add(st.guest)
    if guests:
        from collectors.guest.remote import RemoteGuestCollector

        out += [RemoteGuestCollector(g, targets(g.ssh)) for g in guests]
    linux = [s for s in cfg.storage if s.kind == "linux" and s.ssh is not None]
    if linux:
        from collectors.storage.linux import LinuxStorageCollector

        out += [LinuxStorageCollector(s, targets(s.ssh)) for s in linux]
    if cfg.esxtop:
        from collectors.esxtop.collector import EsxtopCollector

        out += [EsxtopCollector(e, targets(e.ssh)) for e in cfg.esxtop]
    return out
