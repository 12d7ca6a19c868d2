"""A Linux storage host: block devices, multipath maps and their queues, over SSH."""

from __future__ import annotations

from typing import TYPE_CHECKING

from db2vtop.collectors.input import Input, Wiring
from db2vtop.collectors.storage.linux.config import LinuxStorageConfig

if TYPE_CHECKING:
    from db2vtop.collectors.base import BaseCollector


def make(section: LinuxStorageConfig, wiring: Wiring) -> BaseCollector:
    from db2vtop.collectors.storage.linux.collector import LinuxStorageCollector

    return LinuxStorageCollector(section, wiring.ssh(section.ssh))


INPUT = Input("storage", LinuxStorageConfig, __name__, make)
