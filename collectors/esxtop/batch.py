"""esxtop / resxtop batch output (`esxtop -b`): PDH-CSV, as the VMware document
"Interpreting esxtop Statistics" (VMware communities DOC-9279, §7 Batch Mode; Broadcom
KB 382249) describes it.

The first row is the header: "(PDH-CSV 4.0) (UTC)(0)" and then one column per counter,
named `\\\\<host>\\<Object>(<Instance>)\\<Counter>`; every further row is one sample, a
timestamp and then the values, all quoted. With `-a` a host exports tens of thousands of
columns, so the header is split with str.split where no quote is escaped (the csv module
only as a fallback) and only three objects are looked at:

* `Group Cpu(<gid>:<name>)`: %USED, %RUN, %SYS, %WAIT, %RDY, %CSTP, %MLMTD, %SWPWT. A
  group's percentages are sums over its worlds (a 4-vCPU VM can show 400 %USED).
* `Group Memory(<gid>:<name>)`: MEMSZ, MCTLSZ, SWCUR, SWR/s, SWW/s and the NUMA fields
  NHN (home node), NMIG (migrations since power-on), NRMEM, NLMEM and N%L. A group is a VM
  when its MEMSZ is positive (only VMs have configured memory).
* `Physical Disk SCSI Device(<canonical name>)`: DQLEN, ACTV, QUED, %USD, LOAD, CMDS/s, READS/s,
  WRITES/s, MBREAD/s, MBWRTN/s, DAVG/KAVG/GAVG/QAVG per command (and GAVG per read and
  write), ABRTS/s, RESETS/s.

Every column is matched by its exact name, never by its words. The disk device names are the
batch names DOC-9279 §4.3 ("Batch Mode Output") lists; the CPU and memory ones are those of
published `esxtop -b` captures. For NUMA, VMware documents only the interactive names (§3.3:
NHN, NMIG, NRMEM, NLMEM, N%L) and no public capture shows a batch name: both the documented
names and one assumed long spelling are accepted (NUMA below), and a header with none of them
is reported (`numa_columns` empty), never guessed at.

Units are normalised here: MBytes (esxtop's are MiB) become bytes, ms stay ms, % stay 0-100+.
"""

from __future__ import annotations

import csv
import functools
import math
import re
from dataclasses import dataclass, field
from typing import Any

from db2vtop.collectors.base import CollectorError

MIB = 2**20


class EsxtopFormatError(CollectorError):
    """esxtop printed something that is not its documented batch CSV."""


CPU = {
    "% Used": "used_pct", "% Run": "run_pct", "% System": "system_pct", "% Wait": "wait_pct",
    "% Ready": "ready_pct", "% CoStop": "costop_pct", "% Max Limited": "max_limited_pct",
    "% Swap Wait": "swap_wait_pct",
}
MEMORY = {  # counter -> (field, scale)
    "Memory Size MBytes": ("memory_size_bytes", MIB), "Memctl MBytes": ("balloon_bytes", MIB),
    "Swapped MBytes": ("swapped_bytes", MIB), "Swap Read MBytes/sec": ("swap_read_bytes_per_s", MIB),
    "Swap Written MBytes/sec": ("swap_write_bytes_per_s", MIB),
}
DEVICE = {
    "Device Q Depth": ("queue_depth", 1), "Active Commands": ("active", 1), "Queued Commands": ("queued", 1),
    "% Used": ("used_pct", 1), "Load": ("load", 1), "Commands/sec": ("commands_per_s", 1),
    "Reads/sec": ("reads_per_s", 1), "Writes/sec": ("writes_per_s", 1),
    "MBytes Read/sec": ("read_bytes_per_s", MIB), "MBytes Written/sec": ("write_bytes_per_s", MIB),
    "Average Driver MilliSec/Command": ("device_latency_ms", 1),
    "Average Kernel MilliSec/Command": ("kernel_latency_ms", 1),
    "Average Guest MilliSec/Command": ("guest_latency_ms", 1),
    "Average Queue MilliSec/Command": ("queue_latency_ms", 1),
    "Average Guest MilliSec/Read": ("guest_read_latency_ms", 1),
    "Average Guest MilliSec/Write": ("guest_write_latency_ms", 1),
    "Aborts/sec": ("aborts_per_s", 1), "Resets/sec": ("resets_per_s", 1),
}
HOME_NODE = "numa_home_node"
#: the NUMA columns of `Group Memory(...)`, by exact name: counter -> (field, scale, where the name comes from)
NUMA: dict[str, tuple[str, float, str]] = {
    "NHN": (HOME_NODE, 1, "DOC-9279 §3.3"), "NMIG": ("numa_migrations", 1, "DOC-9279 §3.3"),
    "NRMEM": ("numa_remote_bytes", MIB, "DOC-9279 §3.3"), "NLMEM": ("numa_local_bytes", MIB, "DOC-9279 §3.3"),
    "N%L": ("numa_local_pct", 1, "DOC-9279 §3.3"),
    "Numa Home Nodes": (HOME_NODE, 1, "assumed"), "Numa Migrations": ("numa_migrations", 1, "assumed"),
    "Numa Remote Memory MBytes": ("numa_remote_bytes", MIB, "assumed"),
    "Numa Local Memory MBytes": ("numa_local_bytes", MIB, "assumed"), "% Numa Local": ("numa_local_pct", 1, "assumed"),
}


