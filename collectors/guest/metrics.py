"""Guest measurements from two /proc snapshots, and guest facts from /sys.

Disk figures follow sysstat's iostat (compute_ext_disk_stats): the interval comes from
/proc/uptime, r_await = d(read ticks)/d(reads), aqu-sz = d(weighted ticks)/interval,
%util = d(io ticks)/interval; so `guest_disk` matches `iostat -dxk` for the same window.
"""

from __future__ import annotations

from fnmatch import fnmatch
from typing import Any

from db2vtop.agent.core.model import Fact, Sample
from db2vtop.collectors.base import CollectorError
from db2vtop.collectors.guest.procfs import (
    CPU_FIELDS,
    DiskCounters,
    ProcFormatError,
    Snapshot,
    bracketed,
    parse_meminfo,
    parse_stat,
    snapshot,
)

_USER, _NICE, _SYSTEM, _IDLE, _IOWAIT, _IRQ, _SOFTIRQ, _STEAL, _GUEST, _GUEST_NICE = range(len(CPU_FIELDS))


def cpu_fields(prev: tuple[int, ...], cur: tuple[int, ...]) -> dict[str, float] | None:
    d = [max(c - p, 0) for p, c in zip(prev, cur, strict=True)]  # iowait may step back on some kernels
    total = sum(d[:_GUEST])  # guest time is already inside user and nice
    if total <= 0:
        return None

    def pct(x: int) -> float:
        return round(x * 100.0 / total, 2)

    user, nice = max(d[_USER] - d[_GUEST], 0), max(d[_NICE] - d[_GUEST_NICE], 0)
    return {
        "user_pct": pct(user), "nice_pct": pct(nice), "system_pct": pct(d[_SYSTEM]),
        "irq_pct": pct(d[_IRQ]), "softirq_pct": pct(d[_SOFTIRQ]), "iowait_pct": pct(d[_IOWAIT]),
        "steal_pct": pct(d[_STEAL]), "guest_pct": pct(d[_GUEST] + d[_GUEST_NICE]), "idle_pct": pct(d[_IDLE]),
        "busy_pct": pct(user + nice + d[_SYSTEM] + d[_IRQ] + d[_SOFTIRQ] + d[_GUEST] + d[_GUEST_NICE]),
    }


def disk_fields(p: DiskCounters, c: DiskCounters, itv_s: float) -> dict[str, float] | None:
    """iostat -x figures for one device; None when a counter went backwards (device reset)."""
    d = [b - a for a, b in zip(
        (p.rd_ios, p.rd_merges, p.rd_sectors, p.rd_ticks, p.wr_ios, p.wr_merges, p.wr_sectors, p.wr_ticks,
         p.io_ticks, p.time_in_queue),
        (c.rd_ios, c.rd_merges, c.rd_sectors, c.rd_ticks, c.wr_ios, c.wr_merges, c.wr_sectors, c.wr_ticks,
         c.io_ticks, c.time_in_queue), strict=True)]
    if min(d) < 0:
        return None
    rd_ios, rd_merges, rd_sect, rd_ticks, wr_ios, wr_merges, wr_sect, wr_ticks, io_ticks, rq_ticks = d
    itv_ms = itv_s * 1000.0
    return {
        "read_iops": rd_ios / itv_s,
        "write_iops": wr_ios / itv_s,
        "read_bytes_per_s": rd_sect * 512 / itv_s,
        "write_bytes_per_s": wr_sect * 512 / itv_s,
        "read_merges_per_s": rd_merges / itv_s,
        "write_merges_per_s": wr_merges / itv_s,
        "read_await_ms": rd_ticks / rd_ios if rd_ios else 0.0,
        "write_await_ms": wr_ticks / wr_ios if wr_ios else 0.0,
        "read_request_bytes": rd_sect * 512 / rd_ios if rd_ios else 0.0,
        "write_request_bytes": wr_sect * 512 / wr_ios if wr_ios else 0.0,
        "queue_size": rq_ticks / itv_ms,
        "util_pct": min(io_ticks / itv_ms * 100.0, 100.0),
        "in_flight": c.in_flight,
    }


def _excluded(name: str, globs: list[str]) -> bool:
    return any(fnmatch(name, g) for g in globs)


def _per_s(prev: int, cur: int, itv_s: float) -> float:
    return max(cur - prev, 0) / itv_s


