"""A Linux storage host ([[storage]] kind = "linux"): block devices and their queues.

Rates come from /proc/diskstats exactly as the guest computes them (iostat's arithmetic,
metrics.disk_fields); on top of that each device gets its queue limit and how much of it
the average queue used. The limit is the SCSI LUN queue depth (/sys/block/X/device/
queue_depth); for a dm-multipath map, the sum over its paths (each path has its own LUN
queue); otherwise (virtio, NVMe) the block layer's nr_requests. Identity tags let a stack
join a device to the VM's datastores and the arrays' LUNs: `wwid` (sysfs wwid, or the
multipath map's WWID from dm/uuid "mpath-<wwid>"), `naa` (the same as ESXi's canonical
name "naa.<hex>"), `serial` (the SCSI unit serial number VPD page 0x80, which NetApp
`lun show -v` prints). Sysfs layouts: kernel Documentation/ABI/testing/sysfs-block and
sysfs-block-dm; VPD page 0x80 layout: SCSI SPC-4 (4-byte header, then the ASCII serial).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fnmatch import fnmatch
from typing import Any

from db2vtop.agent.core.model import Fact, Record, Sample
from db2vtop.collectors.base import CollectorError
from db2vtop.collectors.guest.metrics import disk_fields
from db2vtop.collectors.guest.procfs import DiskCounters, ProcFormatError, bracketed, parse_diskstats, parse_uptime
from db2vtop.collectors.ssh import SSHTarget
from db2vtop.collectors.ssh.bundle import Bundle, BundleCollector, Fetched
from db2vtop.collectors.storage.linux.config import LinuxStorageConfig

CYCLE_FILES = ("/proc/uptime", "/proc/diskstats", "/sys/block/*/device/queue_depth", "/sys/block/*/queue/nr_requests",
               "/sys/class/block/*/partition")
FACT_FILES = (
    "/proc/sys/kernel/hostname", "/proc/sys/kernel/osrelease", "/sys/block/*/queue/scheduler",
    "/sys/block/*/queue/rotational", "/sys/block/*/size", "/sys/block/*/device/vendor", "/sys/block/*/device/model",
    "/sys/block/*/device/wwid", "/sys/block/*/wwid", "/sys/block/*/serial", "/sys/block/*/device/serial",
    "/sys/block/*/device/vpd_pg80", "/sys/block/dm-*/dm/name", "/sys/block/dm-*/dm/uuid",
)
SLAVE_PATHS = "/sys/block/dm-*/slaves/*"
_HEX = re.compile(r"^[0-9a-f]+$")
_DIGITS = re.compile(r"^[0-9]{1,12}$")


@dataclass(frozen=True, slots=True)
class Identity:
    type: str  # disk | partition | multipath | dm
    wwid: str | None = None
    serial: str | None = None
    paths: tuple[str, ...] = ()

    @property
    def naa(self) -> str | None:
        """ESXi's canonical form: "naa.600a0980..." from sysfs "naa.600A..." or multipath "3600a0980..."."""
        w = (self.wwid or "").lower()
        if w.startswith("naa.") and _HEX.match(w[4:]):
            return w
        if w[:1] == "3" and len(w) in (17, 33) and _HEX.match(w[1:]):  # SCSI designator type 3 = NAA
            return "naa." + w[1:]
        return None

    def tags(self) -> dict[str, str]:
        out = {"type": self.type}
        for key, value in (("wwid", self.wwid), ("naa", self.naa), ("serial", self.serial)):
            if value:
                out[key] = value
        return out


def _text(files: dict[str, str], path: str) -> str | None:
    t = files.get(path)
    if t is None or not t.strip():
        return None
    return t.strip()


def _int(files: dict[str, str], path: str) -> int | None:
    t = _text(files, path)
    return int(t) if t is not None and _DIGITS.match(t) else None


def vpd_serial(page: str | None) -> str | None:
    """The unit serial number from VPD page 0x80 (4-byte header, then printable ASCII)."""
    if page is None or len(page) <= 4:
        return None
    serial = "".join(ch for ch in page[4:] if ch.isprintable()).strip()
    return serial or None


def partitions(files: dict[str, str]) -> set[str]:
    return {p.split("/")[4] for p in files if p.startswith("/sys/class/block/") and p.endswith("/partition")}


def slaves(paths: set[str]) -> dict[str, tuple[str, ...]]:
    """{dm-N: (sdb, sdc)} from the /sys/block/dm-N/slaves/<dev> names."""
    out: dict[str, list[str]] = {}
    for p in paths:
        parts = p.split("/")
        if len(parts) == 6 and parts[4] == "slaves":
            out.setdefault(parts[3], []).append(parts[5])
    return {k: tuple(sorted(v)) for k, v in out.items()}


