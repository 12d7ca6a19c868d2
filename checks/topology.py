"""What a stack is: the stacks there are (`infer_stacks`), and each one's entities over a window (`resolve`).

Every reader asks here: the verdict, the check engine's per-stack thresholds, triage's and the
report's finding filters, the report's figures and every TUI screen, so none of them can disagree on
what belongs to a stack (docs/architecture.md, "The read model").

A stack's identity includes its vCenter: VM names repeat across vCenters (a recovery site, dev and
prod), so every VM and host series is matched on it. vMotion moves a VM between hosts while its name
stays, so the host layer is a function of time: over a window, the host at each moment comes from
vCenter's migration events of the VM where there are any (a VM's history read back from vCenter's hour
is tagged with the host it is on now, whatever the time: only an agent that was running tagged each
sample as it came), else from the VM's own samples, which an agent and esxtop tag with the host that
ran it then (where there are none, from its fact).
"""

from __future__ import annotations

import fnmatch
from bisect import bisect_right
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from db2vtop.agent.core.config import CoreConfig, StackConfig
from db2vtop.agent.core.events import VCenterEvent
from db2vtop.agent.core.model import Fact
from db2vtop.agent.core.source import CachedSource, Series, Source, cached, derive, tag_values
from db2vtop.agent.core.text import plural
from db2vtop.checks.events import migrations

#: a VM's measurements tagged with its host, and fields every such sample carries
VM_PLACEMENT = {"vsphere_vm": ("cpu_ready_pct", "cpu_usage_pct", "mem_balloon_bytes"),
                "esxtop_vm": ("used_pct", "ready_pct")}
#: how far before a window to look for where the VM was when the window opened
LOOKBEHIND_NS = 3600 * 10**9
#: measurements whose series are a host's, and the tag naming the LUN where they are per LUN
HOST_LUN_TAGS = {"vsphere_host_lun": "lun", "esxtop_device": "device"}
#: an array's measurements that can name a LUN (by its `naa` tag)
VOLUME_MEASUREMENTS = ("storage_lun", "storage_volume", "storage_device", "storage_disk", "storage_group")
DB2_MEASUREMENTS = ("db2_database", "db2_log")
GUEST_MEASUREMENT = "guest_cpu"

#: which of a stack's series each entity names (the figure table's `entity`, checks/figures.py)
ENTITIES = {
    "db2": "the stack's DB2 database",
    "guest": "the guest OS the database runs in",
    "vm": "the VM (of the stack's vCenter)",
    "host": "the host the VM ran on, while it ran there",
    "lun": "the host's view of the LUNs behind the VM's disks, while the VM ran there",
    "datastore": "the datastores of the host the VM ran on",
    "volume": "the array volumes behind the VM's disks (matched on NAA), else the stack's arrays' volumes",
    "array": "the stack's arrays as a whole (nodes, clusters)",
}


def short_name(name: str) -> str:
    """A host name's first label, lower case: how a guest, its VM and an [[ssh]] host are compared."""
    return name.split(".", 1)[0].lower()


#: how ESXi's canonical name of a storage device begins (scsiLun canonicalName): an NAA or EUI-64 id, a T10 vendor id,
#: a path (mpx., a device with no id of its own: local disks, CD-ROMs), a VMware legacy name
LUN_PREFIXES = ("naa.", "eui.", "t10.", "mpx.", "vml.")


def lun_name(name: str) -> str:
    """A LUN's name as every source is compared, and as ESXi names it: its canonical name, the NAA or EUI-64 id in
    lower case (arrays report an NAA id bare, or in upper case), any other (t10., mpx., vml.) as it is."""
    n = name.strip()
    low = n.lower()
    if low.startswith(("naa.", "eui.")):
        return low
    if low.startswith(LUN_PREFIXES):
        return n
    return "naa." + low if n else ""


# --- placement -------------------------------------------------------------------------------


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


