"""The vSphere collector: one vCenter (or ESXi host) per instance.

Each cycle: the light inventory (placement, vCPUs, quickStats, configuration version) brought
up to date by one WaitForUpdatesEx, the facts of the VMs it shows changed, vCenter's event log since
the last cycle (events.py), then realtime perf for every powered-on VM and every host in a few batched
QueryPerf calls run on the collector's thread pool. A lost session is logged in again and the step
retried within the same cycle; an unreachable vCenter is a recorded error, retried with backoff, never
the end of the agent.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from db2vtop.agent.core.clock import CLOCK
from db2vtop.agent.core.events import EVENT
from db2vtop.agent.core.model import Annotation, Fact, Record, Sample
from db2vtop.collectors.base import BaseCollector, CollectorError
from db2vtop.collectors.capabilities import DescribesVMs, KeepsHistory, Resumes, ResumesLog, Streams
from db2vtop.collectors.vsphere import inventory as inv_mod
from db2vtop.collectors.vsphere.config import VCenterConfig
from db2vtop.collectors.vsphere.connection import Connector, Session, SoapFaultError, is_session_lost, is_unreachable
from db2vtop.collectors.vsphere.counters import MEASUREMENT_OF
from db2vtop.collectors.vsphere.events import (
    CYCLE_PAGES,
    LOOKBACK_PAGES,
    PAGE,
    EventLog,
    create_collector,
    destroy_collector,
    read_page,
)
from db2vtop.collectors.vsphere.facts import FactsBuilder, TagMaps, build_facts
from db2vtop.collectors.vsphere.inventory import FullRead, Inventory, Rows
from db2vtop.collectors.vsphere.perf import (
    CLOCK_MARGIN_S,
    REALTIME_KEEP_S,
    REALTIME_S,
    CounterIds,
    EntityResult,
    PerfState,
    Spec,
    chunk,
    iso,
    read_counters,
    to_samples,
)
from db2vtop.collectors.vsphere.perf import query as perf_query
from db2vtop.collectors.vsphere.schema import CLOCK_MEASUREMENT
from db2vtop.collectors.vsphere.soapxml import Ref, as_list
from db2vtop.collectors.vsphere.watch import InventoryWatch, WatchLostError

log = logging.getLogger(__name__)

MAX_LOOKBACK_S = REALTIME_KEEP_S
#: pages of the facts pass asked for ahead of the one being made facts
PAGES_AHEAD = 2
#: how long a cycle that is the whole facts pass (every VM's device list) may run: a 10,000-VM vCenter's
#: takes ~15 s, more than a 20 s cycle leaves on a busy machine, and a pass cut short is begun again next
#: cycle, so it would never end (each call still has its own timeout); the same for a first cycle's history
FULL_PASS_TIMEOUT_S = 600.0
#: records a cycle holds before it hands them on (Streams.handoff): a 4,000-VM part of a cycle; a
#: 2,000-VM vCenter's cycle stays one batch (each batch is a store transaction and a sealing step)
HANDOFF = 20_000
#: the same for a first cycle (the facts pass, or a reach-back over every entity's history): handed on in smaller
#: parts, the store and checks take them while vCenter is still answering, not all at its end
HANDOFF_FIRST = 5_000
#: faults vCenter gives a whole QueryPerf call for one entity that is gone or unreachable
ENTITY_FAULTS = frozenset({"ManagedObjectNotFound", "NotFound", "HostNotConnected", "HostNotReachable"})

_gc_lock = threading.Lock()
_gc_holders = 0
_gc_was_enabled = False


def _seen(vm: Fact) -> tuple[str, str, str]:
    """What the collector remembers of a VM once its fact is made or read back from the store: the
    identity digest, the host (whose totals change when the VM leaves it) and the name its fact is tagged
    with. A fact without a digest (an older db2vtop's) never matches, so the VM is read again."""
    return str(vm.data.get("identity") or ""), str(vm.data.get("host_moid") or ""), vm.tags.get("vm", "")


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector for a cycle (reference counting still frees).

    A cycle allocates millions of short-lived, acyclic objects (XML elements, samples); the
    cyclic collector would rescan the growing heap again and again: measured on 2,000 VMs,
    60-70 % of the collector's CPU. Nested and concurrent cycles share one pause.
    """
    global _gc_holders, _gc_was_enabled
    with _gc_lock:
        if _gc_holders == 0:
            _gc_was_enabled = gc.isenabled()
            gc.disable()
        _gc_holders += 1
    try:
        yield
    finally:
        with _gc_lock:
            _gc_holders -= 1
            if _gc_holders == 0 and _gc_was_enabled:
                gc.enable()


class _Conn:
    """A session with what is resolved once per connection."""

    def __init__(self, session: Session):
        self.session = session
        self.view = inv_mod.create_view(session)
        self.ids = CounterIds(read_counters(session))
        self.watch: InventoryWatch | None = None   # the light inventory's filter, made on first use
        self.event_collector = ""                  # the event log's history collector, made on first use
        if self.ids.missing:
            log.warning("vcenter counters not available here: %s", ", ".join(self.ids.missing))


class VSphereCollector(BaseCollector, Streams, KeepsHistory, Resumes, ResumesLog, DescribesVMs):
    resumes = ("vsphere_vm", "vsphere_host", "vsphere_datastore")
    resumes_after = (EVENT,)
    reaches_back = frozenset(MEASUREMENT_OF.values())  # the realtime counters' (not the quickStats')

    def __init__(self, cfg: VCenterConfig):
        super().__init__(f"vsphere:{cfg.name}", cfg.interval, cfg.timeout)
        self.cfg = cfg
        self.workers = cfg.workers
        self.connector = Connector(cfg, self.timeout)
        self._conn: _Conn | None = None
        self.inventory = Inventory()
        self._inventory_at = 0.0
        self.maps = TagMaps()
        self.perf_state = PerfState()
        self.logins = 0
        #: VM moid -> (digest of what its last fact was built from, its host then, its name then)
        self._identity: dict[str, tuple[str, str, str]] = {}
        self._held: list[Record | Fact] = []   # records of the cycle under way not handed on yet
        self._part = HANDOFF                   # how many of them are handed on at a time
        #: (kind, name) -> the newest sample the store holds of that VM or host (epoch s), until its moid is known
        self._stored: dict[tuple[str, str], int] = {}
        self._resumed_on: list[str] = []  # VMs powered on in the stored facts, until a restart's first cycle
        #: a restart's QueryPerf calls asked for while describe() reads the inventory: (tasks, their go, VMs)
        self._ahead: tuple[list[asyncio.Future], asyncio.Event, list[str]] | None = None
        #: where vCenter's event log has been read to (None: events are not read)
        self.event_log = EventLog(cfg.name) if cfg.events else None

    # --- session ----------------------------------------------------------------------

    def _open(self) -> _Conn:
        session = self.connector.connect()
        try:
            return _Conn(session)
        except Exception:
            session.close()
            raise

    async def _connection(self) -> _Conn:
        if self._conn is None:
            self._conn = await self.run_blocking(self._open)
            self.logins += 1
            if self.logins > 1:
                self.facts_stale = True  # placement or configuration may have changed meanwhile
        return self._conn

    def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None and self._executor is not None:
            self._executor.submit(conn.session.close)

    async def _with_session(self, step: Any) -> Any:
        """Run an async step; a lost session is logged in again and the step retried once."""
        for attempt in (1, 2):
            conn = await self._connection()
            try:
                with gc_paused():
                    return await step(conn)
            except Exception as e:
                if is_session_lost(e) and attempt == 1:
                    log.info("vcenter %s: session lost (%s), logging in again", self.cfg.name, e)
                    self._drop()
                    continue
                if is_unreachable(e):
                    self._drop()
                    raise CollectorError(f"vcenter {self.cfg.name}: connection lost: {e}") from None
                if is_session_lost(e):
                    self._drop()
                    raise CollectorError(f"vcenter {self.cfg.name}: session refused after a new login") from None
                raise
        raise AssertionError("unreachable")

    # --- collector API ----------------------------------------------------------------

    async def _light(self, conn: _Conn) -> Rows:
        """The light inventory brought up to date (a full read the first time on a session, then only
        what changed); every VM's light row."""
        for attempt in (1, 2):
            if conn.watch is None:
                conn.watch = await self.run_blocking(InventoryWatch, conn.session, conn.view)
            try:
                changed = await self.run_blocking(conn.watch.poll)
            except WatchLostError as e:
                conn.watch = None
                if attempt == 2:
                    raise
                log.info("vcenter %s: %s; reading the inventory again", self.cfg.name, e)
                continue
            if changed or not self.inventory.hosts:
                self._set_inventory(conn.watch.inventory())
            else:
                self._inventory_at = time.monotonic()
            return conn.watch.vm_rows()
        raise AssertionError("unreachable")

    def cycle_timeout(self) -> float:
        """The whole facts pass, or a first cycle that reaches back for every entity's history (a restart:
        held to the pace of the store and checks), may run longer than a steady cycle."""
        return max(self.timeout, FULL_PASS_TIMEOUT_S) if self._first_cycle() else self.timeout

    def _first_cycle(self) -> bool:
        return not self._identity or (self.history_samples > 1 and not self.perf_state.entity_start)

    def facts_due(self) -> bool:
        """The first facts pass is collect()'s own (it queries perf page by page as the VMs come)."""
        return bool(self._identity) and super().facts_due()

    async def describe(self) -> list[Fact]:
        """The facts pass. The first on this collector reads every VM's full row (see _full_pass) unless
        resume() gave it the last run's; later ones read hosts and datastores, and the VMs whose identity
        moved (collect() finds those within a cycle)."""
        async def step(conn: _Conn) -> list[Fact]:
            if not self._identity:
                return await self._full_pass(conn, None)
            s, view = conn.session, conn.view
            host_rows, ds_rows = await asyncio.gather(self.run_blocking(inv_mod.read_hosts, s, view, True),
                                                      self.run_blocking(inv_mod.read_datastores, s, view))
            builder = FactsBuilder(self.cfg.name, inv_mod.hosts_from(host_rows), host_rows, ds_rows, CLOCK.now_ns())
            self._ask_ahead(conn)
            light = await self._light(conn)
            for obj, p in light:
                builder.count(obj, p)
            builder.maps.add_vms_of(self.maps)
            facts, self.maps = builder.finish()
            return self._retire(facts) + facts + await self._changed_facts(conn, light)
        try:
            return await self._with_session(step)
        except BaseException:
            ahead, self._ahead = self._ahead, None
            for task in ahead[0] if ahead is not None else ():
                task.cancel()
            raise

    def _ask_ahead(self, conn: _Conn) -> None:
        """A restart on stored facts: the light inventory's first read is ~100 round trips at 10,000 VMs; the
        VMs powered on when the last run stopped are asked for their samples meanwhile (a worker left to the
        inventory; the answers of workers - 1 calls held at most). collect() makes them samples, after this
        pass's facts, tagged from the inventory read."""
        if not self._resumed_on or self.inventory.hosts or self._ahead is not None:
            return
        ready, asked = asyncio.Event(), self._take_resumed()
        task = asyncio.ensure_future(self._perf(conn, None, asked, [], emit=self._emit,
                                                slots=asyncio.Semaphore(max(1, self.workers - 1)), ready=ready))
        self._ahead = ([task], ready, asked)

    def resume(self, facts: Iterable[Fact]) -> None:
        """This vCenter's facts as the last run left them. A VM whose identity digest is the same at the first
        poll keeps its fact and disk tags and is not read again, so a restart costs vCenter the light
        inventory, not every VM's device list; a VM, host or datastore gone meanwhile gets its removal."""
        for f in facts:
            d = f.data
            if f.tags.get("vcenter") != self.cfg.name:
                continue
            if f.kind != "vsphere_vm":
                self.remember([f])
                continue
            moid = str(d.get("moid"))
            self._identity[moid] = _seen(f)
            if d.get("power_state") == "poweredOn":
                self._resumed_on.append(moid)
            self.maps.set_vm(moid, {str(x.get("instance")): (x.get("datastore") or "",
                                                             sys.intern(",".join(x.get("luns") or [])))
                                    for x in d.get("disks") or [] if isinstance(x, dict)},
                             [x for x in d.get("nics") or [] if isinstance(x, dict)])

    def resume_marks(self, newest: Callable[[str], Iterable[tuple[dict[str, str], int]]]) -> bool:
        """An entity's realtime samples resume after the newest its main series (vsphere_vm, vsphere_host) has
        in the store: a restart does not ask vCenter again for the history the store holds, nor write it
        again, and a downtime within vCenter's hour is filled (one past it is annotated as a gap). An entity
        moved to another host has a series per host, and two VMs may share a name: the oldest of their newest
        counts (what is asked again is written again unchanged; nothing is skipped). The samples of one entity
        and call are handed on, and written, together, so its other measurements are stored as far."""
        for measurement, kind in (("vsphere_vm", "vm"), ("vsphere_host", "host")):
            for tags, ts in newest(measurement):
                name = tags.get(kind)
                if tags.get("vcenter") == self.cfg.name and name:
                    key = (kind, name)
                    mark = ts // 1_000_000_000
                    self._stored[key] = min(self._stored.get(key, mark), mark)
        return bool(self._stored)

    def resume_annotations(self, stored: list[Annotation]) -> None:
        """The vCenter events the store holds: the event log is read on after the newest of them."""
        if self.event_log is not None:
            self.event_log.resume(stored)

    def _take_resumed(self) -> list[str]:
        """The VMs powered on in the stored facts, their marks resumed by the names the facts give."""
        moids, self._resumed_on = self._resumed_on, []
        for moid in moids:
            mark = self._stored.pop(("vm", self._identity[moid][2]), None) if moid in self._identity else None
            if mark and moid not in self.perf_state.entity_start:
                self.perf_state.entity_start[moid] = mark
        return [m for m in moids if m in self._identity]

    def _resume_mark(self, kind: str, moid: str, inv: Inventory) -> None:
        """The stored mark of an entity not asked for yet in this process, by its name (see resume_marks)."""
        if not self._stored or moid in self.perf_state.entity_start:
            return
        entity = inv.vms.get(moid) if kind == "vm" else inv.hosts.get(moid)
        mark = self._stored.pop((kind, entity.name), None) if entity is not None else None
        if mark:
            self.perf_state.entity_start[moid] = mark

    async def _full_pass(self, conn: _Conn, early: list[asyncio.Future] | None,
                         slots: asyncio.Semaphore | None = None) -> list[Fact]:
        """Hosts and datastores, then every VM's full row, FULL_PAGE VMs a page, each made a fact as it comes.
        Pages are asked for by reference, two in flight: vCenter prepares the next while this one is made
        facts (a single paged read would have it prepare every VM before the first page), and a page of
        parsed XML is dropped before the next but one is read. With `early` (a collect cycle's cold
        start), each page's realtime perf is asked for as soon as its facts are made: tasks added there, which
        share `slots` (QueryPerf calls in flight). Each page waits while the outputs are behind (paced)."""
        s, view = conn.session, conn.view
        host_rows, ds_rows, refs = await asyncio.gather(
            self.run_blocking(inv_mod.read_hosts, s, view, True), self.run_blocking(inv_mod.read_datastores, s, view),
            self.run_blocking(inv_mod.vm_refs, s, view))
        hosts = inv_mod.hosts_from(host_rows)
        builder = FactsBuilder(self.cfg.name, hosts, host_rows, ds_rows, CLOCK.now_ns())
        seen: dict[str, tuple[str, str, str]] = {}
        tagging = (Inventory(builder.vms, hosts), builder.maps)
        if early is not None:
            early.append(asyncio.ensure_future(self._perf(conn, None, [], list(hosts), tagging, self._emit, slots)))
        pages = [refs[i:i + inv_mod.FULL_PAGE] for i in range(0, len(refs), inv_mod.FULL_PAGE)]

        def fetch(page: list[Ref]) -> asyncio.Future:
            return asyncio.ensure_future(self.run_blocking(inv_mod.full_vm_rows, s, page))
        inflight = [fetch(p) for p in pages[:PAGES_AHEAD]]
        try:
            for i in range(len(pages)):
                await self.paced()
                rows = await inflight.pop(0)
                if i + PAGES_AHEAD < len(pages):
                    inflight.append(fetch(pages[i + PAGES_AHEAD]))
                made = [builder.add_vm(obj, p) for obj, p in rows]
                for f in made:
                    seen[f.data["moid"]] = _seen(f)
                if early is not None:  # the page's facts go before its samples
                    self._emit(made)
                    page = [r.value for r, _ in rows if builder.vms[r.value].powered_on]
                    early.append(asyncio.ensure_future(self._perf(conn, None, page, [], tagging, self._emit, slots)))
                rows = made = []
        finally:
            for f in inflight:
                f.cancel()
        self._set_inventory(Inventory(builder.vms, hosts))
        facts, self.maps = builder.finish()
        if early is not None:  # VM facts went out page by page
            facts = [f for f in facts if f.kind != "vsphere_vm"]
        removals = [self._vm_removal(old) for moid, old in self._identity.items()
                    if moid not in seen or seen[moid][2] != old[2]]   # deleted, or renamed
        self._identity = seen
        return removals + self._retire(facts) + facts

    def _retire(self, facts: list[Fact]) -> list[Fact]:
        """Removals of the hosts and datastores the last whole pass made facts of and this one (`facts`)
        did not find: removed from vCenter, or unmounted everywhere. (A pass reads VMs only in part.)"""
        return self.removals(facts, ("vsphere_host", "vsphere_datastore"))

    def _vm_removal(self, seen: tuple[str, str, str]) -> Fact:
        return Fact.removal("vsphere_vm", {"vcenter": self.cfg.name, "vm": seen[2]})

    async def describe_vms(self, vms: Iterable[str]) -> list[Fact]:
        """Facts of the named VMs and their hosts only (triage --vm of one VM among 10,000): every VM's name
        finds them (the cheapest read of the whole inventory), then by reference their full rows, their
        hosts with the VMs on each (whose light rows give the hosts' totals) and the datastores. The
        inventory kept is those hosts' VMs: what lookback() of the named VMs needs."""
        wanted = set(vms)

        async def step(conn: _Conn) -> list[Fact]:
            s = conn.session
            names = await self.run_blocking(inv_mod.retrieve, s, conn.view, {"VirtualMachine": ("name",)},
                                            inv_mod.PAGE)
            targets = [obj for obj, p in names if p.get("name") in wanted]
            named = {obj.value: str(p["name"]) for obj, p in names if p.get("name")}  # each datastore's VMs
            del names  # 10,000 rows not held through the reads below
            vm_rows, ds_rows = await asyncio.gather(self.run_blocking(inv_mod.full_vm_rows, s, targets),
                                                    self.run_blocking(inv_mod.read_datastores, s, conn.view))
            hosts = sorted({h.value for _, p in vm_rows if isinstance(h := p.get("runtime.host"), Ref)})
            host_rows = await self.run_blocking(inv_mod.retrieve_objects, s, [Ref("HostSystem", h) for h in hosts],
                                                {"HostSystem": (*inv_mod.HOST_FULL, "vm")})
            clusters = {p["parent"] for _, p in host_rows if isinstance(p.get("parent"), Ref)
                        and p["parent"].type == "ClusterComputeResource"}
            neighbours = [v for _, p in host_rows for v in as_list(p.get("vm")) if isinstance(v, Ref)]
            light, cluster_rows = await asyncio.gather(
                self.run_blocking(inv_mod.retrieve_objects, s, neighbours, {"VirtualMachine": inv_mod.VM_LIGHT}),
                self.run_blocking(inv_mod.retrieve_objects, s, sorted(clusters), {"ClusterComputeResource": ("name",)}))
            self._set_inventory(Inventory(inv_mod.vms_from(light), inv_mod.hosts_from(host_rows + cluster_rows)))
            read = FullRead(self.inventory, vm_rows, host_rows, ds_rows, agg_rows=light, names=named)
            facts, self.maps = build_facts(self.cfg.name, read, CLOCK.now_ns())
            return facts
        return await self._with_session(step)

    async def _facts_of(self, conn: _Conn, targets: list[Ref], more_hosts: set[str],
                        light: Rows) -> tuple[list[Fact], TagMaps]:
        """Facts of the given VMs (their full rows read by reference), of their hosts and `more_hosts`
        (totals from every VM's light row), and of the datastores."""
        s = conn.session
        hosts = sorted(({self.inventory.vms[t.value].host for t in targets if t.value in self.inventory.vms}
                        | more_hosts) & set(self.inventory.hosts))
        vm_rows, host_rows, ds_rows = await asyncio.gather(
            self.run_blocking(inv_mod.full_vm_rows, s, targets),
            self.run_blocking(inv_mod.retrieve_objects, s, [Ref("HostSystem", h) for h in hosts],
                              {"HostSystem": inv_mod.HOST_FULL}),
            self.run_blocking(inv_mod.read_datastores, s, conn.view))
        read = FullRead(self.inventory, vm_rows, host_rows, ds_rows, agg_rows=light,
                        names={m: v.name for m, v in self.inventory.vms.items()})
        return build_facts(self.cfg.name, read, CLOCK.now_ns())

    async def _changed_facts(self, conn: _Conn, light: Rows) -> list[Fact]:
        """Facts of the VMs whose configuration version, placement, power, size or guest identity differs
        from what their last fact was built from (a reconfiguration, a vMotion, a new VM), and of the
        hosts they left or joined. Nothing before the first facts pass."""
        if not self._identity:
            return []
        present = {obj.value for obj, _ in light}
        removals = []
        for gone in set(self._identity) - present:
            removals.append(self._vm_removal(self._identity.pop(gone)))
            self.maps.forget_vm(gone)
        changed = [(obj, p) for obj, p in light if (self._identity.get(obj.value) or ("",))[0] != inv_mod.identity(p)]
        if len(changed) > inv_mod.CHANGED_MAX:  # a mass change, or an older db2vtop's facts: the paged pass
            log.info("vcenter %s: %d VMs changed, reading every VM again", self.cfg.name, len(changed))
            return removals + await self._full_pass(conn, None)
        if not changed:
            return removals
        olds = [old for obj, _ in changed if (old := self._identity.get(obj.value))]
        left = {old[1] for old in olds if old[1]}
        facts, maps = await self._facts_of(conn, [obj for obj, _ in changed], left, light)
        maps.add_vms_of(self.maps)
        self.maps = maps
        vm_facts = [f for f in facts if f.kind == "vsphere_vm"]
        for f in vm_facts:
            old = self._identity.get(f.data["moid"])
            self._identity[f.data["moid"]] = _seen(f)
            if old and old[2] != f.tags["vm"]:  # renamed: its fact is tagged anew
                removals.append(self._vm_removal(old))
        log.info("vcenter %s: facts of %d changed VM(s) read again", self.cfg.name, len(vm_facts))
        return removals + facts

    async def collect(self) -> list[Record | Fact]:
        """The cycle. The first one (and the first after a failed pass) is the facts pass as well, with
        realtime perf asked for page by page as the VMs come: samples first, not after the whole
        vCenter's configuration. Under a runtime, records go out in parts as they are ready (_emit), and
        those of a cycle that fails midway still go out: their samples' marks have moved."""
        ahead, self._ahead = self._ahead, None

        async def step(conn: _Conn) -> list[Record | Fact]:
            nonlocal ahead
            early: list[asyncio.Future] = []
            paged = not self._identity
            asked: list[str] = []
            self._emit([await self._clock(conn)])
            if ahead is not None:  # asked for by describe(): its facts are out, they may become samples now
                early, ready, asked = ahead
                ahead = None
                ready.set()
            try:
                if paged:
                    self._emit(await self._full_pass(conn, early, asyncio.Semaphore(self.workers)))
                    self.facts_done()
                elif time.monotonic() - self._inventory_at > self.interval / 2:
                    self._emit(await self._changed_facts(conn, await self._light(conn)))
                self._emit(self._quickstats())
                await self._read_events(conn)
                if self._stored:  # a restart: where each entity's stored samples end (a gap past the hour is said)
                    for kind, moids in (("vm", self.inventory.vms), ("host", self.inventory.hosts)):
                        for moid in moids:
                            self._resume_mark(kind, moid, self.inventory)
                    self._stored.clear()
                server_now = conn.session.server_now()
                reset, newest = self.perf_state.reset_ahead(server_now)
                if reset:
                    self.problem(f"vcenter {self.cfg.name}: its clock went back (samples until {iso(newest)} were "
                                 f"taken, its CurrentTime is {iso(server_now)}): the high-water marks of {reset} "
                                 "VMs and hosts were reset to its realtime window, its last hour asked again")
                lost = self.perf_state.lost(server_now)
                if lost is not None:
                    self._emit([self._gap(*lost)])
                if paged:
                    await asyncio.gather(*early)
                else:
                    vms, hosts = self._entities()
                    done = set(asked)
                    await asyncio.gather(self._perf(conn, None, [m for m in vms if m not in done], hosts,
                                                    emit=self._emit), *early)
            except BaseException:
                for task in early:
                    task.cancel()
                await asyncio.gather(*early, return_exceptions=True)
                raise
            out, self._held = self._held, []
            return out

        self._held = []
        self._part = HANDOFF_FIRST if self._first_cycle() else HANDOFF
        try:
            return await self._with_session(step)
        finally:
            for task in ahead[0] if ahead is not None else ():  # the cycle ended before it took them
                task.cancel()
            if self._held and self.handoff is not None:
                held, self._held = self._held, []
                self.handoff(held)

    def _emit(self, records: list[Record | Fact]) -> None:
        """Records of the cycle under way, in order: handed on (Streams.handoff) whenever a part of them
        (HANDOFF, HANDOFF_FIRST in a first cycle) waits, else kept for collect()'s answer."""
        self._held.extend(records)
        if self.handoff is not None and len(self._held) >= self._part:
            held, self._held = self._held, []
            self.handoff(held)

    async def lookback(self, seconds: float, vms: Iterable[str] | None = None,
                       emit: Callable[[list[Record]], object] | None = None) -> list[Record]:
        """The last `seconds` (at most an hour) of realtime samples, in one pass, after the events of vCenter's
        log in all of `seconds` (vCenter keeps its events for days: what changed three hours ago is read).

        Every powered-on VM and host, or only the VMs named in `vms` and their hosts (those they ran on in the
        window too: vCenter tags no sample with where it was taken, its migrations say); of the counters whose
        fields `history_fields` names, when set (what triage keeps). For triage: the agent's high-water marks
        and event log position are left alone. With `emit`, each call's records go there as they come (a
        10,000-VM hour is never held at once); a session lost after some went out is
        not retried (they would go out twice).
        """
        events_s = max(seconds, 20.0)
        seconds = min(events_s, MAX_LOOKBACK_S)
        names = set(vms) if vms is not None else None
        sent: list[int] = []

        def out(records: list[Record | Fact]) -> None:
            sent.append(len(records))
            emit(records)  # type: ignore[misc]

        async def step(conn: _Conn) -> list[Record]:
            if sent:
                raise CollectorError(f"vcenter {self.cfg.name}: session lost while the hour was read")
            if not self.inventory.hosts:
                await self._light(conn)
            clock = await self._clock(conn)
            events: list[Annotation] = []
            left: set[str] = set()  # hosts the named VMs left in the samples' window
            now = conn.session.server_now()
            samples_from = int((now - seconds) * 1e9)

            def took(page: list[Annotation]) -> None:
                left.update(a.tags["source_host"] for a in page if names is not None and a.tags.get("vm") in names
                            and a.tags.get("source_host") and a.ts >= samples_from)
                if emit is not None:
                    out(page)  # type: ignore[arg-type]
                else:
                    events.extend(page)

            if self.event_log is not None:
                await self._events_since(conn, now - events_s, took)
            vms, hosts = self._entities(names)
            if left:
                hosts += await self._left_hosts(conn, left - {self.inventory.hosts[h].name for h in hosts})
            samples = await self._perf(conn, conn.session.server_now() - seconds, vms, hosts,
                                       emit=out if emit is not None else None)
            return [*events, *samples, clock]
        return await self._with_session(step)

    # --- steps ------------------------------------------------------------------------

    async def _read_events(self, conn: _Conn) -> None:
        """vCenter's event log since the last cycle: CYCLE_PAGES pages at most (a backlog is read over the next
        cycles), each handed on as it comes. A fault of the log's own (a collector vCenter no longer knows, too
        many collectors) is the cycle's problem and a new collector next cycle, not the end of the cycle."""
        elog = self.event_log
        if elog is None:
            return
        try:
            for _ in range(CYCLE_PAGES):
                page, answered = await self.run_blocking(self._event_page, conn, elog)
                self._emit(elog.fresh(page))
                if answered < PAGE:
                    return
        except CollectorError as e:
            if is_session_lost(e) or is_unreachable(e):
                raise
            conn.event_collector = ""
            self.problem(f"vcenter {self.cfg.name}: events not read: {e}")

    async def _events_since(self, conn: _Conn, since: float, took: Callable[[list[Annotation]], None]) -> None:
        """Every event from `since` (server time, s) to now, page by page to `took`, with a history collector of
        its own, destroyed after (triage's look back; LOOKBACK_PAGES pages at most)."""
        s = conn.session
        collector = await self.run_blocking(create_collector, s, int(since * 1e9))
        try:
            for _ in range(LOOKBACK_PAGES):
                page, answered = await self.run_blocking(read_page, s, collector, self.maps.lun_ds,
                                                         self.maps.ds_by_uuid, self.cfg.name)
                took(page)
                if answered < PAGE:
                    return
            log.warning("vcenter %s: more than %d events in the look back; the newest are not read", self.cfg.name,
                        LOOKBACK_PAGES * PAGE)
        finally:
            with contextlib.suppress(Exception):  # the session may be gone: vCenter drops its collectors with it
                await self.run_blocking(destroy_collector, s, collector)

    def _event_page(self, conn: _Conn, elog: EventLog) -> tuple[list[Annotation], int]:
        s = conn.session
        if not conn.event_collector:
            earliest = CLOCK.now_ns() - int((self.clock_skew_s - 60) * 1e9)
            # a first start reaches back as far as its realtime history (whose placement the migrations give);
            # a one-off look (triage, with no history asked) reads its own window in lookback()
            first_s = REALTIME_KEEP_S if self.history_samples > 1 else 0.0
            conn.event_collector = create_collector(s, elog.begin(int(s.server_now() * 1e9), earliest, first_s))
        return read_page(s, conn.event_collector, self.maps.lun_ds, self.maps.ds_by_uuid, self.cfg.name)

    async def _left_hosts(self, conn: _Conn, left: set[str]) -> list[str]:
        """The moids of hosts named in migrations (the hosts VMs left), added to the inventory when it does not
        hold them (triage --vm reads only the named VMs' current hosts)."""
        if not left:
            return []
        inv = self.inventory
        known = {h.name: m for m, h in inv.hosts.items()}
        if not left <= set(known):
            rows = await self.run_blocking(inv_mod.read_hosts, conn.session, conn.view, False)
            found = {m: h for m, h in inv_mod.hosts_from(rows).items() if h.name in left and h.name not in known}
            inv.hosts.update(found)
            known.update({h.name: m for m, h in found.items()})
        return sorted(known[n] for n in left if n in known)

    def _set_inventory(self, inventory: Inventory) -> None:
        self.inventory = inventory
        self._inventory_at = time.monotonic()
        self.perf_state.forget({m for m, v in inventory.vms.items() if v.powered_on} | set(inventory.hosts))

    async def _clock(self, conn: _Conn) -> Sample:
        """vCenter's clock read now (CurrentTime), as its offset from ours: the marks and the samples' bound
        follow it (perf.CLOCK_MARGIN_S), and the timekeeping rule judges it."""
        offset = await self.run_blocking(conn.session.read_clock)
        return Sample(CLOCK_MEASUREMENT, {"vcenter": self.cfg.name}, {"clock_offset_ms": round(offset * 1000, 1)})

    def _gap(self, since: float, until: float) -> Annotation:
        """Samples nobody can fetch any more (vCenter keeps an hour): said, not silently skipped."""
        log.warning("vcenter %s: realtime samples %s to %s expired in vCenter before they could be collected",
                    self.cfg.name, iso(since), iso(until))
        return Annotation("gap", self.name, {"vcenter": self.cfg.name},
                          f"realtime samples after {iso(since)} until {iso(until)} expired in vCenter (it keeps "
                          "an hour) before they could be collected", int(until) * 1_000_000_000)

    def _quickstats(self) -> list[Record]:
        ts = CLOCK.now_ns()
        out: list[Record] = []
        mib = 2**20
        for vm in self.inventory.vms.values():
            if not vm.powered_on or not vm.quickstats:
                continue
            q = vm.quickstats
            host = self.inventory.hosts.get(vm.host)
            tags = {"vcenter": self.cfg.name, "vm": vm.name}
            if host:
                tags["host"] = host.name
                if host.cluster:
                    tags["cluster"] = host.cluster
            fields = {"balloon_bytes": q.get("balloonedMemory", 0) * mib,
                      "swapped_bytes": q.get("swappedMemory", 0) * mib,
                      "compressed_bytes": q.get("compressedMemory", 0) * 1024,
                      "cpu_usage_mhz": q.get("overallCpuUsage", 0),
                      "guest_mem_usage_bytes": q.get("guestMemoryUsage", 0) * mib,
                      "host_mem_usage_bytes": q.get("hostMemoryUsage", 0) * mib,
                      "overhead_bytes": q.get("consumedOverheadMemory", 0) * mib}
            out.append(Sample("vsphere_vm_quickstats", tags, fields, ts))
        for host in self.inventory.hosts.values():
            tags = {"vcenter": self.cfg.name, "host": host.name}
            if host.cluster:
                tags["cluster"] = host.cluster
            q = host.quickstats
            fields = {"cpu_usage_mhz": q.get("overallCpuUsage", 0),
                      "mem_usage_bytes": q.get("overallMemoryUsage", 0) * mib}
            out.append(Sample("vsphere_host_quickstats", tags, fields, ts))
        return out

    def _entities(self, vm_names: set[str] | None = None) -> tuple[list[str], list[str]]:
        """Powered-on VMs (all, or those named) and the hosts to query with them."""
        inv = self.inventory
        vms = [m for m, v in inv.vms.items() if v.powered_on and (vm_names is None or v.name in vm_names)]
        hosts = list(inv.hosts) if vm_names is None else sorted({inv.vms[m].host for m in vms})
        return vms, hosts

    async def _perf(self, conn: _Conn, since: float | None, vms: list[str], hosts: list[str],
                    tagging: tuple[Inventory, TagMaps] | None = None,
                    emit: Callable[[list[Record | Fact]], None] | None = None,
                    slots: asyncio.Semaphore | None = None, ready: asyncio.Event | None = None) -> list[Sample]:
        """Realtime samples of these entities: new ones since the marks (since=None), or all after `since`;
        tagged from `tagging` (a facts pass still under way) or the collector's inventory and maps. With
        `emit`, each call's samples go there as soon as they are made, and none are returned. At most
        `workers` calls are in flight (or `slots`' count), each asked for once the outputs have taken enough
        of what came before (paced): a 10,000-VM first cycle is held to the pace of the store and checks. With
        `ready`, answers wait for it before they are made samples (asked while the inventory is still read), each
        holding its slot: at most that many answers are held (all of a 10,000-VM vCenter's would be ~80 MB)."""
        s = conn.session
        now = s.server_now()
        kinds: dict[str, str] = {}
        specs: list[Spec] = []
        inv, maps = tagging or (self.inventory, self.maps)
        reach = now - min(self.history_samples * REALTIME_S, REALTIME_KEEP_S - REALTIME_S)
        for kind, moids in (("host", hosts), ("vm", vms)):
            ids = conn.ids.metric_ids[kind]
            if not ids:
                continue
            if since is not None and self.history_fields is not None:  # a look back: what its reader keeps
                ids = conn.ids.split(kind, self.history_fields)[0]
            # an entity's first samples: the history the live rules read (of the counters they read), and the
            # newest sample of the others, in two specs one call answers
            history, rest = conn.ids.split(kind, self.history_fields)
            for moid in moids:
                kinds[moid] = kind
                if since is None:
                    self._resume_mark(kind, moid, inv)
                start = since if since is not None else self.perf_state.start_for(moid, now)
                if start is not None or self.history_samples <= 1:
                    # a steady cycle (its newest sample or two) asks less: see CounterIds.steady_for
                    recent = since is None and start is not None and start >= now - 2 * REALTIME_S
                    specs.append(Spec(kind, moid, start, conn.ids.steady_for(kind, maps.vm_nic.get(moid))
                                      if recent else ids))
                    continue
                if history:
                    specs.append(Spec(kind, moid, reach, history))
                if rest:
                    specs.append(Spec(kind, moid, None, rest))
        caps = [c for c in (self.cfg.max_query_metrics, s.max_query_metrics) if c > 0]
        calls = chunk(specs, min(caps) if caps else 0, self.cfg.max_query_entities)

        state = self.perf_state if since is None else None
        marks = {m: state.entity_start.get(m, 0) for m in kinds} if state is not None else None

        slots = slots or asyncio.Semaphore(self.workers)

        async def one(batch: list[Spec]) -> list[Sample]:
            # each call's answer becomes samples as soon as it is in: its parsed form is dropped while
            # the other calls are still out
            async with slots:
                await self.paced()
                results = await self._query(s, batch)
                if ready is not None:  # asked before the inventory that tags them was read: held, a slot each
                    await ready.wait()
            inv, maps = tagging or (self.inventory, self.maps)
            samples = to_samples(results, kinds, conn.ids, inv, maps, self.cfg.name, state, marks)
            if emit is None:
                return samples
            emit(samples)
            return []

        return [x for part in await asyncio.gather(*(one(b) for b in calls)) for x in part]

    async def _query(self, s: Session, batch: list[Spec]) -> list[EntityResult]:
        """One QueryPerf call. An entity that vanished since the inventory was read (a VM
        deleted, a host disconnected) fails the whole call in vCenter: halve the batch and
        retry, so it costs only its own samples. Any other fault fails the cycle. Samples dated past vCenter's
        own clock (plus CLOCK_MARGIN_S), or outside the clock skew of ours, are set aside and counted."""
        now, server_now = CLOCK.now(), s.server_now()
        window = (now - self.clock_skew_s, min(now + self.clock_skew_s, server_now + CLOCK_MARGIN_S))
        try:
            results = await self.run_blocking(perf_query, s, s.perf_manager, batch, window)
            rejected = sum(r.rejected for r in results)
            if rejected:
                self.supervisor.set_aside(self.thread, f"{rejected} QueryPerf samples of vcenter {self.cfg.name}",
                                          f"their times are past vCenter's own clock ({iso(server_now)}) plus "
                                          f"{CLOCK_MARGIN_S}s, or more than {self.clock_skew_s:g}s from ours")
            return results
        except SoapFaultError as e:
            if e.name not in ENTITY_FAULTS:
                raise
            if len(batch) == 1:
                log.warning("vcenter %s: no realtime stats for %s %s: %s", self.cfg.name, batch[0].kind,
                            batch[0].moid, e)
                return []
        half = len(batch) // 2
        first, second = await asyncio.gather(self._query(s, batch[:half]), self._query(s, batch[half:]))
        return first + second

    async def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                await asyncio.wait_for(asyncio.get_running_loop().run_in_executor(None, conn.session.close), 5)
            except Exception:  # closing must never fail the shutdown
                log.debug("logout failed", exc_info=True)
        await super().close()
