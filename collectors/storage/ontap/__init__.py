"""NetApp clustered ONTAP: raw performance counters and configuration over SSH or REST."""

from __future__ import annotations

from typing import TYPE_CHECKING

from db2vtop.collectors.input import Input, Wiring
from db2vtop.collectors.storage.ontap.config import OntapConfig

if TYPE_CHECKING:
    from db2vtop.collectors.base import BaseCollector


def make(section: OntapConfig, wiring: Wiring) -> BaseCollector:
    from db2vtop.collectors.storage.ontap.collector import OntapCollector

    return OntapCollector(section, wiring.ssh(section.ssh) if section.effective_transport == "ssh" else None)


INPUT = Input("storage", OntapConfig, __name__, make, also=("db2vtop.collectors.storage",))