def guest_samples(prev: Snapshot, cur: Snapshot, guest: str, ts: int, page_size: int,
                  devices_exclude: list[str] = (), interfaces_exclude: list[str] = ()) -> list[Sample]:
    itv = cur.uptime_s - prev.uptime_s
    if not itv > 0:  # same snapshot, or a reboot in between
        return []
    out: list[Sample] = []
    for name, cur_cpu in cur.cpu.items():
        prev_cpu = prev.cpu.get(name)
        f = cpu_fields(prev_cpu, cur_cpu) if prev_cpu else None
        if f is None:
            continue
        if name == "cpu":
            f.update(load1=cur.loadavg[0], load5=cur.loadavg[1], load15=cur.loadavg[2],
                     procs_running=cur.procs_running, procs_blocked=cur.procs_blocked)
        out.append(Sample("guest_cpu", {"guest": guest, "cpu": "total" if name == "cpu" else name[3:]}, f, ts))

    m, vp, vc = cur.meminfo, prev.vmstat, cur.vmstat
    total, avail = m["MemTotal"], m.get("MemAvailable", m.get("MemFree", 0))
    mem: dict[str, Any] = {
        "total_bytes": total, "available_bytes": avail, "free_bytes": m.get("MemFree", 0),
        "used_bytes": total - avail, "used_pct": round((total - avail) * 100.0 / total, 2) if total else 0.0,
        "buffers_bytes": m.get("Buffers", 0), "page_cache_bytes": m.get("Cached", 0),
        "shmem_bytes": m.get("Shmem", 0),
        "swap_total_bytes": m.get("SwapTotal", 0), "swap_used_bytes": m.get("SwapTotal", 0) - m.get("SwapFree", 0),
        "hugepages_total": m.get("HugePages_Total", 0), "hugepages_free": m.get("HugePages_Free", 0),
        "hugepages_rsvd": m.get("HugePages_Rsvd", 0), "hugepages_surp": m.get("HugePages_Surp", 0),
        "hugepage_size_bytes": m.get("Hugepagesize", 0), "thp_mode": cur.thp_enabled,
    }
    for key, stat in (("swap_in_bytes_per_s", "pswpin"), ("swap_out_bytes_per_s", "pswpout")):
        if stat in vc and stat in vp:
            mem[key] = _per_s(vp[stat], vc[stat], itv) * page_size
    if "pgmajfault" in vc and "pgmajfault" in vp:
        mem["major_faults_per_s"] = _per_s(vp["pgmajfault"], vc["pgmajfault"], itv)
    out.append(Sample("guest_mem", {"guest": guest}, mem, ts))

    for dev, c in cur.disks.items():
        p = prev.disks.get(dev)
        if p is None or not any((c.rd_ios, c.wr_ios)) or _excluded(dev, devices_exclude):
            continue
        f = disk_fields(p, c, itv)
        if f is not None:
            kind = "partition" if dev in cur.partitions else "disk"
            out.append(Sample("guest_disk", {"guest": guest, "device": dev, "type": kind}, f, ts))

    for ifname, c in cur.nets.items():
        p = prev.nets.get(ifname)
        if p is None or _excluded(ifname, interfaces_exclude):
            continue
        out.append(Sample("guest_net", {"guest": guest, "interface": ifname}, {
            "rx_bytes_per_s": _per_s(p.rx_bytes, c.rx_bytes, itv),
            "tx_bytes_per_s": _per_s(p.tx_bytes, c.tx_bytes, itv),
            "rx_packets_per_s": _per_s(p.rx_packets, c.rx_packets, itv),
            "tx_packets_per_s": _per_s(p.tx_packets, c.tx_packets, itv),
            "rx_errors_per_s": _per_s(p.rx_errors, c.rx_errors, itv),
            "tx_errors_per_s": _per_s(p.tx_errors, c.tx_errors, itv),
            "rx_drops_per_s": _per_s(p.rx_drops, c.rx_drops, itv),
            "tx_drops_per_s": _per_s(p.tx_drops, c.tx_drops, itv),
        }, ts))
    return out


def _int(text: str | None) -> int | None:
    try:
        return int(text.strip()) if text is not None else None
    except ValueError:
        return None


def _by_name(files: dict[str, str], prefix: str, suffix: str) -> dict[str, str]:
    """{name: text} for paths prefix + name + suffix, e.g. /sys/block/<name>/queue/nr_requests."""
    return {p[len(prefix):-len(suffix)]: t for p, t in files.items()
            if p.startswith(prefix) and p.endswith(suffix) and "/" not in p[len(prefix):-len(suffix)]}


