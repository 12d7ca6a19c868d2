"""The Stack screen's detail panels, one per letter: esxtop's c m d u v n, db2top's b l w t, and e for
the stack's vCenter events.

Each returns a one-line summary, a table model, and the trend of each row (drawn by the
loader for the rows on screen only).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from db2vtop.agent.core.events import VCenterEvent
from db2vtop.agent.core.source import Row
from db2vtop.checks.figures import BY_ID, LATENCY_FLOOR_MS, of_layer
from db2vtop.checks.scales import Level, Levels
from db2vtop.checks.topology import StackEntities, lun_name
from db2vtop.tui.chart import level_style
from db2vtop.tui.data import Reader, Trend
from db2vtop.tui.format import NONE, num, rate, size, value
from db2vtop.tui.layers import MEM_STATE, cell_of, fig, header_of, max_of, sum_of
from db2vtop.tui.table import Cell, Column, Run, TableModel, TableRow

PANELS = {
    "c": "CPU", "m": "memory", "d": "disk adapters", "u": "LUNs", "v": "VM disks", "n": "network",
    "b": "buffer pools", "l": "log", "w": "waits", "t": "tablespaces and containers", "e": "vCenter events",
}
#: the panel of the stack's vCenter events (made from the verdict's window, not at the cursor like the others)
EVENTS_PANEL = "e"

#: an array measurement's latency fields (the figure table's "latency" on the Stack screen)
ARRAY_LATENCY = {m: tuple(f.field for f in of_layer("storage") if f.measurement == m and f.screen == "latency")
                 for m in {f.measurement for f in of_layer("storage") if f.screen == "latency"}}
PanelResult = tuple[list[Run], TableModel, dict[str, Trend], int]
#: the CPU panel's figures (checks/figures.py: their headers, decimals, levels and the ready trend's floor): vCenter's
#: usage, ready and co-stop of each VM on the host, and esxtop's %RDY and N%L
VM_USAGE, VM_READY, VM_COSTOP = (BY_ID[f"vsphere_vm.{n}"] for n in ("cpu_usage_pct", "cpu_ready_pct", "cpu_costop_pct"))
ESX_READY, ESX_NUMA = BY_ID["esxtop_vm.ready_pct"], BY_ID["esxtop_vm.numa_local_pct"]


def trend(what: str) -> Column:
    """A panel's trend column, named for what it draws (`GAVG trend ≤50`: not read as the column before it)."""
    return Column(f"{what} trend", width=16, whole=True)


def _r(key: str, cells: list[Cell], sort: tuple, style: str | None = None) -> TableRow:
    return TableRow(key, cells, sort, style=style)


def _styled(v: float | None, level: Level, digits: int = 1, suffix: str = "") -> Cell:
    return (num(v, digits) + (suffix if v is not None else ""), level_style(level, v, ""))


def _now(rd: Reader, r: StackEntities, entity: str, measurement: str, until: int,
         where: tuple[tuple[str, str], ...] = ()) -> list[Row]:
    """The newest row of each of the stack's series of `measurement` that `entity` names, at the cursor."""
    return rd.latest_of(r.select(entity, measurement, where), 0, until)


def _vms_on_host(rd: Reader, r: StackEntities, until: int) -> list[Row]:
    return rd.latest_of(r.select("host", "vsphere_vm"), 0, until) if r.host else []


def _esxtop_vms(rd: Reader, r: StackEntities, until: int) -> dict[str, Row]:
    return {x.tags.get("vm", ""): x for x in rd.latest_of(r.select("host", "esxtop_vm"), 0, until)} if r.host else {}


