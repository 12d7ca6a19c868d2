"""The agent's alerts: judged from the live verdicts and findings, kept over time, delivered without loss.

`Alerter` is an Output of the pipeline. Every `[alerting] interval` its thread judges what pages now
(checks/alerts.py): the verdict of every stack an entity of which showed a symptom in the samples of the last
minutes (a figure of the verdict's chains at its level: a healthy fleet costs no verdict at all) or that an
alert names, and the open findings the check runner hands on. An alert that clears stays firing until it has
been clear for `flap_guard`: one that comes back within it never resolved, so a flapping condition pages once.

Each receiver (`[[alert]]`) is told its own changes — `firing`, `updated` (its VMs, stacks or severity moved),
`resolved` — for the alerts its filters let through (`min_severity`, `stacks`, `layers`). A change goes first
into the receiver's spool (agent/sinks/spool.py: on disk, checksummed, bounded, fsync'd at every change), then
the state file (`state.json`, written whole and renamed) records it told; a sender thread delivers the spool in
order, one change at a time, and marks it delivered only after a 2xx. The sender holds back a change until
the state file says it was told: after a kill -9 between the two, the spool's changes the state file lacks are
taken back into it (never told again), so no change is delivered twice. A receiver down for a while gets
every change in order once it answers. Alertmanager is sent the firing alerts again every `resend_interval`
while nothing else waits (it ends an alert not heard of for its resolve_timeout, and forgets all at a restart).
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import logging
import math
import queue
import random
import socket
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from db2vtop.agent.core.clock import CLOCK
from db2vtop.agent.core.config import AlertConfig, CoreConfig, StackConfig, alerts_of
from db2vtop.agent.core.files import make_private_dir, write_private
from db2vtop.agent.core.model import Annotation, Fact, Finding, Sample, severity_rank
from db2vtop.agent.core.source import CachedSource
from db2vtop.agent.core.store import Store, StoreError
from db2vtop.agent.core.supervise import Supervisor
from db2vtop.agent.sinks.receivers import DeliveryError, Receiver
from db2vtop.agent.sinks.spool import Spool
from db2vtop.checks.alerts import Alert, episode_alerts, finding_alerts, iso_ms
from db2vtop.checks.figures import ROLES
from db2vtop.checks.thresholds import verdict_levels
from db2vtop.checks.topology import infer_stacks, lun_name, resolve
from db2vtop.checks.verdict import TRIGGERS, stack_verdict

log = logging.getLogger(__name__)

STATE_FILE = "state.json"
#: the verdict's window: long enough for its buckets to make an episode, short enough to be cheap
WINDOW_NS = 10 * 60 * 10**9
#: an entity that showed a symptom is judged for this long after (an episode's end needs a verdict too)
HOT_NS = WINDOW_NS
#: the stacks (and their VMs' hosts, disks and arrays) are looked up again at most this often, when needed
STACKS_TTL_S = 300.0
UNKNOWN_TTL_S = 60.0
EVALUATE_THREAD = "alerts"


# --- what shows a symptom --------------------------------------------------------------------------


def _watch(levels: dict[str, float]) -> dict[str, list[tuple[str, float | None, str]]]:
    """measurement -> (field, level or None for "any amount", the entity its tags name): the verdict's triggers
    (checks/verdict.py TRIGGERS) on the samples' own fields. DB2's read waits count each at half their summed
    level (a superset: only which stacks get a verdict)."""
    out: dict[str, list[tuple[str, float | None, str]]] = {}
    wanted = [(role, levels[lv] if lv else None) for role, lv in TRIGGERS]
    wanted += [("read_wait_pct", levels["symptom_read_wait_pct"] / 2),
               ("direct_read_wait_pct", levels["symptom_read_wait_pct"] / 2)]
    for role, level in wanted:
        for fig in ROLES[role]:
            out.setdefault(fig.measurement, []).append((fig.field, level, fig.entity))
    return out


def _entity(kind: str, tags: dict[str, str]) -> tuple[str, ...] | None:
    """The entity a symptom's sample names: a VM, a host (its LUNs' too), a DB2, a guest or an array."""
    if kind == "vm" and tags.get("vm"):
        return "vm", tags.get("vcenter", ""), tags["vm"]
    if kind in ("host", "lun", "datastore") and tags.get("host"):
        return "host", tags.get("vcenter", ""), tags["host"]
    if kind in ("db2", "guest") and tags.get(kind):
        return kind, tags[kind]
    if kind in ("volume", "array"):
        if tags.get("naa"):
            return "lun", lun_name(tags["naa"])
        if tags.get("storage"):
            return "array", tags["storage"]
    return None


@dataclass
class _Stacks:
    """The stacks there are, and which of them each entity belongs to (from the stacks and the VMs' facts)."""

    stacks: dict[str, StackConfig]
    by_entity: dict[tuple[str, ...], set[str]]
    vm_stack: dict[tuple[str | None, str], str]
    made_at: float

    @classmethod
    def of(cls, cfg: CoreConfig, view: CachedSource) -> _Stacks:
        found = [i.stack for i in infer_stacks(cfg, view)]
        by: dict[tuple[str, ...], set[str]] = {}
        vm_stack: dict[tuple[str | None, str], str] = {}
        facts = {(f.tags.get("vcenter", ""), f.tags.get("vm", "")): f for f in view.facts("vsphere_vm")}
        for s in found:
            if s.db2:
                by.setdefault(("db2", s.db2), set()).add(s.name)
            if s.guest:
                by.setdefault(("guest", s.guest), set()).add(s.name)
            for a in s.storage:
                by.setdefault(("array", a), set()).add(s.name)
            if not s.vm:
                continue
            vm_stack.setdefault((s.vcenter, s.vm), s.name)
            vm_stack.setdefault((None, s.vm), s.name)
            for (vcenter, vm), f in facts.items():
                if vm != s.vm or (s.vcenter and vcenter and vcenter != s.vcenter):
                    continue
                by.setdefault(("vm", vcenter, vm), set()).add(s.name)
                if f.data.get("host"):
                    by.setdefault(("host", vcenter, str(f.data["host"])), set()).add(s.name)
                for d in f.data.get("disks") or ():
                    for lun in d.get("luns") or () if isinstance(d, dict) else ():
                        by.setdefault(("lun", lun_name(str(lun))), set()).add(s.name)
            by.setdefault(("vm", s.vcenter or "", s.vm), set()).add(s.name)
        return cls({s.name: s for s in found}, by, vm_stack, time.monotonic())

    def of_entity(self, entity: tuple[str, ...]) -> set[str]:
        found = self.by_entity.get(entity)
        if found is None and entity[0] in ("vm", "host") and entity[1]:  # a series without its vCenter's tag
            found = self.by_entity.get((entity[0], "", entity[2]))
        return found or set()


# --- each receiver -----------------------------------------------------------------------------------


@dataclass
class OutboxStats:
    state: str = "ok"  # nothing has failed (yet)
    last_error: str = ""
    sent: int = 0
    refused: int = 0
    retries: int = 0
    resent: int = 0
    resolved: int = 0
    last_success_ns: int = 0


class Outbox:
    """One receiver's spool of changes and the thread that delivers it, in order."""

    def __init__(self, cfg: AlertConfig, spool_dir: Path, supervisor: Supervisor, agent: str):
        self.cfg, self.supervisor = cfg, supervisor
        self.receiver = Receiver(cfg, agent)
        self.spool = Spool(spool_dir, cfg.spool_max_bytes, fsync="always")
        self.stats = OutboxStats()
        self.thread_name = f"alert-{cfg.name}"
        self.firing: dict[str, dict[str, Any]] = {}  # fingerprint -> the last firing change told (for resends)
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._last_resend = time.monotonic()
        self._released = 0  # the newest `seq` the state file has: the sender holds back any later change
        self.unsaved = self._pending()
        self._thread = supervisor.start(self.thread_name, self._run)

    def _pending(self) -> list[dict[str, Any]]:
        """The changes in the spool not delivered yet (read before the sender starts)."""
        found = []
        while (batch := self.spool.read(2**20, 2**24)) is not None:
            for line in batch.data.splitlines():
                try:
                    found.append(json.loads(line))
                except ValueError:  # the sender sets it aside when it comes to it
                    continue
        self.spool.rewind()
        return found

    def release(self, seq: int) -> None:
        """The state file records every change up to `seq`: they may go."""
        self._released = seq
        self._wake.set()

    def accepts(self, a: Alert) -> bool:
        cfg = self.cfg
        if severity_rank(a.severity) > severity_rank(cfg.min_severity):
            return False
        if cfg.layers and a.layer not in cfg.layers:
            return False
        return not cfg.stacks or any(fnmatch.fnmatchcase(s, p) for s in a.stacks for p in cfg.stacks)

    def append(self, change: dict[str, Any]) -> None:
        """Queue one change (durable once this returns)."""
        data = (json.dumps(change, ensure_ascii=False, separators=(",", ":")) + "\n").encode()
        self.spool.append(data, 1)
        with self._lock:
            if change["status"] == "firing":
                self.firing[change["alert"]["fingerprint"]] = change
            else:
                self.firing.pop(change["alert"]["fingerprint"], None)
        self._wake.set()

    def snapshot(self) -> dict[str, Any]:
        st = self.stats
        return {"state": st.state, "last_error": st.last_error, "firing": len(self.firing), "sent": st.sent,
                "resolved": st.resolved, "refused": st.refused, "retries": st.retries, "resent": st.resent,
                "pending": self.spool.pending_points, "dropped": self.spool.dropped, "corrupt": self.spool.corrupt,
                "last_success_ns": st.last_success_ns}

    def close(self, timeout: float) -> None:
        """Deliver what waits for up to `timeout`, then stop; the rest stays in the spool for the next start."""
        deadline = time.monotonic() + timeout
        while self.spool.unread_points and time.monotonic() < deadline and self.stats.state == "ok":
            time.sleep(0.05)
        self._stop.set()
        self._wake.set()
        self._thread.join(self.cfg.timeout + 1)
        self.spool.close()
        self.receiver.close()
        self.supervisor.release(self.thread_name)

    def _run(self) -> None:
        failures = 0
        while not self._stop.is_set():
            try:
                delay = self._turn()
            except Exception as e:  # the spool's disk failing under a read or a commit: from the cursor again
                self.spool.rewind()
                self.supervisor.retrying(self.thread_name, e)
                delay = None
            if delay == 0:
                if failures:
                    self.supervisor.recovered(self.thread_name)
                failures = 0
                continue
            if delay is None or delay > 0:
                failures += 1
                base = min(self.cfg.max_retry_delay, self.cfg.retry_interval * 2 ** min(failures - 1, 20))
                self._wake.wait(max(delay or 0, base / 2 + random.uniform(0, base / 2)))
                self._wake.clear()
            else:  # nothing to send: wait for a change or the next resend
                due = self._last_resend + self.cfg.resend_interval - time.monotonic()
                self._wake.wait(max(0.05, due))
                self._wake.clear()

    def _turn(self) -> float:
        """0 after a delivery, a delay (> 0) after a failure, -1 when there was nothing to do."""
        batch = self.spool.read(1, 2**20)
        if batch is None:
            if self.cfg.kind == "alertmanager" and time.monotonic() - self._last_resend >= self.cfg.resend_interval:
                with self._lock:
                    firing = list(self.firing.values())
                self._last_resend = time.monotonic()
                if firing:
                    return self._deliver(firing, None, resend=True)
            return -1
        try:
            change = json.loads(batch.data)
        except ValueError as e:  # the checksum held, the JSON did not: set aside, the rest goes on
            self.supervisor.set_aside(self.thread_name, f"an alert change of {len(batch.data)} bytes", e)
            self.spool.commit(batch)
            return 0
        if change.get("seq", 0) > self._released:  # not in the state file yet: told once it is
            self.spool.rewind()
            return -1
        return self._deliver([change], batch)

    def _deliver(self, changes: list[dict[str, Any]], batch: Any, resend: bool = False) -> float:
        try:
            answer = self.receiver.send(changes)
        except DeliveryError as e:
            if e.state == "refused" and batch is not None:  # never acceptable: set aside, the rest goes on
                self.stats.refused += 1
                log.error("alert %s: %s refused change %s (%s); set aside", self.cfg.name, self.cfg.url,
                          changes[0].get("id"), e)
                self.spool.commit(batch)
                return 0
            if batch is not None:
                self.spool.rewind()
            self.stats.retries += 1
            self._set_state("failing", str(e))
            return max(e.retry_after, 0.001)
        if batch is not None:
            self.spool.commit(batch)
            self.stats.sent += 1
            self.stats.resolved += sum(1 for c in changes if c["status"] == "resolved")
        else:
            self.stats.resent += len(changes)
        self.stats.last_success_ns = CLOCK.now_ns()
        self._set_state("ok", "")
        log.debug("alert %s: %s answered %s", self.cfg.name, self.cfg.url, answer)
        return 0

    def _set_state(self, state: str, error: str) -> None:
        old, self.stats.state = self.stats.state, state
        if error:
            self.stats.last_error = error
        if state == old:
            return
        if state == "ok":
            log.info("alert %s: delivering again to %s (was %s)", self.cfg.name, self.cfg.url, old)
        else:
            log.warning("alert %s: %s: %s; changes wait in %s", self.cfg.name, state, error, self.spool.dir)


# --- the judge over time -------------------------------------------------------------------------------


@dataclass
class _Active:
    alert: Alert
    clear_since: int | None = None  # ns: not seen since (held until flap_guard has passed)


@dataclass
class _State:
    """What the alerts are and what each receiver was told, as state.json keeps it."""

    active: dict[str, _Active] = field(default_factory=dict)
    told: dict[str, dict[str, list]] = field(default_factory=dict)  # receiver -> key -> [digest, change]
    seq: dict[str, int] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"version": 1, "seq": self.seq, "told": self.told,
                "active": {k: {"alert": a.alert.to_json(), "starts_at_ns": a.alert.starts_at,
                               "clear_since_ns": a.clear_since} for k, a in self.active.items()}}

    @classmethod
    def load(cls, path: Path) -> _State:
        try:
            doc = json.loads(path.read_bytes())
            active = {k: _Active(Alert.from_json(v["alert"], int(v["starts_at_ns"])), v.get("clear_since_ns"))
                      for k, v in doc.get("active", {}).items()}
            return cls(active, {r: dict(t) for r, t in doc.get("told", {}).items()}, dict(doc.get("seq", {})))
        except FileNotFoundError:
            return cls()
        except (OSError, ValueError, KeyError, TypeError) as e:  # never a reason to stop paging
            log.error("alerts: %s cannot be read (%s); starting with no alert known (those still going on fire "
                      "again)", path, e)
            path.replace(path.with_suffix(".bad"))
            return cls()


