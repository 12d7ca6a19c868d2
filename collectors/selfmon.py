"""db2vtop's own cost on the machine it watches (the observer's overhead budget)."""

from __future__ import annotations

import socket
import time

import psutil

from db2vtop.agent.core.model import AGENT_MEASUREMENT, Record, Sample
from db2vtop.agent.core.schema import Measurement, fields
from db2vtop.collectors.base import BaseCollector

MEASUREMENTS = (
    Measurement(
        AGENT_MEASUREMENT, "db2vtop's own process: its cost on the machine it watches.",
        {"agent": "this machine's host name"},
        fields("rss_bytes", "threads", "open_fds", cpu_seconds="user + system CPU time since the process started",
               cpu_pct="CPU used since the previous sample, % of one core"),
    ),
)


class SelfCollector(BaseCollector):
    def __init__(self, interval: float = 10.0, name: str = "self"):
        super().__init__(name, interval)
        self.proc = psutil.Process()
        self.agent = socket.gethostname()
        self._last: tuple[float, float] | None = None

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
        return [Sample(AGENT_MEASUREMENT, {"agent": self.agent}, fields)]

    async def collect(self) -> list[Record]:
        return await self.run_blocking(self._read)
