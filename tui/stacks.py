"""Which store entities make up a stack: DB2 ↔ guest ↔ VM ↔ host ↔ LUNs ↔ array.

A stack comes from a `[[stack]]` section, is inferred from the data (a replay without
a config), or is opened ad hoc from a Fleet row (a VM, a host, a guest). The static
names are resolved against the store at the cursor's time on every load, because a
vMotion changes the host and a new disk adds a LUN while the screen is open.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from db2vtop.agent.config import Config
from db2vtop.agent.core.config import StackConfig
from db2vtop.agent.core.store import Row, Store
from db2vtop.checks import topology
from db2vtop.checks.topology import placement
from db2vtop.tui.data import Reader

VM_MEASUREMENTS = ("vsphere_vm", "esxtop_vm")
HOST_MEASUREMENTS = ("vsphere_host", "esxtop_device", "vsphere_host_lun")
DB2_MEASUREMENTS = ("db2_database", "db2_log")


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


def short_name(name: str) -> str:
    return name.split(".", 1)[0].lower()


def _tag_values(store: Store, measurements: tuple[str, ...], tag: str) -> list[str]:
    return sorted({s.tags[tag] for m in measurements for s in store.series(m) if s.tags.get(tag)})


def _hostnames(store: Store, kind: str, key: str, field_name: str) -> dict[str, str]:
    """Entity name -> the host name it reports (guest facts, VMware Tools' guest host name)."""
    return {f.tags[key]: short_name(str(f.data[field_name])) for f in store.facts(kind)
            if f.tags.get(key) and f.data.get(field_name)}


def view_stacks(cfg: Config | None, store: Store) -> list[StackConfig]:
    """The stacks the screens show: the configured ones and every VM a [[db2]] is matched to
    (checks/topology.py, as triage infers them); without either, those the data suggests."""
    facts = [f for kind in ("vsphere_vm", "storage_lun", "storage_volume", "storage_device") for f in store.facts(kind)]
    shown = [i.stack for i in topology.infer_stacks(cfg or Config(), facts) if i.configured or i.stack.db2]
    return shown or (infer_stacks(store) if store.series("db2_database") else [])


def infer_stacks(store: Store) -> list[StackConfig]:
    """One stack per DB2 database in the store, joined to the guest and VM of the same name.

    "Same name" compares short host names case-insensitively: the guest's name or the
    host name it reports, the VM's name or the guest host name VMware Tools reports.
    When the store holds one DB2 database and one guest (or VM), they belong together.
    """
    db2s = _tag_values(store, DB2_MEASUREMENTS, "db2")
    guests = _tag_values(store, ("guest_cpu",), "guest")
    vms = _tag_values(store, VM_MEASUREMENTS, "vm")
    guest_host = _hostnames(store, "guest", "guest", "hostname")
    vm_host = _hostnames(store, "vsphere_vm", "vm", "guest_hostname")
    vcenter_of = {s.tags["vm"]: s.tags.get("vcenter") for s in store.series("vsphere_vm") if s.tags.get("vm")}
    out = []
    for d in db2s:
        guest = next((g for g in guests if d.lower() in (short_name(g), guest_host.get(g))), None)
        if guest is None and len(guests) == 1 and len(db2s) == 1:
            guest = guests[0]
        names = {d.lower()} | ({short_name(guest), guest_host.get(guest, "")} if guest else set())
        vm = next((v for v in vms if short_name(v) in names or vm_host.get(v) in names), None)
        if vm is None and len(vms) == 1 and len(db2s) == 1:
            vm = vms[0]
        out.append(StackConfig(name=d, db2=d, vm=vm, vcenter=vcenter_of.get(vm) if vm else None, guest=guest))
    return out


@dataclass
class Resolved:
    """A target's entities at one moment."""

    target: Target
    db2: str | None = None
    vm: str | None = None
    vcenter: str | None = None
    host: str | None = None
    guest: str | None = None
    storage: tuple[str, ...] = ()
    luns: dict[str, str] = field(default_factory=dict)  # NAA id -> datastore (or "")
    vm_row: Row | None = None

    def collectors(self) -> set[str]:
        """Names of the collectors that feed this stack (collectors are named for their sections)."""
        names = {self.db2, self.guest, self.vcenter, self.host, *self.storage}
        return {n for n in names if n}


def _newest(rows: list[Row]) -> Row | None:
    return max(rows, key=lambda r: r.ts) if rows else None


def resolve(rd: Reader, target: Target, until_ns: int) -> Resolved:
    """Fill in host, guest and LUNs from what the collectors reported up to the cursor."""
    st = target.stack
    r = Resolved(target, db2=st.db2, vm=st.vm, vcenter=st.vcenter, guest=st.guest, storage=tuple(st.storage),
                 host=target.host)
    if r.vm:
        vm = r.vm

        def mine(t: dict[str, str]) -> bool:
            return t.get("vm") == vm and (not r.vcenter or t.get("vcenter", r.vcenter) == r.vcenter)

        r.vm_row = _newest(rd.latest("vsphere_vm", until_ns, mine))
        if r.vm_row is not None:
            r.vcenter = r.vm_row.tags.get("vcenter") or r.vcenter
        r.host = placement(rd, vm, until_ns, until_ns, r.vcenter).host_at(until_ns) or r.host
        if r.guest is None:
            r.guest = rd.memo(("guest-of-vm", vm), 60, lambda: _guest_of_vm(rd.store, vm))
        for d in rd.latest("vsphere_vm_disk", until_ns, mine):
            if d.tags.get("host", r.host) == r.host:
                for naa in filter(None, d.tags.get("lun", "").split(",")):
                    r.luns[naa] = d.tags.get("datastore", "")
    elif r.host:
        for m, tag in (("vsphere_host_lun", "lun"), ("esxtop_device", "device")):
            for s in rd.series(m):
                if s.tags.get("host") == r.host and s.tags.get(tag, "").startswith("naa."):
                    r.luns.setdefault(s.tags[tag], s.tags.get("datastore", ""))
    return r


def _guest_of_vm(store: Store, vm: str) -> str | None:
    guests = _tag_values(store, ("guest_cpu",), "guest")
    wanted = {short_name(vm)}
    hostname = _hostnames(store, "vsphere_vm", "vm", "guest_hostname").get(vm)
    if hostname:
        wanted.add(hostname)
    guest_host = _hostnames(store, "guest", "guest", "hostname")
    return next((g for g in guests if short_name(g) in wanted or guest_host.get(g) in wanted), None)