def identities(files: dict[str, str], paths: set[str]) -> dict[str, Identity]:
    """What each block device is, from the facts files."""
    out: dict[str, Identity] = {}
    maps = slaves(paths)
    names = {p.split("/")[3] for p in files if p.startswith("/sys/block/") and p.count("/") >= 4}
    for dev in names:
        base = f"/sys/block/{dev}"
        uuid = _text(files, f"{base}/dm/uuid")
        if dev.startswith("dm-"):
            wwid = uuid[len("mpath-"):] if uuid and uuid.startswith("mpath-") else None
            out[dev] = Identity("multipath" if wwid else "dm", wwid, None, maps.get(dev, ()))
            continue
        wwid = _text(files, f"{base}/device/wwid") or _text(files, f"{base}/wwid")
        serial = (vpd_serial(files.get(f"{base}/device/vpd_pg80")) or _text(files, f"{base}/serial")
                  or _text(files, f"{base}/device/serial"))
        out[dev] = Identity("disk", wwid, serial)
    for dev in partitions(files):
        out[dev] = Identity("partition")
    return out


def queue_limit(dev: str, ident: Identity | None, files: dict[str, str]) -> tuple[int | None, str]:
    """The device's queue capacity and where it came from."""
    depth = _int(files, f"/sys/block/{dev}/device/queue_depth")
    if depth:
        return depth, "queue_depth"
    if ident is not None and ident.paths:
        per_path = [_int(files, f"/sys/block/{p}/device/queue_depth") or 0 for p in ident.paths]
        if all(per_path):
            return sum(per_path), "paths"
    return _int(files, f"/sys/block/{dev}/queue/nr_requests") or None, "nr_requests"


@dataclass(slots=True)
class DiskSnapshot:
    uptime_s: float
    disks: dict[str, DiskCounters]


class LinuxStorageCollector(BundleCollector):
    def __init__(self, cfg: LinuxStorageConfig, target: SSHTarget):
        super().__init__(f"storage:{cfg.name}", cfg.interval, cfg.timeout, target, f"storage {cfg.name}")
        self.first_delay = min(1.0, cfg.interval)
        self.cfg = cfg
        self.ids: dict[str, Identity] = {}
        self.prev: DiskSnapshot | None = None

    def bundle(self, facts: bool) -> Bundle:
        b = Bundle().files(*CYCLE_FILES)
        if facts:
            b.files(*FACT_FILES).paths(SLAVE_PATHS)
        return b

    def _excluded(self, dev: str) -> bool:
        return any(fnmatch(dev, g) for g in self.cfg.devices_exclude)

    def _snapshot(self, got: Fetched) -> DiskSnapshot:
        try:
            if "/proc/diskstats" not in got.files or "/proc/uptime" not in got.files:
                raise ProcFormatError("/proc/diskstats or /proc/uptime: file missing (is this Linux?)")
            return DiskSnapshot(parse_uptime(got.files["/proc/uptime"]), parse_diskstats(got.files["/proc/diskstats"]))
        except ProcFormatError as e:
            raise CollectorError(f"storage {self.cfg.name}: {e}") from None

    async def start(self) -> None:
        self.prev = self._snapshot(await self.run_blocking(self.fetch, self.bundle(False)))

    def samples(self, got: Fetched, ts: int) -> list[Record]:
        cur = self._snapshot(got)
        prev, self.prev = self.prev, cur
        itv = cur.uptime_s - prev.uptime_s if prev is not None else 0.0
        if prev is None or not itv > 0:
            return []
        parts = partitions(got.files)
        out: list[Record] = []
        for dev, c in cur.disks.items():
            p = prev.disks.get(dev)
            if p is None or not (c.rd_ios or c.wr_ios) or self._excluded(dev):
                continue
            f: dict[str, Any] | None = disk_fields(p, c, itv)
            if f is None:
                continue
            ident = self.ids.get(dev) or Identity("partition" if dev in parts else "disk")
            limit, source = queue_limit(dev, ident, got.files)
            if limit:
                f.update(queue_depth=limit, queue_depth_used_pct=round(f["queue_size"] * 100.0 / limit, 2),
                         queue_limit_source=source)
            out.append(Sample("storage_disk", {"storage": self.cfg.name, "device": dev, **ident.tags()}, f, ts))
        return out

    def facts(self, got: Fetched, ts: int) -> list[Fact]:
        self.ids = identities(got.files, got.paths)
        files = got.files
        facts = [Fact("storage_host", {"storage": self.cfg.name}, {
            "os": "Linux", "hostname": _text(files, "/proc/sys/kernel/hostname"),
            "kernel": _text(files, "/proc/sys/kernel/osrelease")}, ts)]
        for dev, ident in sorted(self.ids.items()):
            if ident.type == "partition" or self._excluded(dev):
                continue
            base = f"/sys/block/{dev}"
            size = _int(files, f"{base}/size")
            limit, source = queue_limit(dev, ident, files)
            facts.append(Fact("storage_block_device", {"storage": self.cfg.name, "device": dev}, {
                "type": ident.type, "wwid": ident.wwid, "naa": ident.naa, "serial": ident.serial,
                "vendor": _text(files, f"{base}/device/vendor"), "model": _text(files, f"{base}/device/model"),
                "size_bytes": size * 512 if size is not None else None,
                "rotational": _int(files, f"{base}/queue/rotational") == 1,
                "scheduler": bracketed(files.get(f"{base}/queue/scheduler", "")) or None,
                "nr_requests": _int(files, f"{base}/queue/nr_requests"),
                "queue_depth": limit, "queue_limit_source": source,
                "dm_name": _text(files, f"{base}/dm/name"), "paths": list(ident.paths),
            }, ts))
        return facts
