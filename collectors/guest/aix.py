"""AIX guests (seeds S3 and S4 run DB2 on AIX): vmstat, iostat -D, lsattr, vmo, ioo.

AIX has no /proc counters to difference, so each cycle runs `vmstat W 2` and
`iostat -D W 2` side by side (W = 60 % of the interval, at least 1 s) and keeps the
second report, which covers those W seconds (the first one averages since boot). Output
formats follow IBM's AIX 7.3 command reference (vmstat, iostat, lsattr, lsdev, vmo, ioo
pages); columns are found by name, never by position.

Mapping to the guest_* fields where the meaning is the same: vmstat us/sy/id/wa are
user/system/idle/iowait %, pi/po (paging-space page-ins/outs of 4 KiB pages per second)
are the swap rates; iostat -D's rps/wps, bread/bwrtn, %tm_act are read/write IOPS,
bytes/s and util %. AIX's avgserv is service time only; read_await_ms adds the average
wait-queue time (avgtime) so it means what Linux's await means (queued + served).
queue_size is avgwqsz + avgsqsz (wait + service queue, Linux's aqu-sz). sqfull_per_s
(service queue full, i.e. queue_depth reached) has no Linux twin.
"""

from __future__ import annotations

import re
from fnmatch import fnmatch
from typing import Any

from db2vtop.agent.core.model import Fact, Record, Sample
from db2vtop.collectors.base import CollectorError
from db2vtop.collectors.guest.config import RemoteGuestConfig
from db2vtop.collectors.ssh.bundle import Bundle, Fetched

PAGE = 4096  # vmstat reports memory and paging in 4 KiB pages


class AIXFormatError(CollectorError):
    """An AIX command did not print the documented layout."""


