"""The [[ssh]] section: one SSH target, shared by every collector that reads that host."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from db2vtop.agent.core.config import HOUR, MINUTE, Choice, Count, Duration, EnvName, Name, Port, Secret


@dataclass(frozen=True)
class SSHConfig(Secret):
    name: Name
    host: str
    user: str
    port: Port = 22
    key_file: Path | None = None
    password_env: EnvName | None = None
    password_file: Path | None = None
    password_keyring: str | None = None
    known_hosts: Path | None = None
    host_key_policy: Choice("reject", "accept-new") = "reject"
    connect_timeout: Duration(1.0, 10 * MINUTE) = 10.0
    command_timeout: Duration(1.0, HOUR) = 30.0
    keepalive: Duration(1.0, HOUR) = 30.0
    max_sessions: Count("a number of channels", 1, 64) = 4