def _vcenter_ok(tags: dict[str, str], vcenter: str | None) -> bool:
    """A series without a vcenter tag (esxtop's) is any vCenter's."""
    return not vcenter or tags.get("vcenter", vcenter) == vcenter


def placement(source: Source, vm: str | None, since_ns: int, until_ns: int,
              vcenter: str | None = None) -> Placement:
    """Where `vm` (of `vcenter`) was from a little before `since_ns` to `until_ns`: its migrations in that time,
    else its samples' host tags. At one moment (since = until: a Fleet of 10,000 VMs asks each second) the newest
    sample of each of its series is all that is read (an agent tags each with the host it came from)."""
    view = cached(source)
    points: dict[int, str] = {}
    if vm:
        mine = [s for m in VM_PLACEMENT for s in view.by_tag(m, "vm").get(vm, ())
                if s.tags.get("host") and _vcenter_ok(s.tags, vcenter)]
        if since_ns == until_ns:
            for r in view.latest_of(mine, 0, until_ns):
                points.setdefault(r.ts, r.tags["host"])
        else:
            for s in mine:
                for name in VM_PLACEMENT[s.measurement]:
                    window = view.window(s.id, name, since_ns - LOOKBEHIND_NS, until_ns)
                    if window:
                        for ts, _ in window:
                            points.setdefault(ts, s.tags["host"])
                        break
            moves = migrations(view, vm, vcenter, since_ns - LOOKBEHIND_NS, until_ns)
            if moves:
                points = _moved(points, moves, since_ns - LOOKBEHIND_NS)
    times = sorted(points)
    return Placement(vm, times, [points[t] for t in times])


def _moved(points: dict[int, str], moves: list[VCenterEvent], start: int) -> dict[int, str]:
    """Where the VM's migrations say it ran: on the first one's source host until it (on what the samples say
    before it, when vCenter did not name the source), then on each one's destination."""
    first = moves[0]
    out = {start: first.source_host} if first.source_host else {t: h for t, h in points.items() if t < first.ts}
    for e in moves:
        out[e.ts] = e.host or ""
    return out


# --- a stack's entities ---------------------------------------------------------------------


@dataclass(frozen=True)
class Disk:
    """One of the VM's virtual disks: its datastore and the LUNs (lun_name()) behind it."""

    name: str
    datastore: str
    luns: tuple[str, ...]


