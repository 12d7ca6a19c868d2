"""The clustered ONTAP CLI as db2vtop speaks it over SSH: command lines and their parsers.

The clustershell is the login shell of an ONTAP SSH session, so a whole line goes as
the SSH command: commands separated by `;`, values in double quotes, `|` between the
items of a list. Formats (ONTAP 9 command reference, docs.netapp.com/us-en/ontap-cli):

* `statistics show -raw -object O -counter a|b` (advanced privilege or above) prints, per
  instance, an `Object:` / `Instance:` / `Scope:` header and a two-column table with a
  32-character counter column and a 32-character value column; long values wrap onto
  the next line, array counters print `-` and then one `label value` line per bucket;
  raw latencies end in `us`, percent numerators in `%` (the layout NetApp Harvest's
  StatPerf collector parses). Raw values are cumulative: rates come from two samples.
* The session is set up as Harvest's StatPerf collector sets up its own
  (cmd/collectors/statperf/statperf.go): diagnostic privilege, no confirmations, no
  paging, `-units raw` (otherwise byte counters print scaled, "1.5GB"), and `statistics
  settings modify -counter-display all` (otherwise base counters the catalogue marks
  `no-display`, such as cpu_elapsed_time, are left out of the table).
* `set -showseparator "|"` makes `... show -fields a,b` print a header of field names,
  a row of long names, then one row per record, each ending with the separator
  (docs.netapp.com/us-en/ontap-cli/set.html); `set -units B` prints sizes in bytes and
  `-rows 0` turns paging off (rows.html).
* A failed command prints `Error: ...` (the exit status of the session is not reliable).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from db2vtop.collectors.base import CollectorError
from db2vtop.collectors.storage.common import StorageFormatError

SEPARATOR = "|"

#: counters read per object; the latency counters' base is the matching *_ops counter
VOLUME_COUNTERS = ("vserver_name", "total_ops", "read_ops", "write_ops", "other_ops", "read_data", "write_data",
                   "avg_latency", "read_latency", "write_latency", "other_latency")
LUN_COUNTERS = ("vserver_name", "total_ops", "read_ops", "write_ops", "other_ops", "read_data", "write_data",
                "avg_latency", "avg_read_latency", "avg_write_latency", "avg_other_latency", "queue_full",
                "read_align_histo", "write_align_histo")
NODE_COUNTERS = ("cpu_busy", "cpu_elapsed_time", "total_ops", "read_ops", "write_ops")
DISK_COUNTERS = ("node_name", "disk_busy", "base_for_disk_busy")
OBJECTS = (("volume", VOLUME_COUNTERS), ("lun", LUN_COUNTERS), ("system:node", NODE_COUNTERS),
           ("disk:constituent", DISK_COUNTERS))

#: configuration read with `-fields` (admin privilege), one command per SSH round trip
FACT_COMMANDS = {
    "volume": ("volume show", ("vserver", "volume", "aggregate", "size", "percent-snapshot-space",
                               "snapshot-policy", "atime-update", "nvfail", "space-guarantee", "snapdir-access")),
    "lun": ("lun show", ("vserver", "path", "volume", "size", "ostype", "serial", "space-reserve")),
    "aggregate": ("storage aggregate show", ("aggregate", "node", "raidtype", "maxraidsize")),
    "port": ("network port show", ("node", "port", "mtu", "flowcontrol-admin", "flowcontrol-oper")),
    "igroup": ("lun igroup show", ("vserver", "igroup", "protocol", "ostype", "initiator")),
    "iscsi_session": ("vserver iscsi session parameter show", ("vserver", "tpgroup", "tsih", "cmd-window-size")),
}
VSERVER_SCOPED = frozenset({"volume", "lun", "igroup", "iscsi_session"})


class OntapCommandError(CollectorError):
    """ONTAP refused a command (permissions, privilege, an unknown field)."""


#: the session settings of NetApp Harvest's StatPerf collector, sent before its `statistics show -raw`
SESSION = "set -privilege diagnostic -confirmations off -rows 0 -showallfields false -units raw"
COUNTER_DISPLAY = "statistics settings modify -counter-display all"
#: base counters ONTAP's catalogue marks `no-display` (Harvest docs/ontap-metrics.md: "Type: delta,no-display"):
#: absent from `statistics show` unless the session turned the counter display to all
NO_DISPLAY = frozenset({"cpu_elapsed_time", "base_for_disk_busy"})


def perf_line() -> str:
    """One round trip: the session set-up, then every performance object's raw counters."""
    stats = "; ".join(stats_command(obj, counters) for obj, counters in OBJECTS)
    return f"{SESSION}; {COUNTER_DISPLAY}; {stats}"