def cpu_panel(rd: Reader, r: StackEntities, until: int, lv: Levels, label: str = "") -> PanelResult:
    vms, esx = _vms_on_host(rd, r, until), _esxtop_vms(rd, r, until)
    if not vms and not esx:
        return _guest_cpu_panel(rd, r, until, lv)
    cols = [Column("vm", max_width=32), Column("vCPU", right=True),
            *(Column(header_of(f), right=True) for f in (VM_USAGE, VM_READY, VM_COSTOP)), Column("mlmtd%", right=True),
            Column("swpwt%", right=True), *(Column(header_of(f), right=True) for f in (ESX_READY, ESX_NUMA)),
            trend(header_of(VM_READY))]
    rows, trends = [], {}
    names = sorted({x.tags["vm"] for x in vms} | set(esx))
    by_vm = {x.tags["vm"]: x for x in sorted(vms, key=lambda x: x.ts)}
    for name in names:
        f = by_vm[name].fields if name in by_vm else {}
        e = esx[name].fields if name in esx else {}
        ready = value(f, VM_READY.field)
        vals = (value(f, "vcpus"), value(f, VM_USAGE.field), ready, value(f, VM_COSTOP.field),
                value(f, "cpu_maxlimited_pct"), value(f, "cpu_swapwait_pct"), value(e, ESX_READY.field),
                value(e, ESX_NUMA.field))
        me = name == r.vm
        rows.append(_r(name, [("▶ " if me else "  ") + name, num(vals[0], 0), cell_of(VM_USAGE, vals[1], lv),
                              cell_of(VM_READY, ready, lv), cell_of(VM_COSTOP, vals[3], lv),
                              _styled(vals[4], lv["limited"]), num(vals[5]), cell_of(ESX_READY, vals[6], lv),
                              cell_of(ESX_NUMA, vals[7], lv), ""],
                       (name, *vals, None), "bold" if me else None))
        assert VM_READY.chart is not None
        trends[name] = Trend.of([s for s in r.select("host", "vsphere_vm") if s.tags.get("vm") == name],
                                VM_READY.field, floor=VM_READY.chart.floor, level=lv.of(VM_READY.level))
    rows.sort(key=lambda x: -(x.sort[3] or 0.0))
    host = _now(rd, r, "host", "vsphere_host", until)
    hf = host[0].fields if host else {}
    summary = [(f"VMs on {r.host}: {len(names)}   ", "bold"), *fig("host cpu", f"{num(value(hf, 'cpu_usage_pct'))}%"),
               *fig("host rdy", f"{num(value(hf, 'cpu_ready_pct'))}%"),
               ("rdy% is per vCPU (vCenter); %RDY is esxtop's sum over vCPUs", "dim")]
    return summary, TableModel(cols, rows), trends, len(cols) - 1


def _guest_cpu_panel(rd: Reader, r: StackEntities, until: int, lv: Levels, label: str = "") -> PanelResult:
    cols = [Column("cpu"), Column("busy%", right=True), Column("user%", right=True), Column("sys%", right=True),
            Column("iowait%", right=True), Column("steal%", right=True), Column("idle%", right=True), trend("busy%")]
    rows, trends = [], {}
    for x in _now(rd, r, "guest", "guest_cpu", until):
        f, cpu = x.fields, x.tags.get("cpu", "?")
        vals = [value(f, k) for k in ("busy_pct", "user_pct", "system_pct", "iowait_pct", "steal_pct", "idle_pct")]
        rank = -1 if cpu == "total" else int(cpu) if cpu.isdigit() else 10**6
        rows.append(_r(cpu, [cpu, *[num(v) for v in vals], ""], (rank, *vals, None), "bold" if rank < 0 else None))
        trends[cpu] = Trend.of(rd.find("guest_cpu", lambda t, c=cpu: t.get("guest") == r.guest and t.get("cpu") == c),
                               "busy_pct", top=100.0)
    rows.sort(key=lambda x: x.sort[0])
    what = f"guest {r.guest}" if r.guest else "this stack"
    return [(f"CPUs of {what} (no host data: VMs on the host need vSphere or esxtop)", "dim")], \
        TableModel(cols, rows), trends, len(cols) - 1


