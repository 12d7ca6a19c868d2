"""Rates and ratios from two readings of DB2's cumulative counters, as IBM computes them
(db2mon, the MON_GET_* documentation examples). Units are normalised here: times in ms
(TOTAL_CPU_TIME arrives in µs), log pages of 4 KiB, memory in bytes, percent 0-100.

A ratio whose denominator did not move in the interval is left out (None), not 0: an idle
buffer pool has no hit ratio. A counter that went backwards is a reset (deactivation,
restart, failover): the row becomes the new baseline and yields no rates this cycle.
"""

from __future__ import annotations

from collections.abc import Callable

MonRow = dict[str, object]  # one MON_GET_* result row: column -> value
LOG_PAGE_BYTES = 4096
ABSURD_PER_S = 1e12  # no DB2 counter moves this fast: a corrupt or wrapped reading, treated as a reset


class Rates:
    """One row's counters against its baseline over `secs` seconds."""

    __slots__ = ("cur", "prev", "secs")

    def __init__(self, prev: MonRow, cur: MonRow, secs: float):
        self.prev, self.cur, self.secs = prev, cur, secs

    def d(self, *cols: str) -> float | None:
        cur, prev = self.cur, self.prev
        if len(cols) == 1:  # the common case, kept cheap: a cycle computes ~100k of these
            a, b = cur.get(cols[0]), prev.get(cols[0])
            return None if a is None or b is None else a - b  # type: ignore[operator]
        total = None
        for c in cols:
            a, b = cur.get(c), prev.get(c)
            if a is not None and b is not None:
                total = (total or 0) + a - b  # type: ignore[operator]
        return total

    def rate(self, *cols: str) -> float | None:
        d = self.d(*cols)
        return None if d is None else d / self.secs


def per(num: float | None, den: float | None) -> float | None:
    return None if num is None or not den else num / den


def pct(num: float | None, den: float | None) -> float | None:
    return None if num is None or not den else num / den * 100.0


def hit(misses: float | None, total: float | None) -> float | None:
    """(1 - misses/total) * 100: the package cache's hit ratio, and a buffer pool's on Db2 9.7 (kept in 0-100:
    prefetched pages count as misses there, and can outnumber the logical reads)."""
    if misses is None or not total:
        return None
    return min(100.0, max(0.0, (1.0 - misses / total) * 100.0))


def _scaled(v: object, factor: float) -> float | None:
    return None if v is None else v * factor  # type: ignore[operator]


def database_fields(r: Rates, cur: MonRow) -> dict:
    rq = r.d("TOTAL_RQST_TIME")
    cpu_us = r.d("TOTAL_CPU_TIME")
    cpu_ms = None if cpu_us is None else cpu_us / 1000.0
    f = {
        "commits_per_s": r.rate("TOTAL_APP_COMMITS"),
        "rollbacks_per_s": r.rate("TOTAL_APP_ROLLBACKS"),
        "activities_per_s": r.rate("ACT_COMPLETED_TOTAL"),
        "rows_read_per_s": r.rate("ROWS_READ"),
        "rows_returned_per_s": r.rate("ROWS_RETURNED"),
        "rows_read_per_row_returned": per(r.d("ROWS_READ"), r.d("ROWS_RETURNED")),
        "request_ms_per_s": r.rate("TOTAL_RQST_TIME"),
        "wait_ms_per_s": r.rate("TOTAL_WAIT_TIME"),
        "wait_pct": pct(r.d("TOTAL_WAIT_TIME"), rq),
        "cpu_pct": pct(cpu_ms, rq),
        "cpu_ms_per_s": per(cpu_ms, r.secs),
        "cpu_us_per_activity": per(cpu_us, r.d("ACT_COMPLETED_TOTAL")),
        "lock_waits_per_s": r.rate("LOCK_WAITS"),
        "lock_wait_ms": per(r.d("LOCK_WAIT_TIME"), r.d("LOCK_WAITS")),
        "lock_timeouts_per_s": r.rate("LOCK_TIMEOUTS"),
        "deadlocks_per_s": r.rate("DEADLOCKS"),
        "lock_escalations_per_s": r.rate("LOCK_ESCALS"),
        "sorts_per_s": r.rate("TOTAL_SORTS"),
        "sort_overflows_per_s": r.rate("SORT_OVERFLOWS"),
        "sort_overflow_pct": pct(r.d("SORT_OVERFLOWS"), r.d("TOTAL_SORTS")),
        "hash_joins_per_s": r.rate("TOTAL_HASH_JOINS"),
        "hash_join_overflows_per_s": r.rate("HASH_JOIN_OVERFLOWS"),
        "hash_join_overflow_pct": pct(r.d("HASH_JOIN_OVERFLOWS"), r.d("TOTAL_HASH_JOINS")),
        "pkg_cache_hit_pct": hit(r.d("PKG_CACHE_INSERTS"), r.d("PKG_CACHE_LOOKUPS")),
    }
    for name, col in (("pool_read", "POOL_READ_TIME"), ("pool_write", "POOL_WRITE_TIME"),
                      ("direct_read", "DIRECT_READ_TIME"), ("direct_write", "DIRECT_WRITE_TIME"),
                      ("log_disk", "LOG_DISK_WAIT_TIME"), ("log_buffer", "LOG_BUFFER_WAIT_TIME"),
                      ("lock", "LOCK_WAIT_TIME"), ("prefetch", "PREFETCH_WAIT_TIME")):
        f[f"{name}_wait_pct"] = pct(r.d(col), rq)
    return f