def guest_facts(files: dict[str, str], guest: str, ts: int, devices_exclude: list[str] = (),
                interfaces_exclude: list[str] = ()) -> list[Fact]:
    """Configuration facts from the FACT_GLOBS files (sysfs values, symlink targets)."""
    def text(path: str) -> str | None:
        t = files.get(path)
        return t.strip() if t is not None else None

    tags = {"guest": guest}
    mem = parse_meminfo(files["/proc/meminfo"]) if "/proc/meminfo" in files else {}
    cpus = parse_stat(files["/proc/stat"])[0] if "/proc/stat" in files else {}
    facts = [Fact("guest", tags, {
        "hostname": text("/proc/sys/kernel/hostname"), "kernel": text("/proc/sys/kernel/osrelease"),
        "cpus": sum(1 for k in cpus if k != "cpu"), "memory_bytes": mem.get("MemTotal"),
        "swappiness": _int(files.get("/proc/sys/vm/swappiness")),
        "nr_hugepages": _int(files.get("/proc/sys/vm/nr_hugepages")),
        "hugepage_size_bytes": mem.get("Hugepagesize"),
        "thp_enabled": bracketed(files.get("/sys/kernel/mm/transparent_hugepage/enabled", "")) or None,
        "thp_defrag": bracketed(files.get("/sys/kernel/mm/transparent_hugepage/defrag", "")) or None,
        "clocksource": text("/sys/devices/system/clocksource/clocksource0/current_clocksource"),
    }, ts)]

    scsi_driver = {}
    for path, t in files.items():  # /sys/block/<dev>/device/../../scsi_host/<host>/proc_name
        if path.startswith("/sys/block/") and path.endswith("/proc_name"):
            scsi_driver[path.split("/")[3]] = t.strip()
    drivers = _by_name(files, "/sys/block/", "/device/driver")
    for dev, nr in _by_name(files, "/sys/block/", "/queue/nr_requests").items():
        if _excluded(dev, devices_exclude):
            continue
        size = _int(files.get(f"/sys/block/{dev}/size"))
        facts.append(Fact("guest_block_device", {**tags, "device": dev}, {
            "queue_depth": _int(files.get(f"/sys/block/{dev}/device/queue_depth")),
            "nr_requests": _int(nr),
            "rotational": _int(files.get(f"/sys/block/{dev}/queue/rotational")) == 1,
            "scheduler": bracketed(files.get(f"/sys/block/{dev}/queue/scheduler", "")) or None,
            "logical_block_size": _int(files.get(f"/sys/block/{dev}/queue/logical_block_size")),
            "size_bytes": size * 512 if size is not None else None,
            "vendor": text(f"/sys/block/{dev}/device/vendor"), "model": text(f"/sys/block/{dev}/device/model"),
            "driver": scsi_driver.get(dev) or (drivers.get(dev) or "").strip() or None,
            "partitions": {p.split("/")[4]: _int(t) for p, t in files.items()
                           if p.startswith(f"/sys/block/{dev}/") and p.endswith("/start")},
        }, ts))

    for ifname, mtu in _by_name(files, "/sys/class/net/", "/mtu").items():
        if _excluded(ifname, interfaces_exclude):
            continue
        speed = _int(files.get(f"/sys/class/net/{ifname}/speed"))
        facts.append(Fact("guest_net_interface", {**tags, "interface": ifname}, {
            "mtu": _int(mtu), "speed_mbps": speed if speed is not None and speed > 0 else None,
            "driver": text(f"/sys/class/net/{ifname}/device/driver"),
            "operstate": text(f"/sys/class/net/{ifname}/operstate"),
        }, ts))

    for line in files.get("/proc/mounts", "").splitlines():
        parts = line.split()
        if len(parts) >= 4 and (parts[0].startswith("/dev/") or parts[2].startswith("nfs")):
            mountpoint = parts[1].replace("\\040", " ")
            facts.append(Fact("guest_mount", {**tags, "mountpoint": mountpoint},
                              {"source": parts[0], "fstype": parts[2], "options": parts[3]}, ts))
    return facts


class LinuxGuest:
    """A Linux guest's samples and facts from its /proc and /sys files, read here (collectors/guest/local.py) or
    fetched over SSH (remote.py): each cycle's samples are against the snapshot before it (the first is only a
    baseline). `where` begins the error of a file that does not have its documented layout."""

    def __init__(self, guest: str, cfg: Any, page_size: int, where: str = ""):
        self.guest, self.cfg, self.page_size, self.where = guest, cfg, page_size, where
        self.prev: Snapshot | None = None

    def snapshot(self, files: dict[str, str]) -> Snapshot:
        try:
            return snapshot(files)
        except ProcFormatError as e:
            raise CollectorError(f"{self.where}{e}") from None

    def step(self, cur: Snapshot, ts: int) -> list[Sample]:
        """The samples since the snapshot before (none for the first), `cur` the one the next is against."""
        prev, self.prev = self.prev, cur
        if prev is None:
            return []
        return guest_samples(prev, cur, self.guest, ts, self.page_size, self.cfg.devices_exclude,
                             self.cfg.interfaces_exclude)

    def facts_of(self, files: dict[str, str], ts: int) -> list[Fact]:
        return guest_facts(files, self.guest, ts, self.cfg.devices_exclude, self.cfg.interfaces_exclude)
