"""[[storage]] kind = "linux": a Linux host's block devices, over SSH."""

from __future__ import annotations

from dataclasses import dataclass, field

from db2vtop.agent.core.config import Choice
from db2vtop.collectors.storage.config import StorageSection


@dataclass(frozen=True)
class LinuxStorageConfig(StorageSection):
    kind: Choice("linux") = "linux"
    devices_exclude: list[str] = field(default_factory=lambda: ["loop*", "ram*", "zram*"])