def _mem_panel(rd: Reader, r: StackEntities, until: int, lv: Levels, label: str = "") -> PanelResult:
    vms, esx = _vms_on_host(rd, r, until), _esxtop_vms(rd, r, until)
    cols = [Column("vm", max_width=32), Column("balloon", right=True), Column("target", right=True),
            Column("swapped", right=True), Column("swapin", right=True), Column("compr", right=True),
            Column("consumed", right=True), Column("active", right=True), Column("N%L", right=True), trend("balloon")]
    rows, trends = [], {}
    by_vm = {x.tags["vm"]: x for x in sorted(vms, key=lambda x: x.ts)}
    # a VM's consumed, active and compressed memory are its quickStats (not asked of vCenter twice)
    quick = {x.tags["vm"]: x for x in sorted(_now(rd, r, "host", "vsphere_vm_quickstats", until), key=lambda x: x.ts)}
    for name in sorted(set(by_vm) | set(esx)):
        f = by_vm[name].fields if name in by_vm else {}
        e = esx[name].fields if name in esx else {}
        q = quick[name].fields if name in quick else {}
        balloon = value(f, "mem_balloon_bytes") if f else value(e, "balloon_bytes")
        swapped = value(f, "mem_swapped_bytes") if f else value(e, "swapped_bytes")
        vals = (balloon, value(f, "mem_balloon_target_bytes"), swapped, value(f, "mem_swapin_bytes_per_s"),
                value(q, "compressed_bytes"), value(q, "host_mem_usage_bytes"), value(q, "guest_mem_usage_bytes"),
                value(e, "numa_local_pct"))
        me = name == r.vm
        bad = lv["balloon"]
        rows.append(_r(name, [("▶ " if me else "  ") + name, (size(balloon), level_style(bad, balloon, "")),
                              size(vals[1]), (size(swapped), level_style(bad, swapped, "")), rate(vals[3]),
                              size(vals[4]), size(vals[5]), size(vals[6]), num(vals[7], 0), ""], (name, *vals, None),
                       "bold" if me else None))
        trends[name] = Trend.of([s for s in r.select("host", "vsphere_vm") if s.tags.get("vm") == name],
                                "mem_balloon_bytes", floor=2**20, level=lv["balloon"])
    rows.sort(key=lambda x: (-(x.sort[1] or 0.0), -(x.sort[3] or 0.0), x.key))
    host = _now(rd, r, "host", "vsphere_host", until)
    hf = host[0].fields if host else {}
    gm = _now(rd, r, "guest", "guest_mem", until)
    g = gm[0].fields if gm else {}
    state = value(hf, "mem_state")
    summary = (fig("host state", MEM_STATE.get(int(state), NONE) if state is not None else NONE)
               + fig("host balloon", size(value(hf, "mem_balloon_bytes")))
               + fig("host swap", size(value(hf, "mem_swap_used_bytes")))
               + fig("guest used", f"{num(value(g, 'used_pct'))}%")
               + fig("guest swap in/out", f"{rate(value(g, 'swap_in_bytes_per_s'))} "
                                           f"{rate(value(g, 'swap_out_bytes_per_s'))}"))
    if not rows:
        summary.append(("  (no VM memory data: needs vSphere or esxtop)", "dim"))
    return summary, TableModel(cols, rows), trends, len(cols) - 1


def _adapter_panel(rd: Reader, r: StackEntities, until: int, lv: Levels, label: str = "") -> PanelResult:
    """ESXi's per-HBA counters are not collected; the host's datastores are the nearest view."""
    cols = [Column("datastore", max_width=36), Column("r/s", right=True), Column("w/s", right=True),
            Column("read ms", right=True), Column("write ms", right=True), trend("lat ms")]
    rows, trends = [], {}
    if r.host:
        for x in _now(rd, r, "datastore", "vsphere_datastore", until):
            f, ds = x.fields, x.tags.get("datastore", "?")
            vals = [value(f, k) for k in ("read_iops", "write_iops", "read_latency_ms", "write_latency_ms")]
            mine = ds in set(r.luns.values())
            io = lv["io_latency"]
            rows.append(_r(ds, [("▶ " if mine else "  ") + ds, num(vals[0]), num(vals[1]), _styled(vals[2], io, 2),
                                _styled(vals[3], io, 2), ""], (ds, *vals, None), "bold" if mine else None))
            trends[ds] = Trend.of(rd.find("vsphere_datastore", lambda t, d=ds: t.get("host") == r.host
                                          and t.get("datastore") == d), "read_latency_ms", "write_latency_ms",
                                  level=lv["io_latency"], floor=LATENCY_FLOOR_MS)
    note = f"datastores as seen by {r.host}" if r.host else "no host for this stack"
    return [(note, "bold"), ("  (ESXi adapter counters are not collected; ▶ = this stack's)", "dim")], \
        TableModel(cols, rows), trends, len(cols) - 1


