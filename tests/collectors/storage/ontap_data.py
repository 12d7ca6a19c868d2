"""Two samples of one small cluster's raw counters and its configuration tables.

Values are invented; their shape follows ONTAP 9's `statistics show -raw` and
`show -fields` (see clustershell.py), units as in the real `statistics show -raw` capture of
NetApp Harvest's StatPerf test data (latencies in `us`, percent numerators in `%`,
cpu_elapsed_time a bare number). Between T0 and T1 (hand-computed in the tests):
vs1/db2data: +2000 reads at 1.2 ms, +1000 writes at 2.5 ms, no other ops;
vs1/db2log: 5 reads (under the 10-op minimum), 400 writes at 0.3 ms;
LUN /vol/db2data/lun0: +1600 reads at 0.9 ms, +800 writes at 1.5 ms, 40 of 2000 reads
and 0 of 1000 writes misaligned, 12 queue-full; node1 60 % CPU, disks 30 % and 50 % busy.
"""

from __future__ import annotations

import copy

LONG_LUN = "/vol/db2data/a_lun_name_long_enough_to_wrap_in_the_value_column"


VOLUME_LATENCY = ("avg_latency", "read_latency", "write_latency", "other_latency")
LUN_LATENCY = ("avg_latency", "avg_read_latency", "avg_write_latency", "avg_other_latency")


def _io(name: str, ops: dict[str, int], lat_us: dict[str, int], data: tuple[int, int],
        latency_names: tuple[str, ...] = VOLUME_LATENCY, **extra: object) -> dict:
    total = sum(ops.values())
    avg, read, write, other = latency_names
    return {"instance": name, "scope": "vs1", "counters": {
        "vserver_name": "vs1", "total_ops": str(total), "read_ops": str(ops["read"]),
        "write_ops": str(ops["write"]), "other_ops": str(ops["other"]), "read_data": str(data[0]),
        "write_data": str(data[1]), avg: f"{sum(lat_us.values())}us", read: f"{lat_us['read']}us",
        write: f"{lat_us['write']}us", other: f"{lat_us['other']}us", **extra}}


def _volume(name: str, ops: dict[str, int], lat_us: dict[str, int], data: tuple[int, int]) -> dict:
    return _io(name, ops, lat_us, data)


def _lun(path: str, ops: dict[str, int], lat_us: dict[str, int], data: tuple[int, int], qfull: int,
         rhisto: list[int], whisto: list[int]) -> dict:
    return _io(path, ops, lat_us, data, LUN_LATENCY, queue_full=str(qfull),
               read_align_histo={str(i): str(v) for i, v in enumerate(rhisto)},
               write_align_histo={str(i): str(v) for i, v in enumerate(whisto)})