@dataclass(eq=False)
class StackEntities:
    """A stack's entities over [since, until]: what every reader of the stack reads, and only that."""

    stack: StackConfig
    since: int
    until: int
    source: CachedSource = field(repr=False)
    vm: str | None = None
    vcenter: str | None = None
    placement: Placement = field(default_factory=lambda: Placement(None))
    hosts: tuple[str, ...] = ()  # every host the VM ran on in the window (a host target's own host)
    disks: tuple[Disk, ...] = ()
    luns: dict[str, str] = field(default_factory=dict)  # LUN (lun_name()) -> datastore ("" when unknown)
    guest: str | None = None
    db2: str | None = None
    arrays: tuple[str, ...] = ()  # the stack's arrays and those that hold its LUNs
    fixed_host: str | None = None  # a host target (the TUI opened on a host): its series at every moment
    _naa_found: bool | None = field(default=None, init=False, repr=False)

    def __getstate__(self) -> dict[str, Any]:
        """Sent between processes (the report's workers) as data: the source stays behind."""
        return {**self.__dict__, "source": None}

    @property
    def name(self) -> str:
        return self.stack.name

    @property
    def host(self) -> str | None:
        """The host at the window's end (the TUI's cursor)."""
        return self.fixed_host or self.placement.host_at(self.until)

    def host_at(self, ts: int) -> str | None:
        return self.fixed_host or self.placement.host_at(ts)

    def always_there(self, tags: dict[str, str]) -> bool:
        """A host's series counts at every moment of the window: the VM ran on that host alone in it (or the
        target is the host)."""
        return self.fixed_host is not None or (len(self.hosts) == 1 and tags.get("host") == self.hosts[0])

    def ran_there(self, tags: dict[str, str], ts: int) -> bool:
        """A host's sample counts while the VM ran on that host."""
        return self.fixed_host is not None or self.placement.host_at(ts) == tags.get("host")

    # --- which series are the stack's ---

    def _on_host(self, entity: str, tags: dict[str, str]) -> bool:
        """A host's series (one of its LUNs' for `lun`) of a host the VM ran on, of the stack's vCenter."""
        on_host = tags.get("host") in self.hosts and _vcenter_ok(tags, self.vcenter)
        return on_host and (entity != "lun" or self.lun_of(tags) in self.luns)

    @staticmethod
    def lun_of(tags: dict[str, str]) -> str:
        """The LUN (lun_name()) a host's per-LUN series names."""
        return lun_name(tags.get("lun") or tags.get("device") or "")

    @property
    def _by_naa(self) -> bool:
        """Whether some array names one of the stack's LUNs: then its volumes are those, else every one
        of its arrays' volumes (NFS, LUNs not reported, a Linux storage host)."""
        if self._naa_found is None:
            volumes = _volumes(self.source)
            self._naa_found = any(lun in volumes for lun in self.luns)
        return self._naa_found

    def select(self, entity: str, measurement: str, where: Iterable[tuple[str, str]] = ()) -> list[Series]:
        """The stack's series of `measurement` that `entity` names (and whose tags include `where`)."""
        v = self.source
        if entity == "db2":
            found = v.by_tag(measurement, "db2").get(self.db2, []) if self.db2 else []
        elif entity == "guest":
            found = v.by_tag(measurement, "guest").get(self.guest, []) if self.guest else []
        elif entity == "vm":
            found = [s for s in v.by_tag(measurement, "vm").get(self.vm, []) if _vcenter_ok(s.tags, self.vcenter)] \
                if self.vm else []
        elif entity in ("host", "datastore", "lun"):
            found = [s for h in self.hosts for s in v.by_tag(measurement, "host").get(h, ())
                     if self._on_host(entity, s.tags)]
        elif entity == "volume" and self._by_naa:
            volumes = _volumes(v)
            found = [s for lun in self.luns for s in volumes.get(lun, ()) if s.measurement == measurement]
        elif entity in ("volume", "array"):
            found = [s for a in self.arrays for s in v.by_tag(measurement, "storage").get(a, ())]
        else:
            raise ValueError(f"no such entity {entity!r}; one of {', '.join(ENTITIES)}")
        pairs = tuple(where)
        return [s for s in found if all(s.tags.get(k) == x for k, x in pairs)] if pairs else list(found)

    def owns(self, subject: dict[str, str]) -> bool:
        """Whether a finding's subject is one of the stack's entities: its VM (of its vCenter), guest, DB2
        or arrays; a host the VM ran on in the window; a host's LUN only when it is behind the VM's disks; its
        VM's vCenter itself (its clock dates the VM's samples)."""
        if not _vcenter_ok(subject, self.vcenter):
            return False
        if subject.get("layer") == "vcenter":
            return self.vm is not None and "vcenter" in subject
        if self.vm is not None and subject.get("vm") == self.vm:
            return True
        if any(v is not None and subject.get(k) == v for k, v in (("db2", self.db2), ("guest", self.guest))):
            return True
        if subject.get("storage") in self.arrays:
            return True
        if "host" in subject and "vm" not in subject and subject["host"] in self.hosts:
            lun = subject.get("lun") or subject.get("device") or subject.get("naa")
            return lun is None or lun_name(lun) in self.luns
        return False

    def collectors(self) -> set[str]:
        """The collectors that feed this stack, by the names the agent gives them (agent/assemble.py, each for its
        section): vsphere:VCENTER, esxtop:HOST, db2:NAME, storage:ARRAY, guest:TARGET (a remote guest; the local
        one, this machine's, is plain `guest`)."""
        sections = (("vsphere", (self.vcenter,)), ("esxtop", self.hosts or (self.host,)), ("db2", (self.db2,)),
                    ("storage", self.arrays), ("guest", (self.guest,)))
        return {f"{kind}:{name}" for kind, names in sections for name in names if name}

    def to_json(self) -> dict[str, Any]:
        s = self.stack
        return {"name": s.name, "vm": self.vm, "vcenter": self.vcenter, "guest": self.guest, "db2": self.db2,
                "storage": list(self.arrays), "hosts": list(self.hosts), "luns": sorted(self.luns),
                "disks": [{"disk": d.name, "datastore": d.datastore, "luns": list(d.luns)} for d in self.disks]}


