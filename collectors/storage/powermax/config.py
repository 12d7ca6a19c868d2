"""[[storage]] kind = "powermax": Dell EMC PowerMax/VMAX/Symmetrix, symstat over SSH or Unisphere REST."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Annotated, Any

from db2vtop.agent.core.config import HOUR, Choice, Duration, Invalid, Marker, Name
from db2vtop.collectors.storage.config import ArraySection


class _Sid(Marker):
    def convert(self, value: Any) -> str:
        if not isinstance(value, str) or not re.fullmatch(r"[0-9]{12}", value):
            raise ValueError
        return value


Sid = Annotated[str, _Sid("a Symmetrix ID of 12 digits, such as \"000197900123\"")]


@dataclass(frozen=True)
class PowermaxConfig(ArraySection):
    kind: Choice("powermax") = "powermax"
    sid: Sid | None = None
    storage_groups: list[Name] = field(default_factory=list)
    sample_interval: Duration(1.0, HOUR) = 10.0

    def check(self) -> None:
        super().check()
        if self.sid is None:
            raise Invalid("sid", "missing; a PowerMax/Symmetrix is addressed by its 12-digit Symmetrix ID")
        cycle = self.timeout or self.interval
        if self.effective_transport == "ssh" and self.sample_interval >= cycle:
            raise Invalid("sample_interval", f"{self.sample_interval:g}s is not shorter than the cycle timeout "
                                             f"({cycle:g}s); symstat samples for that long")
