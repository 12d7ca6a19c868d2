"""Dell EMC XtremIO: cluster and volume performance from the XMS REST API v3."""

from __future__ import annotations

from typing import TYPE_CHECKING

from db2vtop.collectors.input import Input, Wiring
from db2vtop.collectors.storage.xtremio.config import XtremioConfig

if TYPE_CHECKING:
    from db2vtop.collectors.base import BaseCollector


def make(section: XtremioConfig, wiring: Wiring) -> BaseCollector:
    from db2vtop.collectors.storage.xtremio.collector import XtremioCollector

    return XtremioCollector(section)


INPUT = Input("storage", XtremioConfig, __name__, make, also=("db2vtop.collectors.storage",))
