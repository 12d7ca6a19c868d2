"""The [[esxtop]] section: esxtop batch mode on one ESXi host over SSH."""

from __future__ import annotations

from dataclasses import dataclass

from db2vtop.agent.core.config import DAY, HOUR, Duration, Invalid, Name, Ref, Timeout


@dataclass(frozen=True)
class EsxtopConfig:
    name: Name
    ssh: Ref("ssh")
    interval: Duration(2.0, DAY) = 10.0  # esxtop samples every 2 s at the fastest
    timeout: Timeout | None = None
    delay: Duration(2.0, HOUR) = 2.0  # esxtop -d: the window each sample averages over (esxtop's minimum is 2 s)

    def check(self) -> None:
        if self.delay >= self.interval:
            raise Invalid("delay", f"{self.delay:g}s is not valid; expected at least 2s (esxtop's minimum) and "
                                   f"less than the interval ({self.interval:g}s)")
