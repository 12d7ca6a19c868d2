"""Parsers for the Linux /proc and /sys files the guest measurements come from.

They work on a mapping of path -> file text, so the local collector (which reads the
files) and a remote one (which fetches them in one SSH round trip) compute exactly the
same numbers. Formats: kernel Documentation/admin-guide/iostats.rst (diskstats),
filesystems/proc.rst (stat, meminfo, vmstat, net/dev, loadavg, uptime).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

#: read every cycle to compute rates
SNAPSHOT_FILES = (
    "/proc/uptime", "/proc/stat", "/proc/meminfo", "/proc/vmstat", "/proc/diskstats",
    "/proc/net/dev", "/proc/loadavg", "/sys/kernel/mm/transparent_hugepage/enabled",
)
#: globs read every cycle; the presence of a `partition` file marks a partition
SNAPSHOT_GLOBS = ("/sys/class/block/*/partition",)
#: globs read for facts (configuration), every facts interval
FACT_GLOBS = (
    "/proc/sys/kernel/hostname", "/proc/sys/kernel/osrelease", "/proc/sys/vm/swappiness",
    "/proc/sys/vm/nr_hugepages", "/sys/kernel/mm/transparent_hugepage/enabled",
    "/sys/kernel/mm/transparent_hugepage/defrag",
    "/sys/devices/system/clocksource/clocksource0/current_clocksource", "/proc/meminfo", "/proc/stat",
    "/proc/mounts", "/sys/block/*/queue/nr_requests", "/sys/block/*/queue/rotational",
    "/sys/block/*/queue/scheduler", "/sys/block/*/queue/logical_block_size", "/sys/block/*/size",
    "/sys/block/*/device/queue_depth", "/sys/block/*/device/vendor", "/sys/block/*/device/model",
    "/sys/block/*/*/start", "/sys/block/*/device/../../scsi_host/*/proc_name",
    "/sys/class/net/*/mtu", "/sys/class/net/*/speed", "/sys/class/net/*/operstate",
)
#: symlinks whose target's last component is the value (driver names)
FACT_LINK_GLOBS = ("/sys/class/net/*/device/driver", "/sys/block/*/device/driver")


class ProcFormatError(ValueError):
    """A /proc file did not have the documented layout."""


@dataclass(frozen=True, slots=True)
class DiskCounters:
    """The cumulative fields of one /proc/diskstats line (iostats.rst numbering)."""

    rd_ios: int
    rd_merges: int
    rd_sectors: int
    rd_ticks: int
    wr_ios: int
    wr_merges: int
    wr_sectors: int
    wr_ticks: int
    in_flight: int
    io_ticks: int
    time_in_queue: int


@dataclass(frozen=True, slots=True)
class NetCounters:
    rx_bytes: int
    rx_packets: int
    rx_errors: int
    rx_drops: int
    tx_bytes: int
    tx_packets: int
    tx_errors: int
    tx_drops: int


@dataclass(slots=True)
class Snapshot:
    uptime_s: float
    cpu: dict[str, tuple[int, ...]]  # "cpu" (total), "cpu0", ... -> jiffies by CPU_FIELDS
    procs_running: int
    procs_blocked: int
    meminfo: dict[str, int]  # bytes (kB values converted) or counts (HugePages_*)
    vmstat: dict[str, int]
    disks: dict[str, DiskCounters]
    nets: dict[str, NetCounters]
    loadavg: tuple[float, float, float]
    thp_enabled: str
    partitions: set[str] = field(default_factory=set)


CPU_FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal", "guest", "guest_nice")


def _ints(parts: list[str], what: str) -> list[int]:
    try:
        return [int(p) for p in parts]
    except ValueError:
        raise ProcFormatError(f"{what}: expected integers, got {' '.join(parts)[:80]!r}") from None


def _finite(word: str) -> float:
    value = float(word)
    if not math.isfinite(value):
        raise ValueError(word)
    return value


def parse_uptime(text: str) -> float:
    try:
        return _finite(text.split()[0])
    except (IndexError, ValueError):
        raise ProcFormatError(f"/proc/uptime: expected seconds, got {text[:40]!r}") from None


def parse_stat(text: str) -> tuple[dict[str, tuple[int, ...]], int, int]:
    cpus: dict[str, tuple[int, ...]] = {}
    running = blocked = -1
    for line in text.splitlines():
        parts = line.split()
        if not parts:
            continue
        if parts[0].startswith("cpu"):
            vals = _ints(parts[1:], "/proc/stat " + parts[0])
            if len(vals) < 4:
                raise ProcFormatError(f"/proc/stat {parts[0]}: expected at least 4 counters")
            cpus[parts[0]] = tuple(vals + [0] * (len(CPU_FIELDS) - len(vals)))[: len(CPU_FIELDS)]
        elif parts[0] == "procs_running" and len(parts) > 1:
            running = _ints(parts[1:2], "/proc/stat procs_running")[0]
        elif parts[0] == "procs_blocked" and len(parts) > 1:
            blocked = _ints(parts[1:2], "/proc/stat procs_blocked")[0]
    if "cpu" not in cpus or running < 0 or blocked < 0:
        raise ProcFormatError("/proc/stat: missing the cpu, procs_running or procs_blocked line")
    return cpus, running, blocked


def parse_meminfo(text: str) -> dict[str, int]:
    """Values in bytes; HugePages_* counts stay counts."""
    out = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        parts = rest.split()
        if not parts:
            continue
        try:
            value = int(parts[0])
        except ValueError:
            raise ProcFormatError(f"/proc/meminfo {key}: expected a number, got {parts[0]!r}") from None
        out[key.strip()] = value * 1024 if len(parts) > 1 and parts[1] == "kB" else value
    if "MemTotal" not in out:
        raise ProcFormatError("/proc/meminfo: no MemTotal line")
    return out


def parse_vmstat(text: str) -> dict[str, int]:
    out = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].isascii() and parts[1].lstrip("-").isdigit():  # "²" is a digit to isdigit
            out[parts[0]] = int(parts[1])
    return out


def parse_diskstats(text: str) -> dict[str, DiskCounters]:
    out = {}
    for line in text.splitlines():
        parts = line.split()
        if not parts:
            continue
        if len(parts) < 14:
            raise ProcFormatError(f"/proc/diskstats: expected at least 14 columns, got {len(parts)}: {line[:80]!r}")
        vals = _ints(parts[3:14], f"/proc/diskstats {parts[2]}")
        out[parts[2]] = DiskCounters(*vals)
    return out


def parse_netdev(text: str) -> dict[str, NetCounters]:
    out = {}
    for line in text.splitlines():
        name, sep, rest = line.partition(":")
        if not sep or "|" in rest:
            continue  # the two header lines
        v = _ints(rest.split(), f"/proc/net/dev {name.strip()}")
        if len(v) < 16:
            raise ProcFormatError(f"/proc/net/dev {name.strip()}: expected 16 counters, got {len(v)}")
        out[name.strip()] = NetCounters(v[0], v[1], v[2], v[3], v[8], v[9], v[10], v[11])
    return out


def parse_loadavg(text: str) -> tuple[float, float, float]:
    try:
        a, b, c = (_finite(x) for x in text.split()[:3])
    except ValueError:
        raise ProcFormatError(f"/proc/loadavg: expected three numbers, got {text[:40]!r}") from None
    return a, b, c


_BRACKET = re.compile(r"\[([^\]]+)\]")


def bracketed(text: str) -> str:
    """The selected value of a sysfs choice file: "always [madvise] never" -> "madvise"."""
    m = _BRACKET.search(text)
    return m.group(1) if m else text.strip()


def snapshot(files: dict[str, str]) -> Snapshot:
    """Build a snapshot from file texts; raises ProcFormatError naming the bad file."""
    try:
        cpus, running, blocked = parse_stat(files["/proc/stat"])
        return Snapshot(
            uptime_s=parse_uptime(files["/proc/uptime"]),
            cpu=cpus, procs_running=running, procs_blocked=blocked,
            meminfo=parse_meminfo(files["/proc/meminfo"]),
            vmstat=parse_vmstat(files["/proc/vmstat"]),
            disks=parse_diskstats(files["/proc/diskstats"]),
            nets=parse_netdev(files["/proc/net/dev"]),
            loadavg=parse_loadavg(files["/proc/loadavg"]),
            thp_enabled=bracketed(files.get("/sys/kernel/mm/transparent_hugepage/enabled", "")),
            partitions={p.split("/")[4] for p in files
                        if p.startswith("/sys/class/block/") and p.endswith("/partition")},
        )
    except KeyError as e:
        raise ProcFormatError(f"{e.args[0]}: file missing") from None