_BP_PAGES = ("DATA", "INDEX", "XDA", "COL")  # the page types of a buffer pool, as MON_GET_* name them


def _bp_hits(r: Rates) -> dict:
    """Hit ratios per page type and overall, as db2mon and IBM's "Formulas for calculating buffer pool hit
    ratios" (Db2 10.1+) compute them: pages the agents found in the pool (found - found by prefetchers) over
    logical reads, temporary ones included. Where the pages-found counters are NULL (9.7) it is that level's
    documented 1 - physical/logical."""
    f: dict = {}
    found = reads = 0.0
    classic_misses = classic_reads = 0.0
    lbp = True
    for page in _BP_PAGES:
        logical = r.d(f"POOL_{page}_L_READS", f"POOL_TEMP_{page}_L_READS")
        if logical is None:
            f[f"{page.lower()}_hit_pct"] = None
            continue
        physical = r.d(f"POOL_{page}_P_READS", f"POOL_TEMP_{page}_P_READS")
        got, by_prefetch = r.d(f"POOL_{page}_LBP_PAGES_FOUND"), r.d(f"POOL_ASYNC_{page}_LBP_PAGES_FOUND")
        if got is None or by_prefetch is None:
            lbp = False
            f[f"{page.lower()}_hit_pct"] = hit(physical, logical)
        else:
            f[f"{page.lower()}_hit_pct"] = pct(got - by_prefetch, logical)
            found += got - by_prefetch
        reads += logical
        classic_misses += physical or 0
        classic_reads += logical
    f["hit_pct"] = pct(found, reads) if lbp else hit(classic_misses, classic_reads)
    return f


