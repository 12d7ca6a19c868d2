"""db2vtop's own cost on the machine it watches (the observer's overhead budget), and the health of
each of its threads (agent/core/supervise.py): a thread that is retrying, has set records aside or
has failed is data in the store and in InfluxDB, which the TUI and triage show. A thread's change
of state also comes as an annotation, a marker on the time axis."""

from __future__ import annotations

import socket
import time

import psutil

from db2vtop.agent.core.model import AGENT_MEASUREMENT, THREAD_MEASUREMENT, Annotation, Record, Sample
from db2vtop.agent.core.schema import Measurement, fields
from db2vtop.collectors.base import BaseCollector

MEASUREMENTS = (
    Measurement(
        AGENT_MEASUREMENT, "db2vtop's own process: its cost on the machine it watches.",
        {"agent": "this machine's host name"},
        fields("rss_bytes", "threads", "open_fds", cpu_seconds="user + system CPU time since the process started",
               cpu_pct="CPU used since the previous sample, % of one core"),
    ),
    Measurement(
        THREAD_MEASUREMENT, "One of the agent's threads (store writer, spool writer and sender, check runner, "
                            "each collector's worker): its health.",
        {"agent": "this machine's host name", "thread": "`store-writer`, `influx-spool`, `influx-send`, `checks` "
                                                        "or `collector:NAME`"},
        fields(state="`ok`, `retrying` (a failure of the moment, such as a full disk, retried) or `failed` "
                     "(it could not go on: the agent stops with a non-zero status)",
               set_aside="records, batches or files it could not handle and set aside, since the start",
               retries="failures of the moment it retried, since the start",
               last_error="the last of them", text=("state", "last_error")),
    ),
)


class SelfCollector(BaseCollector):
    def __init__(self, interval: float = 10.0, name: str = "self"):
        super().__init__(name, interval)
        self.proc = psutil.Process()
        self.agent = socket.gethostname()
        self._last: tuple[float, float] | None = None
        self._states: dict[str, str] = {}  # each thread's state at the last sample

    def _read(self) -> list[Record]:
        with self.proc.oneshot():
            t = self.proc.cpu_times()
            cpu_s = t.user + t.system
            mem = self.proc.memory_info()
            threads = self.proc.num_threads()
            fds = self.proc.num_fds()
        now = time.monotonic()
        last, self._last = self._last, (now, cpu_s)
        fields = {"rss_bytes": mem.rss, "threads": threads, "open_fds": fds, "cpu_seconds": round(cpu_s, 3)}
        if last is not None and now > last[0]:
            fields["cpu_pct"] = round((cpu_s - last[1]) / (now - last[0]) * 100.0, 3)
        return [Sample(AGENT_MEASUREMENT, {"agent": self.agent}, fields), *self._health()]

    def _health(self) -> list[Record]:
        out: list[Record] = []
        for h in self.supervisor.snapshot():
            tags = {"agent": self.agent, "thread": h.name}
            out.append(Sample(THREAD_MEASUREMENT, tags, {"state": h.state, "set_aside": h.set_aside,
                                                         "retries": h.retries, "last_error": h.last_error}))
            if self._states.get(h.name, "ok") != h.state:
                out.append(Annotation("thread_" + h.state, h.name, tags, h.last_error if h.state != "ok" else ""))
            self._states[h.name] = h.state
        return out

    async def collect(self) -> list[Record]:
        return await self.run_blocking(self._read)