@dataclass(frozen=True)
class _Known:
    """The facts and guests the resolver looks names up in, indexed once per answer of the source."""

    vm_facts: dict[str, list[Fact]]  # VM name -> its facts (one per vCenter that has it)
    vcenters: dict[str, set[str]]  # VM name -> the vCenters with a VM of that name (facts and series)
    guests: list[str]  # every guest the samples or the facts know
    reported: dict[str, str]  # guest -> the short host name it reports


def _known(view: CachedSource) -> _Known:
    vm_facts, guest_facts = view.facts("vsphere_vm"), view.facts("guest")
    indexes = tuple(view.by_tag(m, "vm") for m in VM_PLACEMENT)
    guest_series = view.by_tag(GUEST_MEASUREMENT, "guest")

    def build() -> _Known:
        by_vm: dict[str, list[Fact]] = {}
        vcenters: dict[str, set[str]] = {}
        for f in vm_facts:
            if f.tags.get("vm"):
                by_vm.setdefault(f.tags["vm"], []).append(f)
                if f.tags.get("vcenter"):
                    vcenters.setdefault(f.tags["vm"], set()).add(f.tags["vcenter"])
        for index in indexes:
            for vm, series in index.items():
                vcenters.setdefault(vm, set()).update(s.tags["vcenter"] for s in series if s.tags.get("vcenter"))
        guests = sorted(set(guest_series) | {f.tags["guest"] for f in guest_facts if f.tags.get("guest")})
        reported = {f.tags["guest"]: short_name(str(f.data["hostname"])) for f in guest_facts
                    if f.tags.get("guest") and f.data.get("hostname")}
        return _Known(by_vm, vcenters, guests, reported)

    return derive(view, "topology", (vm_facts, guest_facts, *indexes, guest_series), build)


def _volumes(view: CachedSource) -> dict[str, list[Series]]:
    """Every array series that names a LUN, by its name (lun_name(), indexed once per series listing)."""
    indexes = tuple(view.by_tag(m, "naa") for m in VOLUME_MEASUREMENTS)

    def build() -> dict[str, list[Series]]:
        out: dict[str, list[Series]] = {}
        for index in indexes:
            for k, series in index.items():
                out.setdefault(lun_name(k), []).extend(series)
        return out

    return derive(view, "volumes", indexes, build)


def _vm_fact(known: _Known, vm: str, vcenter: str | None) -> Fact | None:
    found = [f for f in known.vm_facts.get(vm, ()) if _vcenter_ok(f.tags, vcenter)]
    return max(found, key=lambda f: f.ts) if found else None


def _vcenter_of(known: _Known, vm: str) -> str | None:
    """The vCenter of a VM named without one: the only vCenter that has it (else None: ambiguous)."""
    found = known.vcenters.get(vm, set())
    return next(iter(found)) if len(found) == 1 else None


