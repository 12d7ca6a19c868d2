"""TLS settings of one shape for every source that speaks HTTPS (vCenter, the arrays' REST APIs,
InfluxDB): `verify_tls` (default true) and `ca_file`.

- neither: the system's CAs, host name checked;
- `ca_file`: that file's CAs only (a private CA, or a server's own self-signed certificate: that
  pins it), host name checked;
- `verify_tls = false`: no verification at all, warned about when the context is made (each
  client makes one, at its first call).

Both at once would mean verification on and off; config check refuses the pair (`contradiction`).
"""

from __future__ import annotations

import logging
import ssl
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

class TLSError(Exception):
    """The ca_file cannot be used."""


def context(verify_tls: bool, ca_file: Path | str | None, where: str) -> ssl.SSLContext:
    """The client context a section's settings mean; `where` names the source in the warning.
    A ca_file wins over verify_tls = false (only a config built around config check has both)."""
    if ca_file is not None:
        try:
            return ssl.create_default_context(cafile=str(ca_file))
        except (OSError, ssl.SSLError) as e:
            raise TLSError(f"{where}: cannot load ca_file {ca_file}: {e}") from None
    if verify_tls:
        return ssl.create_default_context()
    log.warning("%s: TLS certificate verification is OFF (verify_tls = false)", where)
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx


def contradiction(section: Any) -> str | None:
    """What is wrong with a section that says both `verify_tls = false` and `ca_file`, else None."""
    if getattr(section, "verify_tls", True) is False and getattr(section, "ca_file", None) is not None:
        return ("verify_tls = false turns certificate verification off, and ca_file turns it on with that "
                "file's CAs; give one: remove verify_tls = false to verify with ca_file, or ca_file to turn "
                "verification off")
    return None
