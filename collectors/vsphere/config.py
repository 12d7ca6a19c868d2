"""The [[vcenter]] section: one vCenter or standalone ESXi host."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from db2vtop.agent.core.config import DAY, Count, Duration, EnvName, Invalid, Name, Secret, Size, Timeout, Url


@dataclass(frozen=True)
class VCenterConfig(Secret):
    name: Name
    url: Url
    user: str
    password_env: EnvName | None = None
    password_file: Path | None = None
    password_keyring: str | None = None
    verify_tls: bool = True
    ca_file: Path | None = None
    allow_plaintext: bool = False  # an http:// url: the password travels unencrypted (warned at every start)
    interval: Duration(20.0, DAY) = 20.0  # vCenter's realtime sampling period
    timeout: Timeout | None = None
    workers: Count("a number of threads", 1, 16) = 4
    max_query_entities: Count("a number of entities per QueryPerf call", 1, 5000) = 250
    max_query_metrics: Count("a number of metric ids per QueryPerf call (0 = no own cap)", 0, 100_000) = 0
    #: one SOAP answer, inflated; a thirty-second of it in XML elements (collectors/vsphere/connection.py)
    max_response_bytes: Size(2**20, 2**32) = 64 * 2**20
    #: read vCenter's event log (migrations, HA, reconfigurations, snapshots, host and storage problems, alarms)
    events: bool = True

    def check(self) -> None:
        if self.password() is None:
            raise Invalid("", "no password source; set password_env, password_file or password_keyring")
