"""The PowerMax collector: symstat per device over SSH, or Unisphere per storage group."""

from __future__ import annotations

from db2vtop.agent.core.clock import CLOCK
from db2vtop.agent.core.model import Record, now_ns
from db2vtop.collectors.ssh import SSHTarget
from db2vtop.collectors.storage.common import StorageCollector, StorageFormatError
from db2vtop.collectors.storage.powermax import symstat, unisphere
from db2vtop.collectors.storage.powermax.config import PowermaxConfig
from db2vtop.collectors.storage.restclient import RestClient


class PowermaxCollector(StorageCollector):
    def __init__(self, cfg: PowermaxConfig, target: SSHTarget | None = None):
        super().__init__(cfg)
        self.sid = cfg.sid or ""
        self.base_tags["sid"] = self.sid
        self.target = target
        self.client = RestClient(cfg, self.timeout) if cfg.effective_transport == "rest" else None
        if self.client is None and target is None:
            raise ValueError("the ssh transport needs an SSHTarget")
        self.seconds = max(1, int(cfg.sample_interval))
        self._last_ts: dict[str, int] = {}
        self._ssh_trips = 0

    @property
    def round_trips(self) -> int:
        return self.client.round_trips if self.client else self._ssh_trips

    def _symstat(self) -> list[tuple[str, dict[str, str], dict]]:
        assert self.target is not None
        self._ssh_trips += 1
        r = self.target.run(symstat.argv(self.sid, self.seconds), timeout=self.timeout)
        text = r.text()
        if r.rc != 0:
            err = (r.stderr.decode("utf-8", "replace").strip() or text.strip())[:300]
            raise StorageFormatError(f"symstat -sid {self.sid} ended with status {r.rc}: {err or 'no output'}")
        return [("storage_device", tags, fields) for tags, fields in symstat.parse(text).values()]

    def _unisphere(self) -> list[tuple[str, dict[str, str], dict, int]]:
        assert self.client is not None
        names = self.cfg.storage_groups or unisphere.groups(
            self.client.request("POST", unisphere.KEYS_PATH, {"symmetrixId": self.sid}))
        end = int(CLOCK.now() * 1000)
        start = end - int(max(2 * unisphere.WINDOW_S, 2 * self.cfg.interval) * 1000)
        out = []
        for group in names:
            body = self.client.request("POST", unisphere.METRICS_PATH, unisphere.request(self.sid, group, start, end))
            found = unisphere.latest(body, group, self.cfg.min_ops_for_latency)
            if found is None or found[0] <= self._last_ts.get(group, 0):
                continue  # no newer diagnostic interval than the one already stored
            if abs(found[0] / 1000 - CLOCK.now()) > self.clock_skew_s:  # it would stop the group's mark for good
                self.supervisor.set_aside(self.thread, f"Unisphere interval of {group} at {found[0]} ms",
                                          f"its time is more than {self.clock_skew_s:g}s from now")
                continue
            self._last_ts[group] = found[0]
            out.append(("storage_group", {"storage_group": group}, found[1], found[0] * 1_000_000))
        return out

    async def collect(self) -> list[Record]:
        if self.client is not None:
            groups = await self.run_blocking(self._unisphere)
            return [*self.samples(groups)]
        found = await self.run_blocking(self._symstat)
        ts = now_ns()
        return [*self.samples((m, tags, fields, ts) for m, tags, fields in found)]

    async def close(self) -> None:
        if self.client is not None:
            self.client.close()
        await super().close()