def _lun_panel(rd: Reader, r: StackEntities, until: int, lv: Levels, label: str = "") -> PanelResult:
    """The per-I/O waterfall for each LUN: what the VM waits (GAVG) = VMkernel (KAVG) + device
    (DAVG); DAVG minus the array's own latency is the fabric and HBA."""
    cols = [Column("LUN", max_width=36), Column("datastore", max_width=20), Column("GAVG", right=True),
            Column("KAVG", right=True), Column("DAVG", right=True), Column("QAVG", right=True),
            Column("QUED", right=True), Column("ACTV", right=True), Column("DQLEN", right=True),
            Column("%USD", right=True), Column("IOPS", right=True), Column("array ms", right=True),
            Column("fabric ms", right=True), Column("array", max_width=24), trend("GAVG")]
    if not r.host:
        return [("no host for this stack: LUNs need vSphere or esxtop", "dim")], TableModel(cols, []), {}, len(cols) - 1
    host_luns = {x.tags.get("lun", ""): x for x in _now(rd, r, "host", "vsphere_host_lun", until)}
    devs = {x.tags.get("device", ""): x for x in _now(rd, r, "host", "esxtop_device", until)}
    reported = {lun_name(n): n for n in (set(host_luns) | set(devs)) - {""}}  # as the host names them
    names = sorted(reported.get(n, n) for n in r.luns) if r.luns else sorted(reported.values())
    wanted = {lun_name(n) for n in names}
    arrays: dict[str, Row] = {}
    if names:
        for m in ("storage_lun", "storage_volume", "storage_disk"):
            for x in rd.latest_at(m, until, lambda t: lun_name(t.get("naa", "")) in wanted):
                arrays.setdefault(lun_name(x.tags["naa"]), x)
    rows, trends = [], {}
    for lun in names:
        v, e, a = host_luns.get(lun), devs.get(lun), arrays.get(lun_name(lun))
        vf, ef = (v.fields if v else {}), (e.fields if e else {})
        gavg = value(vf, "total_latency_ms") if v else value(ef, "guest_latency_ms")
        kavg = value(vf, "kernel_latency_ms") if v else value(ef, "kernel_latency_ms")
        davg = value(vf, "device_latency_ms") if v else value(ef, "device_latency_ms")
        qavg = value(vf, "queue_latency_ms") if v else value(ef, "queue_latency_ms")
        iops = (sum_of([v], "read_iops", "write_iops") if v else value(ef, "commands_per_s"))
        array_ms, where = None, ""
        if a is not None:
            array_ms, _ = max_of([a], *ARRAY_LATENCY.get(a.measurement, ("avg_latency_ms",)))
            where = a.tags.get("storage", "") + ":" + (a.tags.get("lun") or a.tags.get("volume")
                                                       or a.tags.get("device", ""))
        fabric = davg - array_ms if davg is not None and array_ms is not None else None
        vals = (gavg, kavg, davg, qavg, value(ef, "queued"), value(ef, "active"), value(ef, "queue_depth"),
                value(ef, "used_pct"), iops, array_ms, fabric)
        ds = r.luns.get(lun_name(lun)) or vf.get("datastore") or (v.tags.get("datastore", "") if v else "")
        io = lv["io_latency"]
        rows.append(_r(lun, [lun, str(ds), _styled(gavg, io, 2), _styled(kavg, lv["kavg"], 2), _styled(davg, io, 2),
                             num(qavg, 2), _styled(vals[4], lv["queued"], 0), num(vals[5], 0),
                             num(vals[6], 0), _styled(vals[7], lv["queue_used"], 0), num(iops, 0),
                             _styled(array_ms, lv["array_latency"], 2), num(fabric, 2), where, ""],
                       (lun, ds, *vals, where, None)))
        trends[lun] = (Trend.of(rd.find("vsphere_host_lun", lambda t, n=lun: t.get("host") == r.host
                                        and t.get("lun") == n), "total_latency_ms", level=lv["io_latency"],
                                floor=LATENCY_FLOOR_MS) if v else
                       Trend.of(rd.find("esxtop_device", lambda t, n=lun: t.get("host") == r.host
                                        and t.get("device") == n), "guest_latency_ms", level=lv["io_latency"],
                                floor=LATENCY_FLOOR_MS))
    rows.sort(key=lambda x: -(x.sort[2] or 0.0))
    summary = [(f"LUNs of {label} on {r.host}: ", "bold"),
               ("GAVG = KAVG (VMkernel queueing) + DAVG (device); fabric = DAVG − array latency", "dim")]
    return summary, TableModel(cols, rows), trends, len(cols) - 1


