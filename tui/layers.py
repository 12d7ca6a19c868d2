"""The five layers of a stack at the cursor: key figures and what their charts plot.

Layers follow the verdict's chain, top to bottom: DB2 → guest → VM → host → array. Each
has a load or contention trend (left chart) and a latency trend (right chart).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from db2vtop.agent.core.store import Row, Series
from db2vtop.checks.scales import levels
from db2vtop.tui.chart import Thresholds
from db2vtop.tui.data import Reader, Trend
from db2vtop.tui.format import NONE, num, rate, size, value
from db2vtop.tui.stacks import Resolved
from db2vtop.tui.table import Run

# Colour levels are the rules' thresholds after the user's [checks.RULE] overrides (checks/scales.py);
# the app applies the overrides when it starts, so an override recolours every pane.
READY, COSTOP, LIMITED = Thresholds(), Thresholds(), Thresholds()
GAVG = AWAIT = Thresholds()  # what the guest waits for an I/O: await, VMDK latency, GAVG
KAVG, QUEUED, QUEUE_USED, QUEUE_FULL = Thresholds(), Thresholds(), Thresholds(), Thresholds()
ARRAY, LOG_WRITE, LOG_USED, LOG_BUFFER_FULL = Thresholds(), Thresholds(), Thresholds(), Thresholds()
PCT_BUSY, HOST_MEM_STATE, BALLOON, HOST_SWAP, GUEST_SWAP = (Thresholds(), Thresholds(), Thresholds(),
                                                           Thresholds(), Thresholds())
NONZERO = Thresholds()
_BY_SCALE = {"ready": READY, "costop": COSTOP, "limited": LIMITED, "io_latency": GAVG, "kavg": KAVG,
             "queued": QUEUED, "queue_used": QUEUE_USED, "queue_full": QUEUE_FULL, "array_latency": ARRAY,
             "log_write": LOG_WRITE, "log_used": LOG_USED, "log_buffer_full": LOG_BUFFER_FULL, "cpu_busy": PCT_BUSY,
             "mem_state": HOST_MEM_STATE, "balloon": BALLOON, "host_swap": HOST_SWAP, "guest_swap": GUEST_SWAP,
             "nonzero": NONZERO}
OVERRIDES: dict[str, dict] = {}  # [checks] as the app was started with: the Stack screen's verdict uses them too


def apply_overrides(overrides: dict[str, dict] | None = None) -> None:
    OVERRIDES.clear()
    OVERRIDES.update(overrides or {})
    for name, (warn, crit) in levels(OVERRIDES).items():
        if name in _BY_SCALE:
            _BY_SCALE[name].set(warn, crit)


apply_overrides()
LATENCY_FLOOR_MS = 5.0

MEM_STATE = {0: "high", 1: "soft", 2: "hard", 3: "low"}


@dataclass
class Layer:
    """A layer before drawing: its figures and what its two charts plot."""

    key: str
    title: str
    figures: list[Run]
    a: Trend | None = None
    a_label: str = ""
    b: Trend | None = None
    b_label: str = ""
    newest: list[tuple[Series | None, Row]] = field(default_factory=list)
    present: bool = True


def fig(label: str, text: str, thresholds: Thresholds | None = None, v: float | None = None) -> list[Run]:
    st = thresholds.style_of(v, "bold") if thresholds is not None else "bold"
    return [(f"{label} ", "dim"), (text, st), ("  ", None)]


def plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def max_of(rows: list[Row], *names: str) -> tuple[float | None, Row | None]:
    best, at = None, None
    for r in rows:
        for n in names:
            v = value(r.fields, n)
            if v is not None and (best is None or v > best):
                best, at = v, r
    return best, at


def sum_of(rows: list[Row], *names: str) -> float | None:
    vals = [v for r in rows for n in names if (v := value(r.fields, n)) is not None]
    return sum(vals) if vals else None


def series_of(rd: Reader, rows: list[Row]) -> list[tuple[Series | None, Row]]:
    out = []
    for r in rows:
        s = next((s for s in rd.series(r.measurement) if s.tags == r.tags), None)
        out.append((s, r))
    return out


# --- layers ------------------------------------------------------------------------------


def db2_layer(rd: Reader, r: Resolved, until: int) -> Layer:
    def mine(t: dict[str, str]) -> bool:
        return t.get("db2") == r.db2

    if not r.db2:
        return Layer("db2", "DB2", [("no DB2 in this stack", "dim")], present=False)
    db = rd.latest("db2_database", until, mine)
    log = rd.latest("db2_log", until, mine)
    bp = rd.latest("db2_bufferpool", until, mine)
    database = next((x.tags.get("database") for x in db + log if x.tags.get("database")), "")
    tps = sum_of(db, "commits_per_s")
    log_ms, _ = max_of(log, "log_write_ms")
    logical, physical = sum_of(bp, "logical_reads_per_s"), sum_of(bp, "physical_reads_per_s")
    hit = (1 - physical / logical) * 100 if logical and physical is not None else None
    wait, _ = max_of(db, "wait_pct")
    lock, _ = max_of(db, "lock_wait_pct")
    figures = (fig("TPS", num(tps)) + fig("log write", f"{num(log_ms, 2)} ms", LOG_WRITE, log_ms)
               + fig("hit", f"{num(hit)}%") + fig("wait", f"{num(wait)}%") + fig("lock", f"{num(lock)}%"))
    return Layer("db2", f"DB2 {r.db2}/{database}".rstrip("/"), figures,
                  Trend.of(rd.find("db2_database", mine), "commits_per_s", how="sum"), "TPS",
                  Trend.of(rd.find("db2_log", mine), "log_write_ms", thresholds=LOG_WRITE,
                           floor=LATENCY_FLOOR_MS), "log write ms", series_of(rd, db[:1] + log[:1]))


def guest_layer(rd: Reader, r: Resolved, until: int) -> Layer:
    def mine(t: dict[str, str]) -> bool:
        return t.get("guest") == r.guest

    def disk(t: dict[str, str]) -> bool:
        return mine(t) and t.get("type", "disk") == "disk"

    if not r.guest:
        return Layer("guest", "Guest", [("no guest OS data for this stack", "dim")], present=False)
    cpu = [x for x in rd.latest("guest_cpu", until, lambda t: mine(t) and t.get("cpu") == "total")]
    mem = rd.latest("guest_mem", until, mine)
    disks = rd.latest("guest_disk", until, disk)
    c = cpu[0].fields if cpu else {}
    m = mem[0].fields if mem else {}
    worst, at = max_of(disks, "read_await_ms", "write_await_ms")
    swap = (value(m, "swap_in_bytes_per_s") or 0) + (value(m, "swap_out_bytes_per_s") or 0)
    steal = value(c, "steal_pct")
    figures = (fig("busy", f"{num(value(c, 'busy_pct'))}%", PCT_BUSY, value(c, "busy_pct"))
               + fig("iowait", f"{num(value(c, 'iowait_pct'))}%")
               + fig("steal", f"{num(steal)}%", READY, steal)
               + fig("swap", rate(swap) if m else NONE, GUEST_SWAP, swap)
               + fig("await", f"{num(worst, 1)} ms" + (f" {at.tags.get('device')}" if at else ""), AWAIT, worst))
    return Layer("guest", f"Guest {r.guest}", figures,
                  Trend.of(rd.find("guest_cpu", lambda t: mine(t) and t.get("cpu") == "total"), "busy_pct",
                           top=100.0, thresholds=PCT_BUSY), "CPU busy %",
                  Trend.of(rd.find("guest_disk", disk), "read_await_ms", "write_await_ms", thresholds=AWAIT,
                           floor=LATENCY_FLOOR_MS), "await ms", series_of(rd, cpu))


def vm_layer(rd: Reader, r: Resolved, until: int) -> Layer:
    def mine(t: dict[str, str]) -> bool:
        return t.get("vm") == r.vm and (not r.vcenter or t.get("vcenter", r.vcenter) == r.vcenter)

    if not r.vm:
        return Layer("vm", "VM", [("no VM in this stack", "dim")], present=False)
    disks = rd.latest("vsphere_vm_disk", until, mine)
    vmdk, _ = max_of(disks, "read_latency_ms", "write_latency_ms")
    disk_trend = Trend.of(rd.find("vsphere_vm_disk", mine), "read_latency_ms", "write_latency_ms",
                          thresholds=GAVG, floor=LATENCY_FLOOR_MS)
    if r.vm_row is not None:
        f = r.vm_row.fields
        ready, costop = value(f, "cpu_ready_pct"), value(f, "cpu_costop_pct")
        figures = (fig("rdy", f"{num(ready)}%", READY, ready) + fig("cstp", f"{num(costop)}%", COSTOP, costop)
                   + fig("balloon", size(value(f, "mem_balloon_bytes")), BALLOON,
                          value(f, "mem_balloon_bytes"))
                   + fig("swapped", size(value(f, "mem_swapped_bytes")), HOST_SWAP,
                          value(f, "mem_swapped_bytes"))
                   + fig("VMDK", f"{num(vmdk)} ms", GAVG, vmdk))
        where = f" on {r.host}" if r.host else ""
        return Layer("vm", f"VM {r.vm}{where}", figures,
                      Trend.of(rd.find("vsphere_vm", mine), "cpu_ready_pct", floor=5.0, thresholds=READY),
                      "ready % per vCPU", disk_trend, "VMDK ms", series_of(rd, [r.vm_row]))
    esx = rd.latest("esxtop_vm", until, lambda t: t.get("vm") == r.vm)
    if esx:  # esxtop's group figures: sums over the VM's worlds
        f = esx[0].fields
        figures = (fig("%RDY", num(value(f, "ready_pct"))) + fig("%CSTP", num(value(f, "costop_pct")))
                   + fig("MCTLSZ", size(value(f, "balloon_bytes"))) + fig("SWCUR", size(value(f, "swapped_bytes")))
                   + fig("N%L", num(value(f, "numa_local_pct"), 0)))
        return Layer("vm", f"VM {r.vm} (esxtop)", figures,
                      Trend.of(rd.find("esxtop_vm", lambda t: t.get("vm") == r.vm), "ready_pct", floor=5.0),
                      "%RDY (all vCPUs)", disk_trend, "VMDK ms", series_of(rd, esx))
    return Layer("vm", f"VM {r.vm}", [("no vSphere or esxtop samples for this VM", "dim")], present=False)


def host_layer(rd: Reader, r: Resolved, until: int) -> Layer:
    if not r.host:
        return Layer("host", "Host", [("host unknown (no vSphere or esxtop data)", "dim")], present=False)
    h = r.host

    def on_host(t: dict[str, str]) -> bool:
        return t.get("host") == h

    def lun(t: dict[str, str]) -> bool:
        return on_host(t) and (not r.luns or t.get("lun") in r.luns)

    def dev(t: dict[str, str]) -> bool:
        return on_host(t) and (not r.luns or t.get("device") in r.luns)

    host = rd.latest("vsphere_host", until, on_host)
    luns = rd.latest("vsphere_host_lun", until, lun)
    devs = rd.latest("esxtop_device", until, dev)
    f = host[0].fields if host else {}
    gavg, _ = max_of(luns, "total_latency_ms")
    if gavg is None:
        gavg, _ = max_of(devs, "guest_latency_ms")
    kavg, _ = max_of(luns, "kernel_latency_ms")
    if kavg is None:
        kavg, _ = max_of(devs, "kernel_latency_ms")
    davg, _ = max_of(luns, "device_latency_ms")
    if davg is None:
        davg, _ = max_of(devs, "device_latency_ms")
    qued, _ = max_of(devs, "queued")
    state = value(f, "mem_state")
    figures = (fig("cpu", f"{num(value(f, 'cpu_usage_pct'))}%", PCT_BUSY, value(f, "cpu_usage_pct"))
               + fig("mem", MEM_STATE.get(int(state), NONE) if state is not None else NONE,
                      HOST_MEM_STATE, state)
               + fig("GAVG", f"{num(gavg)} ms", GAVG, gavg) + fig("KAVG", f"{num(kavg, 2)} ms", KAVG, kavg)
               + fig("DAVG", f"{num(davg)} ms", GAVG, davg) + fig("QUED", num(qued, 0), QUEUED, qued))
    lat = (Trend.of(rd.find("vsphere_host_lun", lun), "total_latency_ms", thresholds=GAVG, floor=LATENCY_FLOOR_MS)
           if luns else Trend.of(rd.find("esxtop_device", dev), "guest_latency_ms", thresholds=GAVG,
                                 floor=LATENCY_FLOOR_MS))
    what = f" ({plural(len(r.luns), 'LUN')})" if r.luns else ""
    return Layer("host", f"Host {h}{what}", figures,
                  Trend.of(rd.find("vsphere_host", on_host), "cpu_usage_pct", top=100.0, thresholds=PCT_BUSY),
                  "CPU usage %", lat, "GAVG ms", series_of(rd, host[:1] or luns[:1] or devs[:1]))


ARRAY_LATENCY = {"storage_lun": ("avg_latency_ms",), "storage_volume": ("avg_latency_ms",),
                 "storage_disk": ("read_await_ms", "write_await_ms"), "storage_group": ("avg_latency_ms",)}
ARRAY_IOPS = {"storage_lun": ("total_iops",), "storage_volume": ("total_iops",),
              "storage_disk": ("read_iops", "write_iops"), "storage_group": ("total_iops",),
              "storage_device": ("total_iops",)}


def array_entities(rd: Reader, r: Resolved) -> dict[str, list[Series]]:
    """The array's view of the stack's LUNs (matched on NAA), else all of the stack's arrays."""
    wanted = set(r.storage)

    def by_naa(t: dict[str, str]) -> bool:
        return t.get("naa") in r.luns and (not wanted or t.get("storage") in wanted)

    found = {m: rd.find(m, by_naa) for m in ARRAY_IOPS} if r.luns else {}
    if not any(found.values()) and wanted:
        found = {m: rd.find(m, lambda t: t.get("storage") in wanted) for m in ARRAY_IOPS}
        if found.get("storage_lun"):
            found["storage_volume"] = []  # ONTAP reports both: LUNs are the closer view
    return {m: s for m, s in found.items() if s}