def _memory_field(counter: str) -> tuple[str, float] | None:
    spec = MEMORY.get(counter)
    if spec is not None:
        return spec
    numa = NUMA.get(counter)
    return None if numa is None else numa[:2]


@dataclass(slots=True)
class BatchSample:
    host: str
    time: str
    vms: dict[str, dict[str, Any]] = field(default_factory=dict)
    devices: dict[str, dict[str, float]] = field(default_factory=dict)
    #: the counters of each object db2vtop reads, as the header names them (every layout, in order)
    columns: dict[str, list[str]] = field(default_factory=dict)
    #: the NUMA columns found in Group Memory: counter -> field
    numa_columns: dict[str, str] = field(default_factory=dict)


def split_row(line: str) -> list[str]:
    """One CSV row: str.split when every cell is plainly quoted (two quotes per cell), else csv."""
    line = line.rstrip("\r")
    if len(line) >= 2 and line[0] == '"' and line[-1] == '"':
        cells = line[1:-1].split('","')
        if line.count('"') == 2 * len(cells):
            return cells
    try:
        return next(csv.reader([line]))
    except (csv.Error, StopIteration):
        raise EsxtopFormatError(f"not a CSV row: {line[:80]!r}") from None


OBJECTS = ("Group Cpu(", "Group Memory(", "Physical Disk SCSI Device(")
Block = tuple[int, str, str, tuple[str, ...]]  # first column index, object, instance, its counters in order


def _blocks_scan(header: str, prefix: str) -> tuple[list[Block], int]:
    """The columns of OBJECTS, found without splitting the whole header (it can be megabytes),
    and the number of columns.

    esxtop writes all counters of one instance side by side, in the same order for every
    instance of an object; so after the first instance each block is checked with one
    string comparison, and a block that differs is walked cell by cell. Only for headers
    without escaped quotes (a quote in a cell makes `","` ambiguous).
    """
    found: list[tuple[int, str, str, tuple[str, ...]]] = []
    for obj in OBJECTS:
        needle = f'"{prefix}{obj}'
        layout: tuple[str, ...] = ()
        pos = header.find(needle)
        while pos >= 0:
            close = header.find(")\\", pos + len(needle))
            if close < 0:
                break
            head = header[pos + 1:close + 2]  # \\host\Object(instance)\
            block = head + ('","' + head).join(layout) if layout else ""
            end = pos + 1 + len(block)
            if block and header.startswith(block, pos + 1) and header.startswith('"', end):
                counters = layout
            else:
                counters, block = _walk(header, pos + 1, head)
                end = pos + 1 + len(block)
                layout = layout or counters
            found.append((pos, obj, header[pos + len(needle):close], counters))
            pos = header.find(needle, end)
    found.sort()
    blocks, index, prev = [], 0, 0
    for pos, obj, instance, counters in found:
        index += header.count('","', prev, pos + 1)
        prev = pos + 1
        blocks.append((index, obj, instance, counters))  # separators before a cell = its column
    return blocks, index + header.count('","', prev) + 1


def _walk(header: str, start: int, head: str) -> tuple[tuple[str, ...], str]:
    """The counters of the consecutive cells that begin with `head`, and their text."""
    counters, pos = [], start
    while header.startswith(head, pos):
        end = header.find('"', pos)
        if end < 0:
            end = len(header)
        counters.append(header[pos + len(head):end])
        if not header.startswith('","', end):
            break
        pos = end + 3
    return tuple(counters), '","'.join(head + c for c in counters)


def _blocks_cells(header: list[str], prefix: str) -> list[Block]:
    """The same from split cells (headers with quotes inside cells): a block per column."""
    blocks = []
    for i, cell in enumerate(header):
        if not cell.startswith(prefix):
            continue
        rest = cell[len(prefix):]
        for obj in OBJECTS:
            if rest.startswith(obj):
                instance, _, counter = rest[len(obj):].rpartition(")\\")
                blocks.append((i, obj, instance, (counter,)))
    return blocks


@functools.lru_cache(maxsize=256)
def _plan(obj: str, counters: tuple[str, ...]) -> tuple[tuple[int, str, float], ...]:
    """(offset, field, scale) of the counters this parser keeps, for one block layout."""
    plan = []
    for k, counter in enumerate(counters):
        if obj == "Group Cpu(":
            spec = (CPU[counter], 1.0) if counter in CPU else None
        elif obj == "Group Memory(":
            spec = _memory_field(counter)
        else:
            spec = DEVICE.get(counter)
        if spec is not None:
            plan.append((k, spec[0], float(spec[1])))
    return tuple(plan)


def _value(text: str) -> float | None:
    try:
        v = float(text)
    except ValueError:
        return None
    return v if math.isfinite(v) else None


