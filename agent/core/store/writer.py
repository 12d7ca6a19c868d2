"""The store's single writer: a thread that commits what the agent's threads hand it, in order, retries what a
full disk refused, sets aside what the store cannot hold, and seals and applies retention between batches."""

from __future__ import annotations

import logging
import queue
import sqlite3
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from db2vtop.agent.core.backlog import Backlog
from db2vtop.agent.core.clock import CLOCK, RetentionClock, iso_utc
from db2vtop.agent.core.model import Annotation, Fact, Finding, Sample, describe_record
from db2vtop.agent.core.store.files import CHUNK_SPAN_NS, StoreError
from db2vtop.agent.core.store.store import Store
from db2vtop.agent.core.supervise import Supervisor

log = logging.getLogger(__package__)  # "db2vtop.agent.core.store", as its log lines always said


@dataclass
class WriterStats:
    batches: int = 0
    samples: int = 0
    write_ms: float = 0.0
    last_error: str = ""
    pending: int = 0
    retention_deleted: int = 0
    sealed: int = 0
    dropped: int = 0  # samples dropped, the oldest first, while more than max_pending waited for the disk


@dataclass
class _Batch:
    samples: list[Sample] = field(default_factory=list)
    facts: list[Fact] = field(default_factory=list)
    annotations: list[Annotation] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)

    def extend(self, other: _Batch) -> None:
        self.samples += other.samples
        self.facts += other.facts
        self.annotations += other.annotations
        self.findings += other.findings

    def empty(self) -> bool:
        return not (self.samples or self.facts or self.annotations or self.findings)

    def size(self) -> int:
        return len(self.samples) + len(self.facts) + len(self.annotations) + len(self.findings)

    def items(self) -> list[Sample | Fact | Annotation | Finding]:
        """Every record in write order (samples, facts, annotations, findings)."""
        return [*self.samples, *self.facts, *self.annotations, *self.findings]

    @classmethod
    def of(cls, items: Sequence[Sample | Fact | Annotation | Finding]) -> _Batch:
        b = cls()
        for r in items:
            (b.samples if isinstance(r, Sample) else b.facts if isinstance(r, Fact)
             else b.annotations if isinstance(r, Annotation) else b.findings).append(r)
        return b


#: a failed commit waits this long before the next try, doubling up to the most
_RETRY_S, _MAX_RETRY_S = 0.5, 8.0
#: samples kept in memory for the retry while the store cannot be written (a disk full for long); past it
#: the oldest are dropped, logged and counted (StoreWriter._bound)
MAX_PENDING = 100_000


