"""Every statement db2vtop sends to DB2, and the allowlist that guards them.

Each SELECT returns one VARCHAR per row that we build ourselves: `tag|v1|v2|...|vn|`.
Numbers go through CHAR() (locale-free digits), NULL becomes an empty field, strings are
escaped (`\\` `\\|` `\\n`), and the trailing `|` shows that a row arrived whole. That leaves
the CLP only one column to right-pad, whatever its widths, NULL dashes or code page.

A query has variants, newest first: when DB2 answers SQL0204N/SQL0206N/SQL0440N (no such
function, column or signature on this level), the collector moves to the next variant
(e.g. MON_GET_TRANSACTION_LOG, then SYSIBMADM.SNAPDB on 9.7) and says which it uses.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from db2vtop.collectors.base import CollectorError


class Db2Error(CollectorError):
    """A DB2 failure the collector understood; the message says what to do."""


Adapt = Callable[[dict], None]


def num(col: str, agg: bool = False, as_: str | None = None) -> tuple[str, str]:
    """A number (or timestamp) column as locale-free characters; NULL becomes empty."""
    ref = f"SUM(T.{col})" if agg else f"T.{col}"
    return (as_ or col, f"COALESCE(RTRIM(CHAR({ref})),'')")


def text(col: str, as_: str | None = None) -> tuple[str, str]:
    """A string column with the delimiter, backslash and newlines escaped."""
    return (as_ or col,
            f"COALESCE(REPLACE(REPLACE(REPLACE(RTRIM(T.{col}),'\\','\\\\'),'|','\\|'),CHR(10),'\\n'),'')")


def null(col: str) -> tuple[str, str]:
    return (col, "''")


CLOCK = ("CLOCK", "RTRIM(CHAR(CURRENT TIMESTAMP - CURRENT TIMEZONE))")  # the server's UTC clock


@dataclass(frozen=True)
class Variant:
    label: str                       # what the collector says it uses, e.g. "SYSIBMADM.SNAPDB"
    source: str                      # FROM clause; {member} is replaced
    items: tuple[tuple[str, str], ...]
    tail: str = ""                   # WHERE / GROUP BY
    adapt: Adapt | None = None       # turns this variant's columns into the query's names

    @property
    def columns(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.items)

    @property
    def grant(self) -> str:
        """The least privilege this variant needs, as a GRANT statement."""
        m = re.search(r"TABLE\((\w+)\(", self.source)
        if m:
            return f"GRANT EXECUTE ON FUNCTION SYSPROC.{m.group(1)} TO USER <user>"
        return f"GRANT SELECT ON {self.source.split()[0]} TO USER <user>"

    def sql(self, tag: str, member: int) -> str:
        lines = [f"SELECT '{tag}'"]
        lines += [f"||'|'||{expr}" for _, expr in self.items]
        lines += ["||'|'", "FROM " + self.source.format(member=member)]
        if self.tail:
            lines.append(self.tail)
        return "\n".join(lines)


@dataclass(frozen=True)
class Query:
    tag: str                         # row tag and id
    variants: tuple[Variant, ...]
    keys: tuple[tuple[str, str], ...] = ()  # (column, sample tag) that identify a row, with MEMBER
    strings: frozenset[str] = frozenset()
    counters: tuple[str, ...] = ()   # cumulative since activation: rates
    facts: bool = False              # only run when facts are due

    def parse_value(self, name: str, raw: str | None) -> str | int | float | None:
        if raw is None or name in self.strings:
            return raw
        try:
            return int(raw)
        except ValueError:
            try:
                return float(raw.replace(",", "."))
            except ValueError:
                raise Db2Error(f"{self.tag}: {name} is not a number: {raw[:40]!r}") from None


def _tiers(label: str, source: str, items: list[tuple[str, str]], newer: set[str] | tuple[set[str], ...],
           tail: str = "", adapt: Adapt | None = None) -> tuple[Variant, ...]:
    """The full variant and, for each set of columns newer than some level (newest first), one more with
    those and every newer set as NULL: 11.5 → 10.1 → 9.7."""
    levels = (newer,) if isinstance(newer, set) else newer
    variants = [Variant(label, source, tuple(items), tail, adapt)]
    gone: set[str] = set()
    for cols in levels:
        if not cols:
            continue
        gone |= cols
        older = tuple(null(n) if n in gone else (n, e) for n, e in items)
        variants.append(Variant(f"{label} without {', '.join(sorted(gone))}", source, older, tail, adapt))
    return tuple(variants)


def _fn(name: str, args: str) -> str:
    return f"TABLE({name}({args})) AS T"


# --- monitoring queries (every cycle) --------------------------------------------------

DB_COUNTERS = (
    "TOTAL_APP_COMMITS", "TOTAL_APP_ROLLBACKS", "ACT_COMPLETED_TOTAL", "ROWS_READ", "ROWS_RETURNED",
    "TOTAL_RQST_TIME", "TOTAL_WAIT_TIME", "TOTAL_CPU_TIME", "POOL_READ_TIME", "POOL_WRITE_TIME",
    "DIRECT_READ_TIME", "DIRECT_WRITE_TIME", "LOG_DISK_WAIT_TIME", "LOG_BUFFER_WAIT_TIME", "LOCK_WAIT_TIME",
    "LOCK_WAITS", "LOCK_TIMEOUTS", "DEADLOCKS", "LOCK_ESCALS", "TOTAL_SORTS", "SORT_OVERFLOWS",
    "PKG_CACHE_INSERTS", "PKG_CACHE_LOOKUPS", "PREFETCH_WAIT_TIME", "TOTAL_HASH_JOINS", "HASH_JOIN_OVERFLOWS")
DB_NEWER = {"PREFETCH_WAIT_TIME", "TOTAL_HASH_JOINS", "HASH_JOIN_OVERFLOWS"}

DATABASE = Query(
    "db",
    (Variant("MON_GET_DATABASE", _fn("MON_GET_DATABASE", "{member}"),
             (num("MEMBER"), CLOCK, num("DB_CONN_TIME"), *(num(c) for c in DB_COUNTERS))),
     *_tiers("MON_GET_WORKLOAD summed per member", _fn("MON_GET_WORKLOAD", "'',{member}"),
             [num("MEMBER"), CLOCK, null("DB_CONN_TIME"), *(num(c, agg=True) for c in DB_COUNTERS)],
             DB_NEWER, tail="GROUP BY T.MEMBER")),
    strings=frozenset({"CLOCK", "DB_CONN_TIME"}), counters=DB_COUNTERS)

BP_COUNTERS = (
    "POOL_DATA_L_READS", "POOL_DATA_P_READS", "POOL_INDEX_L_READS", "POOL_INDEX_P_READS",
    "POOL_XDA_L_READS", "POOL_XDA_P_READS", "POOL_COL_L_READS", "POOL_COL_P_READS",
    "POOL_TEMP_DATA_L_READS", "POOL_TEMP_DATA_P_READS", "POOL_TEMP_INDEX_L_READS", "POOL_TEMP_INDEX_P_READS",
    "POOL_TEMP_XDA_L_READS", "POOL_TEMP_XDA_P_READS", "POOL_TEMP_COL_L_READS", "POOL_TEMP_COL_P_READS",
    "POOL_ASYNC_DATA_READS", "POOL_ASYNC_INDEX_READS", "POOL_ASYNC_XDA_READS", "POOL_ASYNC_COL_READS",
    "POOL_READ_TIME", "POOL_ASYNC_READ_TIME", "POOL_WRITE_TIME",
    "POOL_DATA_WRITES", "POOL_INDEX_WRITES", "POOL_XDA_WRITES", "POOL_COL_WRITES",
    "DIRECT_READS", "DIRECT_WRITES", "POOL_DRTY_PG_STEAL_CLNS", "POOL_LSN_GAP_CLNS", "POOL_DRTY_PG_THRSH_CLNS",
    # pages the agents found in the pool = found - found by prefetchers: the hit ratio of db2mon and of
    # IBM's "Formulas for calculating buffer pool hit ratios" (Db2 10.1+)
    *(f"POOL_{a}{k}_LBP_PAGES_FOUND" for k in ("DATA", "INDEX", "XDA", "COL") for a in ("", "ASYNC_")))
COL_NEWER = {"POOL_COL_L_READS", "POOL_COL_P_READS", "POOL_TEMP_COL_L_READS", "POOL_TEMP_COL_P_READS",
             "POOL_ASYNC_COL_READS", "POOL_COL_WRITES", "POOL_COL_LBP_PAGES_FOUND", "POOL_ASYNC_COL_LBP_PAGES_FOUND"}
LBP_NEWER = {f"POOL_{a}{k}_LBP_PAGES_FOUND" for k in ("DATA", "INDEX", "XDA") for a in ("", "ASYNC_")}

BUFFERPOOL = Query(
    "bp",
    _tiers("MON_GET_BUFFERPOOL", _fn("MON_GET_BUFFERPOOL", "'',{member}"),
           [num("MEMBER"), text("BP_NAME"), *(num(c) for c in BP_COUNTERS)],
           (COL_NEWER, LBP_NEWER), tail="WHERE T.BP_NAME NOT LIKE 'IBMSYSTEMBP%'"),
    keys=(("BP_NAME", "bufferpool"),), strings=frozenset({"BP_NAME"}), counters=BP_COUNTERS)

TS_COUNTERS = (
    "POOL_READ_TIME", "POOL_WRITE_TIME", "POOL_DATA_P_READS", "POOL_INDEX_P_READS", "POOL_XDA_P_READS",
    "POOL_COL_P_READS", "POOL_TEMP_DATA_P_READS", "POOL_TEMP_INDEX_P_READS", "POOL_TEMP_XDA_P_READS",
    "POOL_TEMP_COL_P_READS", "POOL_ASYNC_DATA_READS", "POOL_ASYNC_INDEX_READS", "POOL_ASYNC_XDA_READS",
    "POOL_ASYNC_COL_READS", "POOL_DATA_WRITES", "POOL_INDEX_WRITES", "POOL_XDA_WRITES", "POOL_COL_WRITES",
    "DIRECT_READS", "DIRECT_WRITES", "DIRECT_READ_REQS", "DIRECT_WRITE_REQS", "DIRECT_READ_TIME",
    "DIRECT_WRITE_TIME", "PREFETCH_WAIT_TIME", "PREFETCH_WAITS")
TS_GAUGES = ("TBSP_PAGE_SIZE", "TBSP_USED_PAGES", "TBSP_TOTAL_PAGES")

TABLESPACE = Query(
    "ts",
    _tiers("MON_GET_TABLESPACE", _fn("MON_GET_TABLESPACE", "'',{member}"),
           [num("MEMBER"), text("TBSP_NAME"), *(num(c) for c in TS_COUNTERS + TS_GAUGES)],
           {"POOL_COL_P_READS", "POOL_TEMP_COL_P_READS", "POOL_ASYNC_COL_READS", "POOL_COL_WRITES",
            "PREFETCH_WAIT_TIME", "PREFETCH_WAITS"}),
    keys=(("TBSP_NAME", "tablespace"),), strings=frozenset({"TBSP_NAME"}), counters=TS_COUNTERS)

CT_COUNTERS = ("POOL_READ_TIME", "POOL_WRITE_TIME", "PAGES_READ", "PAGES_WRITTEN", "DIRECT_READS",
               "DIRECT_WRITES", "DIRECT_READ_TIME", "DIRECT_WRITE_TIME")

CONTAINER = Query(
    "ct",
    _tiers("MON_GET_CONTAINER", _fn("MON_GET_CONTAINER", "'',{member}"),
           [num("MEMBER"), text("TBSP_NAME"), text("CONTAINER_NAME"), *(num(c) for c in CT_COUNTERS),
            num("FS_USED_SIZE"), num("FS_TOTAL_SIZE"), num("ACCESSIBLE")],
           {"FS_USED_SIZE", "FS_TOTAL_SIZE"}),
    keys=(("TBSP_NAME", "tablespace"), ("CONTAINER_NAME", "container")),
    strings=frozenset({"TBSP_NAME", "CONTAINER_NAME"}), counters=CT_COUNTERS)

LOG_COUNTERS = ("LOG_WRITES", "LOG_WRITE_TIME", "NUM_LOG_WRITE_IO", "NUM_LOG_BUFFER_FULL", "LOG_READS",
                "LOG_READ_TIME", "NUM_LOG_READ_IO")
LOG_GAUGES = ("TOTAL_LOG_USED", "TOTAL_LOG_AVAILABLE", "SEC_LOGS_ALLOCATED")


def _snapdb_times(row: dict) -> None:
    """SNAPDB splits log times into seconds and nanoseconds; MON_GET_TRANSACTION_LOG has ms."""
    for what in ("WRITE", "READ"):
        s, ns = row.pop(f"LOG_{what}_TIME_S"), row.pop(f"LOG_{what}_TIME_NS")
        row[f"LOG_{what}_TIME"] = None if s is None else s * 1000 + (ns or 0) / 1e6


LOG = Query(
    "log",
    (Variant("MON_GET_TRANSACTION_LOG", _fn("MON_GET_TRANSACTION_LOG", "{member}"),
             (num("MEMBER"), *(num(c) for c in LOG_COUNTERS + LOG_GAUGES))),
     Variant("SYSIBMADM.SNAPDB", "SYSIBMADM.SNAPDB AS T",
             (num("DBPARTITIONNUM", as_="MEMBER"), num("LOG_WRITES"), num("LOG_WRITE_TIME_S"),
              num("LOG_WRITE_TIME_NS"), num("NUM_LOG_WRITE_IO"), num("NUM_LOG_BUFFER_FULL"), num("LOG_READS"),
              num("LOG_READ_TIME_S"), num("LOG_READ_TIME_NS"), num("NUM_LOG_READ_IO"),
              *(num(c) for c in LOG_GAUGES)),
             adapt=_snapdb_times)),
    counters=LOG_COUNTERS)

MEMORY = Query(
    "mem",
    (Variant("MON_GET_MEMORY_SET", _fn("MON_GET_MEMORY_SET", "NULL,NULL,{member}"),
             (num("MEMBER"), text("MEMORY_SET_TYPE"), text("DB_NAME"), num("MEMORY_SET_SIZE"),
              num("MEMORY_SET_COMMITTED"), num("MEMORY_SET_USED"), num("MEMORY_SET_USED_HWM"))),),
    keys=(("MEMORY_SET_TYPE", "memory_set"), ("DB_NAME", "memory_db")),
    strings=frozenset({"MEMORY_SET_TYPE", "DB_NAME"}))

SYSTEM = Query(
    "sys",
    (Variant("ENV_GET_SYSTEM_RESOURCES", _fn("ENV_GET_SYSTEM_RESOURCES", ""),
             (num("MEMBER"), num("CPU_USAGE_TOTAL"), num("CPU_LOAD_SHORT"), num("CPU_ONLINE"),
              num("MEMORY_TOTAL"), num("MEMORY_FREE"), num("SWAP_PAGES_IN"), num("SWAP_PAGES_OUT"))),),
    counters=("SWAP_PAGES_IN", "SWAP_PAGES_OUT"))

# --- configuration queries (when facts are due) -------------------------------------------

INSTANCE = Query(
    "inst",
    _tiers("SYSIBMADM.ENV_INST_INFO", "SYSIBMADM.ENV_INST_INFO AS T",
           [text("INST_NAME"), text("SERVICE_LEVEL"), text("BLD_LEVEL"), text("PTF"), num("NUM_DBPARTITIONS"),
            num("NUM_MEMBERS")], {"NUM_MEMBERS"}),
    strings=frozenset({"INST_NAME", "SERVICE_LEVEL", "BLD_LEVEL", "PTF"}), facts=True)

_CFG = [text("NAME"), text("VALUE"), text("VALUE_FLAGS"), text("DEFERRED_VALUE")]
_CFG_STRINGS = frozenset({"NAME", "VALUE", "VALUE_FLAGS", "DEFERRED_VALUE"})

DBCFG = Query(
    "dbcfg",
    (Variant("SYSIBMADM.DBCFG", "SYSIBMADM.DBCFG AS T", (num("MEMBER"), *_CFG)),
     Variant("SYSIBMADM.DBCFG by DBPARTITIONNUM", "SYSIBMADM.DBCFG AS T",
             (num("DBPARTITIONNUM", as_="MEMBER"), *_CFG))),
    strings=_CFG_STRINGS, facts=True)

DBMCFG = Query("dbmcfg", (Variant("SYSIBMADM.DBMCFG", "SYSIBMADM.DBMCFG AS T", tuple(_CFG)),),
               strings=_CFG_STRINGS, facts=True)

_REG = [text("REG_VAR_NAME"), text("REG_VAR_VALUE"), text("LEVEL")]

REGISTRY = Query(
    "reg",
    # Db2 11.5 documents (member, showall), showall 0 = the variables that are set; earlier levels take the
    # member only; the view is the deprecated one ENV_GET_REG_VARIABLES replaces
    (Variant("ENV_GET_REG_VARIABLES(member, showall)", _fn("ENV_GET_REG_VARIABLES", "{member},0"),
             (num("MEMBER"), *_REG)),
     Variant("ENV_GET_REG_VARIABLES(member)", _fn("ENV_GET_REG_VARIABLES", "{member}"), (num("MEMBER"), *_REG)),
     Variant("SYSIBMADM.REG_VARIABLES", "SYSIBMADM.REG_VARIABLES AS T",
             (num("DBPARTITIONNUM", as_="MEMBER"), *_REG))),
    strings=frozenset({"REG_VAR_NAME", "REG_VAR_VALUE", "LEVEL"}), facts=True)

TBSPCFG = Query(
    "tbspcfg",
    (Variant("MON_GET_TABLESPACE", _fn("MON_GET_TABLESPACE", "'',{member}"),
             (num("MEMBER"), text("TBSP_NAME"), num("TBSP_ID"), text("TBSP_TYPE"), text("TBSP_CONTENT_TYPE"),
              num("TBSP_PAGE_SIZE"), num("TBSP_EXTENT_SIZE"), num("TBSP_PREFETCH_SIZE"),
              num("TBSP_USING_AUTO_STORAGE"), num("TBSP_AUTO_RESIZE_ENABLED"), num("FS_CACHING"))),),
    strings=frozenset({"TBSP_NAME", "TBSP_TYPE", "TBSP_CONTENT_TYPE"}), facts=True)

TBSPCAT = Query(
    "tbspcat",
    (Variant("SYSCAT.TABLESPACES", "SYSCAT.TABLESPACES AS T",
             (text("TBSPACE"), num("PREFETCHSIZE"), num("OVERHEAD"), num("TRANSFERRATE"), num("BUFFERPOOLID"),
              text("DATATYPE"))),),
    strings=frozenset({"TBSPACE", "DATATYPE"}), facts=True)

CTCFG = Query(
    "ctcfg",
    _tiers("MON_GET_CONTAINER", _fn("MON_GET_CONTAINER", "'',{member}"),
           [num("MEMBER"), text("TBSP_NAME"), text("CONTAINER_NAME"), num("CONTAINER_ID"), text("CONTAINER_TYPE"),
            num("STRIPE_SET"), text("FS_ID")], {"FS_ID"}),  # FS_ID is VARCHAR(22)
    strings=frozenset({"TBSP_NAME", "CONTAINER_NAME", "CONTAINER_TYPE", "FS_ID"}), facts=True)

BPCAT = Query(
    "bpcat",
    (Variant("SYSCAT.BUFFERPOOLS", "SYSCAT.BUFFERPOOLS AS T",
             (text("BPNAME"), num("BUFFERPOOLID"), num("NPAGES"), num("PAGESIZE"), num("NUMBLOCKPAGES"),
              num("BLOCKSIZE"))),),
    strings=frozenset({"BPNAME"}), facts=True)

QUERIES: tuple[Query, ...] = (DATABASE, BUFFERPOOL, TABLESPACE, CONTAINER, LOG, MEMORY, SYSTEM,
                              INSTANCE, DBCFG, DBMCFG, REGISTRY, TBSPCFG, TBSPCAT, CTCFG, BPCAT)
BY_TAG = {q.tag: q for q in QUERIES}

# --- the allowlist ---------------------------------------------------------------------------

_FUNCTIONS = frozenset({"COALESCE", "RTRIM", "CHAR", "VARCHAR", "REPLACE", "CHR", "SUM", "TABLE"})
_FORBIDDEN = frozenset({
    "INSERT", "UPDATE", "DELETE", "MERGE", "CALL", "CREATE", "DROP", "ALTER", "GRANT", "REVOKE", "TRUNCATE",
    "DECLARE", "SET", "EXECUTE", "EXEC", "LOCK", "REFRESH", "RENAME", "COMMENT", "EXPORT", "IMPORT", "LOAD",
    "REORG", "RUNSTATS", "BACKUP", "RESTORE", "FORCE", "ADMIN_CMD", "INTO", "WITH", "VALUES"})
_SOURCE = re.compile(
    r"FROM\s+(?:TABLE\(\s*(?:SYSPROC\.)?(?:MON_GET_|ENV_GET_)\w+\s*\([^()]*\)\s*\)|(?:SYSIBMADM|SYSCAT)\.\w+)"
    r"(?:\s+AS\s+T)?(?:\s+(?:WHERE|GROUP\s+BY)\b.*)?$", re.S)
_LITERAL = re.compile(r"'(?:[^']|'')*'")
_NAME = r"[A-Za-z0-9@#$_]{1,8}"
_CONNECT = re.compile(rf"CONNECT TO {_NAME}(?: USER [A-Za-z0-9@#$_.\-]{{1,128}} USING [^\s;'\"]+)?", re.I)
_CLP = re.compile(r"(?:TERMINATE|ECHO @@db2vtop:[a-z0-9:_]+)", re.I)


def check_statement(stmt: str) -> str:
    """Refuse anything but a read-only SELECT on MON_GET_*, ENV_GET_*, SYSIBMADM.* or SYSCAT.*,
    and the CLP's CONNECT TO / ECHO / TERMINATE. Called on every statement before it is sent."""
    if _CONNECT.fullmatch(stmt) or _CLP.fullmatch(stmt):
        return stmt
    bare = _LITERAL.sub(" 0 ", stmt)
    if "'" in bare or ";" in bare or "--" in bare or "/*" in bare or "\\" in bare:
        raise Db2Error(f"refusing to send a statement with an unbalanced quote, a ';' or a comment: {stmt[:80]!r}")
    upper = " ".join(bare.upper().split())
    words = re.findall(r"[A-Z_][A-Z0-9_$#@]*", upper)
    if not upper.startswith("SELECT ") or words.count("SELECT") != 1 or words.count("FROM") != 1:
        raise Db2Error(f"refusing to send anything but one plain SELECT: {stmt[:80]!r}")
    bad = _FORBIDDEN.intersection(words)
    if bad:
        raise Db2Error(f"refusing to send a statement containing {', '.join(sorted(bad))}: {stmt[:80]!r}")
    called = {f for f in re.findall(r"([A-Z_][A-Z0-9_.]*)\s*\(", upper)
              if f not in _FUNCTIONS and not re.fullmatch(r"(?:SYSPROC\.)?(?:MON_GET|ENV_GET)_\w+", f)}
    if called:
        raise Db2Error(f"refusing to call {', '.join(sorted(called))}: {stmt[:80]!r}")
    from_at = upper.index(" FROM ")
    if not _SOURCE.fullmatch(upper[from_at + 1:]):
        raise Db2Error("refusing a SELECT that reads anything but MON_GET_*, ENV_GET_*, SYSIBMADM.* or SYSCAT.*: "
                       f"{stmt[:80]!r}")
    return stmt
