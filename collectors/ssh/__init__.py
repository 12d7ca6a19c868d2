"""The SSH layer shared by the DB2, storage, esxtop and remote guest collectors.

Its [[ssh]] section is light; paramiko is imported only when a target is made (`Targets`, or one of
target.py's names such as SSHTarget asked of this package): a local-only agent never loads it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from db2vtop.collectors.input import Input
from db2vtop.collectors.ssh.config import SSHConfig

if TYPE_CHECKING:
    from db2vtop.agent.core.schema import Schema


def declarations() -> Schema:
    """Nothing: the targets' samples are their collectors'."""
    from db2vtop.agent.core.schema import Schema

    return Schema()


#: no collector of its own: the other sources' make() ask for its targets
INPUT = Input("ssh", SSHConfig, __name__, schema=declarations)

_FROM_TARGET = ("Result", "SSHAuthError", "SSHConnectError", "SSHError", "SSHHostKeyError", "SSHTarget",
                "SSHTimeoutError", "command")
__all__ = ["INPUT", "SSHConfig", "Targets", *_FROM_TARGET]


class Targets:
    """One SSHTarget per [[ssh]] section, made on first use: the collectors of a host share its connection."""

    def __init__(self, sections: list[SSHConfig]):
        self.sections = {s.name: s for s in sections}
        self.made: dict[str, Any] = {}

    def __call__(self, name: str | None) -> Any:
        if name is None:
            return None
        if name not in self.made:
            from db2vtop.collectors.ssh.target import SSHTarget

            self.made[name] = SSHTarget(self.sections[name])
        return self.made[name]


def __getattr__(name: str) -> Any:
    if name in _FROM_TARGET:
        from db2vtop.collectors.ssh import target

        return getattr(target, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
