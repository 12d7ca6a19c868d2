"""The [[vcenter]] section: one vCenter or standalone ESXi host."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

from db2vtop.agent.core.config import (
    DAY,
    Count,
    Duration,
    EnvName,
    Invalid,
    Name,
    Secret,
    Size,
    Thumbprint,
    Timeout,
    Url,
)
from db2vtop.agent.core.secrets import SecretRef


@dataclass(frozen=True)
class VCenterConfig(Secret):
    name: Name
    url: Url
    user: str = ""  # required with a password; a token names its own subject
    password_env: EnvName | None = None
    password_file: Path | None = None
    password_keyring: str | None = None
    #: a SAML bearer token of vCenter's single sign-on, in place of user and password (LoginByToken)
    token_env: EnvName | None = None
    token_file: Path | None = None
    verify_tls: bool = True
    ca_file: Path | None = None
    #: the one certificate trusted, by its digest, in place of a CA and the host name (an ESXi host's own)
    thumbprint: Thumbprint | None = None
    #: an HTTP CONNECT proxy; unset, https_proxy / HTTPS_PROXY (and no_proxy) of the environment apply
    proxy: Url | None = None
    allow_plaintext: bool = False  # an http:// url: the password travels unencrypted (warned at every start)
    interval: Duration(20.0, DAY) = 20.0  # vCenter's realtime sampling period
    timeout: Timeout | None = None
    workers: Count("a number of threads", 1, 16) = 4
    max_query_entities: Count("a number of entities per QueryPerf call", 1, 5000) = 250
    max_query_metrics: Count("a number of metric ids per QueryPerf call (0 = no own cap)", 0, 100_000) = 0
    #: one SOAP answer, inflated; a sixteenth of it in XML elements (collectors/vsphere/connection.py)
    max_response_bytes: Size(2**20, 2**32) = 64 * 2**20
    #: read vCenter's event log (migrations, HA, reconfigurations, snapshots, host and storage problems, alarms)
    events: bool = True

    def token(self) -> SecretRef | None:
        if self.token_env or self.token_file:
            return SecretRef(env=self.token_env, file=self.token_file)
        return None

    def check(self) -> None:
        token, password = self.token(), self.password()
        if self.token_env and self.token_file:
            raise Invalid("", "token_env and token_file are both set; give only one")
        if token is not None and password is not None:
            raise Invalid("", "a password and a token are both set; give one way to log in")
        if token is None and password is None:
            raise Invalid("", "no password source or token; set user with password_env, password_file or "
                              "password_keyring, or set token_env or token_file")
        if password is not None and not self.user:
            raise Invalid("user", "required with a password")
        if self.thumbprint is not None:
            if not self.verify_tls:
                raise Invalid("thumbprint", "pins the certificate, and verify_tls = false says check nothing; "
                                            "remove one of them")
            if self.ca_file is not None:
                raise Invalid("thumbprint", "pins the certificate in place of a CA; remove ca_file or thumbprint")
            if urlparse(self.url).scheme != "https":
                raise Invalid("thumbprint", "pins a TLS certificate, and the url is not https://")
        if self.proxy is not None and urlparse(self.proxy).scheme != "http":
            raise Invalid.value("proxy", self.proxy, "the http:// URL of an HTTP CONNECT proxy (the session to "
                                                     "vCenter is TLS inside the tunnel)")
