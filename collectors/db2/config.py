"""The [[db2]] section: one DB2 database, read over the CLP through SSH or with the ibm_db driver."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from db2vtop.agent.core.config import (
    DAY,
    Choice,
    Duration,
    EnvName,
    Invalid,
    Name,
    Port,
    Range,
    Ref,
    Secret,
    Timeout,
)

Member = Range("-2 (all members), -1 (the member connected to) or a member number", -2, 999)

_DB_ALIAS = re.compile(r"^[A-Za-z0-9@#$_]{1,8}$")
_DB_USER = re.compile(r"^[A-Za-z0-9@#$_.-]{1,128}$")


@dataclass(frozen=True)
class DB2Config(Secret):
    name: Name
    database: str
    ssh: Ref("ssh") | None = None
    transport: Choice("clp", "ibm_db") = "clp"
    user: str | None = None
    password_env: EnvName | None = None
    password_file: Path | None = None
    password_keyring: str | None = None
    interval: Duration(1.0, DAY) = 10.0
    timeout: Timeout | None = None
    instance_profile: str = "~/sqllib/db2profile"
    member: Member = -2
    facts_interval: Duration(10.0, DAY) = 900.0
    host: str | None = None
    port: Port = 50000
    tls: bool = False
    ca_file: Path | None = None

    def check(self) -> None:
        if not _DB_ALIAS.match(self.database):
            raise Invalid.value("database", self.database, "a database alias of 1-8 letters, digits, @, # or $")
        if self.user is not None and not _DB_USER.match(self.user):
            raise Invalid.value("user", self.user, "a DB2 user name (letters, digits, @ # $ _ . -)")
        if self.transport == "clp":
            if self.ssh is None:
                raise Invalid("ssh", 'missing; the "clp" transport runs db2 over an [[ssh]] target')
            if (self.user is None) != (self.password() is None):
                raise Invalid("", "user and a password_* go together; leave both out to connect with the OS "
                                  "authentication of the [[ssh]] user")
        else:
            if self.host is None and self.ssh is None:
                raise Invalid("host", 'missing; the "ibm_db" transport connects to host:port '
                                      "(or to the host of its [[ssh]] target)")
            if self.user is None or self.password() is None:
                raise Invalid("", 'the "ibm_db" transport needs user and one of password_env, password_file '
                                  "or password_keyring")