def bufferpool_fields(r: Rates, cur: MonRow) -> dict:
    f: dict = _bp_hits(r)
    logical = physical = temp_l = temp_p = None
    for page in _BP_PAGES:
        name = page.lower()
        lr, pr = r.d(f"POOL_{page}_L_READS"), r.d(f"POOL_{page}_P_READS")
        tl, tp = r.d(f"POOL_TEMP_{page}_L_READS"), r.d(f"POOL_TEMP_{page}_P_READS")
        f[f"{name}_logical_reads_per_s"] = per(lr, r.secs)
        f[f"{name}_physical_reads_per_s"] = per(pr, r.secs)
        logical, physical = _add(logical, lr, tl), _add(physical, pr, tp)
        temp_l, temp_p = _add(temp_l, tl), _add(temp_p, tp)
    async_reads = r.d(*(f"POOL_ASYNC_{k}_READS" for k in _BP_PAGES))
    writes = r.d(*(f"POOL_{k}_WRITES" for k in _BP_PAGES))
    read_ms, async_ms = r.d("POOL_READ_TIME"), r.d("POOL_ASYNC_READ_TIME")
    sync_pages = None if physical is None or async_reads is None else physical - async_reads
    f.update({
        "temp_logical_reads_per_s": per(temp_l, r.secs),
        "temp_physical_reads_per_s": per(temp_p, r.secs),
        "logical_reads_per_s": per(logical, r.secs),
        "physical_reads_per_s": per(physical, r.secs),
        "async_reads_per_s": per(async_reads, r.secs),
        "async_read_pct": pct(async_reads, physical),
        "read_ms_per_page": per(read_ms, physical),
        "sync_read_ms_per_page": per(None if read_ms is None or async_ms is None else read_ms - async_ms,
                                     sync_pages if sync_pages and sync_pages > 0 else None),
        "writes_per_s": per(writes, r.secs),
        "write_ms_per_page": per(r.d("POOL_WRITE_TIME"), writes),
        "direct_reads_per_s": r.rate("DIRECT_READS"),
        "direct_writes_per_s": r.rate("DIRECT_WRITES"),
        "dirty_steal_cleans_per_s": r.rate("POOL_DRTY_PG_STEAL_CLNS"),
        "lsn_gap_cleans_per_s": r.rate("POOL_LSN_GAP_CLNS"),
        "threshold_cleans_per_s": r.rate("POOL_DRTY_PG_THRSH_CLNS"),
    })
    return f


def _add(total: float | None, *parts: float | None) -> float | None:
    for p in parts:
        if p is not None:
            total = (total or 0) + p
    return total


_TS_READS = tuple(f"POOL_{t}{k}_P_READS" for t in ("", "TEMP_") for k in _BP_PAGES)


def tablespace_fields(r: Rates, cur: MonRow) -> dict:
    pages_read = r.d(*_TS_READS)
    pages_written = r.d(*(f"POOL_{k}_WRITES" for k in _BP_PAGES))
    page = cur.get("TBSP_PAGE_SIZE")
    used, total = cur.get("TBSP_USED_PAGES"), cur.get("TBSP_TOTAL_PAGES")
    return {
        "pages_read_per_s": per(pages_read, r.secs),
        "pages_written_per_s": per(pages_written, r.secs),
        "read_ms_per_page": per(r.d("POOL_READ_TIME"), pages_read),
        "write_ms_per_page": per(r.d("POOL_WRITE_TIME"), pages_written),
        "async_read_pct": pct(r.d(*(f"POOL_ASYNC_{k}_READS" for k in _BP_PAGES)), pages_read),
        "direct_reads_per_s": r.rate("DIRECT_READS"),
        "direct_writes_per_s": r.rate("DIRECT_WRITES"),
        "direct_read_ms": per(r.d("DIRECT_READ_TIME"), r.d("DIRECT_READ_REQS")),
        "direct_write_ms": per(r.d("DIRECT_WRITE_TIME"), r.d("DIRECT_WRITE_REQS")),
        "prefetch_wait_ms": per(r.d("PREFETCH_WAIT_TIME"), r.d("PREFETCH_WAITS")),
        "used_bytes": None if used is None or page is None else used * page,  # type: ignore[operator]
        "total_bytes": None if total is None or page is None else total * page,  # type: ignore[operator]
        "used_pct": pct(used, total),  # type: ignore[arg-type]
    }


def container_fields(r: Rates, cur: MonRow) -> dict:
    used, total = cur.get("FS_USED_SIZE"), cur.get("FS_TOTAL_SIZE")
    return {
        "pages_read_per_s": r.rate("PAGES_READ"),
        "pages_written_per_s": r.rate("PAGES_WRITTEN"),
        "read_ms_per_page": per(r.d("POOL_READ_TIME"), r.d("PAGES_READ")),
        "write_ms_per_page": per(r.d("POOL_WRITE_TIME"), r.d("PAGES_WRITTEN")),
        "direct_reads_per_s": r.rate("DIRECT_READS"),
        "direct_writes_per_s": r.rate("DIRECT_WRITES"),
        "fs_used_bytes": used,
        "fs_total_bytes": total,
        "fs_used_pct": pct(used, total),  # type: ignore[arg-type]
        "accessible": None if cur.get("ACCESSIBLE") is None else bool(cur["ACCESSIBLE"]),
    }