def resolve(source: Source, stack: StackConfig, since_ns: int, until_ns: int,
            host: str | None = None) -> StackEntities:
    """`stack`'s entities over [since, until]: the VM and its vCenter, its host per moment, its disks →
    datastores → LUNs, the guest, DB2 and the array volumes. `host` resolves a host on its own (the TUI
    opened on a host): its series at every moment, its LUNs every LUN it reports."""
    view = cached(source)
    known = _known(view)
    out = StackEntities(stack, since_ns, until_ns, view, vm=stack.vm, vcenter=stack.vcenter, guest=stack.guest,
                        db2=stack.db2, fixed_host=host)
    luns: dict[str, str] = {}
    disks: list[Disk] = []
    if stack.vm:
        out.vcenter = stack.vcenter or _vcenter_of(known, stack.vm)
        out.placement = placement(view, stack.vm, since_ns, until_ns, out.vcenter)
        hosts = out.placement.hosts_between(since_ns, until_ns)
        fact = _vm_fact(known, stack.vm, out.vcenter)
        if not hosts and fact is not None and fact.data.get("host"):  # no sample in reach: where vCenter said
            hosts = {str(fact.data["host"])}
            out.placement = Placement(stack.vm, [fact.ts], [str(fact.data["host"])])
        out.hosts = tuple(sorted(hosts))
        # its virtual disks: as its series name them, then as its fact lists them (a disk the fact names
        # without its device is the series' disk of the same LUNs)
        found = [(s.tags.get("instance", ""), s.tags.get("datastore", ""), s.tags.get("lun", "").split(","))
                 for s in view.by_tag("vsphere_vm_disk", "vm").get(stack.vm, ()) if _vcenter_ok(s.tags, out.vcenter)]
        found += [(str(d.get("instance") or ""), str(d.get("datastore") or ""), d.get("luns") or ())
                  for d in (fact.data.get("disks") or () if fact is not None else ())]
        names: set[str] = set()
        lun_sets: set[tuple[str, ...]] = set()
        for name, datastore, raw in found:
            ids = tuple(lun_name(str(x)) for x in raw if x)
            if (name in names) if name else (ids in lun_sets):
                continue
            names.add(name)
            lun_sets.add(ids)
            disks.append(Disk(name, datastore, ids))
            for x in ids:
                if not luns.get(x):
                    luns[x] = datastore
        if out.guest is None:
            out.guest = _guest_named(known, {short_name(stack.vm)} | (
                {short_name(str(fact.data["guest_hostname"]))} if fact is not None and fact.data.get("guest_hostname")
                else set()))
    elif host is not None:
        out.hosts = (host,)
        for m, tag in HOST_LUN_TAGS.items():
            for s in view.by_tag(m, "host").get(host, ()):
                if s.tags.get(tag, "").lower().startswith(LUN_PREFIXES):
                    luns.setdefault(lun_name(s.tags[tag]), s.tags.get("datastore", ""))
    if out.guest is None and stack.db2 and not stack.vm:
        out.guest = _guest_named(known, {stack.db2.lower()})
    out.disks, out.luns = tuple(disks), luns
    arrays = list(stack.storage)
    if luns:
        volumes = _volumes(view)
        arrays += [s.tags["storage"] for lun in luns for s in volumes.get(lun, ()) if s.tags.get("storage")]
    out.arrays = tuple(dict.fromkeys(arrays))
    return out


def _guest_named(known: _Known, names: set[str]) -> str | None:
    """The guest whose short name, or the host name it reports, is one of `names`."""
    return next((g for g in known.guests if short_name(g) in names or known.reported.get(g) in names), None)


# --- the stacks there are ----------------------------------------------------------------------


@dataclass
class Inferred:
    """A stack and how each layer was found: `rule` by which rule it exists, `matched` each layer by
    what, `unmatched` why not."""

    stack: StackConfig
    rule: str  # config | vcenter | db2 | guest
    matched: dict[str, str] = field(default_factory=dict)
    unmatched: dict[str, str] = field(default_factory=dict)

    @property
    def configured(self) -> bool:
        return self.rule == "config"

    def to_json(self) -> dict:
        s = self.stack
        return {"stack": s.name, "configured": self.configured, "rule": self.rule, "vm": s.vm, "vcenter": s.vcenter,
                "guest": s.guest, "db2": s.db2, "storage": list(s.storage), "matched": self.matched,
                "unmatched": self.unmatched}


