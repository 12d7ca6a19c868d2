"""What a Stack screen looks at: a stack, or one VM, host or guest.

A stack comes from a `[[stack]]` section, is inferred (checks/topology.py infer_stacks: a replay
without a config too), or is opened ad hoc from a Fleet row (a VM, a host, a guest). Its entities
are resolved by checks/topology.py at the cursor on every load, because a vMotion changes the host
and a new disk adds a LUN while the screen is open.
"""

from __future__ import annotations

from dataclasses import dataclass

from db2vtop.agent.config import Config
from db2vtop.agent.core.config import StackConfig
from db2vtop.agent.core.source import Source
from db2vtop.checks.topology import StackEntities, infer_stacks, resolve

HOST_MEASUREMENTS = ("vsphere_host", "esxtop_device", "vsphere_host_lun")


@dataclass(frozen=True)
class Target:
    """What a Stack screen looks at: a configured or inferred stack, or one VM / host / guest."""

    scope: str  # "stack" | "vm" | "host" | "guest": what the screen is opened on
    name: str
    stack: StackConfig
    host: str | None = None  # a host target's name

    @property
    def label(self) -> str:
        return f"{self.scope} {self.name}"

    @classmethod
    def of_stack(cls, stack: StackConfig) -> Target:
        return cls("stack", stack.name, stack)

    @classmethod
    def of_vm(cls, vm: str, vcenter: str | None = None) -> Target:
        return cls("vm", vm, StackConfig(name=vm, vm=vm, vcenter=vcenter))

    @classmethod
    def of_host(cls, host: str) -> Target:
        return cls("host", host, StackConfig(name=host), host=host)

    @classmethod
    def of_guest(cls, guest: str) -> Target:
        return cls("guest", guest, StackConfig(name=guest, guest=guest))


@dataclass(frozen=True)
class Stacks:
    """The stacks there are, as `db2vtop stacks` lists them (`:stack NAME` and `2` open any of them), and those the
    Fleet gives a row of their own: the configured ones, every VM a [[db2]] is matched to and every DB2 database no
    stack holds (a plain VM's or guest's stack is its VM's or guest's row)."""

    every: tuple[StackConfig, ...] = ()
    shown: tuple[StackConfig, ...] = ()

    @classmethod
    def configured(cls, stacks: list[StackConfig]) -> Stacks:
        return cls(tuple(stacks), tuple(stacks))


def view_stacks(cfg: Config | None, source: Source) -> Stacks:
    """Every stack (checks/topology.py infer_stacks, all its rules), and those the Fleet shows."""
    found = infer_stacks(cfg or Config(), source)
    return Stacks(tuple(i.stack for i in found),
                  tuple(i.stack for i in found if i.configured or (i.rule != "guest" and i.stack.db2)))


def resolve_at(source: Source, target: Target, since_ns: int, until_ns: int) -> StackEntities:
    """A target's entities over the window (checks/topology.py `resolve`; a host target is its host)."""
    return resolve(source, target.stack, since_ns, until_ns, host=target.host)