def log_fields(r: Rates, cur: MonRow) -> dict:
    used, avail = cur.get("TOTAL_LOG_USED"), cur.get("TOTAL_LOG_AVAILABLE")
    finite = used is not None and avail is not None and avail >= 0  # type: ignore[operator]
    buffer_full = r.d("NUM_LOG_BUFFER_FULL")
    return {
        "log_write_ms": per(r.d("LOG_WRITE_TIME"), r.d("NUM_LOG_WRITE_IO")),
        "log_writes_per_s": r.rate("NUM_LOG_WRITE_IO"),
        "log_write_bytes_per_s": _scaled(r.rate("LOG_WRITES"), LOG_PAGE_BYTES),
        "log_buffer_full_per_s": per(buffer_full, r.secs),
        "log_buffer_full": None if buffer_full is None else int(buffer_full),
        "log_read_ms": per(r.d("LOG_READ_TIME"), r.d("NUM_LOG_READ_IO")),
        "log_reads_per_s": r.rate("NUM_LOG_READ_IO"),
        "log_used_bytes": used,
        "log_available_bytes": avail if finite else None,
        "log_used_pct": pct(used, used + avail) if finite else None,  # type: ignore[operator]
        "secondary_logs": cur.get("SEC_LOGS_ALLOCATED"),
    }


def memory_fields(cur: MonRow) -> dict:
    return {f"{name}_bytes": _scaled(cur.get(col), 1024)
            for name, col in (("size", "MEMORY_SET_SIZE"), ("committed", "MEMORY_SET_COMMITTED"),
                              ("used", "MEMORY_SET_USED"), ("used_hwm", "MEMORY_SET_USED_HWM"))}


def system_fields(r: Rates | None, cur: MonRow) -> dict:
    f = {
        "cpu_usage_pct": cur.get("CPU_USAGE_TOTAL"),
        "cpu_load_short": cur.get("CPU_LOAD_SHORT"),
        "cpus_online": cur.get("CPU_ONLINE"),
        "memory_total_bytes": _scaled(cur.get("MEMORY_TOTAL"), 2**20),
        "memory_free_bytes": _scaled(cur.get("MEMORY_FREE"), 2**20),
    }
    if r is not None:
        f["swap_in_pages_per_s"] = r.rate("SWAP_PAGES_IN")
        f["swap_out_pages_per_s"] = r.rate("SWAP_PAGES_OUT")
    return f


RATE_FIELDS: dict[str, tuple[str, Callable[[Rates, MonRow], dict]]] = {
    "db": ("db2_database", database_fields),
    "bp": ("db2_bufferpool", bufferpool_fields),
    "ts": ("db2_tablespace", tablespace_fields),
    "ct": ("db2_container", container_fields),
    "log": ("db2_log", log_fields),
}


class Baselines:
    """The previous reading of every row, keyed by (query, member, names)."""

    def __init__(self) -> None:
        self.rows: dict[tuple, tuple[float, MonRow]] = {}

    def step(self, key: tuple, clock: float, row: MonRow, counters: tuple[str, ...]) -> Rates | bool | None:
        """Rates against the baseline; True if the counters went back (a reset); None if no baseline."""
        prev = self.rows.get(key)
        self.rows[key] = (clock, row)
        if prev is None:
            return None
        secs = clock - prev[0]
        if secs <= 0:
            return None
        old = prev[1]
        for c in counters:
            a, b = row.get(c), old.get(c)
            if a is not None and b is not None and (a < b or a - b > ABSURD_PER_S * secs):  # type: ignore[operator]
                return True
        return Rates(old, row, secs)

    def forget(self, member: object) -> None:
        for key in [k for k in self.rows if k[1] == member]:
            del self.rows[key]

    def keep_only(self, keys: set[tuple], tags: set[str]) -> None:
        """Drop rows of these queries that were not seen this time (a dropped tablespace)."""
        for key in [k for k in self.rows if k[0] in tags and k not in keys]:
            del self.rows[key]