def stats_command(obj: str, counters: tuple[str, ...], instance: str | None = None) -> str:
    where = f' -instance "{instance}"' if instance else ""
    return f"statistics show -raw -object {obj}{where} -counter {'|'.join(counters)}"


def fact_line(what: str, vserver: str | None) -> str:
    command, fields = FACT_COMMANDS[what]
    scope = f" -vserver {vserver}" if vserver and what in VSERVER_SCOPED else ""
    return f'set -showseparator "{SEPARATOR}" -units B -rows 0; {command}{scope} -fields {",".join(fields)}'


def check_errors(text: str, what: str) -> None:
    for line in text.splitlines():
        if line.lstrip().startswith("Error:"):
            raise OntapCommandError(f"ONTAP refused {what}: {line.strip()[:300]}")


# --- statistics show -raw -------------------------------------------------------------

CounterValue = str | dict[str, str]


@dataclass
class RawInstance:
    object: str
    name: str = ""
    scope: str = ""
    counters: dict[str, CounterValue] = field(default_factory=dict)
    _numbers: dict[str, float] = field(default_factory=dict, repr=False)
    _arrays: dict[str, dict[str, float] | None] = field(default_factory=dict, repr=False)

    def number(self, counter: str) -> float:
        """A counter as a number, converted once (the instance is the next cycle's baseline)."""
        value = self._numbers.get(counter)
        if value is None:
            value = self._numbers[counter] = raw_number(self.counters.get(counter), f"{self.object} {self.name} "
                                                                                    f"{counter}")
        return value

    def array(self, counter: str) -> dict[str, float] | None:
        """An array counter's buckets as numbers (None if absent or not an array), converted once."""
        if counter not in self._arrays:
            value = self.counters.get(counter)
            self._arrays[counter] = None if not isinstance(value, dict) else {
                k: raw_number(v, f"{self.object} {self.name} {counter}[{k}]") for k, v in value.items()}
        return self._arrays[counter]


def parse_raw(text: str) -> dict[str, list[RawInstance]]:
    """Instances per object, counter values as printed (units still attached).

    Header lines (Object:, Instance:, Scope: ...) start in column 0, table lines are
    indented: a counter row by 4 spaces, an array bucket further (its label is
    right-aligned), a wrapped value or counter name is a line with a single word.
    """
    out: dict[str, list[RawInstance]] = {}
    cur: RawInstance | None = None
    in_table = False
    value_col = 37  # start of the value column; taken from the divider
    last: str | None = None  # counter of the previous row, for wrapped values
    array: dict[str, str] | None = None
    for line in text.splitlines():
        if not line or line[0] != " ":
            if line.startswith("Object:"):
                cur = RawInstance(line[7:].strip())
                out.setdefault(cur.object, []).append(cur)
                in_table, last, array = False, None, None
            elif cur is not None and not in_table:
                if line.startswith("Instance:"):
                    cur.name = line[9:].strip()
                elif line.startswith("Scope:"):
                    cur.scope = line[6:].strip()
            continue  # banners, footers ("N entries were displayed."), Start-time, End-time
        tokens = line.split()
        if cur is None or not tokens:
            continue
        if not in_table:
            in_table = tokens[0] == "Counter" and tokens[-1] == "Value"
            continue
        first = tokens[0]
        if len(tokens) == 2 and first[0] == "-" and first.strip("-") == "" and tokens[1].strip("-") == "":
            value_col = line.rindex(" ") + 1
            continue
        if len(tokens) == 1:
            if last is None:
                raise StorageFormatError(f"ONTAP statistics: unexpected line {first[:60]!r} in "
                                         f"{cur.name or cur.object}")
            if array is not None or line.find(first) >= value_col:
                prev = cur.counters[last]
                if isinstance(prev, str):
                    cur.counters[last] = prev + first
            else:  # the counter name itself wrapped
                value = cur.counters.pop(last)
                last = last + first
                cur.counters[last] = value
            continue
        if array is not None and line[4] == " ":
            array[" ".join(tokens[:-1])] = tokens[-1]
            continue
        name, value = (first if len(tokens) == 2 else " ".join(tokens[:-1])), tokens[-1]
        if value == "-":
            array = {}
            cur.counters[name] = array
        else:
            array = None
            cur.counters[name] = value
        last = name
    return out


