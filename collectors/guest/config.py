"""The [guest] section (this machine) and [[remote_guest]] (a guest read over SSH)."""

from __future__ import annotations

from dataclasses import dataclass, field

from db2vtop.agent.core.config import DAY, Choice, Duration, Ref, Timeout


@dataclass(frozen=True)
class GuestConfig:
    enabled: bool = True
    interval: Duration(0.5, DAY) = 5.0  # /proc reads take milliseconds
    timeout: Timeout | None = None
    devices_exclude: list[str] = field(default_factory=lambda: ["loop*", "ram*"])
    interfaces_exclude: list[str] = field(default_factory=lambda: ["lo", "veth*"])


@dataclass(frozen=True)
class RemoteGuestConfig:
    """A guest read over SSH; its samples are tagged guest = the [[ssh]] target's name."""

    ssh: Ref("ssh", once=True)
    os: Choice("auto", "linux", "aix") = "auto"
    interval: Duration(1.0, DAY) = 5.0
    timeout: Timeout | None = None
    devices_exclude: list[str] = field(default_factory=lambda: ["loop*", "ram*"])
    interfaces_exclude: list[str] = field(default_factory=lambda: ["lo", "veth*"])
