"""The DB2 collector: MON_GET_* table functions and admin views read through the CLP over SSH
(one remote shell per cycle) or, optionally, the ibm_db driver; cumulative counters turned
into per-member rates, and the configuration facts the practices check."""

from __future__ import annotations

from typing import TYPE_CHECKING

from db2vtop.collectors.db2.config import DB2Config
from db2vtop.collectors.input import Input, Wiring

if TYPE_CHECKING:
    from db2vtop.collectors.base import BaseCollector


def make(section: DB2Config, wiring: Wiring) -> BaseCollector:
    from db2vtop.collectors.db2.collector import Db2Collector
    from db2vtop.collectors.db2.transport import ClpTransport, DriverTransport

    if section.transport == "clp":
        return Db2Collector(section, ClpTransport(section, wiring.ssh(section.ssh)))
    host = section.host or next(s.host for s in wiring.cfg.ssh if s.name == section.ssh)
    return Db2Collector(section, DriverTransport(section, host))


INPUT = Input("db2", DB2Config, __name__, make)