#: suffixes a raw value can carry: times (to microseconds), percent numerators, and the data units a session
#: without `-units raw` prints byte counters in (ONTAP's sizes are binary: KB = 1024 B)
_UNIT = {"us": 1.0, "ms": 1000.0, "s": 1e6, "%": 1.0, "": 1.0,
         "B": 1.0, "KB": 2.0**10, "MB": 2.0**20, "GB": 2.0**30, "TB": 2.0**40, "PB": 2.0**50}
_VALUE = re.compile(r"^(-?[0-9]+(?:\.[0-9]+)?)(us|ms|s|%|B|KB|MB|GB|TB|PB)?$")


#: ONTAP's raw counters are unsigned 64-bit: anything past that (hundreds of digits read as inf) is no reading
MAX_COUNTER = 2.0**64


class ImplausibleCounterError(StorageFormatError):
    """A counter that reads as a number but cannot be one ONTAP keeps (negative, or past 64 bits)."""


def raw_number(value: CounterValue | None, what: str) -> float:
    """A raw counter as a number; times in microseconds, data in bytes."""
    if not isinstance(value, str):
        raise StorageFormatError(f"ONTAP statistics: {what} is {'missing' if value is None else 'an array'}")
    if value.isascii() and value.isdigit():  # the common case, and much cheaper than the pattern
        number, unit = float(value), 1.0
    else:
        m = _VALUE.match(value)
        if not m:
            raise StorageFormatError(f"ONTAP statistics: {what} = {value[:40]!r} is not a number")
        number, unit = float(m.group(1)), _UNIT[m.group(2) or ""]
    if not 0 <= number < MAX_COUNTER:  # inf fails this too
        raise ImplausibleCounterError(f"ONTAP statistics: {what} = {value[:40]!r} is negative or past what a "
                                      "64-bit counter holds")
    return number * unit


# --- show -fields with a separator ------------------------------------------------------

_FIELD_NAME = re.compile(r"^[a-z][a-z0-9-]*$")


def parse_fields(text: str, sep: str = SEPARATOR) -> list[dict[str, str]]:
    """Records of a `show -fields` table printed with `set -showseparator`."""
    header: list[str] | None = None
    skip_long_names = False
    rows: list[dict[str, str]] = []
    for raw in text.splitlines():
        line = raw.rstrip("\r\n")
        s = line.strip()
        if not s:
            continue
        if header is None:
            parts = _split(line, sep)
            if len(parts) > 1 and all(_FIELD_NAME.match(p) for p in parts):
                header, skip_long_names = parts, True
            continue
        if skip_long_names:
            skip_long_names = False
            continue
        if s.endswith("entries were displayed.") or s.endswith("entry was displayed."):
            continue
        parts = _split(line, sep)
        if len(parts) != len(header):
            raise StorageFormatError(f"ONTAP table: a row has {len(parts)} fields, the header {len(header)}: "
                                     f"{s[:80]!r}")
        rows.append(dict(zip(header, parts, strict=True)))
    return rows


def _split(line: str, sep: str) -> list[str]:
    parts = [p.strip() for p in line.split(sep)]
    if parts and parts[-1] == "":
        parts.pop()
    return parts


_SIZE = re.compile(r"^([0-9]+(?:\.[0-9]+)?)\s*(B|KB|MB|GB|TB|PB)?$")
_SIZE_UNIT = {"B": 1, "KB": 2**10, "MB": 2**20, "GB": 2**30, "TB": 2**40, "PB": 2**50}


def size_bytes(value: str, what: str) -> int | None:
    """ONTAP sizes ("1073741824B", "20GB"); "-" means not set."""
    if value in ("", "-"):
        return None
    m = _SIZE.match(value)
    if not m:
        raise StorageFormatError(f"ONTAP table: {what} = {value[:40]!r} is not a size")
    return int(float(m.group(1)) * _SIZE_UNIT[m.group(2) or "B"])


def flag(value: str) -> bool | None:
    """ONTAP booleans print as true/false, on/off, enabled/disabled."""
    v = value.strip().lower()
    if v in ("true", "on", "enabled", "yes"):
        return True
    if v in ("false", "off", "disabled", "no"):
        return False
    return None
