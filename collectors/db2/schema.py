"""What the DB2 collector writes: rates and ratios from the MON_GET_* table functions, as IBM's db2mon
computes them."""

from db2vtop.agent.core.schema import Measurement, fields

MEASUREMENTS = (
    Measurement(
        "db2_database",
        "Where a database's request time goes, and its throughput (MON_GET_DATABASE, MON_GET_WORKLOAD).",
        {
            "database": 'the database alias',
            "db2": 'the [[db2]] name',
            "member": 'the DB2 member',
        },
        fields=fields(
            "activities_per_s", "commits_per_s", "cpu_ms_per_s", "cpu_us_per_activity", "deadlocks_per_s",
            "direct_read_wait_pct", "direct_write_wait_pct", "hash_join_overflow_pct",
            "hash_join_overflows_per_s", "hash_joins_per_s", "lock_escalations_per_s", "lock_timeouts_per_s",
            "lock_wait_pct", "lock_waits_per_s", "log_buffer_wait_pct", "log_disk_wait_pct",
            "pkg_cache_hit_pct", "pool_read_wait_pct", "pool_write_wait_pct", "prefetch_wait_pct",
            "request_ms_per_s", "rollbacks_per_s", "rows_read_per_row_returned", "rows_read_per_s",
            "rows_returned_per_s", "sort_overflow_pct", "sort_overflows_per_s", "sorts_per_s", "wait_pct",
            cpu_pct='TOTAL_CPU_TIME, µs, over request time',
            lock_wait_ms='per wait',
            wait_ms_per_s='time spent in requests, i.e. average concurrency × 1000',
        ),
    ),
    Measurement(
        "db2_bufferpool",
        'A buffer pool: reads, hit ratios, writes and page cleaning (MON_GET_BUFFERPOOL).',
        {
            "bufferpool": 'the buffer pool',
            "database": 'the database alias',
            "db2": 'the [[db2]] name',
            "member": 'the DB2 member',
        },
        fields=fields(
            "async_reads_per_s", "col_logical_reads_per_s", "col_physical_reads_per_s", "data_hit_pct",
            "data_logical_reads_per_s", "data_physical_reads_per_s", "direct_reads_per_s",
            "direct_writes_per_s", "dirty_steal_cleans_per_s", "hit_pct", "index_hit_pct",
            "index_logical_reads_per_s", "index_physical_reads_per_s", "logical_reads_per_s",
            "lsn_gap_cleans_per_s", "physical_reads_per_s", "read_ms_per_page", "sync_read_ms_per_page",
            "temp_hit_pct", "temp_logical_reads_per_s", "temp_physical_reads_per_s", "threshold_cleans_per_s",
            "write_ms_per_page", "writes_per_s", "xda_hit_pct", "xda_logical_reads_per_s",
            "xda_physical_reads_per_s",
            async_read_pct='prefetched share of physical reads',
            col_hit_pct="each including its temporary pages, as IBM's example computes them",
        ),
    ),
    Measurement(
        "db2_tablespace",
        'A table space: I/O and space (MON_GET_TABLESPACE).',
        {
            "database": 'the database alias',
            "db2": 'the [[db2]] name',
            "member": 'the DB2 member',
            "tablespace": 'the table space',
        },
        fields=fields(
            "async_read_pct", "direct_read_ms", "direct_reads_per_s", "direct_writes_per_s", "pages_read_per_s",
            "pages_written_per_s", "read_ms_per_page", "total_bytes", "used_bytes", "used_pct",
            "write_ms_per_page",
            direct_write_ms='per request',
            prefetch_wait_ms='per wait',
        ),
    ),
    Measurement(
        "db2_container",
        'A table space container: I/O and its file system (MON_GET_CONTAINER).',
        {
            "container": "the container's path",
            "database": 'the database alias',
            "db2": 'the [[db2]] name',
            "member": 'the DB2 member',
            "tablespace": 'the table space',
        },
        fields=fields(
            "accessible", "direct_reads_per_s", "direct_writes_per_s", "fs_total_bytes", "fs_used_bytes",
            "pages_read_per_s", "pages_written_per_s", "write_ms_per_page",
            fs_used_pct='the file system under the container',
            read_ms_per_page='POOL_READ_TIME / PAGES_READ',
        ),
    ),
    Measurement(
        "db2_log",
        'Transaction log writes and space (MON_GET_TRANSACTION_LOG).',
        {
            "database": 'the database alias',
            "db2": 'the [[db2]] name',
            "member": 'the DB2 member',
        },
        fields=fields(
            "log_available_bytes", "log_buffer_full_per_s", "log_read_ms", "log_reads_per_s", "log_used_bytes",
            "log_used_pct", "secondary_logs",
            log_buffer_full='events in the cycle',
            log_write_bytes_per_s='4 KiB log pages',
            log_write_ms='per write I/O',
            log_writes_per_s='log write I/Os',
        ),
    ),
    Measurement(
        "db2_memory",
        'A memory set: committed and used memory (MON_GET_MEMORY_SET).',
        {
            "database": 'the database alias',
            "db2": 'the [[db2]] name',
            "member": 'the DB2 member',
            "memory_db": 'the database of a DATABASE set',
            "memory_set": 'the memory set type',
        },
        fields=fields(
            "committed_bytes", "size_bytes", "used_bytes", "used_hwm_bytes",
        ),
    ),
    Measurement(
        "db2_system",
        "The DB2 server's host as DB2 sees it (ENV_GET_SYSTEM_RESOURCES).",
        {
            "database": 'the database alias',
            "db2": 'the [[db2]] name',
            "member": 'the DB2 member',
        },
        fields=fields(
            "cpu_load_short", "cpu_usage_pct", "cpus_online", "memory_free_bytes", "memory_total_bytes",
            "swap_in_pages_per_s", "swap_out_pages_per_s",
        ),
    ),
)
