"""[[storage]] kind = "xtremio": Dell EMC XtremIO, over the XMS REST API."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from db2vtop.agent.core.config import Choice
from db2vtop.collectors.storage.config import ArraySection


@dataclass(frozen=True)
class XtremioConfig(ArraySection):
    kind: Choice("xtremio") = "xtremio"

    transports: ClassVar[tuple[str, ...]] = ("rest",)
    read_over: ClassVar[str] = ('it is read over the XMS REST API (transport = "rest" with url, user, '
                                "password_env)")
