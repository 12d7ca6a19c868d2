"""ONTAP samples and facts from parsed CLI output.

Rates follow NetApp Harvest's order: deltas of two raw samples first, averages
(latency = Δlatency / Δops of its base counter) next, rates (Δ/Δt) last; a latency
whose base saw fewer than `min_ops` operations in the interval is left out rather than
reported from a handful of I/Os (Harvest's latency_io_reqd). A counter that went
backwards (node reboot, takeover) drops that instance for one interval and is
reported as a `counter_reset` annotation.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from db2vtop.agent.core.model import Annotation, FieldValue
from db2vtop.collectors.storage.ontap.cli import RawInstance, flag, parse_raw, size_bytes

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


def _deltas(prev: RawInstance, cur: RawInstance, names: tuple[str, ...]) -> dict[str, float]:
    out = {}
    for n in names:
        a, b = prev.number(n), cur.number(n)
        if b < a:
            raise CounterReset(n)
        out[n] = b - a
    return out


def _misaligned_pct(prev: RawInstance, cur: RawInstance, counter: str, min_ops: int) -> float | None:
    """Share of I/O not aligned to a WAFL block: buckets 1-7 of the alignment histogram."""
    before, after = prev.array(counter), cur.array(counter)
    if not before or not after:
        return None
    d = {k: v - before.get(k, 0.0) for k, v in after.items()}
    total = sum(d.values())
    if total <= 0 or total < min_ops or min(d.values()) < 0:
        return None
    return round((total - d.get("0", 0.0)) * 100.0 / total, 3)


_IO = ("total_ops", "read_ops", "write_ops", "other_ops", "read_data", "write_data")


def _io_fields(d: dict[str, float], dt: float) -> dict[str, FieldValue]:
    return {"total_iops": round(d["total_ops"] / dt, 3), "read_iops": round(d["read_ops"] / dt, 3),
            "write_iops": round(d["write_ops"] / dt, 3), "other_iops": round(d["other_ops"] / dt, 3),
            "read_bytes_per_s": round(d["read_data"] / dt, 1), "write_bytes_per_s": round(d["write_data"] / dt, 1)}


def _latencies(d: dict[str, float], names: dict[str, tuple[str, str]], min_ops: int) -> dict[str, FieldValue]:
    out: dict[str, FieldValue] = {}
    for field, (lat, base) in names.items():
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


@dataclass
class CounterRow:
    measurement: str
    tags: dict[str, str]
    fields: dict[str, FieldValue]


def rows(prev: Snapshot, cur: Snapshot, min_ops: int, lun_tags: dict[Key, dict[str, str]],
         vserver: str | None = None) -> tuple[list[CounterRow], list[Annotation]]:
    """Samples for every instance present in both snapshots."""
    dt = cur.at - prev.at
    out: list[CounterRow] = []
    resets: list[Annotation] = []
    if dt <= 0:
        return out, resets

    def pairs(obj: str):
        before = prev.objects.get(obj, {})
        for key, inst in cur.objects.get(obj, {}).items():
            if key in before and (vserver is None or obj not in ("volume", "lun") or key[0] == vserver):
                yield key, before[key], inst

    def reset(obj: str, key: Key, counter: str) -> None:
        resets.append(Annotation("counter_reset", f"ontap {obj} {'/'.join(key)}", {"object": obj},
                                 f"{counter} went backwards; one interval of {obj} {key[-1]} skipped"))

    for key, p, c in pairs("volume"):
        try:
            d = _deltas(p, c, (*_IO, "avg_latency", "read_latency", "write_latency", "other_latency"))
        except CounterReset as e:
            reset("volume", key, str(e))
            continue
        out.append(CounterRow("storage_volume", {"vserver": key[0], "volume": key[1]},
                       {**_io_fields(d, dt), **_latencies(d, VOLUME_LATENCY, min_ops)}))
    for key, p, c in pairs("lun"):
        try:
            d = _deltas(p, c, (*_IO, "avg_latency", "avg_read_latency", "avg_write_latency", "avg_other_latency",
                               "queue_full"))
        except CounterReset as e:
            reset("lun", key, str(e))
            continue
        fields = {**_io_fields(d, dt), **_latencies(d, LUN_LATENCY, min_ops),
                  "queue_full_per_s": round(d["queue_full"] / dt, 3)}
        for direction in ("read", "write"):
            pct = _misaligned_pct(p, c, f"{direction}_align_histo", min_ops)
            if pct is not None:
                fields[f"{direction}_misaligned_pct"] = pct
        tags = {"vserver": key[0], "volume": volume_of(key[1]), "lun": key[1], **lun_tags.get(key, {})}
        out.append(CounterRow("storage_lun", tags, fields))
    node_fields: dict[str, dict[str, FieldValue]] = {}
    for key, p, c in pairs("system:node"):
        try:
            d = _deltas(p, c, ("cpu_busy", "cpu_elapsed_time", "total_ops", "read_ops", "write_ops"))
        except CounterReset as e:
            reset("system:node", key, str(e))
            continue
        f: dict[str, FieldValue] = {"total_iops": round(d["total_ops"] / dt, 3),
                                    "read_iops": round(d["read_ops"] / dt, 3),
                                    "write_iops": round(d["write_ops"] / dt, 3)}
        if d["cpu_elapsed_time"] > 0:
            f["cpu_busy_pct"] = round(min(d["cpu_busy"] * 100.0 / d["cpu_elapsed_time"], 100.0), 2)
        node_fields[key[0]] = f
    busy: dict[str, list[float]] = defaultdict(list)
    for key, p, c in pairs("disk:constituent"):
        try:
            d = _deltas(p, c, ("disk_busy", "base_for_disk_busy"))
        except CounterReset as e:
            reset("disk:constituent", key, str(e))
            continue
        node = c.counters.get("node_name")
        if isinstance(node, str) and d["base_for_disk_busy"] > 0:
            busy[node].append(min(d["disk_busy"] * 100.0 / d["base_for_disk_busy"], 100.0))
    for node, values in busy.items():
        f = node_fields.setdefault(node, {})
        f["disk_busy_pct"] = round(max(values), 2)  # the busiest disk, as sysstat's "Disk util"
        f["disk_busy_avg_pct"] = round(sum(values) / len(values), 2)
    out.extend(CounterRow("storage_node", {"node": node}, f) for node, f in node_fields.items())
    return out, resets


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
