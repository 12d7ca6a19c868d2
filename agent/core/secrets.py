"""Secrets by reference: an environment variable, a private file or the OS keyring.

A secret value is only read when a collector connects; it never enters argv, logs,
the store or an exception message. Only its reference ("env VC1_PASSWORD") is shown.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

from db2vtop.agent.core.trust import untrusted


class SecretError(Exception):
    """A secret could not be read; the message names the reference, never a value."""


@dataclass(frozen=True)
class SecretRef:
    env: str | None = None
    file: Path | None = None
    keyring: str | None = None

    def describe(self) -> str:
        if self.env:
            return f"environment variable {self.env}"
        if self.file:
            return f"file {self.file}"
        return f"keyring service {self.keyring}"

    def resolve(self, user: str = "") -> str:
        if self.env:
            value = os.environ.get(self.env)
            if not value:
                raise SecretError(f"environment variable {self.env} is not set or empty")
            return value
        if self.file:
            return read_secret_file(self.file)
        return _from_keyring(self.keyring or "", user)


#: a password or token is far smaller; a config naming a log or a disk image fails at once
MAX_SECRET_BYTES = 64 * 1024


def read_secret_file(path: Path) -> str:
    """Read a secret file, refusing one that group or others could read, one another user could
    write or replace (agent/core/trust.py: its owner, its directories, its links resolved), and
    anything but a small regular file (a FIFO would block `config check`, a device or huge file never end)."""
    try:
        st = path.stat()
    except OSError as e:
        raise SecretError(f"cannot read secret file {path}: {e.strerror}") from None
    problem = untrusted(path)
    if problem is not None:
        raise SecretError(f"secret file {problem.why}: whoever can write or replace it chooses the secret sent; "
                          f"{problem.fix}")
    if not stat.S_ISREG(st.st_mode):
        raise SecretError(f"secret file {path} is not a regular file")
    if st.st_size > MAX_SECRET_BYTES:
        raise SecretError(f"secret file {path} is larger than 64KiB; it should hold one password or token")
    if st.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise SecretError(
            f"secret file {path} is readable by group or others (mode {stat.S_IMODE(st.st_mode):o});"
            f" run: chmod 600 {path}")
    try:
        value = path.read_text(encoding="utf-8").strip("\r\n")
    except (OSError, UnicodeDecodeError) as e:
        raise SecretError(f"cannot read secret file {path}: {type(e).__name__}") from None
    if not value:
        raise SecretError(f"secret file {path} is empty")
    return value


def _from_keyring(service: str, user: str) -> str:
    try:
        import keyring  # optional: pip install keyring
    except ImportError:
        raise SecretError(
            "password_keyring needs the 'keyring' package: pip install keyring") from None
    value = keyring.get_password(service, user)
    if not value:
        raise SecretError(f"no secret for user {user!r} in keyring service {service!r}")
    return value