class StoreWriter:
    """The store's single writer: a thread that commits queued batches in order, under the supervisor.

    Callers never wait on SQLite. A commit that fails for a reason of the moment (disk full, I/O
    error, a read-only remount) keeps the batch and retries with backoff, so nothing handed to the
    writer is dropped while the process lives, up to `max_pending` samples waiting: past that (a disk
    full for hours) the oldest samples are dropped, logged and counted, so memory stays bounded.
    A batch the store refuses for what it holds (an integer past 64 bits, a value of no storable
    type) is split until the refused records are alone; those are set aside (logged, counted in the
    thread's health) and the rest is written. A store that can no longer be written at all (a
    corrupt file) fails the thread, which stops the agent.
    """

    THREAD = "store-writer"
    #: tries, a second apart, to write what is still pending at exit
    exit_tries = 5

    def __init__(self, path: Path, retention_s: float, retention_every_s: float = 10.0,
                 supervisor: Supervisor | None = None, max_pending: int = MAX_PENDING):
        self.store = Store(path, writer=True)
        self.retention_s = retention_s
        self.max_pending = max_pending
        self.retention_every_s = retention_every_s
        self.stats = WriterStats()
        self.supervisor = supervisor or Supervisor()
        self._newest_ns = 0  # newest sample time committed: spans before its own are closed
        self._sealed_before = 0  # every head row before this is sealed (but each series' newest)
        self._pass_before: int | None = None  # the bound of the sealing pass under way
        self._retry_s = _RETRY_S
        self._retention_clock = RetentionClock(CLOCK.now_ns())  # from the store's newest data once it runs
        self._q: queue.SimpleQueue = queue.SimpleQueue()
        #: records queued and not yet committed (or set aside): what the runtime's back-pressure reads
        self.backlog = Backlog(self.THREAD)
        self._thread = self.backlog.thread = self.supervisor.start(self.THREAD, self._run)

    @property
    def path(self) -> Path:
        return self.store.path

    def submit(self, samples: Iterable[Sample] = (), facts: Iterable[Fact] = (),
               annotations: Iterable[Annotation] = (), findings: Iterable[Finding] = ()) -> None:
        batch = _Batch(list(samples), list(facts), list(annotations), list(findings))
        if not batch.empty():
            self.backlog.add(batch.size())
            self._q.put(batch)

    def call(self, fn: Any, timeout: float = 30.0) -> Any:
        """Run fn(store) on the writer thread, in order with queued batches; return its result."""
        if not self._thread.is_alive():
            raise StoreError(f"the store writer of {self.path} has stopped")
        done = threading.Event()
        box: dict[str, Any] = {}

        def job(store: Store) -> None:
            try:
                box["result"] = fn(store)
            except Exception as e:  # handed back to the caller
                box["error"] = e
            done.set()

        self._q.put(job)
        if not done.wait(timeout):
            raise StoreError(f"store writer did not answer within {timeout:.0f}s")
        if "error" in box:
            raise box["error"]
        return box.get("result")

    def flush(self, timeout: float = 30.0) -> None:
        self.call(lambda store: None, timeout)

    def close(self, timeout: float = 30.0) -> None:
        self._q.put(None)
        self._thread.join(timeout)
        self.store.close()

    def _run(self) -> None:
        pending = _Batch()
        self._start_retention_clock()
        next_retention = time.monotonic() + self.retention_every_s
        while True:
            stop = False
            for item in self._drain():
                if item is None:
                    stop = True
                elif isinstance(item, _Batch):
                    pending.extend(item)
                else:  # a job: commit what was queued before it first, so it sees that data
                    pending = self._commit_counted(pending)
                    item(self.store)
            pending = self._commit_counted(pending)
            self._bound(pending)
            self.stats.pending = len(pending.samples)
            if stop:
                self._commit_at_exit(pending)
                return
            if time.monotonic() >= next_retention:
                self._maintain("retention", self._retention_step)
                next_retention = time.monotonic() + self.retention_every_s
            self._maintain("sealing", self._seal_step)

    def _drain(self) -> list[Any]:
        try:  # while a sealing pass is under way, come back to it soon
            items = [self._q.get(timeout=1.0 if self._pass_before is None else 0.05)]
        except queue.Empty:
            return []
        while len(items) < 1000:
            try:
                items.append(self._q.get_nowait())
            except queue.Empty:
                break
        return items

    def _bound(self, pending: _Batch) -> None:
        """Past `max_pending` samples waiting for a store that cannot be written (a disk full for hours), drop
        the oldest (facts, markers and findings are kept): memory stays bounded, and what is lost is logged
        and counted in the thread's health (`db2vtop_thread` set_aside) and in stats.dropped."""
        over = len(pending.samples) - self.max_pending
        if over <= 0:
            return
        dropped = pending.samples[:over]
        del pending.samples[:over]
        self.backlog.done(over)
        self.stats.dropped += over
        times = [s.ts for s in dropped]
        self.supervisor.set_aside(
            self.THREAD, f"{over} samples of {iso_utc(min(times))} to {iso_utc(max(times))}",
            f"dropped, the oldest of more than {self.max_pending} waiting for a store that cannot be written "
            f"({self.stats.last_error or 'no error yet'}); {self.stats.dropped} dropped since the start", count=over)

    def _commit_at_exit(self, pending: _Batch) -> None:
        self._retry_s = 0.0  # a few more tries, a second apart, then the loss is said
        for _ in range(self.exit_tries):
            if pending.empty():
                return
            time.sleep(1.0)
            pending = self._commit(pending)
        if not pending.empty():  # lost: the exit status must say so
            self.supervisor.fail(self.THREAD, f"{len(pending.samples)} samples could not be written at exit: "
                                              f"{self.stats.last_error}")

    def _commit_counted(self, b: _Batch) -> _Batch:
        """_commit, and what it took (written, or set aside as unstorable) off the backlog."""
        before = b.size()
        left = self._commit(b)
        self.backlog.done(before - left.size())
        return left

    def _commit(self, b: _Batch) -> _Batch:
        """Write b; what is left to retry (all of it after a failure of the moment), else an empty batch."""
        if b.empty():
            return b
        t0 = time.perf_counter()
        try:
            self.store.write(b.samples, b.facts, b.annotations, b.findings)
        except sqlite3.OperationalError as e:  # disk full, I/O error, read-only: keep and retry
            return self._keep(b, e)
        except sqlite3.DatabaseError as e:
            if isinstance(e, sqlite3.IntegrityError | sqlite3.DataError):
                return self._isolate(b.items())
            raise StoreError(f"{self.path} cannot be written: {e}") from None  # corrupt: the thread ends
        except Exception:  # something in the batch the store cannot hold
            return self._isolate(b.items())
        self.stats.write_ms = (time.perf_counter() - t0) * 1000
        self._written(b)
        return _Batch()

    def _keep(self, b: _Batch, e: Exception) -> _Batch:
        self.stats.last_error = f"store write failed: {e}"
        self.supervisor.retrying(self.THREAD, f"{self.stats.last_error} ({len(b.samples)} samples kept for retry)")
        time.sleep(self._retry_s)
        self._retry_s = min(self._retry_s * 2, _MAX_RETRY_S)
        return b

    def _written(self, b: _Batch) -> None:
        now = CLOCK.now_ns()  # a source's clock ahead of ours must not close spans still filling
        self._newest_ns = max([self._newest_ns, *(min(s.ts, now) for s in b.samples)])
        self.stats.batches += 1
        self.stats.samples += len(b.samples)
        if self.stats.last_error:
            self.stats.last_error = ""
            self._retry_s = _RETRY_S
            self.supervisor.recovered(self.THREAD)

    def _isolate(self, items: list[Sample | Fact | Annotation | Finding]) -> _Batch:
        """Write `items` in order in ever smaller parts until each record the store refuses is alone;
        set those aside. Stops at a failure of the moment and returns what is left for the retry."""
        parts = [items]
        while parts:
            part = parts.pop(0)
            b = _Batch.of(part)
            try:
                self.store.write(b.samples, b.facts, b.annotations, b.findings)
            except sqlite3.OperationalError as e:
                return self._keep(_Batch.of([r for p in (part, *parts) for r in p]), e)
            except Exception as e:
                if isinstance(e, sqlite3.DatabaseError) and not isinstance(e, sqlite3.IntegrityError
                                                                            | sqlite3.DataError):
                    raise StoreError(f"{self.path} cannot be written: {e}") from None
                if len(part) == 1:
                    self.supervisor.set_aside(self.THREAD, _describe(part[0]), e)
                else:
                    half = len(part) // 2
                    parts[:0] = [part[:half], part[half:]]
                continue
            self._written(b)
        return _Batch()

    def _maintain(self, what: str, step: Any) -> None:
        """Retention and sealing: a step that fails is retried on the next turn; storing goes on."""
        try:
            step()
        except sqlite3.Error as e:
            log.warning("store %s step failed: %s", what, e)
        except Exception:  # a bug in upkeep must not stop the writing
            log.exception("store %s step failed", what)

    def _start_retention_clock(self) -> None:
        """Retention counts on from the newest data the store holds (when that is earlier than now): an agent
        started under a clock that jumped ahead, or after a long stop, does not delete at once what was kept."""
        now = CLOCK.now_ns()
        try:
            span = self.store.time_range()
        except sqlite3.Error as e:
            log.warning("store: cannot read its time range (%s); retention counts from now", e)
            span = None
        self._retention_clock = RetentionClock(min(span[1], now) if span else now)

    def _retention_step(self) -> None:
        """Delete what is older than `retention`, counted on the retention clock (agent/core/clock.py): a jump
        of the system clock, forward or back, deletes nothing it would not have deleted anyway."""
        cutoff = self._retention_clock.now_ns() - int(self.retention_s * 1e9)
        self.stats.retention_deleted += self.store.enforce_retention(cutoff)

    def _seal_step(self) -> None:
        """Seal a little of the spans that have closed since the last pass; one short transaction."""
        if self._pass_before is None:
            before = self._newest_ns // CHUNK_SPAN_NS * CHUNK_SPAN_NS
            if before <= self._sealed_before:
                return
            self._pass_before = before
        moved, done = self.store.seal_step(self._pass_before)
        self.stats.sealed += moved
        if done:
            self._sealed_before, self._pass_before = self._pass_before, None
            self.store.release_free_pages()


def _describe(r: Sample | Fact | Annotation | Finding) -> str:
    if isinstance(r, Finding):
        return f"finding {r.key}"
    return describe_record(r)