def _disk_panel(rd: Reader, r: StackEntities, until: int, lv: Levels, label: str = "") -> PanelResult:
    """The same I/O seen by the hypervisor (VMDKs) and by the guest (block devices)."""
    cols = [Column("layer"), Column("disk", max_width=28), Column("r/s", right=True), Column("w/s", right=True),
            Column("read", right=True), Column("write", right=True), Column("read ms", right=True),
            Column("write ms", right=True), Column("queue", right=True), Column("where", max_width=30), trend("lat ms")]
    rows, trends = [], {}
    if r.vm:
        for x in _now(rd, r, "vm", "vsphere_vm_disk", until):
            f, inst = x.fields, x.tags.get("instance", "?")
            oio = sum_of([x], "read_oio", "write_oio")
            vals = [value(f, k) for k in ("read_iops", "write_iops", "read_bytes_per_s", "write_bytes_per_s",
                                          "read_latency_ms", "write_latency_ms")]
            key = f"vmdk {inst} {x.tags.get('host', '')}"
            rows.append(_r(key, ["VMDK", inst, num(vals[0]), num(vals[1]), rate(vals[2]), rate(vals[3]),
                                 _styled(vals[4], lv["io_latency"], 2), _styled(vals[5], lv["io_latency"], 2), num(oio),
                                 f"{x.tags.get('datastore', '')} {x.tags.get('lun', '')}".strip(), ""],
                           ("VMDK", inst, *vals, oio, x.tags.get("datastore"), None)))
            trends[key] = Trend.of(rd.find("vsphere_vm_disk", lambda t, tags=x.tags: t == tags),
                                   "read_latency_ms", "write_latency_ms", level=lv["io_latency"],
                                   floor=LATENCY_FLOOR_MS)
    if r.guest:
        for x in _now(rd, r, "guest", "guest_disk", until, (("type", "disk"),)):
            f, dev = x.fields, x.tags.get("device", "?")
            vals = [value(f, k) for k in ("read_iops", "write_iops", "read_bytes_per_s", "write_bytes_per_s",
                                          "read_await_ms", "write_await_ms", "queue_size")]
            key = f"guest {dev}"
            rows.append(_r(key, ["guest", dev, num(vals[0]), num(vals[1]), rate(vals[2]), rate(vals[3]),
                                 _styled(vals[4], lv["io_latency"], 2), _styled(vals[5], lv["io_latency"], 2),
                                 num(vals[6], 2),
                                 f"util {num(value(f, 'util_pct'))}%", ""], ("guest", dev, *vals, None, None)))
            trends[key] = Trend.of(rd.find("guest_disk", lambda t, tags=x.tags: t == tags),
                                   "read_await_ms", "write_await_ms", level=lv["io_latency"], floor=LATENCY_FLOOR_MS)
    summary = [("virtual disks (hypervisor view) and the guest's block devices: ", "bold"),
               ("guest await above VMDK latency = queueing inside the guest", "dim")]
    return summary, TableModel(cols, rows), trends, len(cols) - 1


def _vnic_names(rd: Reader, r: StackEntities, until: int) -> dict[str, str]:
    """The VM's vNICs by the device key vCenter names its network counters by: their labels (Network adapter 1),
    from the VM's newest fact at the cursor."""
    facts = [f for f in rd.facts("vsphere_vm") if f.tags.get("vm") == r.vm and f.ts <= until
             and (not r.vcenter or f.tags.get("vcenter", r.vcenter) == r.vcenter)]
    nics = max(facts, key=lambda f: f.ts).data.get("nics") if facts else None
    return {str(n.get("key")): str(n.get("label") or f"{n.get('type') or 'vNIC'} {n.get('key')}")
            for n in nics or [] if isinstance(n, dict) and n.get("key") is not None}