#: what each rule of infer_stacks adds, for `db2vtop stacks` and the docs
RULES = {
    "config": "a [[stack]] section, as written",
    "vcenter": "a vCenter VM no section names; its guest, DB2 and arrays matched from the sources' reports",
    "db2": "a DB2 database no stack holds, joined to the guest and VM of its name",
    "guest": "a guest with samples that no stack holds",
}


def _latest(facts: Iterable[Fact], kind: str) -> dict[tuple, Fact]:
    """The newest fact of `kind` per subject."""
    out: dict[tuple, Fact] = {}
    for f in facts:
        if f.kind == kind:
            key = tuple(sorted(f.tags.items()))
            if key not in out or f.ts >= out[key].ts:
                out[key] = f
    return out


def infer_stacks(cfg: CoreConfig, source: Source) -> list[Inferred]:
    """Every stack, by four rules in turn (`RULES`): the configured `[[stack]]` sections; one per vCenter
    VM that no section names (its guest the `[[ssh]]` target whose host is the VM's guest host name or
    one of its IP addresses, its DB2 the `[[db2]]` on that target, its arrays those whose LUNs carry the
    NAA ids behind its disks); one per DB2 database no stack holds (the guest and VM of its name, or the
    only ones); one per guest with samples no stack holds. A VM whose name repeats across vCenters gets
    a stack named `vcenter/vm`."""
    view = cached(source)
    facts = view.facts()
    out = [Inferred(s, "config", {"stack": "[[stack]] " + s.name}) for s in cfg.stack]
    named = {(s.vcenter, s.vm) for s in cfg.stack if s.vm} | {(None, s.vm) for s in cfg.stack if s.vm}
    array_luns: dict[str, str] = {}
    for kind in ("storage_lun", "storage_volume", "storage_device"):
        for f in _latest(facts, kind).values():
            lun = f.tags.get("naa") or f.data.get("naa")
            if lun and f.tags.get("storage"):
                array_luns.setdefault(lun_name(str(lun)), f.tags["storage"])
    vms = sorted(_latest(facts, "vsphere_vm").values(), key=lambda f: (f.tags.get("vm", ""), f.tags.get("vcenter", "")))
    repeated = {n for n, c in Counter(f.tags.get("vm") for f in vms).items() if c > 1}
    taken = {s.name for s in cfg.stack}
    targets = _Targets.of(cfg)
    for f in vms:
        vm, vcenter = f.tags.get("vm"), f.tags.get("vcenter")
        if not vm or (vcenter, vm) in named or (None, vm) in named:
            continue
        name = f"{vcenter}/{vm}" if (vm in repeated or vm in taken) and vcenter else vm
        taken.add(name)
        found = Inferred(StackConfig(name=name, vm=vm, vcenter=vcenter), "vcenter", {"vm": f"vCenter {vcenter}"})
        _match_guest(targets, f, found)
        _match_storage(f, array_luns, found, bool(cfg.storage))
        out.append(found)
    out += _db2_stacks(cfg, view, out, taken)
    held = {s.stack.guest for s in out if s.stack.guest}
    vm_names = {short_name(s.stack.vm) for s in out if s.stack.vm}  # their guest is found by name (resolve)
    for g in tag_values(view, (GUEST_MEASUREMENT,), "guest"):
        if g not in held and g not in taken and short_name(g) not in vm_names:
            out.append(Inferred(StackConfig(name=g, guest=g), "guest", {"guest": f"guest {g} has samples"}))
    return out


