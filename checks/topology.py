"""Which entities make up a stack, and where its VM was, moment by moment.

vMotion moves a VM between hosts while its name stays, so the host layer of a stack is a
function of time: every reader of it (the verdict, triage, the Stack screen) asks here for
the host at a moment or per bucket, never for every host the VM was ever seen on. The
placement comes from the VM's own samples, which vCenter and esxtop tag with the host that
ran it at that moment.
"""

from __future__ import annotations

import fnmatch
from bisect import bisect_right
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Protocol

from db2vtop.agent.core.config import Config, StackConfig
from db2vtop.agent.core.model import Fact, FieldValue
from db2vtop.agent.core.store import Series

#: a VM's measurements tagged with its host, and fields every such sample carries
VM_PLACEMENT = {"vsphere_vm": ("cpu_ready_pct", "cpu_usage_pct", "mem_balloon_bytes"),
                "esxtop_vm": ("used_pct", "ready_pct")}
#: how far before a window to look for where the VM was when the window opened
LOOKBEHIND_NS = 3600 * 10**9


class Source(Protocol):
    """What placement reads: the store, the TUI's reader, or rows held in memory (triage)."""

    def series(self, measurement: str | None = None) -> list[Series]: ...

    def window(self, series_id: int, field_name: str, since_ns: int,
               until_ns: int | None = None) -> list[tuple[int, FieldValue]]: ...


@dataclass
class Placement:
    """The VM's host over time: each sample's timestamp with the host it was tagged with."""

    vm: str | None
    times: list[int] = field(default_factory=list)
    hosts: list[str] = field(default_factory=list)

    def host_at(self, ts: int) -> str | None:
        """The host of the newest sample at or before `ts`; before the first sample, the first host."""
        if not self.times:
            return None
        i = bisect_right(self.times, ts)
        return self.hosts[i - 1] if i else self.hosts[0]

    def hosts_between(self, since_ns: int, until_ns: int) -> set[str]:
        """Every host the VM ran on within the window (and the one it was on when it opened)."""
        if not self.times:
            return set()
        lo, hi = bisect_right(self.times, since_ns), bisect_right(self.times, until_ns)
        return {self.hosts[max(lo - 1, 0)], *self.hosts[lo:hi]}


def placement(source: Source, vm: str | None, since_ns: int, until_ns: int,
              vcenter: str | None = None) -> Placement:
    """Where `vm` (of `vcenter`, when names repeat across vCenters) was from a little before
    `since_ns` to `until_ns`."""
    points: dict[int, str] = {}
    if vm:
        for measurement, fields in VM_PLACEMENT.items():
            for s in source.series(measurement):
                if s.tags.get("vm") != vm or not s.tags.get("host") or \
                        (vcenter and s.tags.get("vcenter", vcenter) != vcenter):
                    continue
                for name in fields:
                    window = source.window(s.id, name, since_ns - LOOKBEHIND_NS, until_ns)
                    if window:
                        for ts, _ in window:
                            points.setdefault(ts, s.tags["host"])
                        break
    times = sorted(points)
    return Placement(vm, times, [points[t] for t in times])


@dataclass
class Inferred:
    """A stack and how each layer was found: `matched` says by what, `unmatched` why not."""

    stack: StackConfig
    configured: bool
    matched: dict[str, str] = field(default_factory=dict)
    unmatched: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict:
        s = self.stack
        return {"stack": s.name, "configured": self.configured, "vm": s.vm, "vcenter": s.vcenter, "guest": s.guest,
                "db2": s.db2, "storage": list(s.storage), "matched": self.matched, "unmatched": self.unmatched}


def _short(name: str) -> str:
    return name.split(".", 1)[0].lower()


def _latest(facts: list[Fact], kind: str) -> dict[tuple, Fact]:
    """The newest fact of `kind` per subject."""
    out: dict[tuple, Fact] = {}
    for f in facts:
        if f.kind == kind:
            key = tuple(sorted(f.tags.items()))
            if key not in out or f.ts >= out[key].ts:
                out[key] = f
    return out