def _net_panel(rd: Reader, r: StackEntities, until: int, lv: Levels, label: str = "") -> PanelResult:
    cols = [Column("layer"), Column("nic", max_width=24), Column("rx", right=True), Column("tx", right=True),
            Column("rx pkt/s", right=True), Column("tx pkt/s", right=True), Column("drops/s", right=True),
            Column("errors/s", right=True), trend("rx+tx")]
    rows, trends = [], {}
    if r.vm:
        names = _vnic_names(rd, r, until)
        for x in _now(rd, r, "vm", "vsphere_vm_net", until):
            f, device = x.fields, x.tags.get("instance", "?")
            nic = names.get(device) or f"key {device}"  # not the device key alone, a bare number
            drops = sum_of([x], "rx_drops_per_s", "tx_drops_per_s")
            key = f"vnic {device} {x.tags.get('host', '')}"
            rows.append(_r(key, ["vNIC", nic, rate(value(f, "rx_bytes_per_s")), rate(value(f, "tx_bytes_per_s")),
                                 NONE, NONE, _styled(drops, lv["nonzero"]), NONE, ""],
                           ("vNIC", nic, value(f, "rx_bytes_per_s"), value(f, "tx_bytes_per_s"), None, None, drops,
                            None, None)))
            trends[key] = Trend.of(rd.find("vsphere_vm_net", lambda t, tags=x.tags: t == tags),
                                   "rx_bytes_per_s", "tx_bytes_per_s", how="sum")
    if r.guest:
        for x in _now(rd, r, "guest", "guest_net", until):
            f, nic = x.fields, x.tags.get("interface", "?")
            drops = sum_of([x], "rx_drops_per_s", "tx_drops_per_s")
            errors = sum_of([x], "rx_errors_per_s", "tx_errors_per_s")
            key = f"guest {nic}"
            vals = (value(f, "rx_bytes_per_s"), value(f, "tx_bytes_per_s"), value(f, "rx_packets_per_s"),
                    value(f, "tx_packets_per_s"))
            rows.append(_r(key, ["guest", nic, rate(vals[0]), rate(vals[1]), num(vals[2]), num(vals[3]),
                                 _styled(drops, lv["nonzero"]), _styled(errors, lv["nonzero"]),
                                 ""], ("guest", nic, *vals, drops, errors, None)))
            trends[key] = Trend.of(rd.find("guest_net", lambda t, tags=x.tags: t == tags),
                                   "rx_bytes_per_s", "tx_bytes_per_s", how="sum")
    return [("network: the VM's vNICs (hypervisor view) and the guest's interfaces", "bold")], \
        TableModel(cols, rows), trends, len(cols) - 1


def _db2_rows(rd: Reader, r: StackEntities, measurement: str, until: int) -> list[Row]:
    return _now(rd, r, "db2", measurement, until)


def _no_db2(cols: list[Column]) -> PanelResult:
    return [("no DB2 in this stack", "dim")], TableModel(cols, []), {}, len(cols) - 1


def _bufferpool_panel(rd: Reader, r: StackEntities, until: int, lv: Levels, label: str = "") -> PanelResult:
    cols = [Column("member"), Column("bufferpool", max_width=24), Column("hit%", right=True),
            Column("data%", right=True), Column("index%", right=True), Column("logical/s", right=True),
            Column("physical/s", right=True), Column("async%", right=True), Column("read ms/pg", right=True),
            Column("writes/s", right=True), Column("write ms/pg", right=True), trend("hit%")]
    if not r.db2:
        return _no_db2(cols)
    rows, trends = [], {}
    for x in _db2_rows(rd, r, "db2_bufferpool", until):
        f, bp, member = x.fields, x.tags.get("bufferpool", "?"), x.tags.get("member", "")
        vals = [value(f, k) for k in ("hit_pct", "data_hit_pct", "index_hit_pct", "logical_reads_per_s",
                                      "physical_reads_per_s", "async_read_pct", "read_ms_per_page", "writes_per_s",
                                      "write_ms_per_page")]
        key = f"{member} {bp}"
        rows.append(_r(key, [member, bp, _styled(vals[0], lv["hit_ratio"]), num(vals[1]), num(vals[2]),
                             num(vals[3]), num(vals[4]), num(vals[5]), num(vals[6], 2), num(vals[7]),
                             num(vals[8], 2), ""], (member, bp, *vals, None)))
        trends[key] = Trend.of(rd.find("db2_bufferpool", lambda t, tags=x.tags: t == tags), "hit_pct", top=100.0,
                               level=lv["hit_ratio"])
    rows.sort(key=lambda x: (x.sort[0], x.sort[1]))
    return [("buffer pools: hit % = (1 − physical/logical) × 100 over the cycle", "bold")], \
        TableModel(cols, rows), trends, len(cols) - 1