def _db2_stacks(cfg: CoreConfig, view: CachedSource, stacks: list[Inferred], taken: set[str]) -> list[Inferred]:
    """One stack per DB2 database no stack holds. Its guest: the [[ssh]] target its [[db2]] runs on when a
    guest of that name reports, else the guest whose short name (or the host name it reports) is the
    database's name, else the only guest no stack holds when there is one such database; its VM likewise
    by the names of the database and the guest (or VMware Tools' guest host name), else the only VM."""
    held = {s.stack.db2 for s in stacks if s.stack.db2}
    db2s = sorted((set(tag_values(view, DB2_MEASUREMENTS, "db2"))
                   | {f.tags["db2"] for f in view.facts() if f.kind.startswith("db2") and f.tags.get("db2")}) - held)
    if not db2s:
        return []
    known = _known(view)
    free_guests = [g for g in known.guests if g not in {s.stack.guest for s in stacks}]
    vms = tag_values(view, tuple(VM_PLACEMENT), "vm")
    free_vms = [v for v in vms if v not in {s.stack.vm for s in stacks}]
    tools = {vm: short_name(str(f.data["guest_hostname"])) for vm, facts in known.vm_facts.items() for f in facts
             if f.data.get("guest_hostname")}
    ssh_of = {d.name: d.ssh for d in cfg.db2}
    out = []
    for d in db2s:
        found = Inferred(StackConfig(name=d, db2=d), "db2", {"db2": f"DB2 {d} reports and no stack holds it"})
        guest = ssh_of.get(d) if ssh_of.get(d) in known.guests else None
        if guest is not None:
            found.matched["guest"] = f"[[db2]] {d} runs on [[ssh]] {guest}, which reports as a guest"
        elif (guest := _guest_named(known, {d.lower()})) is not None:
            found.matched["guest"] = f"guest {guest} is named (or reports the host name) {d}"
        elif len(free_guests) == 1 and len(db2s) == 1:
            guest = free_guests[0]
            found.matched["guest"] = f"the only guest no stack holds, {guest}, beside the only such DB2"
        names = {d.lower()} | ({short_name(guest), known.reported.get(guest, "")} if guest else set())
        vm = next((v for v in vms if short_name(v) in names or tools.get(v) in names), None)
        if vm is not None:
            found.matched["vm"] = f"VM {vm} is named like the database or its guest"
        elif len(free_vms) == 1 and len(db2s) == 1:
            vm = free_vms[0]
            found.matched["vm"] = f"the only VM no stack holds, {vm}, beside the only such DB2"
        name = d if d not in taken else f"db2/{d}"
        taken.add(name)
        vcenter = _vcenter_of(known, vm) if vm else None
        found.stack = StackConfig(name=name, db2=d, vm=vm, vcenter=vcenter, guest=guest)
        out.append(found)
    return out


@dataclass(frozen=True)
class _Targets:
    """The [[ssh]] targets by host (as written, and its short name) and the [[db2]] on each, indexed once: a
    10,000-VM inventory is matched VM by VM, not target by target for each VM (2,000 VMs and 100 targets took a
    second)."""

    ssh: tuple[Any, ...]  # the [[ssh]] sections (collectors' config: the checks see them as the Config's)
    by_host: dict[str, int]  # a target's host -> the first target with it
    by_short: dict[str, int]  # its short name -> the first
    db2_on: dict[str, Any]  # an [[ssh]] name -> the first [[db2]] on it

    @classmethod
    def of(cls, cfg: CoreConfig) -> _Targets:
        by_host: dict[str, int] = {}
        by_short: dict[str, int] = {}
        for i, ssh in enumerate(cfg.ssh):
            by_host.setdefault(ssh.host, i)
            by_short.setdefault(short_name(ssh.host), i)
        db2_on: dict[str, Any] = {}
        for d in cfg.db2:
            db2_on.setdefault(d.ssh, d)
        return cls(tuple(cfg.ssh), by_host, by_short, db2_on)


