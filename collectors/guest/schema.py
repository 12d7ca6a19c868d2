"""What the guest collectors write (Linux /proc, AIX commands; local or over SSH): one declaration for both."""

from db2vtop.agent.core.schema import Measurement, fields

MEASUREMENTS = (
    Measurement(
        "guest_cpu",
        'CPU time shares, load and run queue, from /proc/stat (Linux) or vmstat/mpstat (AIX).',
        {
            "cpu": '`total` or the CPU number',
            "guest": "the guest: this machine's host name, or the [[ssh]] target of a remote guest",
        },
        fields=fields(
            "context_switches_per_s", "guest_pct", "idle_pct", "interrupts_per_s", "iowait_pct", "irq_pct",
            "load1", "load15", "load5", "nice_pct", "softirq_pct", "syscalls_per_s",
            "system_pct", "user_pct",
            busy_pct='user + nice + system + irq + softirq + guest',
            entitlement_pct='AIX lparstat ec: CPU used against the entitlement',
            physical_cpus='AIX lparstat pc: physical processors consumed',
            procs_blocked='tasks blocked on I/O (/proc/stat procs_blocked)',
            procs_running='runnable tasks (/proc/stat procs_running)',
            steal_pct='time the hypervisor ran something else',
        ),
    ),
    Measurement(
        "guest_mem",
        'Memory, swap and huge pages, from /proc/meminfo and /proc/vmstat (Linux) or vmstat/svmon (AIX).',
        {
            "guest": "the guest: this machine's host name, or the [[ssh]] target of a remote guest",
        },
        fields=fields(
            "available_bytes", "buffers_bytes", "free_bytes", "hugepage_size_bytes", "hugepages_free",
            "hugepages_rsvd", "hugepages_surp", "hugepages_total", "major_faults_per_s", "page_cache_bytes",
            "shmem_bytes", "swap_in_bytes_per_s", "swap_out_bytes_per_s", "swap_total_bytes", "swap_used_bytes",
            "total_bytes", "used_pct",
            active_virtual_bytes='AIX vmstat avm: active virtual memory',
            pages_freed_per_s='AIX vmstat fr: pages freed by the page replacement',
            pages_scanned_per_s='AIX vmstat sr: pages scanned by the page replacement',
            thp_mode='string: `always`, `madvise` or `never`',
            used_bytes='total − available, as `free` shows it',
            text=('thp_mode',),
        ),
    ),
    Measurement(
        "guest_disk",
        'Block device I/O as iostat -dx computes it from /proc/diskstats (iostat -D on AIX).',
        {
            "device": "the block device (a LUN's NAA id for esxtop, the PowerMax device number)",
            "guest": "the guest: this machine's host name, or the [[ssh]] target of a remote guest",
            "type": '`disk`, `partition`, `multipath` or `dm`',
        },
        fields=fields(
            "in_flight", "queue_wait_ms", "read_await_ms", "read_bytes_per_s", "read_failures_per_s",
            "read_merges_per_s", "read_request_bytes", "read_service_ms", "read_timeouts_per_s",
            "service_queue_size", "wait_queue_size", "write_bytes_per_s", "write_failures_per_s",
            "write_merges_per_s", "write_service_ms", "write_timeouts_per_s",
            queue_size='iostat aqu-sz: average requests queued or in service',
            sqfull_per_s='AIX the service queue was full: `queue_depth` reached',
            util_pct='%util; not meaningful for devices that serve requests in parallel',
            write_await_ms='including time queued',
            write_iops='iostat w/s',
            read_iops='iostat r/s',
            write_request_bytes='average request size',
        ),
    ),
    Measurement(
        "guest_net",
        'Network interface rates from /proc/net/dev.',
        {
            "guest": "the guest: this machine's host name, or the [[ssh]] target of a remote guest",
            "interface": 'the network interface',
        },
        fields=fields(
            "rx_bytes_per_s", "rx_drops_per_s", "rx_errors_per_s", "rx_packets_per_s", "tx_bytes_per_s",
            "tx_drops_per_s", "tx_errors_per_s", "tx_packets_per_s",
        ),
    ),
)
