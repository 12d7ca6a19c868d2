"""The SSH layer shared by the DB2, storage, esxtop and remote guest collectors."""

from db2vtop.collectors.ssh.target import (
    Result,
    SSHAuthError,
    SSHConnectError,
    SSHError,
    SSHHostKeyError,
    SSHTarget,
    SSHTimeoutError,
    command,
)

__all__ = ["Result", "SSHAuthError", "SSHConnectError", "SSHError", "SSHHostKeyError", "SSHTarget",
           "SSHTimeoutError", "command"]