def _log_panel(rd: Reader, r: StackEntities, until: int, lv: Levels, label: str = "") -> PanelResult:
    cols = [Column("member"), Column("write ms", right=True), Column("writes/s", right=True),
            Column("written", right=True), Column("buffer full/s", right=True), Column("used%", right=True),
            Column("secondary", right=True), Column("read ms", right=True), Column("reads/s", right=True),
            trend("write")]
    if not r.db2:
        return _no_db2(cols)
    rows, trends = [], {}
    for x in _db2_rows(rd, r, "db2_log", until):
        f, member = x.fields, x.tags.get("member", "")
        vals = [value(f, k) for k in ("log_write_ms", "log_writes_per_s", "log_write_bytes_per_s",
                                      "log_buffer_full_per_s", "log_used_pct", "secondary_logs", "log_read_ms",
                                      "log_reads_per_s")]
        rows.append(_r(member, [member, _styled(vals[0], lv["log_write"], 2), num(vals[1]), rate(vals[2]),
                                _styled(vals[3], lv["log_buffer_full"], 2), _styled(vals[4], lv["log_used"]),
                                num(vals[5], 0), num(vals[6], 2), num(vals[7]), ""], (member, *vals, None)))
        trends[member] = Trend.of(rd.find("db2_log", lambda t, tags=x.tags: t == tags), "log_write_ms",
                                  level=lv["log_write"], floor=LATENCY_FLOOR_MS)
    rows.sort(key=lambda x: x.sort[0])
    fact = next((f for f in rd.facts("db2_database") if f.tags.get("db2") == r.db2), None)
    path = fact.data.get("log_path") if fact else None
    summary = [("transaction log", "bold")] + ([("  path ", "dim"), (str(path), None)] if path else [])
    return summary, TableModel(cols, rows), trends, len(cols) - 1


#: (label, field, the scale of the share at which the verdict counts it a symptom, where it has one)
WAITS = (("pool read", "pool_read_wait_pct", "read_wait"), ("pool write", "pool_write_wait_pct", None),
         ("direct read", "direct_read_wait_pct", "read_wait"), ("direct write", "direct_write_wait_pct", None),
         ("log disk", "log_disk_wait_pct", "log_disk_wait"), ("log buffer", "log_buffer_wait_pct", None),
         ("lock", "lock_wait_pct", "lock_wait"), ("prefetch", "prefetch_wait_pct", None), ("CPU", "cpu_pct", None))


def _wait_panel(rd: Reader, r: StackEntities, until: int, lv: Levels, label: str = "") -> PanelResult:
    """dmctop's "Time spent": shares of request time, biggest first."""
    cols = [Column("member"), Column("time spent in", max_width=20), Column("% of request time", right=True),
            Column("", width=20), trend("share")]
    if not r.db2:
        return _no_db2(cols)
    rows, trends = [], {}
    db = _db2_rows(rd, r, "db2_database", until)
    for x in db:
        member = x.tags.get("member", "")
        for label, name, scale in WAITS:
            v = value(x.fields, name)
            key = f"{member} {name}"
            bar = "█" * round((v or 0) / 5)
            rows.append(_r(key, [member, label, num(v), (bar, level_style(lv.of(scale), v, "cyan")), ""],
                           (member, label, v, v, None)))
            trends[key] = Trend.of(rd.find("db2_database", lambda t, tags=x.tags: t == tags), name, top=100.0)
    rows.sort(key=lambda x: (x.sort[0], -(x.sort[2] or 0.0)))
    f = db[0].fields if db else {}
    summary = (fig("request ms/s", num(value(f, "request_ms_per_s"), 0)) + fig("wait", f"{num(value(f, 'wait_pct'))}%")
               + fig("lock waits", f"{num(value(f, 'lock_waits_per_s'))}/s")
               + fig("lock wait", f"{num(value(f, 'lock_wait_ms'))} ms")
               + fig("deadlocks", f"{num(value(f, 'deadlocks_per_s'), 2)}/s")
               + fig("timeouts", f"{num(value(f, 'lock_timeouts_per_s'), 2)}/s")
               + fig("sort overflow", f"{num(value(f, 'sort_overflow_pct'))}%"))
    return summary, TableModel(cols, rows), trends, len(cols) - 1


