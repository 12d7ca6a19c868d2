"""esxtop batch mode over SSH to ESXi: per-VM NUMA locality and CPU contention, per-LUN queues."""

from __future__ import annotations

from typing import TYPE_CHECKING

from db2vtop.collectors.esxtop.config import EsxtopConfig
from db2vtop.collectors.input import Input, Wiring

if TYPE_CHECKING:
    from db2vtop.collectors.base import BaseCollector


def make(section: EsxtopConfig, wiring: Wiring) -> BaseCollector:
    from db2vtop.collectors.esxtop.collector import EsxtopCollector

    return EsxtopCollector(section, wiring.ssh(section.ssh))


INPUT = Input("esxtop", EsxtopConfig, __name__, make)
