"""What every [[storage]] vendor's section has. One `[[storage]]` section name, one dataclass per
vendor (in its own package), told apart by `kind`; each vendor says which transports it is read
over and checks its own keys."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from db2vtop.agent.core.config import (
    DAY,
    Choice,
    Count,
    Duration,
    EnvName,
    Invalid,
    Name,
    Ref,
    Secret,
    Size,
    Timeout,
    Url,
)


# the vendors' dataclasses are made and compared; these only lend them their fields and checks
@dataclass(frozen=True, init=False, repr=False, eq=False)
class StorageSection:
    name: Name
    kind: str  # each vendor's class narrows it to its own value
    ssh: Ref("ssh") | None = None
    interval: Duration(1.0, DAY) = 20.0
    timeout: Timeout | None = None
    transport: Choice("ssh", "rest") | None = None

    #: the transports this vendor is read over, its default first; and what to say of the others
    transports: ClassVar[tuple[str, ...]] = ("ssh",)
    read_over: ClassVar[str] = "it is read over ssh"

    @property
    def effective_transport(self) -> str:
        return self.transport or self.transports[0]

    def check(self) -> None:
        """Each transport needs its own keys; say which one is missing and why."""
        transport = self.effective_transport
        if transport not in self.transports:
            raise Invalid("transport", f'"{transport}" is not available for kind "{self.kind}"; {self.read_over}')
        if transport == "ssh" and self.ssh is None:
            raise Invalid("ssh", "missing; storage is read over an [[ssh]] target")


@dataclass(frozen=True, init=False, repr=False, eq=False)
class ArraySection(Secret, StorageSection):
    """An array: over SSH (its CLI) or its REST endpoint."""

    url: Url | None = None
    user: str | None = None
    password_env: EnvName | None = None
    password_file: Path | None = None
    password_keyring: str | None = None
    verify_tls: bool = True
    ca_file: Path | None = None
    allow_plaintext: bool = False  # an http:// url: the password travels unencrypted (warned at every start)
    min_ops_for_latency: Count("a number of operations", 0, 10**9) = 10
    #: one REST answer, inflated (agent/core/httpclient.py)
    max_response_bytes: Size(2**20, 2**32) = 64 * 2**20

    transports: ClassVar[tuple[str, ...]] = ("ssh", "rest")

    def check(self) -> None:
        super().check()
        if self.effective_transport == "rest":
            if self.url is None:
                raise Invalid("url", 'missing; transport "rest" needs the array\'s https:// URL')
            if self.user is None or self.password() is None:
                raise Invalid("", 'transport "rest" needs user and a password (password_env, password_file or'
                                  ' password_keyring)')