def _tablespace_panel(rd: Reader, r: StackEntities, until: int, lv: Levels, label: str = "") -> PanelResult:
    """Tablespaces, each followed by its containers: compare read ms/page across containers."""
    cols = [Column("member"), Column("tablespace / container", max_width=44), Column("read pg/s", right=True),
            Column("write pg/s", right=True), Column("read ms/pg", right=True), Column("write ms/pg", right=True),
            Column("async%", right=True), Column("direct r/s", right=True), Column("used%", right=True), trend("ms/pg")]
    if not r.db2:
        return _no_db2(cols)
    rows, trends = [], {}
    fields = ("pages_read_per_s", "pages_written_per_s", "read_ms_per_page", "write_ms_per_page")
    for x in _db2_rows(rd, r, "db2_tablespace", until):
        f, tbsp, member = x.fields, x.tags.get("tablespace", "?"), x.tags.get("member", "")
        vals = [value(f, k) for k in (*fields, "async_read_pct", "direct_reads_per_s", "used_pct")]
        key = f"{member} {tbsp}"
        rows.append(_r(key, [member, tbsp, num(vals[0]), num(vals[1]), num(vals[2], 2), num(vals[3], 2),
                             num(vals[4]), num(vals[5]), num(vals[6]), ""],
                       ((member, tbsp, ""), *vals, None), "bold"))
        trends[key] = Trend.of(rd.find("db2_tablespace", lambda t, tags=x.tags: t == tags), "read_ms_per_page",
                               floor=LATENCY_FLOOR_MS)
    for x in _db2_rows(rd, r, "db2_container", until):
        f, tbsp, member = x.fields, x.tags.get("tablespace", "?"), x.tags.get("member", "")
        path = x.tags.get("container", "?")
        vals = [value(f, k) for k in (*fields, "direct_reads_per_s", "fs_used_pct")]
        key = f"{member} {tbsp} {path}"
        rows.append(_r(key, [member, "  " + path, num(vals[0]), num(vals[1]), num(vals[2], 2), num(vals[3], 2),
                             NONE, num(vals[4]), num(vals[5]), ""],
                       ((member, tbsp, path), vals[0], vals[1], vals[2], vals[3], None, vals[4], vals[5], None)))
        trends[key] = Trend.of(rd.find("db2_container", lambda t, tags=x.tags: t == tags), "read_ms_per_page",
                               floor=LATENCY_FLOOR_MS)
    rows.sort(key=lambda x: x.sort[0])
    return [("tablespaces (bold) and their containers; container used% is its file system's", "bold")], \
        TableModel(cols, rows), trends, len(cols) - 1


#: a panel reads the stack's entities at the cursor; `label` names what the screen is open on
def events_panel(events: list[VCenterEvent], vm: str | None) -> PanelResult:
    """The stack's vCenter events in the window, newest first: when, what kind, on what, what happened."""
    cols = [Column("time", width=8), Column("kind", max_width=11), Column("on", max_width=24),
            Column("type", max_width=40, min_width=12), Column("what happened", max_width=120, min_width=20)]
    rows = []
    for i, e in enumerate(events):
        when = datetime.fromtimestamp(e.ts / 1e9).strftime("%H:%M:%S")
        on = e.vm if e.vm else e.host or e.datastore or ""
        rows.append(_r(f"{e.ts} {i}", [when, e.kind, on, e.type, e.summary], (-e.ts, e.kind, on, e.type, e.summary),
                       style="bold" if vm and e.vm == vm else None))
    rows.sort(key=lambda x: x.sort)
    summary: list[Run] = [("vCenter events", "bold"), (f"  {len(events)} in the window: the VM's, its hosts' while it "
                                                       "ran there, its datastores'", "dim")]
    return summary, TableModel(cols, rows), {}, -1


PANEL_LOADERS: dict[str, Callable[[Reader, StackEntities, int, Levels, str], PanelResult]] = {
    "c": cpu_panel, "m": _mem_panel, "d": _adapter_panel, "u": _lun_panel, "v": _disk_panel, "n": _net_panel,
    "b": _bufferpool_panel, "l": _log_panel, "w": _wait_panel, "t": _tablespace_panel,
}
