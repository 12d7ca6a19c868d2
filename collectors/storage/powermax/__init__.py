"""Dell EMC PowerMax/VMAX/Symmetrix: symstat over SSH, or Unisphere REST performance."""

from __future__ import annotations

from typing import TYPE_CHECKING

from db2vtop.collectors.input import Input, Wiring
from db2vtop.collectors.storage.powermax.config import PowermaxConfig

if TYPE_CHECKING:
    from db2vtop.collectors.base import BaseCollector


def make(section: PowermaxConfig, wiring: Wiring) -> BaseCollector:
    from db2vtop.collectors.storage.powermax.collector import PowermaxCollector

    return PowermaxCollector(section, wiring.ssh(section.ssh) if section.effective_transport == "ssh" else None)


INPUT = Input("storage", PowermaxConfig, __name__, make)
