"""The InfluxDB output: everything goes through the on-disk spool, nothing is lost.

`submit()` only queues (the runtime never waits on disk or network). A writer thread
encodes line protocol and appends it to the spool; a sender thread reads the spool in
order, sends gzip'd batches to /api/v2/write (agent/core/httpclient.py: each POST under one
deadline of `timeout`, its answer bounded), and marks a batch delivered only after a 2xx.
Failures are sorted by what can fix them:

- 400/413/422 (this data is bad): the batch is split in halves until the refused points
  are alone; those go to `dead-letter.jsonl` with InfluxDB's reason, the rest are sent.
  Never retried forever.
- 401/403 (state `auth_error`), 404 and other answers (`error`), 429/5xx (`retrying`),
  no answer (`unreachable`): spooling goes on; the batch is retried with exponential
  backoff and jitter (Retry-After honoured, as seconds or a date, within `max_retry_delay`).
  The token is read again before a retry after an auth error, so a rotated token file is
  picked up.

State changes and the start of dropping (spool full) are logged and queued as
annotations for `SinkMonitor`, which also emits the `db2vtop_sink` self-metric.

Both threads run under the agent's supervisor. A spool write that fails (disk full, I/O
error) keeps the encoded records in memory (up to MAX_BACKLOG_BYTES, the oldest dropped and
counted beyond it) and retries with backoff until the disk takes them again; a batch that
cannot be encoded is set aside and counted; records still unspooled at exit fail the thread,
so the exit status says points were lost.
"""

from __future__ import annotations

import json
import logging
import queue
import random
import sys
import threading
import time
import zlib
from collections import deque
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlencode, urlparse

from db2vtop.agent.core import tls
from db2vtop.agent.core.clock import CLOCK
from db2vtop.agent.core.config import InfluxConfig
from db2vtop.agent.core.files import append_private
from db2vtop.agent.core.httpclient import Answer, CallError, HttpClient, retry_after
from db2vtop.agent.core.model import Annotation, Fact, Finding, Sample
from db2vtop.agent.core.secrets import SecretError
from db2vtop.agent.core.supervise import Supervisor
from db2vtop.agent.sinks.lineproto import FieldTypes, LineEncoder
from db2vtop.agent.sinks.spool import Batch, Spool

log = logging.getLogger(__name__)

BAD_DATA = frozenset({400, 413, 422})
AUTH = frozenset({401, 403})
MAX_BATCH_BYTES = 8 * 2**20
# The sender's HTTP threads share the GIL with encoding: at CPython's default 5 ms switch
# interval each of their system calls can wait behind a busy thread (the "convoy effect"),
# which cost ~25% of throughput in bench/influx.py. The sink lowers it for the process.
SWITCH_INTERVAL_S = 0.0005
DEAD_LETTER_MAX_BYTES = 64 * 2**20
#: encoded records held in memory while the spool cannot be written (disk full)
MAX_BACKLOG_BYTES = 64 * 2**20
_RETRY_S, _MAX_RETRY_S = 0.5, 8.0
SPOOL_THREAD, SEND_THREAD = "influx-spool", "influx-send"


class _RetryError(Exception):
    def __init__(self, state: str, message: str, retry_after: float = 0.0):
        super().__init__(message)
        self.state, self.retry_after = state, retry_after


class _BadDataError(Exception):
    def __init__(self, status: int, reason: str):
        super().__init__(reason)
        self.status, self.reason = status, reason


@dataclass
class _InFlight:
    batch: Batch
    done: bool = False
    delivered: int = 0


@dataclass
class SinkStats:
    state: str = "starting"
    last_error: str = ""
    spooled: int = 0
    sent: int = 0
    dead_lettered: int = 0
    retries: int = 0
    batches: int = 0
    last_success_ns: int = 0


class DeadLetters:
    """Points InfluxDB refused, one JSON object per line, with the reason it gave."""

    def __init__(self, path: Path, max_bytes: int = DEAD_LETTER_MAX_BYTES):
        self.path, self.max_bytes = path, max_bytes
        self._lock = threading.Lock()

    def write(self, lines: list[bytes], status: int, reason: str) -> None:
        now = datetime.now(UTC).isoformat(timespec="seconds")
        text = "".join(json.dumps({"time": now, "status": status, "reason": reason,
                                   "line": line.decode("utf-8", "replace")}, ensure_ascii=False) + "\n"
                       for line in lines)
        try:
            with self._lock:
                if self.path.exists() and self.path.stat().st_size > self.max_bytes:
                    self.path.replace(self.path.with_suffix(".jsonl.1"))
                with append_private(self.path) as f:
                    f.write(text)
        except OSError as e:
            log.error("influxdb: cannot write dead letters to %s: %s", self.path, e)