def infer_stacks(cfg: Config, facts: list[Fact]) -> list[Inferred]:
    """Every stack: the configured `[[stack]]` sections as written, then one per vCenter VM that no
    section names, its layers found from what the sources report: the guest is the `[[ssh]]` target
    whose host is the VM's guest host name (VMware Tools) or one of its IP addresses, DB2 the `[[db2]]`
    on that target, the arrays those whose LUNs carry the NAA ids behind the VM's disks."""
    out = [Inferred(s, True, {"stack": "[[stack]] " + s.name}) for s in cfg.stack]
    named = {(s.vcenter, s.vm) for s in cfg.stack if s.vm} | {(None, s.vm) for s in cfg.stack if s.vm}
    array_luns: dict[str, str] = {}
    for kind in ("storage_lun", "storage_volume", "storage_device"):
        for f in _latest(facts, kind).values():
            naa = f.tags.get("naa") or f.data.get("naa")
            if naa and f.tags.get("storage"):
                array_luns.setdefault(str(naa).lower().removeprefix("naa."), f.tags["storage"])
    for f in sorted(_latest(facts, "vsphere_vm").values(), key=lambda f: f.tags.get("vm", "")):
        vm, vcenter = f.tags.get("vm"), f.tags.get("vcenter")
        if not vm or (vcenter, vm) in named or (None, vm) in named:
            continue
        found = Inferred(StackConfig(name=vm, vm=vm, vcenter=vcenter), False, {"vm": f"vCenter {vcenter}"})
        _match_guest(cfg, f, found)
        _match_storage(f, array_luns, found)
        out.append(found)
    return out


def _match_guest(cfg: Config, vm: Fact, found: Inferred) -> None:
    hostname = str(vm.data.get("guest_hostname") or "")
    ips = {str(ip) for ip in vm.data.get("ip_addresses") or ()}
    if not hostname and not ips:
        found.unmatched["guest"] = "VMware Tools reports no guest host name or IP address"
        return
    for ssh in cfg.ssh:
        if ssh.host in ips:
            why = f"[[ssh]] {ssh.name} host {ssh.host} is the VM's IP address"
        elif hostname and _short(ssh.host) == _short(hostname):
            why = f"[[ssh]] {ssh.name} host {ssh.host} is the VM's guest host name {hostname}"
        else:
            continue
        found.stack = replace(found.stack, guest=ssh.name)
        found.matched["guest"] = why
        db2 = next((d for d in cfg.db2 if d.ssh == ssh.name), None)
        if db2 is not None:
            found.stack = replace(found.stack, db2=db2.name)
            found.matched["db2"] = f"[[db2]] {db2.name} runs on [[ssh]] {ssh.name}"
        else:
            found.unmatched["db2"] = f"no [[db2]] runs on [[ssh]] {ssh.name}"
        return
    found.unmatched["guest"] = (f"no [[ssh]] target's host is {hostname or 'the guest host name'} or one of "
                                f"{', '.join(sorted(ips)) or 'its IP addresses'}")
    found.unmatched["db2"] = "no guest matched, so no [[db2]] on it"


def _match_storage(vm: Fact, array_luns: dict[str, str], found: Inferred) -> None:
    luns = {str(lun).lower().removeprefix("naa.") for d in vm.data.get("disks") or () for lun in d.get("luns") or ()}
    arrays = sorted({array_luns[lun] for lun in luns if lun in array_luns})
    if arrays:
        found.stack = replace(found.stack, storage=arrays)
        found.matched["storage"] = f"{len(luns)} LUN(s) behind the VM's disks found on " + ", ".join(arrays)
    else:
        found.unmatched["storage"] = ("no array reports the LUNs behind the VM's disks" if luns else
                                      "the VM's disks have no LUN (NFS or not reported)")


def in_stack(stack: StackConfig, subject: dict[str, str], facts: list[Fact]) -> bool:
    """Whether a finding's subject belongs to the stack: its VM, guest, DB2 or arrays, or the host the
    VM runs on now (its placement fact)."""
    if any(v is not None and subject.get(k) == v for k, v in (("vm", stack.vm), ("db2", stack.db2),
                                                             ("guest", stack.guest))):
        return True
    if subject.get("storage") in stack.storage:
        return True
    if stack.vm and "host" in subject and "vm" not in subject:
        placed = [f for f in facts if f.kind == "vsphere_vm" and f.tags.get("vm") == stack.vm]
        if not placed:
            return False
        vm = max(placed, key=lambda f: f.ts)
        lun = subject.get("lun") or subject.get("device")
        if lun is not None:  # a host's LUN is the stack's only when one of its disks lives there
            return lun in {x for d in vm.data.get("disks") or () for x in d.get("luns") or ()}
        return vm.data.get("host") == subject["host"]
    return False


def db2_vm_selector(cfg: Config) -> Callable[[Fact], bool] | None:
    """Which VMs (their vsphere_vm facts) the per-VM rules judge: with `[vsphere] db2_vms` patterns, the
    VMs a [[stack]] names, those a [[db2]] runs on (matched as infer_stacks matches) and those the
    patterns match; without patterns, None: every VM."""
    if not cfg.vsphere.db2_vms:
        return None
    named = {s.vm for s in cfg.stack if s.vm}

    def is_db2(vm: Fact) -> bool:
        name = vm.tags.get("vm", "")
        if name in named or any(fnmatch.fnmatchcase(name, p) for p in cfg.vsphere.db2_vms):
            return True
        found = Inferred(StackConfig(name=name, vm=name), False)
        _match_guest(cfg, vm, found)
        return found.stack.db2 is not None

    return is_db2
