"""ONTAP samples and facts from parsed CLI output.

Rates follow NetApp Harvest's order: deltas of two raw samples first, averages
(latency = Δlatency / Δops of its base counter) next, rates (Δ/Δt) last; a latency
whose base saw fewer than `min_ops` operations in the interval is left out rather than
reported from a handful of I/Os (Harvest's latency_io_reqd). A counter that went
backwards (node reboot, takeover) drops that instance for one interval and is
reported as a `counter_reset` annotation. A counter the cluster left out (or printed
as something else than a number) costs only the fields computed from it: the rest of
the instance and of the cycle is kept, and the gap is reported as a collector error
naming the counter and the command that shows it.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from db2vtop.agent.core.model import Annotation, FieldValue
from db2vtop.collectors.storage.common import StorageFormatError
from db2vtop.collectors.storage.ontap.cli import (
    COUNTER_DISPLAY,
    NO_DISPLAY,
    SESSION,
    ImplausibleCounterError,
    RawInstance,
    flag,
    parse_raw,
    size_bytes,
    stats_command,
)

#: NetApp's NAA prefix for clustered ONTAP LUNs; the rest of the id is the LUN serial in hex
#: (NetApp KB "How to match a LUN's NAA number to its serial number"; 7-Mode used 60a98000)
NAA_PREFIX = "naa.600a0980"

Key = tuple[str, ...]


@dataclass
class Snapshot:
    at: float  # monotonic seconds when the output arrived
    objects: dict[str, dict[Key, RawInstance]]


def instance_key(inst: RawInstance) -> Key:
    if inst.object in ("volume", "lun"):
        vserver = inst.counters.get("vserver_name")
        return (vserver if isinstance(vserver, str) else inst.scope, inst.name)
    return (inst.name,)


def snapshot(text: str, at: float) -> Snapshot:
    objects = {obj: {instance_key(i): i for i in insts if i.name} for obj, insts in parse_raw(text).items()}
    return Snapshot(at, objects)


def naa_for_serial(serial: str) -> tuple[str, str] | None:
    """(serial in hex, NAA id vSphere shows) for an ONTAP LUN serial."""
    try:
        hexed = serial.encode("ascii").hex()
    except UnicodeEncodeError:
        return None
    return (hexed, NAA_PREFIX + hexed) if serial else None


def volume_of(path: str) -> str:
    parts = path.split("/")
    return parts[2] if len(parts) > 3 and parts[1] == "vol" else ""


def latency_ms(d_latency_us: float, d_ops: float, min_ops: int) -> float | None:
    if d_ops <= 0 or d_ops < min_ops:
        return None
    return round(d_latency_us / d_ops / 1000.0, 4)


class CounterReset(Exception):  # noqa: N818 - control flow, never leaves this module
    pass


class Gaps:
    """Counters instances lacked this cycle, by (object, counter, what was wrong), with the fields they cost.

    A cluster of thousands of LUNs that all lack one counter gives one line, not thousands."""

    def __init__(self) -> None:
        self.seen: dict[tuple[str, str, str], list] = {}

    def add(self, obj: str, key: Key, counter: str, inst: RawInstance, when: str = "", wrong: str = "",
            error: Exception | None = None) -> None:
        value = inst.counters.get(counter)
        if not wrong:
            wrong = "is missing" if value is None else "is an array" if isinstance(value, dict) else \
                "is negative or past 64 bits" if isinstance(error, ImplausibleCounterError) else "is not a number"
        wrong += when
        entry = self.seen.get((obj, counter, wrong))
        if entry is None:
            self.seen[(obj, counter, wrong)] = [key, 1, value if isinstance(value, str) else None]
        else:
            entry[1] += 1

    def messages(self) -> list[str]:
        out = []
        for (obj, counter, wrong), (key, n, example) in self.seen.items():
            who = "/".join(key) + (f" and {n - 1} more" if n > 1 else "")
            shown = f" ({example[:40]!r})" if example is not None else ""
            lost = " and ".join(LEFT_OUT.get(obj, {}).get(counter, ())) or "no field"
            text = (f"ONTAP {obj} {who}: counter {counter} {wrong}{shown}, so {lost} cannot be computed; "
                    f'"{stats_command(obj, (counter,), key[-1])}" shows what the cluster prints')
            if counter in NO_DISPLAY:
                text += (f"; {counter} is a no-display base counter, printed only after "
                         f'"{SESSION}; {COUNTER_DISPLAY}" (the diagnostic privilege this needs may be '
                         "missing from the monitoring user's role)")
            out.append(text)
        return out


def _deltas(prev: RawInstance, cur: RawInstance, names: tuple[str, ...], gaps: Gaps, key: Key) -> dict[str, float]:
    """Deltas of the counters both readings have as numbers; the others go to `gaps`."""
    out = {}
    for n in names:
        try:
            b = cur.number(n)
        except StorageFormatError as e:
            gaps.add(cur.object, key, n, cur, error=e)
            continue
        try:
            a = prev.number(n)
        except StorageFormatError as e:
            gaps.add(cur.object, key, n, prev, " in the previous reading", error=e)
            continue
        if b < a:
            raise CounterReset(n)
        out[n] = b - a
    return out


def _misaligned_pct(prev: RawInstance, cur: RawInstance, counter: str, min_ops: int, gaps: Gaps,
                    key: Key) -> float | None:
    """Share of I/O not aligned to a WAFL block: buckets 1-7 of the alignment histogram."""
    try:
        before, after = prev.array(counter), cur.array(counter)
    except StorageFormatError:
        gaps.add(cur.object, key, counter, cur, wrong="has a bucket that is not a number")
        return None
    if not before or not after:
        return None
    d = {k: v - before.get(k, 0.0) for k, v in after.items()}
    total = sum(d.values())
    if total <= 0 or total < min_ops or min(d.values()) < 0:
        return None
    return round((total - d.get("0", 0.0)) * 100.0 / total, 3)


IO_RATES = {"total_iops": ("total_ops", 3), "read_iops": ("read_ops", 3), "write_iops": ("write_ops", 3),
            "other_iops": ("other_ops", 3), "read_bytes_per_s": ("read_data", 1),
            "write_bytes_per_s": ("write_data", 1)}
NODE_RATES = {f: IO_RATES[f] for f in ("total_iops", "read_iops", "write_iops")}
_IO = tuple(c for c, _ in IO_RATES.values())


def _rates(d: dict[str, float], dt: float, rates: dict[str, tuple[str, int]]) -> dict[str, FieldValue]:
    return {field: round(d[counter] / dt, digits) for field, (counter, digits) in rates.items() if counter in d}


def _latencies(d: dict[str, float], names: dict[str, tuple[str, str]], min_ops: int) -> dict[str, FieldValue]:
    out: dict[str, FieldValue] = {}
    for field, (lat, base) in names.items():
        if lat in d and base in d:
            v = latency_ms(d[lat], d[base], min_ops)
            if v is not None:
                out[field] = v
    return out


VOLUME_LATENCY = {"avg_latency_ms": ("avg_latency", "total_ops"), "read_latency_ms": ("read_latency", "read_ops"),
                  "write_latency_ms": ("write_latency", "write_ops"),
                  "other_latency_ms": ("other_latency", "other_ops")}
LUN_LATENCY = {"avg_latency_ms": ("avg_latency", "total_ops"), "read_latency_ms": ("avg_read_latency", "read_ops"),
               "write_latency_ms": ("avg_write_latency", "write_ops"),
               "other_latency_ms": ("avg_other_latency", "other_ops")}
CPU_BUSY = {"cpu_busy_pct": ("cpu_busy", "cpu_elapsed_time")}
DISK_BUSY = {"disk_busy_pct": ("disk_busy", "base_for_disk_busy"),  # the node's, from its disks
             "disk_busy_avg_pct": ("disk_busy", "base_for_disk_busy")}


def _left_out() -> dict[str, dict[str, tuple[str, ...]]]:
    """Per object, the fields each counter takes part in (what a missing counter costs)."""
    specs = {"volume": (IO_RATES, VOLUME_LATENCY),
             "lun": (IO_RATES, LUN_LATENCY, {"queue_full_per_s": ("queue_full",),
                                            "read_misaligned_pct": ("read_align_histo",),
                                            "write_misaligned_pct": ("write_align_histo",)}),
             "system:node": (NODE_RATES, CPU_BUSY), "disk:constituent": (DISK_BUSY,)}
    out: dict[str, dict[str, tuple[str, ...]]] = {}
    for obj, tables in specs.items():
        by_counter: dict[str, list[str]] = defaultdict(list)
        for table in tables:
            for field, spec in table.items():
                for c in (spec[0],) if table is IO_RATES or table is NODE_RATES else spec:
                    by_counter[c].append(field)
        out[obj] = {c: tuple(fields) for c, fields in by_counter.items()}
    return out


LEFT_OUT = _left_out()


@dataclass
class CounterRow:
    measurement: str
    tags: dict[str, str]
    fields: dict[str, FieldValue]


def rows(prev: Snapshot, cur: Snapshot, min_ops: int, lun_tags: dict[Key, dict[str, str]],
         vserver: str | None = None) -> tuple[list[CounterRow], list[Annotation], list[str]]:
    """Samples for every instance present in both snapshots, the resets, and the counters found missing."""
    dt = cur.at - prev.at
    out: list[CounterRow] = []
    resets: list[Annotation] = []
    gaps = Gaps()
    if dt <= 0:
        return out, resets, []

    def pairs(obj: str):
        before = prev.objects.get(obj, {})
        for key, inst in cur.objects.get(obj, {}).items():
            if key in before and (vserver is None or obj not in ("volume", "lun") or key[0] == vserver):
                yield key, before[key], inst

    def deltas(obj: str, key: Key, p: RawInstance, c: RawInstance, names: tuple[str, ...]) -> dict[str, float] | None:
        try:
            return _deltas(p, c, names, gaps, key)
        except CounterReset as e:
            resets.append(Annotation("counter_reset", f"ontap {obj} {'/'.join(key)}", {"object": obj},
                                     f"{e} went backwards; one interval of {obj} {key[-1]} skipped"))
            return None

    for key, p, c in pairs("volume"):
        d = deltas("volume", key, p, c, (*_IO, "avg_latency", "read_latency", "write_latency", "other_latency"))
        if d is not None:
            out.append(CounterRow("storage_volume", {"vserver": key[0], "volume": key[1]},
                                  {**_rates(d, dt, IO_RATES), **_latencies(d, VOLUME_LATENCY, min_ops)}))
    for key, p, c in pairs("lun"):
        d = deltas("lun", key, p, c, (*_IO, "avg_latency", "avg_read_latency", "avg_write_latency",
                                      "avg_other_latency", "queue_full"))
        if d is None:
            continue
        fields = {**_rates(d, dt, IO_RATES), **_latencies(d, LUN_LATENCY, min_ops)}
        if "queue_full" in d:
            fields["queue_full_per_s"] = round(d["queue_full"] / dt, 3)
        for direction in ("read", "write"):
            pct = _misaligned_pct(p, c, f"{direction}_align_histo", min_ops, gaps, key)
            if pct is not None:
                fields[f"{direction}_misaligned_pct"] = pct
        tags = {"vserver": key[0], "volume": volume_of(key[1]), "lun": key[1], **lun_tags.get(key, {})}
        out.append(CounterRow("storage_lun", tags, fields))
    node_fields: dict[str, dict[str, FieldValue]] = {}
    for key, p, c in pairs("system:node"):
        d = deltas("system:node", key, p, c, ("cpu_busy", "cpu_elapsed_time", "total_ops", "read_ops", "write_ops"))
        if d is None:
            continue
        f = _rates(d, dt, NODE_RATES)
        if d.get("cpu_elapsed_time", 0) > 0 and "cpu_busy" in d:
            f["cpu_busy_pct"] = round(min(d["cpu_busy"] * 100.0 / d["cpu_elapsed_time"], 100.0), 2)
        node_fields[key[0]] = f
    busy: dict[str, list[float]] = defaultdict(list)
    for key, p, c in pairs("disk:constituent"):
        d = deltas("disk:constituent", key, p, c, ("disk_busy", "base_for_disk_busy"))
        node = c.counters.get("node_name")
        if d and isinstance(node, str) and d.get("base_for_disk_busy", 0) > 0 and "disk_busy" in d:
            busy[node].append(min(d["disk_busy"] * 100.0 / d["base_for_disk_busy"], 100.0))
    for node, values in busy.items():
        f = node_fields.setdefault(node, {})
        f["disk_busy_pct"] = round(max(values), 2)  # the busiest disk, as sysstat's "Disk util"
        f["disk_busy_avg_pct"] = round(sum(values) / len(values), 2)
    out.extend(CounterRow("storage_node", {"node": node}, f) for node, f in node_fields.items())
    return out, resets, gaps.messages()


# --- facts --------------------------------------------------------------------------------

@dataclass
class FactRow:
    kind: str
    tags: dict[str, str]
    data: dict


def _int(value: str) -> int | None:
    try:
        return int(value)
    except ValueError:
        return None


def _pct(value: str) -> float | None:
    try:
        return float(value.rstrip("%"))
    except ValueError:
        return None


def facts(tables: dict[str, list[dict[str, str]]]) -> tuple[list[FactRow], dict[Key, dict[str, str]]]:
    """Configuration facts, and the serial/NAA tags of each LUN for its samples."""
    out: list[FactRow] = []
    vol_size: dict[tuple[str, str], int | None] = {}
    for r in tables.get("volume", []):
        size = size_bytes(r.get("size", "-"), "volume size")
        vol_size[(r.get("vserver", ""), r.get("volume", ""))] = size
        out.append(FactRow("storage_volume", {"vserver": r.get("vserver", ""), "volume": r.get("volume", "")}, {
            "aggregate": r.get("aggregate"), "size_bytes": size,
            "snapshot_reserve_pct": _pct(r.get("percent-snapshot-space", "")),
            "snapshot_policy": r.get("snapshot-policy"), "atime_update": flag(r.get("atime-update", "")),
            "nvfail": flag(r.get("nvfail", "")), "space_guarantee": r.get("space-guarantee"),
            "snapdir_access": flag(r.get("snapdir-access", ""))}))
    luns = tables.get("lun", [])
    lun_total: dict[tuple[str, str], int] = defaultdict(int)
    for r in luns:
        lun_total[(r.get("vserver", ""), r.get("volume", ""))] += size_bytes(r.get("size", "-"), "lun size") or 0
    lun_tags: dict[Key, dict[str, str]] = {}
    for r in luns:
        vserver, path, volume = r.get("vserver", ""), r.get("path", ""), r.get("volume", "")
        serial = r.get("serial", "")
        ids = naa_for_serial(serial)
        tags = {"serial": serial, "serial_hex": ids[0], "naa": ids[1]} if ids else {}
        lun_tags[(vserver, path)] = tags
        vsize, total = vol_size.get((vserver, volume)), lun_total[(vserver, volume)]
        out.append(FactRow("storage_lun", {"vserver": vserver, "volume": volume, "lun": path, **tags}, {
            "size_bytes": size_bytes(r.get("size", "-"), "lun size"), "ostype": r.get("ostype"),
            "space_reserve": flag(r.get("space-reserve", "")), "volume_size_bytes": vsize,
            "luns_in_volume_bytes": total,
            "volume_to_luns_ratio": round(vsize / total, 3) if vsize and total else None}))
    for r in tables.get("aggregate", []):
        out.append(FactRow("storage_aggregate", {"aggregate": r.get("aggregate", "")}, {
            "node": r.get("node"), "raid_type": r.get("raidtype"),
            "raid_group_size": _int(r.get("maxraidsize", ""))}))
    for r in tables.get("port", []):
        out.append(FactRow("storage_port", {"node": r.get("node", ""), "port": r.get("port", "")}, {
            "mtu": _int(r.get("mtu", "")), "flowcontrol_admin": r.get("flowcontrol-admin"),
            "flowcontrol_oper": r.get("flowcontrol-oper")}))
    for r in tables.get("igroup", []):
        initiators = [i for i in r.get("initiator", "").split(",") if i and i != "-"]
        out.append(FactRow("storage_igroup", {"vserver": r.get("vserver", ""), "igroup": r.get("igroup", "")}, {
            "protocol": r.get("protocol"), "ostype": r.get("ostype"), "initiators": initiators}))
    windows: dict[str, list[int]] = defaultdict(list)
    for r in tables.get("iscsi_session", []):
        size = _int(r.get("cmd-window-size", ""))
        if size is not None:
            windows[r.get("vserver", "")].append(size)
    for vserver, sizes in windows.items():
        out.append(FactRow("storage_iscsi", {"vserver": vserver}, {
            "sessions": len(sizes), "cmd_window_size_min": min(sizes), "cmd_window_size_max": max(sizes)}))
    return out, lun_tags