def _match_guest(targets: _Targets, vm: Fact, found: Inferred) -> None:
    """The VM's guest: the first [[ssh]] target whose host is one of its IP addresses or its guest host name."""
    hostname = str(vm.data.get("guest_hostname") or "")
    ips = {str(ip) for ip in vm.data.get("ip_addresses") or ()}
    if not hostname and not ips:
        found.unmatched["guest"] = "VMware Tools reports no guest host name or IP address"
        return
    first = [targets.by_host[ip] for ip in ips if ip in targets.by_host]
    if hostname and short_name(hostname) in targets.by_short:
        first.append(targets.by_short[short_name(hostname)])
    if not first:
        found.unmatched["guest"] = (f"no [[ssh]] target's host is {hostname or 'the guest host name'} or one of "
                                    f"{', '.join(sorted(ips)) or 'its IP addresses'}")
        found.unmatched["db2"] = "no guest matched, so no [[db2]] on it"
        return
    ssh = targets.ssh[min(first)]
    why = f"[[ssh]] {ssh.name} host {ssh.host} is the VM's IP address" if ssh.host in ips else \
        f"[[ssh]] {ssh.name} host {ssh.host} is the VM's guest host name {hostname}"
    found.stack = replace(found.stack, guest=ssh.name)
    found.matched["guest"] = why
    db2 = targets.db2_on.get(ssh.name)
    if db2 is not None:
        found.stack = replace(found.stack, db2=db2.name)
        found.matched["db2"] = f"[[db2]] {db2.name} runs on [[ssh]] {ssh.name}"
    else:
        found.unmatched["db2"] = f"no [[db2]] runs on [[ssh]] {ssh.name}"


def _match_storage(vm: Fact, array_luns: dict[str, str], found: Inferred, configured: bool) -> None:
    luns = {lun_name(str(lun)) for d in vm.data.get("disks") or () for lun in d.get("luns") or ()}
    arrays = sorted({array_luns[lun] for lun in luns if lun in array_luns})
    if arrays:
        found.stack = replace(found.stack, storage=arrays)
        found.matched["storage"] = f"{plural(len(luns), 'LUN')} behind the VM's disks found on " + ", ".join(arrays)
    elif not luns:
        found.unmatched["storage"] = "the VM's disks have no LUN (NFS or not reported)"
    elif not configured and not array_luns:  # nothing to match against: say so, not that no array has them
        found.unmatched["storage"] = "no [[storage]] array configured to match the LUNs behind the VM's disks"
    else:
        found.unmatched["storage"] = "no array reports the LUNs behind the VM's disks"


def db2_vm_selector(cfg: CoreConfig) -> Callable[[Fact], bool] | None:
    """Which VMs (their vsphere_vm facts) the per-VM rules judge: with `[vsphere] db2_vms` patterns, the
    VMs a [[stack]] names, those a [[db2]] runs on (matched as infer_stacks matches) and those the
    patterns match; without patterns, None: every VM."""
    if not cfg.vsphere.db2_vms:
        return None
    named = {s.vm for s in cfg.stack if s.vm}
    targets = _Targets.of(cfg)

    def is_db2(vm: Fact) -> bool:
        name = vm.tags.get("vm", "")
        if name in named or any(fnmatch.fnmatchcase(name, p) for p in cfg.vsphere.db2_vms):
            return True
        found = Inferred(StackConfig(name=name, vm=name), "vcenter")
        _match_guest(targets, vm, found)
        return found.stack.db2 is not None

    return is_db2


def pick(stacks: list[Inferred], vms: Iterable[str], names: Iterable[str]) -> tuple[list[Inferred], list[str]]:
    """The stacks `--vm` and `--stack` name (all when neither is given), and the names no stack has.
    A VM is named `vcenter/vm` or bare; a bare name held by VMs of several vCenters picks each."""
    vms, names = list(vms), list(names)
    if not vms and not names:
        return stacks, []

    def vm_names(s: StackConfig) -> set[str]:
        return {s.vm, f"{s.vcenter}/{s.vm}"} if s.vm else set()

    chosen = [i for i in stacks if vm_names(i.stack) & set(vms) or i.stack.name in names]
    missing = [v for v in vms if not any(v in vm_names(i.stack) for i in chosen)]
    missing += [n for n in names if not any(i.stack.name == n for i in chosen)]
    return chosen, missing
