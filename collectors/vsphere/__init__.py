"""vCenter / ESXi collector (pyvmomi's session, bulk reads in raw SOAP): inventory facts in bulk and batched realtime
perf."""

from __future__ import annotations

from typing import TYPE_CHECKING

from db2vtop.collectors.input import Input, Wiring
from db2vtop.collectors.vsphere.config import VCenterConfig

if TYPE_CHECKING:
    from db2vtop.agent.core.schema import Schema
    from db2vtop.collectors.base import BaseCollector


def make(section: VCenterConfig, wiring: Wiring) -> BaseCollector:
    from db2vtop.collectors.vsphere.collector import VSphereCollector  # imported only when configured

    return VSphereCollector(section)


def declarations() -> Schema:
    """Derived from the counter table (schema.py), not a schema.toml."""
    from db2vtop.collectors.vsphere.schema import SCHEMA

    return SCHEMA


INPUT = Input("vcenter", VCenterConfig, __name__, make, schema=declarations)