T0 = {
    "banner": "Last login time: 11/22/2026 09:59:58",
    "stats": {
        "volume": [
            _volume("db2data", {"read": 60000, "write": 30000, "other": 10000},
                    {"read": 30_000_000, "write": 24_000_000, "other": 1_000_000}, (491_520_000, 245_760_000)),
            _volume("db2log", {"read": 100, "write": 5000, "other": 50},
                    {"read": 50_000, "write": 1_500_000, "other": 5_000}, (819_200, 20_480_000)),
        ],
        "lun": [
            _lun("/vol/db2data/lun0", {"read": 50000, "write": 20000, "other": 1000},
                 {"read": 40_000_000, "write": 30_000_000, "other": 100_000}, (409_600_000, 163_840_000), 100,
                 [49000, 500, 0, 0, 0, 0, 0, 0], [20000, 0, 0, 0, 0, 0, 0, 0]),
            _lun(LONG_LUN, {"read": 10, "write": 10, "other": 0},
                 {"read": 1000, "write": 1000, "other": 0}, (81920, 81920), 0,
                 [10, 0, 0, 0, 0, 0, 0, 0], [10, 0, 0, 0, 0, 0, 0, 0]),
        ],
        "system:node": [{"instance": "node1", "scope": "node1", "counters": {
            "cpu_busy": "40000000%", "cpu_elapsed_time": "100000000", "total_ops": "200000",
            "read_ops": "120000", "write_ops": "70000"}}],
        "disk:constituent": [
            {"instance": "1.0.1.P3", "scope": "node1", "counters": {
                "node_name": "node1", "disk_busy": "3000%", "base_for_disk_busy": "10000"}},
            {"instance": "1.0.2.P3", "scope": "node1", "counters": {
                "node_name": "node1", "disk_busy": "5000%", "base_for_disk_busy": "10000"}},
        ],
    },
    "tables": {
        "volume show": [
            {"vserver": "vs1", "volume": "db2data", "aggregate": "aggr1", "size": "2199023255552B",
             "percent-snapshot-space": "0%", "snapshot-policy": "none", "atime-update": "false",
             "nvfail": "on", "space-guarantee": "none", "snapdir-access": "false"},
            {"vserver": "vs1", "volume": "db2log", "aggregate": "aggr1", "size": "107374182400B",
             "percent-snapshot-space": "20%", "snapshot-policy": "default", "atime-update": "true",
             "nvfail": "off", "space-guarantee": "volume", "snapdir-access": "true"},
        ],
        "lun show": [
            {"vserver": "vs1", "path": "/vol/db2data/lun0", "volume": "db2data", "size": "1099511627776B",
             "ostype": "vmware", "serial": "HnT-OZ/GiMhK", "space-reserve": "disabled"},
            {"vserver": "vs1", "path": "/vol/db2log/lun0", "volume": "db2log", "size": "107374182400B",
             "ostype": "vmware", "serial": "805-h{G1U6Ei", "space-reserve": "enabled"},
        ],
        "storage aggregate show": [
            {"aggregate": "aggr1", "node": "node1", "raidtype": "raid_dp", "maxraidsize": "18"}],
        "network port show": [
            {"node": "node1", "port": "e0c", "mtu": "9000", "flowcontrol-admin": "none", "flowcontrol-oper": "none"},
            {"node": "node1", "port": "e0d", "mtu": "1500", "flowcontrol-admin": "full", "flowcontrol-oper": "full"}],
        "lun igroup show": [
            {"vserver": "vs1", "igroup": "DC1_iSCSI", "protocol": "iscsi", "ostype": "vmware",
             "initiator": "iqn.1998-01.com.vmware:esx01,iqn.1998-01.com.vmware:esx02"}],
        "vserver iscsi session parameter show": [
            {"vserver": "vs1", "tpgroup": "lif1", "tsih": "1", "cmd-window-size": "128"},
            {"vserver": "vs1", "tpgroup": "lif2", "tsih": "2", "cmd-window-size": "256"}],
    },
}


def t1() -> dict:
    s = copy.deepcopy(T0)
    vols = s["stats"]["volume"]
    vols[0] = _volume("db2data", {"read": 62000, "write": 31000, "other": 10000},
                      {"read": 32_400_000, "write": 26_500_000, "other": 1_000_000}, (507_904_000, 253_952_000))
    vols[1] = _volume("db2log", {"read": 105, "write": 5400, "other": 50},
                      {"read": 60_000, "write": 1_620_000, "other": 5_000}, (860_160, 22_118_400))
    luns = s["stats"]["lun"]
    luns[0] = _lun("/vol/db2data/lun0", {"read": 51600, "write": 20800, "other": 1000},
                   {"read": 41_440_000, "write": 31_200_000, "other": 100_000}, (422_707_200, 170_393_600), 112,
                   [50960, 530, 10, 0, 0, 0, 0, 0], [21000, 0, 0, 0, 0, 0, 0, 0])
    node = s["stats"]["system:node"][0]["counters"]
    node.update(cpu_busy="46000000%", cpu_elapsed_time="110000000", total_ops="203000", read_ops="122000",
                write_ops="71000")
    disks = s["stats"]["disk:constituent"]
    disks[0]["counters"].update(disk_busy="3300%", base_for_disk_busy="11000")
    disks[1]["counters"].update(disk_busy="5500%", base_for_disk_busy="11000")
    return s