def _digest(a: Alert) -> str:
    return hashlib.sha256(repr(a.digest()).encode()).hexdigest()[:16]


class Alerter:
    """An Output (see agent.runtime): judges what pages and tells each receiver (docs/alerts.md)."""

    name = "alerts"

    def __init__(self, cfg: CoreConfig, store_path: Path, supervisor: Supervisor | None = None, judge: bool = True):
        """`judge`: run the judging thread (off: only what `apply` is handed is told, for a test's own moments)."""
        self.cfg = cfg
        self.store_path = store_path
        self.supervisor = supervisor or Supervisor()
        self.dir = cfg.alerting.state_dir or alerts_of(store_path)
        make_private_dir(self.dir)
        self.agent = socket.gethostname()
        self.outboxes: list[Outbox] = []
        try:
            for a in cfg.alert:
                self.outboxes.append(Outbox(a, a.spool_dir or self.dir / a.name, self.supervisor, self.agent))
        except BaseException:
            self.close(0)
            raise
        self.state = _State.load(self.dir / STATE_FILE)
        self._unsaved = False
        for box in self.outboxes:  # a kill -9 after a change was spooled, before the state file said so
            for change in box.unsaved:
                if change.get("seq", 0) > self.state.seq.get(box.cfg.name, 0):
                    self._recall(box.cfg.name, change)
                    self._unsaved = True
            box.unsaved = []
        self._save()
        for box in self.outboxes:  # what each was last told firing: Alertmanager's resends
            box.firing = {c["alert"]["fingerprint"]: c for _, c in self.state.told.get(box.cfg.name, {}).values()
                          if c["status"] == "firing"}
        levels = {k: min(verdict_levels(s, cfg.checks)[k] for s in [StackConfig(name="-"), *cfg.stack])
                  for k in verdict_levels(StackConfig(name="-"), cfg.checks)}
        self.watch = _watch(levels)
        self.hot: dict[tuple[str, ...], int] = {}  # entity -> when it last showed a symptom
        self.findings: dict[str, Finding] | None = None  # open ones, by key (read from the store at the start)
        self._early: list[Finding] = []  # changes handed on before that read
        self._events: list[Annotation] = []  # each alert's start and end, for the store and InfluxDB
        self._events_lock = threading.Lock()
        self.evaluations = 0
        self._stacks: _Stacks | None = None
        self._q: queue.SimpleQueue = queue.SimpleQueue()
        self._stop = threading.Event()
        if judge:
            self._thread = self.supervisor.start(EVALUATE_THREAD, self._run)

    # --- the Output protocol -------------------------------------------------------------------------

    def submit(self, samples: Iterable[Sample] = (), facts: Iterable[Fact] = (),
               annotations: Iterable[Annotation] = (), findings: Iterable[Finding] = ()) -> None:
        """Queue for the judging thread: only the samples of a measurement the verdict's triggers read."""
        watched = [s for s in samples if s.measurement in self.watch]
        found = list(findings)
        if watched or found:
            self._q.put((watched, found))

    def close(self, timeout: float = 10.0) -> None:
        if hasattr(self, "_thread"):
            self._stop.set()
            self._q.put(None)
            self._thread.join(timeout + 30)
            self.supervisor.release(EVALUATE_THREAD)
        for box in self.outboxes:
            box.close(timeout)

    # --- the judging thread --------------------------------------------------------------------------

    def _run(self) -> None:
        interval = self.cfg.alerting.interval
        due = time.monotonic()
        while not self._stop.is_set():
            self._drain(max(0.0, due - time.monotonic()))
            if self._stop.is_set():
                return
            if time.monotonic() >= due:
                due = time.monotonic() + interval
                try:
                    self.evaluate(CLOCK.now_ns())
                    self.supervisor.recovered(EVALUATE_THREAD)
                except (StoreError, OSError) as e:  # the store being rewritten, a disk full: next turn
                    self.supervisor.retrying(EVALUATE_THREAD, e)
                except Exception as e:  # a bug judging one moment must not stop the alerts: logged, counted
                    log.exception("alerts: judging failed")
                    self.supervisor.set_aside(EVALUATE_THREAD, "a judgement of the alerts", e)

    def _drain(self, wait: float) -> None:
        try:
            item = self._q.get(timeout=wait) if wait > 0 else self._q.get_nowait()
        except queue.Empty:
            return
        while item is not None:
            samples, findings = item
            self._mark_hot(samples)
            if self.findings is not None:
                self._note(findings)
            else:
                self._early.extend(findings)
            try:
                item = self._q.get_nowait()
            except queue.Empty:
                return
        self._stop.set()

    def _note(self, findings: Iterable[Finding]) -> None:
        assert self.findings is not None
        for f in findings:
            if f.resolved_at is None:
                self.findings[f.key] = f
            else:
                self.findings.pop(f.key, None)

    def _mark_hot(self, samples: list[Sample]) -> None:
        for s in samples:
            fields = s.fields
            for name, level, kind in self.watch[s.measurement]:
                x = fields.get(name)
                if type(x) is not float and type(x) is not int:
                    continue
                if x > 0 if level is None else x >= level:
                    entity = _entity(kind, s.tags)
                    if entity is not None:
                        self.hot[entity] = max(self.hot.get(entity, 0), s.ts)

    def evaluate(self, now: int) -> None:
        """Judge what pages at `now` and tell the receivers what changed."""
        self.evaluations += 1
        self.hot = {e: ts for e, ts in self.hot.items() if ts >= now - HOT_NS}
        with Store(self.store_path) as store:
            if self.findings is None:
                self.findings = {f.key: f for f in store.findings(open_only=True)}
                self._note(self._early)
                self._early = []
            critical = [f for f in self.findings.values() if f.severity == "critical"]
            judged = []
            if self.hot or self.state.active or critical:
                view = CachedSource(store)
                stacks = self._stacks_of(view)
                names = {n for e in self.hot for n in stacks.of_entity(e)}
                names |= {n for a in self.state.active.values() for n in a.alert.stacks}
                shared: dict = {}  # a host's figures and a datastore's VMs, read once for every stack they slow
                for name in sorted(names):
                    stack = stacks.stacks.get(name)
                    if stack is None:
                        continue
                    ent = resolve(view, stack, now - WINDOW_NS, now)
                    judged.append((stack_verdict(view, stack, now - WINDOW_NS, now, self.cfg.checks, ent,
                                                 shared=shared), ent))
                current = {**episode_alerts(judged), **finding_alerts(critical, judged, stacks.vm_stack)}
            else:
                current = {}
        self.apply(current, now)

    def _stacks_of(self, view: CachedSource) -> _Stacks:
        """The stacks, looked up again every STACKS_TTL_S, or after a minute when an entity showing a symptom
        is nobody's (a VM that has just appeared)."""
        age = time.monotonic() - self._stacks.made_at if self._stacks is not None else math.inf
        if self._stacks is None or age > STACKS_TTL_S or (
                age > UNKNOWN_TTL_S and any(not self._stacks.of_entity(e) for e in self.hot)):
            self._stacks = _Stacks.of(self.cfg, view)
        return self._stacks

    def apply(self, current: dict[str, Alert], now: int) -> None:
        """Keep the alerts over time (flap_guard), then each receiver's changes: spool first, state after."""
        guard = int(self.cfg.alerting.flap_guard * 1e9)
        ended: dict[str, int] = {}
        for key, alert in current.items():
            known = self.state.active.get(key)
            if known is None:
                self.state.active[key] = _Active(alert)
                self._event(alert, "firing", max(alert.starts_at, now - int(WINDOW_NS)))
            else:
                alert.starts_at = min(alert.starts_at, known.alert.starts_at)  # the onset, past the window
                alert.annotations["since"] = iso_ms(alert.starts_at) or ""
                known.alert, known.clear_since = alert, None
        for key, a in list(self.state.active.items()):
            if key in current:
                continue
            if a.clear_since is None:
                a.clear_since = now
            elif now - a.clear_since >= guard:
                ended[key] = a.clear_since
                del self.state.active[key]
                self._event(a.alert, "resolved", a.clear_since)
        for box in self.outboxes:
            self._unsaved |= self._tell(box, ended, now)
        self._unsaved |= bool(ended)
        self._save()

    def _save(self) -> None:
        """The state file written (again, after a failed write), then the changes it records may go."""
        if self._unsaved:
            data = json.dumps(self.state.to_json(), ensure_ascii=False).encode()
            write_private(self.dir / STATE_FILE, data, durable=True)
            self._unsaved = False
        for box in self.outboxes:
            box.release(self.state.seq.get(box.cfg.name, 0))

    def _recall(self, name: str, change: dict[str, Any]) -> None:
        """A change found in the spool taken back into the state, as `_tell` would have recorded it."""
        doc = change["alert"]
        self.state.seq[name] = change["seq"]
        told = self.state.told.setdefault(name, {})
        if change["status"] == "resolved":
            told.pop(doc["key"], None)
            self.state.active.pop(doc["key"], None)
        else:
            told[doc["key"]] = [_digest(Alert.from_json(doc, 0)), change]

    def _event(self, a: Alert, status: str, ts: int) -> None:
        """An annotation of an alert's start (at its onset, at most the verdict's window back) or its end."""
        tags = {k: a.labels[k] for k in ("alertname", "severity", "layer", "rule") if a.labels.get(k)}
        with self._events_lock:
            self._events.append(Annotation("alert", f"{a.labels.get('alertname', 'alert')} {status}",
                                           {**tags, "status": status}, a.annotations.get("summary", ""), ts))

    def take_events(self) -> list[Annotation]:
        with self._events_lock:
            events, self._events = self._events, []
        return events

    def _tell(self, box: Outbox, ended: dict[str, int], now: int) -> bool:
        name = box.cfg.name
        told = self.state.told.setdefault(name, {})
        want = {k: a.alert for k, a in self.state.active.items() if box.accepts(a.alert)}
        changes = []
        for key, alert in want.items():
            digest = _digest(alert)
            if key not in told:
                changes.append((key, "firing", alert, None, digest))
            elif told[key][0] != digest:
                changes.append((key, "updated", alert, None, digest))
        for key in [k for k in told if k not in want]:
            changes.append((key, "resolved", told[key][1]["alert"], ended.get(key, now), ""))
        for key, change, alert, ends, digest in changes:
            doc = alert if isinstance(alert, dict) else alert.to_json()
            seq = self.state.seq.get(name, 0) + 1
            status = "resolved" if change == "resolved" else "firing"
            ident = hashlib.sha256(f"{doc['fingerprint']} {change} {doc['startsAt']} {digest} {ends}".encode())
            record = {"id": ident.hexdigest()[:24], "seq": seq, "change": change, "status": status, "alert": doc,
                      "endsAt": iso_ms(ends)}
            try:
                box.append(record)
            except OSError as e:  # disk full: this receiver is told on a later turn (nothing recorded as told)
                self.supervisor.retrying(box.thread_name, f"cannot write the spool {box.spool.dir}: {e.strerror or e}")
                break
            self.state.seq[name] = seq
            if status == "resolved":
                told.pop(key, None)
            else:
                told[key] = [digest, record]
            log.info("alert %s: %s %s %s", name, change, doc["labels"].get("alertname"),
                     doc["annotations"].get("summary", "")[:200])
        return bool(changes)

    def snapshot(self) -> dict[str, dict[str, Any]]:
        return {box.cfg.name: box.snapshot() for box in self.outboxes}
