"""The engine in the agent's pipeline: fed what the collectors produce, on its own thread."""

from __future__ import annotations

import logging
import queue
from collections.abc import Callable, Iterable, Sequence

from db2vtop.agent.core.backlog import Backlog
from db2vtop.agent.core.cadence import STALE_INTERVALS
from db2vtop.agent.core.clock import CLOCK
from db2vtop.agent.core.config import CoreConfig
from db2vtop.agent.core.model import SELF_MEASUREMENT, Annotation, Fact, Finding, Output, Sample
from db2vtop.agent.core.source import Row
from db2vtop.agent.core.store import Store
from db2vtop.agent.core.supervise import Supervisor
from db2vtop.checks.engine import Engine, validate_overrides
from db2vtop.checks.rules import all_rules
from db2vtop.checks.topology import db2_vm_selector

log = logging.getLogger(__name__)


def build_engine(cfg: CoreConfig) -> Engine:
    """The engine with every rule and the config's threshold overrides (validated: ConfigError)."""
    rules = all_rules()
    file = str(cfg.source or "config")
    validate_overrides(rules, file, cfg.checks)
    for i, stack in enumerate(cfg.stack):
        validate_overrides(rules, file, stack.checks, f"stack[{i}].checks", base=cfg.checks)
    return Engine(rules, cfg.checks, cfg.stack, db2_vm_selector(cfg))


class CheckRunner:
    """An Output: judges every batch the runtime emits and passes finding changes on, on a thread run
    by the supervisor: a batch the engine fails on is set aside (logged with its traceback, counted)."""

    THREAD = "checks"

    def __init__(self, engine: Engine, outputs: Sequence[Output], supervisor: Supervisor | None = None):
        self.engine = engine
        self.outputs = list(outputs)
        self.supervisor = supervisor or Supervisor()
        self._q: queue.SimpleQueue = queue.SimpleQueue()
        #: samples and facts queued and not judged yet: what the runtime's back-pressure reads
        self.backlog = Backlog(self.THREAD)
        #: what each collector declares (its measurements and fact kinds; the pipeline sets it), and how many
        #: cycles in a row each has failed, from the runtime's sample of each cycle
        self.declared: dict[str, frozenset[str]] = {}
        self._failing: dict[str, int] = {}
        self._thread = self.backlog.thread = self.supervisor.start(self.THREAD, self._run)

    def unread(self, samples: Iterable[Sample]) -> frozenset[str]:
        """What only collectors that failed their last cycles write (as triage's `unread`, from the runtime's
        cycle samples): a collector is down once it failed STALE_INTERVALS cycles in a row."""
        for s in samples:
            if s.measurement == SELF_MEASUREMENT and s.tags.get("collector") in self.declared:
                name = s.tags["collector"]
                status = s.fields.get("status")
                if status == "ok":
                    self._failing[name] = 0
                elif status in ("error", "timeout"):
                    self._failing[name] = self._failing.get(name, 0) + 1
        down = {n for n, k in self._failing.items() if k >= STALE_INTERVALS}
        if not down:
            return frozenset()
        read = frozenset().union(*(d for n, d in self.declared.items() if n not in down))
        return frozenset().union(*(self.declared[n] for n in down)) - read

    def resume(self, store: Store, facts: list[Fact] | None = None,
               history: Callable[[], Iterable[Iterable[Sample | Row]]] | None = None) -> None:
        """Continue where the last run stopped: its open findings, the current facts (`facts` when the caller
        has read them already) and the recent samples the store holds (`history`: batches in time order, read
        on the checks' thread while the store writer goes on), judged before anything new."""
        self._put((store.findings(open_only=True), [], store.facts() if facts is None else facts, history))

    def submit(self, samples: Iterable[Sample] = (), facts: Iterable[Fact] = (),
               annotations: Iterable[Annotation] = (), findings: Iterable[Finding] = ()) -> None:
        self._put(([], list(samples), list(facts), None))

    def _put(self, item: tuple) -> None:
        self.backlog.add(len(item[1]) + len(item[2]))
        self._q.put(item)

    def close(self, timeout: float = 10.0) -> None:
        self._q.put(None)
        self._thread.join(timeout)
        self.supervisor.release(self.THREAD)

    def _run(self) -> None:
        pending = None  # an item taken from the queue that must wait for its own turn
        while True:
            item, pending = (pending if pending is not None else self._q.get()), None
            if item is None:
                return
            adopt, samples, facts, history = item
            stop = False
            # what queued meanwhile is judged in one go: a cycle handed on in parts, or batches that came while
            # the engine was busy, makes one static judgement of the facts, not one per part. The store's
            # history is judged before anything that came after it, so it is never folded into other batches.
            while history is None:
                try:
                    more = self._q.get_nowait()
                except queue.Empty:
                    break
                if more is None:
                    stop = True
                    break
                if more[3] is not None:
                    pending = more
                    break
                adopt, samples, facts = adopt + more[0], samples + more[1], facts + more[2]
            try:
                self.engine.adopt(adopt)
                self.engine.feed(samples, facts)
                if history is not None:  # in batches, each later than the one before
                    for batch in history():
                        self.engine.start_from(batch)
                self.engine.mark_stale(CLOCK.now_ns(), self.unread(samples))
                changes = self.engine.changes()
            except Exception as e:  # a rule bug must not stop collection; it is logged with its traceback
                log.exception("check engine failed on a batch")
                what = f"a batch of {len(samples)} samples and {len(facts)} facts"
                self.supervisor.set_aside(self.THREAD, what + (" with the store's history" if history else ""), e)
                changes = []  # not `continue`: a stop taken from the queue above must still end the thread
            self.backlog.done(len(samples) + len(facts))
            if changes:
                for out in self.outputs:
                    out.submit(findings=changes)
            if stop:
                return