class InfluxSink:
    """An Output (see agent.runtime) that delivers to InfluxDB through a durable spool."""

    name = "influxdb"

    def __init__(self, cfg: InfluxConfig, supervisor: Supervisor | None = None):
        if cfg.spool_dir is None:
            raise ValueError("the sink needs its spool_dir resolved (agent/assemble.py build_sink)")
        self.cfg = cfg
        self.supervisor = supervisor or Supervisor()
        self.stats = SinkStats()
        sys.setswitchinterval(min(sys.getswitchinterval(), SWITCH_INTERVAL_S))
        self.spool = Spool(cfg.spool_dir, cfg.spool_max_bytes, fsync=cfg.spool_fsync,
                           fsync_interval=cfg.spool_fsync_interval)
        self.encoder = LineEncoder(cfg.tags, FieldTypes(cfg.spool_dir / "field_types.json"))
        self.dead_letters = DeadLetters(cfg.spool_dir / "dead-letter.jsonl")
        self._q: queue.SimpleQueue = queue.SimpleQueue()
        self._wake = threading.Event()  # new data to send (or stopping)
        self._interrupt = threading.Event()  # stopping: cut a backoff short
        self._abort = threading.Event()
        self._closing = False
        self._closed = False
        self.late = 0  # points submitted after close(): not spooled
        self._events: list[Annotation] = []
        self._events_lock = threading.Lock()
        self._dropping = False
        self._clients: queue.SimpleQueue[HttpClient] = queue.SimpleQueue()  # one per request in flight
        self._made: list[HttpClient] = []
        self._auth: str | None = None  # the Authorization header, read again after an auth error
        self._auth_lock = threading.Lock()
        self._write_path = "/api/v2/write?" + urlencode({"org": cfg.org, "bucket": cfg.bucket, "precision": "ns"})
        self._tls: Any = None
        self._tls_error = ""
        if urlparse(cfg.url).scheme == "https":
            try:
                self._tls = tls.context(cfg.verify_tls, cfg.ca_file, "influxdb")
            except tls.TLSError as e:
                self._tls_error = str(e)
        self._backlog: deque[tuple[bytes, int]] = deque()  # encoded, not yet in the spool (disk full)
        self._backlog_bytes = 0
        self._retry_s = _RETRY_S
        self._last_send = 0.0
        self._writer = self.supervisor.start(SPOOL_THREAD, self._write_loop)
        self._sender = self.supervisor.start(SEND_THREAD, self._send_loop)

    # --- the Output protocol ------------------------------------------------------

    def submit(self, samples: Iterable[Sample] = (), facts: Iterable[Fact] = (),
               annotations: Iterable[Annotation] = (), findings: Iterable[Finding] = ()) -> None:
        """Queue for the spool. Findings (the check runner's changes) become `db2vtop_finding`
        points, facts `db2vtop_fact` points (their data as a JSON document), so views reading
        InfluxDB see what the embedded store holds. After close() nothing is queued: the shutdown
        watchdog closes the pipeline (the store last) under a runtime that may still hand on a cycle;
        what comes then is lost, counted and fails the thread, so the exit status says so."""
        item = (list(samples), list(annotations), list(findings), list(facts))
        if not self._closed:
            self._q.put(item)
            return
        n, first = sum(map(len, item)), not self.late
        self.late += n
        if first:  # once: a failure says the loss, `late` counts all of it
            self.supervisor.fail(SPOOL_THREAD, f"{n} points came after the sink was closed and were not written "
                                               f"to the spool {self.cfg.spool_dir}")

    def take_events(self) -> list[Annotation]:
        with self._events_lock:
            events, self._events = self._events, []
        return events

    def snapshot(self) -> dict[str, Any]:
        st = self.stats
        return {"state": st.state, "last_error": st.last_error, "spooled": st.spooled, "sent": st.sent,
                "dropped": self.spool.dropped, "corrupt": self.spool.corrupt, "dead_lettered": st.dead_lettered,
                "retries": st.retries,
                "batches": st.batches, "pending": self.spool.pending_points, "spool_bytes": self.spool.total_bytes,
                "last_success_ns": st.last_success_ns}

    def flush(self, timeout: float = 30.0) -> bool:
        """Wait until everything submitted so far is delivered; False on timeout."""
        deadline = time.monotonic() + timeout
        marker = threading.Event()
        self._q.put(marker)
        if not marker.wait(timeout):
            return False
        while time.monotonic() < deadline:
            if self.spool.pending_points == 0 and not self._backlog:
                return True
            time.sleep(0.05)
        return False

    def close(self, timeout: float | None = None) -> None:
        """Spool what is queued, try to deliver the backlog for up to `timeout`, then stop.

        Whatever is not delivered by then stays in the spool for the next start.
        """
        if self._closed:
            return
        self._closed = True
        timeout = self.cfg.flush_timeout if timeout is None else timeout
        self._q.put(None)
        self._writer.join()
        self._closing = True
        self._interrupt.set()  # one last try now, not after the current backoff
        self._wake.set()
        self._sender.join(timeout)
        if self._sender.is_alive():
            self._abort.set()
            self._wake.set()
            self._sender.join(self.cfg.timeout + 1)
        left = self.spool.pending_points
        self.spool.close()
        for client in self._made:
            client.close()
        for name in (SPOOL_THREAD, SEND_THREAD):
            self.supervisor.release(name)
        if left:
            log.warning("influxdb: %d points left in the spool %s for the next start", left, self.cfg.spool_dir)
        else:
            log.info("influxdb: spool delivered")

    # --- writer thread: queue -> line protocol -> spool ---------------------------

    def _write_loop(self) -> None:
        while True:
            try:
                items = [self._q.get(timeout=self._retry_s if self._backlog else self.cfg.spool_fsync_interval)]
            except queue.Empty:
                items = []
            while items and len(items) < 1000:
                try:
                    items.append(self._q.get_nowait())
                except queue.Empty:
                    break
            stop = False
            lines: list[str] = []
            markers = []
            for item in items:
                if item is None:
                    stop = True
                elif isinstance(item, threading.Event):
                    markers.append(item)
                else:
                    lines += self._encode(*item)
            self.append_lines(lines)
            for m in markers:
                m.set()
            if stop:
                self._spool_at_exit()
                return

    def _encode(self, samples: list[Sample], annotations: list[Annotation], findings: list[Finding],
                facts: list[Fact]) -> list[str]:
        """Line protocol for one submitted batch; a record that cannot be encoded is set aside alone."""
        try:
            return (self.encoder.samples(samples) + self.encoder.annotations(annotations)
                    + self.encoder.findings(findings) + self.encoder.facts(facts))
        except Exception:  # find the records at fault; the others are sent
            pass
        lines: list[str] = []
        for encode, records in ((self.encoder.samples, samples), (self.encoder.annotations, annotations),
                                (self.encoder.findings, findings), (self.encoder.facts, facts)):
            for r in records:
                try:
                    lines += encode([r])
                except Exception as e:
                    self.supervisor.set_aside(SPOOL_THREAD, f"{type(r).__name__} {str(r)[:200]}", e)
        return lines

    def append_lines(self, lines: list[str]) -> None:
        """Append encoded lines to the spool in records of at most one batch (kept in memory while the
        spool cannot be written, tried again on every turn)."""
        n = self.cfg.batch_size
        for i in range(0, len(lines), n):
            chunk = "".join(lines[i:i + n]).encode()
            self._backlog.append((chunk, len(lines[i:i + n])))
            self._backlog_bytes += len(chunk)
        if not self._backlog:
            self._sync()
            return
        while self._backlog:
            payload, points = self._backlog[0]
            try:
                self.spool.append(payload, points)
            except OSError as e:
                self._spool_failed(e)
                break
            self._backlog.popleft()
            self._backlog_bytes -= len(payload)
            self.stats.spooled += points
        else:
            self._retry_s = _RETRY_S
            self.supervisor.recovered(SPOOL_THREAD)
        self._sync()
        try:
            self.encoder.types.save()
        except OSError as e:
            log.warning("influxdb: cannot save field types: %s", e)
        self._note_drops()
        if self.spool.pending_points >= self.cfg.batch_size:
            self._wake.set()

    def _sync(self) -> None:
        try:
            self.spool.maybe_sync()
        except OSError as e:
            self.supervisor.retrying(SPOOL_THREAD, f"cannot sync the spool {self.cfg.spool_dir}: {e.strerror or e}")

    def _spool_failed(self, e: OSError) -> None:
        """Disk full (or an I/O error): keep the records, drop the oldest beyond the memory bound, retry."""
        while self._backlog_bytes > MAX_BACKLOG_BYTES and len(self._backlog) > 1:
            payload, points = self._backlog.popleft()
            self._backlog_bytes -= len(payload)
            self.spool.dropped += points
        held = sum(p for _, p in self._backlog)
        self.supervisor.retrying(SPOOL_THREAD, f"cannot write the spool {self.cfg.spool_dir}: {e.strerror or e} "
                                               f"({held} points held in memory)")
        self._retry_s = min(self._retry_s * 2, _MAX_RETRY_S)

    def _spool_at_exit(self) -> None:
        for _ in range(3):
            if not self._backlog:
                return
            time.sleep(1.0)
            self.append_lines([])
        if self._backlog:  # lost: the exit status must say so
            held = sum(p for _, p in self._backlog)
            self.supervisor.fail(SPOOL_THREAD, f"{held} points could not be written to the spool "
                                               f"{self.cfg.spool_dir} at exit")

    def _note_drops(self) -> None:
        dropped = self.spool.dropped
        if dropped and not self._dropping:
            self._dropping = True
            text = (f"spool full ({self.cfg.spool_max_bytes} bytes in {self.cfg.spool_dir}): the oldest points "
                    f"are being dropped ({dropped} so far); last error: {self.stats.last_error or 'none'}")
            log.error("influxdb: %s", text)
            self._event("spool_overflow", text)
        elif self._dropping and self.spool.total_bytes < self.cfg.spool_max_bytes // 2:
            self._dropping = False

    def _event(self, event: str, text: str) -> None:
        with self._events_lock:
            self._events.append(Annotation(event, self.name, {"sink": self.name}, text))

    # --- sender thread: spool -> InfluxDB -----------------------------------------

    def _send_loop(self) -> None:
        """Keep up to max_in_flight batches on the wire; mark them delivered in spool order.

        One connection is bound by the server's per-request latency; two in flight keep a
        local influxd busy. A batch that fails is retried (after backoff, with the others
        still waiting behind it), so delivery order within the spool only ever slips by
        the batches in flight, and a restart re-sends at most those. An unexpected error (the
        spool's disk failing under a read or a commit) is retried the same way from the cursor.
        """
        pool = ThreadPoolExecutor(self.cfg.max_in_flight, thread_name_prefix="influx-post")
        window: list[_InFlight] = []
        failures = 0
        try:
            while not self._abort.is_set():
                try:
                    delay = self._send_turn(pool, window, failures)
                except Exception as e:
                    delay = None
                    failures += 1
                    self.supervisor.retrying(SEND_THREAD, e)
                    window.clear()
                    self.spool.rewind()
                    base = min(self.cfg.max_retry_delay, self.cfg.retry_interval * 2 ** min(failures - 1, 20))
                    self._interrupt.wait(base)
                    continue
                if delay is None:
                    return
                if delay == 0:
                    if failures:
                        self.supervisor.recovered(SEND_THREAD)
                    failures = 0
                    continue
                failures += 1
                self._interrupt.wait(delay)
        finally:
            pool.shutdown(wait=True)
            self.spool.rewind()

    def _send_turn(self, pool: ThreadPoolExecutor, window: list[_InFlight], failures: int) -> float | None:
        """One turn of the sender: 0 to go on at once, a delay after a failed send, None to stop."""
        if not window:
            unread = self.spool.unread_points
            wait = self.cfg.flush_interval - (time.monotonic() - self._last_send)
            if unread == 0 or (unread < self.cfg.batch_size and not self._closing and wait > 0):
                if self._closing and unread == 0:
                    return None
                self._wait(wait if unread else self.cfg.flush_interval)
                return 0
            while len(window) < self.cfg.max_in_flight:
                batch = self.spool.read(self.cfg.batch_size, MAX_BATCH_BYTES)
                if batch is None:
                    break
                window.append(_InFlight(batch))
            if not window:
                return 0
        self._last_send = time.monotonic()
        errors = [e for e in pool.map(self._attempt, [f for f in window if not f.done]) if e]
        if not errors:  # before the spool's commit, which is what flush() waits for
            self._set_state("ok", "")
        while window and window[0].done:
            self._delivered(window.pop(0))
        if not errors:
            return 0
        self.stats.retries += 1
        e = errors[0]
        self._set_state(e.state, str(e))
        if self._closing:
            return None  # stopping: leave the backlog for the next start
        base = min(self.cfg.max_retry_delay, self.cfg.retry_interval * 2 ** min(failures, 20))
        return max(e.retry_after, base / 2 + random.uniform(0, base / 2))

    def _wait(self, seconds: float) -> None:
        self._wake.wait(seconds)
        self._wake.clear()

    def _attempt(self, f: _InFlight) -> _RetryError | None:
        try:
            f.delivered = self._send(f.batch.data, f.batch.points)
        except _RetryError as e:
            return e
        f.done = True
        return None

    def _delivered(self, f: _InFlight) -> None:
        self.stats.sent += f.delivered
        self.stats.dead_lettered += f.batch.points - f.delivered
        self.stats.batches += 1
        self.stats.last_success_ns = CLOCK.now_ns()
        self.spool.commit(f.batch)  # last: flush() waits for the spool, then reads the stats

    def _send(self, data: bytes, points: int) -> int:
        """Send, splitting around points InfluxDB refuses; returns the points delivered."""
        try:
            self._post(data)
            return points
        except _BadDataError as e:
            lines = data.rstrip(b"\n").split(b"\n")
            if len(lines) <= 1:
                log.warning("influxdb: a point was refused (%d %s); it is in %s", e.status, e.reason,
                            self.dead_letters.path)
                self.dead_letters.write(lines, e.status, e.reason)
                return 0
            half = len(lines) // 2
            return (self._send(b"\n".join(lines[:half]) + b"\n", half)
                    + self._send(b"\n".join(lines[half:]) + b"\n", len(lines) - half))

    def _post(self, data: bytes) -> None:
        headers = {"Content-Type": "text/plain; charset=utf-8", "Accept": "application/json"}
        body = data
        if self.cfg.gzip:
            body, headers["Content-Encoding"] = zlib.compress(data, 1, wbits=31), "gzip"
        auth = self._authorization()
        if auth:
            headers["Authorization"] = auth
        client = self._client()
        try:
            answer = client.request("POST", self._write_path, body, headers)
        except CallError as e:  # no answer: refused, reset, TLS, the deadline
            raise _RetryError("unreachable", str(e)[:500]) from None
        finally:
            self._clients.put(client)
        status = answer.status
        if 200 <= status < 300:
            return
        reason = _reason(answer)
        if status in BAD_DATA:
            raise _BadDataError(status, reason)
        if status in AUTH:
            self._auth = None  # read the token again before the next try
            raise _RetryError("auth_error", f"{status} {reason}")
        if status == 429 or status >= 500:
            delay = retry_after(answer.header("Retry-After"), self.cfg.max_retry_delay)
            raise _RetryError("retrying", f"{status} {reason}", delay)
        raise _RetryError("error", f"{status} {reason}")

    def _client(self) -> HttpClient:
        """A connection of its own for this request (up to max_in_flight are made, then reused)."""
        if self._tls_error:
            raise _RetryError("error", self._tls_error)
        try:
            return self._clients.get_nowait()
        except queue.Empty:
            client = HttpClient(self.cfg.url, timeout=self.cfg.timeout, tls=self._tls)
            self._made.append(client)
            return client

    def _authorization(self) -> str:
        with self._auth_lock:
            if self._auth is None:
                ref = self.cfg.token()
                try:
                    token = ref.resolve() if ref else ""
                except SecretError as e:
                    raise _RetryError("error", f"token: {e}") from None
                self._auth = f"Token {token}" if token else ""
            return self._auth

    def _set_state(self, state: str, error: str) -> None:
        old = self.stats.state
        self.stats.state = state
        if error:
            self.stats.last_error = error
        if state == old:
            return
        if state == "ok":
            if old != "starting":
                log.info("influxdb: delivering again to %s (was %s)", self.cfg.url, old)
                self._event("sink_ok", f"delivering again (was {old})")
        else:
            level = logging.ERROR if state in ("auth_error", "error") else logging.WARNING
            log.log(level, "influxdb: %s: %s; spooling to %s and retrying", state, error, self.cfg.spool_dir)
            self._event("sink_" + state, error)


def _reason(answer: Answer) -> str:
    """InfluxDB's reason for refusing (its JSON `error` or `message`), at most 500 characters."""
    text = answer.text(64 * 1024)
    try:
        doc = json.loads(text)
        if isinstance(doc, dict) and isinstance(doc.get("error") or doc.get("message"), str):
            text = doc.get("error") or doc.get("message")
    except ValueError:
        pass
    return (text or answer.reason or "").strip()[:500]