def storage_layer(rd: Reader, r: Resolved, until: int) -> Layer:
    entities = array_entities(rd, r)
    if not entities:
        why = "no array LUN matches this stack's NAA ids" if r.luns else "no storage for this stack"
        return Layer("storage", "Storage", [(why, "dim")], present=False)
    rows = [x for m, series in entities.items() for x in rd.store.latest_of(series, 0, until)]
    lat_rows = [x for x in rows if x.measurement in ARRAY_LATENCY]
    worst = None
    for x in lat_rows:
        v, _ = max_of([x], *ARRAY_LATENCY[x.measurement])
        if v is not None and (worst is None or v > worst[0]):
            worst = (v, x)
    iops = sum(sum_of([x], *ARRAY_IOPS[x.measurement]) or 0.0 for x in rows)
    qfull = sum_of(rows, "queue_full_per_s")
    names = sorted({x.tags.get("storage", "") for x in rows} - {""})
    nodes = rd.latest("storage_node", until, lambda t: t.get("storage") in set(names))
    busy, _ = max_of(nodes, "cpu_busy_pct")
    figures = (fig("latency", f"{num(worst[0] if worst else None, 2)} ms", ARRAY, worst[0] if worst else None)
               + fig("IOPS", num(iops, 0)) + fig("queue full", f"{num(qfull)}/s", QUEUE_FULL, qfull)
               + fig("node cpu", f"{num(busy)}%", PCT_BUSY, busy))
    lat = Trend(tuple((tuple(s), ARRAY_LATENCY[m]) for m, s in entities.items() if m in ARRAY_LATENCY),
                thresholds=ARRAY, floor=LATENCY_FLOOR_MS)
    ops = Trend(tuple((tuple(s), ARRAY_IOPS[m]) for m, s in entities.items()), how="sum")
    n = sum(len(s) for s in entities.values())
    kinds = sorted({m.removeprefix("storage_") for m in entities})
    title = f"Storage {', '.join(names)} ({plural(n, '/'.join(kinds))})"
    return Layer("storage", title, figures, ops, "IOPS", lat, "array ms", series_of(rd, rows[:1]))


LAYERS: tuple[Callable[[Reader, Resolved, int], Layer], ...] = (
    db2_layer, guest_layer, vm_layer, host_layer, storage_layer)
