"""The guest collector for the machine db2vtop runs on: reads /proc and /sys directly."""

from __future__ import annotations

import glob
import os
import socket

from db2vtop.agent.core.clock import CLOCK
from db2vtop.agent.core.model import Fact, Record
from db2vtop.collectors.base import BaseCollector
from db2vtop.collectors.guest.config import GuestConfig
from db2vtop.collectors.guest.metrics import LinuxGuest
from db2vtop.collectors.guest.procfs import FACT_GLOBS, FACT_LINK_GLOBS, SNAPSHOT_FILES, SNAPSHOT_GLOBS, Snapshot


def read_files(patterns: tuple[str, ...], link_patterns: tuple[str, ...] = ()) -> dict[str, str]:
    """path -> text for every existing match; for link patterns, the link target's name."""
    out: dict[str, str] = {}
    for pattern in patterns:
        for path in glob.glob(pattern) if "*" in pattern else (pattern,):
            try:
                with open(path, encoding="utf-8", errors="replace") as f:
                    out[path] = f.read()
            except OSError:
                continue  # vanished, or not readable (e.g. speed of a down link)
    for pattern in link_patterns:
        for path in glob.glob(pattern):
            try:
                out[path] = os.path.basename(os.readlink(path))
            except OSError:
                continue
    return out


class LocalGuestCollector(BaseCollector):
    complete_facts = True

    def __init__(self, cfg: GuestConfig, name: str = "guest"):
        super().__init__(name, cfg.interval, cfg.timeout)
        self.first_delay = min(1.0, cfg.interval)
        self.cfg = cfg
        self.guest = socket.gethostname()
        self.page_size = os.sysconf("SC_PAGE_SIZE")
        self.linux = LinuxGuest(self.guest, cfg, self.page_size)

    def _snapshot(self) -> Snapshot:
        return self.linux.snapshot(read_files(SNAPSHOT_FILES + SNAPSHOT_GLOBS))

    async def start(self) -> None:
        self.linux.prev = await self.run_blocking(self._snapshot)

    async def collect(self) -> list[Record]:
        cur = await self.run_blocking(self._snapshot)
        return self.linux.step(cur, CLOCK.now_ns())

    async def describe(self) -> list[Fact]:
        files = await self.run_blocking(read_files, FACT_GLOBS, FACT_LINK_GLOBS)
        return self.linux.facts_of(files, CLOCK.now_ns())