def _numbers(texts: list[str]) -> list[float | None]:
    """Floats for a column of cells; the common all-numeric case stays in C."""
    try:
        floats = list(map(float, texts))
    except ValueError:
        return [_value(t) for t in texts]
    if all(map(math.isfinite, floats)):
        return floats  # type: ignore[return-value]
    return [v if math.isfinite(v) else None for v in floats]


def _home_node(text: str) -> int | str | None:
    """NHN: one node ("0"), or several for a wide VM ("0,1"); negative means none."""
    v = _value(text)
    if v is not None:
        return int(v) if v >= 0 and v.is_integer() else None
    nodes = [w for w in text.replace(",", " ").split() if w.isascii() and w.isdigit()]
    return ",".join(nodes) or None


def _rows(text: str) -> tuple[str, str]:
    """The header and the last sample row, without copying the (megabytes of) text line by line."""
    start = text.find('"(PDH-CSV')
    end = text.find("\n", start)
    stop = len(text)
    while stop > 0 and text[stop - 1] in " \t\r\n":
        stop -= 1
    if start < 0 or end < 0 or end >= stop:
        raise EsxtopFormatError("esxtop -b: a header but no sample row")
    return text[start:end - (text[end - 1] == "\r")], text[text.rfind("\n", 0, stop) + 1:stop].strip()


_OBJECT = re.compile(r'"\\\\[^\\"]*\\([^("\\]+)')


def header_objects(text: str) -> list[str]:
    """Every object the header row names (Group Cpu, Numa Node, Physical Cpu, ...): what a host's esxtop
    exports, recorded once per new host. It reads the whole header, so it is not for every cycle."""
    start = text.find('"(PDH-CSV')
    end = text.find("\n", start)
    return sorted(set(_OBJECT.findall(text[start:end if end >= 0 else len(text)]))) if start >= 0 else []


def parse_batch(text: str) -> BatchSample:
    """The last sample of an `esxtop -b` run. Raises EsxtopFormatError on anything else."""
    if not text[:200].lstrip().startswith('"(PDH-CSV'):
        raise EsxtopFormatError(f"esxtop -b: no PDH-CSV header (got {text[:60].strip()!r})")
    header_line, last_line = _rows(text)
    values = split_row(last_line)
    first = header_line.find('","\\\\')
    host = header_line[first + 5:header_line.find("\\", first + 5)] if first >= 0 else ""
    if not host or '"' in host:
        raise EsxtopFormatError("esxtop -b: no \\\\host\\Object\\Counter columns")
    prefix = f"\\\\{host}\\"
    if '""' in header_line:
        cells = split_row(header_line)
        columns, blocks = len(cells), _blocks_cells(cells, prefix)
    else:
        blocks, columns = _blocks_scan(header_line, prefix)
    if columns != len(values):
        raise EsxtopFormatError(f"esxtop -b: the header has {columns} columns, the sample {len(values)}")
    out = BatchSample(host, values[0])
    groups: dict[str, dict[str, dict[str, Any]]] = {obj: {} for obj in OBJECTS}
    layouts: dict[tuple[str, tuple[str, ...]], tuple[list[int], list[dict[str, Any]]]] = {}
    for first, obj, instance, counters in blocks:
        if first + len(counters) > columns:
            raise EsxtopFormatError(f"esxtop -b: the columns of {obj}{instance}) run past the end of the row")
        firsts, fields = layouts.setdefault((obj, counters), ([], []))
        firsts.append(first)
        fields.append(groups[obj].setdefault(instance, {}))
    for obj, counters in layouts:
        seen = out.columns.setdefault(obj[:-1], [])
        seen += [c for c in dict.fromkeys(counters) if c not in seen]
    out.numa_columns = {c: NUMA[c][0] for c in out.columns.get("Group Memory", ()) if c in NUMA}
    for (obj, counters), (firsts, fields) in layouts.items():  # a column at a time: one plan per layout
        for offset, name, scale in _plan(obj, counters):
            cells = [values[f + offset] for f in firsts]
            if name == HOME_NODE:
                for f, node in zip(fields, map(_home_node, cells), strict=True):
                    if node is not None:
                        f[HOME_NODE if isinstance(node, int) else "numa_home_nodes"] = node
                continue
            for f, v in zip(fields, _numbers(cells), strict=True):
                if v is not None:
                    f[name] = v * scale if scale != 1.0 else v
    out.devices = {k: v for k, v in groups["Physical Disk SCSI Device("].items() if v}
    cpu = groups["Group Cpu("]
    for instance, mem in groups["Group Memory("].items():
        if not mem.get("memory_size_bytes", 0) > 0:
            continue  # not a VM
        fields = {**cpu.get(instance, {}), **mem}
        if "numa_local_pct" not in fields:
            local, remote = fields.get("numa_local_bytes"), fields.get("numa_remote_bytes")
            if local is not None and remote is not None and local + remote > 0:
                fields["numa_local_pct"] = round(local * 100.0 / (local + remote), 2)
        out.vms[instance.partition(":")[2] or instance] = fields
    return out
