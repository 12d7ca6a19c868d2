"""A guest read over SSH ([[remote_guest]], or a [[stack]]'s guest): Linux or AIX.

Every cycle is one SSH round trip (a BundleCollector): one script fetches all the files
(Linux) or command outputs (AIX) at once, facts cycles included. The OS is `uname -s` at
start unless [[remote_guest]] os says it.
Linux figures come from the same parsers as the local collector (procfs.snapshot,
metrics.guest_samples and guest_facts), so field names and values agree. Samples are
tagged guest = the [[ssh]] target's name, the name a [[stack]] uses for its guest.
"""

from __future__ import annotations

from typing import Protocol

from db2vtop.agent.core.model import Fact, Record
from db2vtop.collectors.base import CollectorError
from db2vtop.collectors.guest import aix
from db2vtop.collectors.guest.config import RemoteGuestConfig
from db2vtop.collectors.guest.metrics import LinuxGuest
from db2vtop.collectors.guest.procfs import FACT_GLOBS, FACT_LINK_GLOBS, SNAPSHOT_FILES, SNAPSHOT_GLOBS
from db2vtop.collectors.ssh import SSHTarget
from db2vtop.collectors.ssh.bundle import Bundle, BundleCollector, Fetched


class Platform(Protocol):
    def bundle(self, facts: bool) -> Bundle: ...
    def samples(self, got: Fetched, ts: int) -> list[Record]: ...
    def facts(self, got: Fetched, ts: int) -> list[Fact]: ...


def _detect_bundle() -> Bundle:
    """First contact: the OS, the page size, and (in case it is Linux) a baseline snapshot."""
    return (Bundle().command("uname", "uname", "-s").command("pagesize", "getconf", "PAGESIZE")
            .files(*SNAPSHOT_FILES, *SNAPSHOT_GLOBS))


class LinuxPlatform(LinuxGuest):
    """The local collector's procfs arithmetic on files fetched over SSH."""

    def __init__(self, guest: str, cfg: RemoteGuestConfig, page_size: int):
        super().__init__(guest, cfg, page_size, "remote ")  # the first samples() call only takes the baseline

    def baseline(self, got: Fetched) -> None:
        self.prev = self.snapshot(got.files)

    def bundle(self, facts: bool) -> Bundle:
        b = Bundle().files(*SNAPSHOT_FILES, *SNAPSHOT_GLOBS)
        if facts:
            b.files(*FACT_GLOBS).links(*FACT_LINK_GLOBS)
        return b

    def samples(self, got: Fetched, ts: int) -> list[Record]:
        return self.step(self.snapshot(got.files), ts)

    def facts(self, got: Fetched, ts: int) -> list[Fact]:
        return self.facts_of(got.files, ts)


class RemoteGuestCollector(BundleCollector):
    def __init__(self, cfg: RemoteGuestConfig, target: SSHTarget):
        super().__init__(f"guest:{cfg.ssh}", cfg.interval, cfg.timeout, target, f"guest {cfg.ssh}")
        self.first_delay = min(1.0, cfg.interval)
        self.cfg, self.guest = cfg, cfg.ssh
        self.platform: Platform | None = None

    def _detect(self) -> Fetched | None:
        """Choose the platform from `uname -s` (the answer also holds a Linux snapshot)."""
        if self.cfg.os == "aix":
            self.platform = aix.AIXPlatform(self.guest, self.cfg)
            return None
        got = self.fetch(_detect_bundle())
        uname = got.commands.get("uname")
        os_name = uname.text.strip() if uname is not None and uname.rc == 0 else ""
        if self.cfg.os == "linux" or os_name == "Linux":
            page = got.commands.get("pagesize")
            text = page.text.strip() if page is not None and page.rc == 0 else ""
            size = int(text) if text.isascii() and text.isdigit() else 4096
            self.platform = LinuxPlatform(self.guest, self.cfg, size)
        elif os_name == "AIX":
            self.platform = aix.AIXPlatform(self.guest, self.cfg)
        else:
            raise CollectorError(f"guest {self.guest}: unsupported OS {os_name or 'unknown'!r} (uname -s); "
                                 'set os = "linux" or "aix" in [[remote_guest]]')
        return got

    def _start(self) -> None:
        got = self._detect()
        if isinstance(self.platform, LinuxPlatform) and got is not None:
            self.platform.baseline(got)

    def _platform(self) -> Platform:
        """The platform, detected now if start() could not (the host was down): a Linux
        platform then takes its baseline from the cycle's own fetch."""
        if self.platform is None:
            self._detect()
        assert self.platform is not None
        return self.platform

    def bundle(self, facts: bool) -> Bundle:
        return self._platform().bundle(facts)

    def samples(self, got: Fetched, ts: int) -> list[Record]:
        return self._platform().samples(got, ts)

    def facts(self, got: Fetched, ts: int) -> list[Fact]:
        return self._platform().facts(got, ts)

    async def start(self) -> None:
        await self.run_blocking(self._start)