_SUFFIX = {"K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "S": 1e3}  # iostat: 16.4K bytes; S = seconds (as ms)
_NUMBER = re.compile(r"^-?\d+(?:\.\d+)?$")


def number(token: str, what: str) -> float:
    """A figure as iostat/vmstat print it: "12", "0.4", "16.4K", "1.2M", or "1.5S" (seconds, as ms)."""
    scale = _SUFFIX.get(token[-1:], 1.0) if token else 1.0
    digits = token[:-1] if scale != 1.0 else token
    if not _NUMBER.match(digits):
        raise AIXFormatError(f"{what}: expected a number, got {token[:20]!r}")
    return float(digits) * scale


def _config_line(text: str) -> dict[str, str]:
    """ "System configuration: lcpu=4 mem=8192MB ent=0.50" -> {"lcpu": "4", "mem": "8192MB", "ent": "0.50"}"""
    for line in text.splitlines():
        if line.startswith("System configuration:"):
            return dict(w.split("=", 1) for w in line.partition(":")[2].split() if "=" in w)
    return {}


def parse_vmstat(text: str) -> tuple[dict[str, float], dict[str, str]]:
    """The last data line of `vmstat W N` by column name, and the System configuration values.

    The faults group's `sy` (system calls) is renamed `sy_calls`; the cpu group's stays `sy`.
    """
    names: list[str] | None = None
    last: list[str] | None = None
    for line in text.splitlines():
        words = line.split()
        if words[:2] == ["r", "b"]:
            names = []
            for w in words:
                names.append("sy_calls" if w == "sy" and "us" not in names else w)
        elif names and words and len(words) == len(names) and all(_NUMBER.match(w) for w in words):
            last = words
    if names is None or last is None:
        raise AIXFormatError("vmstat: no column header (r b avm fre ...) followed by a data line")
    return {n: number(w, f"vmstat {n}") for n, w in zip(names, last, strict=True)}, _config_line(text)


def parse_iostat_disks(text: str) -> dict[str, dict[str, float]]:
    """`iostat -D` stanzas: {hdisk: {"xfer.%tm_act": ..., "read.rps": ..., "queue.sqfull": ...}}.

    A stanza is a disk line "hdisk0  xfer:  %tm_act bps tps bread bwrtn" followed by its
    values, then "read:", "write:" and "queue:" header/value line pairs. A later report
    of the same disk replaces the earlier (the first report averages since boot).
    """
    out: dict[str, dict[str, float]] = {}
    disk: str | None = None
    header: tuple[str, list[str]] | None = None
    current: dict[str, float] = {}
    for line in text.splitlines():
        words = line.split()
        if not words or line.startswith(("System configuration", "---")):
            continue
        if header is not None:
            group, names = header
            if len(words) != len(names):
                raise AIXFormatError(f"iostat -D {disk} {group}: {len(names)} values expected, got {line.strip()!r}")
            for n, w in zip(names, words, strict=True):
                current[f"{group}.{n}"] = number(w, f"iostat -D {disk} {n}")
            header = None
            continue
        if len(words) >= 2 and words[1].endswith(":") and not line[0].isspace():
            disk, current = words[0], {}
            out[disk] = current
            header = (words[1][:-1], words[2:])
        elif words[0].endswith(":") and disk is not None:
            header = (words[0][:-1], words[1:])
        else:
            raise AIXFormatError(f"iostat -D: unexpected line {line.strip()[:60]!r}")
    return out


def parse_pairs(text: str) -> dict[str, str]:
    """`lsattr -El DEV -F attribute:value` ("queue_depth:8"), `lsdev -F name:description` lines."""
    out = {}
    for line in text.splitlines():
        name, sep, value = line.partition(":")
        if sep and name.strip():
            out[name.strip()] = value.strip()
    return out


def parse_tunables(text: str) -> dict[str, str]:
    """`vmo -F -a` / `ioo -a` lines ("   lru_file_repage = 0")."""
    out = {}
    for line in text.splitlines():
        name, sep, value = line.partition("=")
        if sep and name.strip() and " " not in name.strip():
            out[name.strip()] = value.strip()
    return out


def _int(text: str | None) -> int | None:
    """A decimal or 0x-hex attribute value (max_transfer = 0x80000), else None."""
    if text is None:
        return None
    try:
        return int(text, 0)
    except ValueError:
        return None


def _mem_bytes(value: str | None) -> int | None:
    m = re.match(r"^(\d+)MB$", value or "")
    return int(m.group(1)) * 2**20 if m else None


def cpu_fields(v: dict[str, float]) -> dict[str, Any]:
    f: dict[str, Any] = {"user_pct": v["us"], "system_pct": v["sy"], "idle_pct": v["id"], "iowait_pct": v["wa"],
                         "busy_pct": v["us"] + v["sy"], "procs_running": v["r"], "procs_blocked": v["b"]}
    for src, dst in (("pc", "physical_cpus"), ("ec", "entitlement_pct"), ("in", "interrupts_per_s"),
                     ("cs", "context_switches_per_s"), ("sy_calls", "syscalls_per_s")):
        if src in v:
            f[dst] = v[src]
    return f


def mem_fields(v: dict[str, float], config: dict[str, str]) -> dict[str, Any]:
    return {"total_bytes": _mem_bytes(config.get("mem")), "free_bytes": v["fre"] * PAGE,
            "active_virtual_bytes": v["avm"] * PAGE, "swap_in_bytes_per_s": v["pi"] * PAGE,
            "swap_out_bytes_per_s": v["po"] * PAGE, "pages_freed_per_s": v.get("fr"),
            "pages_scanned_per_s": v.get("sr")}


def disk_fields(d: dict[str, float]) -> dict[str, float]:
    wait = d["queue.avgtime"]
    return {
        "util_pct": d["xfer.%tm_act"], "read_iops": d["read.rps"], "write_iops": d["write.wps"],
        "read_bytes_per_s": d["xfer.bread"], "write_bytes_per_s": d["xfer.bwrtn"],
        "read_service_ms": d["read.avgserv"], "write_service_ms": d["write.avgserv"], "queue_wait_ms": wait,
        "read_await_ms": d["read.avgserv"] + wait, "write_await_ms": d["write.avgserv"] + wait,
        "queue_size": d["queue.avgwqsz"] + d["queue.avgsqsz"], "wait_queue_size": d["queue.avgwqsz"],
        "service_queue_size": d["queue.avgsqsz"], "sqfull_per_s": d["queue.sqfull"],
        "read_timeouts_per_s": d["read.timeouts"], "read_failures_per_s": d["read.fails"],
        "write_timeouts_per_s": d["write.timeouts"], "write_failures_per_s": d["write.fails"],
    }


_LSATTR_LOOPS = """for d in $(lsdev -Cc disk -F name 2>/dev/null); do
  _c "lsattr $d" lsattr -El "$d" -F attribute:value
done
for a in $(lsdev -Cc adapter -F name 2>/dev/null); do
  case $a in fcs*) _c "lsattr $a" lsattr -El "$a" -F attribute:value ;; esac
done"""


class AIXPlatform:
    def __init__(self, guest: str, cfg: RemoteGuestConfig):
        self.guest, self.cfg = guest, cfg
        self.window = str(max(1, min(30, int(cfg.interval * 0.6))))

    def bundle(self, facts: bool) -> Bundle:
        b = Bundle().parallel("vmstat", "vmstat", self.window, "2").parallel("iostat", "iostat", "-D", self.window, "2")
        if facts:
            (b.command("oslevel", "oslevel", "-s").command("hostname", "hostname")
             .command("lsdev_disk", "lsdev", "-Cc", "disk", "-F", "name:description").raw(_LSATTR_LOOPS)
             .command("aio0", "lsattr", "-El", "aio0", "-F", "attribute:value")
             .command("ioo", "ioo", "-a").command("vmo", "vmo", "-F", "-a"))
        return b

    @staticmethod
    def _output(got: Fetched, name: str) -> str:
        out = got.commands.get(name)
        if out is None:
            raise AIXFormatError(f"{name}: no output (the remote script did not run it)")
        if out.rc != 0:
            why = "not found on the remote PATH" if out.rc == 127 else f"exit status {out.rc}"
            raise AIXFormatError(f"{name}: {why}: {out.text.strip()[:120]}")
        return out.text

    def samples(self, got: Fetched, ts: int) -> list[Record]:
        v, config = parse_vmstat(self._output(got, "vmstat"))
        disks = parse_iostat_disks(self._output(got, "iostat"))
        try:
            out: list[Record] = [Sample("guest_cpu", {"guest": self.guest, "cpu": "total"}, cpu_fields(v), ts),
                                 Sample("guest_mem", {"guest": self.guest}, mem_fields(v, config), ts)]
            for name, d in disks.items():
                if any(fnmatch(name, g) for g in self.cfg.devices_exclude):
                    continue
                out.append(Sample("guest_disk", {"guest": self.guest, "device": name, "type": "disk"},
                                  disk_fields(d), ts))
        except KeyError as e:
            raise AIXFormatError(f"vmstat/iostat -D: column {e.args[0]!r} missing") from None
        return out

    def facts(self, got: Fetched, ts: int) -> list[Fact]:
        tags = {"guest": self.guest}

        def text(name: str) -> str | None:
            out = got.commands.get(name)
            return out.text.strip() if out is not None and out.rc == 0 else None

        config = _config_line(text("vmstat") or "")
        vmo, ioo, aio0 = (parse_tunables(text("vmo") or ""), parse_tunables(text("ioo") or ""),
                          parse_pairs(text("aio0") or ""))
        facts = [Fact("guest", tags, {
            "os": "AIX", "hostname": text("hostname"), "kernel": text("oslevel"),
            "cpus": _int(config.get("lcpu")), "memory_bytes": _mem_bytes(config.get("mem")),
            "entitlement": float(config["ent"]) if _NUMBER.match(config.get("ent", "")) else None,
            "lru_file_repage": _int(vmo.get("lru_file_repage")),
            "aio_maxservers": _int(ioo.get("aio_maxservers", aio0.get("maxservers"))),
            "aio_minservers": _int(ioo.get("aio_minservers", aio0.get("minservers"))),
            "aio_maxreqs": _int(ioo.get("aio_maxreqs", aio0.get("maxreqs"))),
            "aio_state": aio0.get("autoconfig") or ("available" if ioo.get("aio_maxservers") else None),
        }, ts)]
        described = parse_pairs(text("lsdev_disk") or "")  # "hdisk1:MPIO Other FC SCSI Disk Drive"
        for name, out in got.commands.items():
            if not name.startswith("lsattr ") or out.rc != 0:
                continue
            dev = name.split(" ", 1)[1]
            attrs = parse_pairs(out.text)
            if dev.startswith("fcs"):
                facts.append(Fact("guest_fc_adapter", {**tags, "adapter": dev}, {
                    "num_cmd_elems": _int(attrs.get("num_cmd_elems")),
                    "max_xfer_size_bytes": _int(attrs.get("max_xfer_size"))}, ts))
            elif not any(fnmatch(dev, g) for g in self.cfg.devices_exclude):
                facts.append(Fact("guest_block_device", {**tags, "device": dev}, {
                    "queue_depth": _int(attrs.get("queue_depth")),
                    "max_transfer_bytes": _int(attrs.get("max_transfer")),
                    "algorithm": attrs.get("algorithm"), "reserve_policy": attrs.get("reserve_policy"),
                    "unique_id": attrs.get("unique_id"), "description": described.get(dev)}, ts))
        return facts
