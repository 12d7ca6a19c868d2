"""[[storage]] kind = "ontap": NetApp clustered ONTAP, over SSH (the clustershell) or REST."""

from __future__ import annotations

from dataclasses import dataclass

from db2vtop.agent.core.config import Choice, Name
from db2vtop.collectors.storage.config import ArraySection


@dataclass(frozen=True)
class OntapConfig(ArraySection):
    kind: Choice("ontap") = "ontap"
    vserver: Name | None = None
