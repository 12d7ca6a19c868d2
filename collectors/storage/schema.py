"""What the storage collectors write: Linux storage hosts, ONTAP, XtremIO, PowerMax."""

from db2vtop.agent.core.schema import Measurement, fields

MEASUREMENTS = (
    Measurement(
        "storage_disk",
        "A storage host's block devices, with queue capacity and saturation.",
        {
            "device": "the block device (a LUN's NAA id for esxtop, the PowerMax device number)",
            "serial": 'the LUN serial number',
            "storage": 'the [[storage]] name',
            "type": '`disk`, `partition`, `multipath` or `dm`',
        },
        fields=fields(
            "in_flight", "queue_size", "read_await_ms", "read_bytes_per_s", "read_iops", "read_merges_per_s",
            "read_request_bytes", "util_pct", "write_await_ms", "write_bytes_per_s", "write_iops",
            "write_merges_per_s", "write_request_bytes",
            queue_depth="the device's queue capacity: the SCSI LUN queue depth (sysfs), for a multipath map "
                        "the sum over its paths, else the block layer's nr_requests",
            queue_depth_used_pct='`queue_size` against `queue_depth`: the saturation figure',
            queue_limit_source='`queue_depth`, `paths` or `nr_requests`',
            text=('queue_limit_source',),
        ),
    ),
    Measurement(
        "storage_volume",
        'An array volume: ONTAP `statistics` / REST, XtremIO XMS.',
        {
            "cluster": 'the vSphere cluster, or the XtremIO cluster',
            "kind": 'the array kind',
            "naa": "the LUN's NAA id as ESXi names it",
            "storage": 'the [[storage]] name',
            "volume": 'the volume',
            "vserver": 'the ONTAP SVM',
        },
        fields=fields(
            "avg_latency_ms", "logical_used_bytes", "read_bytes_per_s", "read_iops", "read_latency_ms",
            "total_iops", "write_bytes_per_s", "write_iops", "write_latency_ms",
            other_iops='ONTAP: operations other than reads and writes (metadata)',
        ),
    ),
    Measurement(
        "storage_lun",
        'An ONTAP LUN, with alignment and queue-full figures.',
        {
            "kind": 'the array kind',
            "lun": "the LUN's NAA id (vSphere) or path (ONTAP)",
            "naa": "the LUN's NAA id as ESXi names it",
            "serial": 'the LUN serial number',
            "serial_hex": 'the serial in hex',
            "storage": 'the [[storage]] name',
            "volume": 'the volume',
            "vserver": 'the ONTAP SVM',
        },
        fields=fields(
            "avg_latency_ms", "other_iops", "queue_full_per_s", "read_bytes_per_s", "read_iops",
            "read_latency_ms", "read_misaligned_pct", "total_iops", "write_bytes_per_s", "write_iops",
            "write_latency_ms",
            write_misaligned_pct='share of I/O not aligned to a 4 KB WAFL block, from the alignment histograms',
        ),
    ),
    Measurement(
        "storage_node",
        'An ONTAP node: CPU and disk busy.',
        {
            "kind": 'the array kind',
            "node": 'the ONTAP node',
            "storage": 'the [[storage]] name',
        },
        fields=fields(
            "cpu_busy_pct", "disk_busy_avg_pct", "read_iops", "total_iops", "write_iops",
            disk_busy_pct='the busiest disk, as sysstat\'s "Disk util"',
        ),
    ),
    Measurement(
        "storage_cluster",
        'An XtremIO cluster: performance and capacity.',
        {
            "cluster": 'the vSphere cluster, or the XtremIO cluster',
            "kind": 'the array kind',
            "storage": 'the [[storage]] name',
        },
        fields=fields(
            "avg_latency_ms", "compression_ratio", "data_reduction_ratio", "dedup_ratio", "free_ssd_pct",
            "logical_used_bytes", "physical_capacity_bytes", "physical_used_bytes", "read_bytes_per_s",
            "read_iops", "read_latency_ms", "total_iops", "write_bytes_per_s", "write_iops", "write_latency_ms",
        ),
    ),
    Measurement(
        "storage_device",
        'A PowerMax device, from `symstat`.',
        {
            "device": "the block device (a LUN's NAA id for esxtop, the PowerMax device number)",
            "kind": 'the array kind',
            "pd_name": "the host's device path",
            "sid": 'the Symmetrix ID',
            "storage": 'the [[storage]] name',
        },
        fields=fields(
            "read_bytes_per_s", "read_hit_pct", "read_iops", "sequential_read_pct", "total_iops",
            "write_bytes_per_s", "write_hit_pct", "write_iops",
            write_pending_tracks="no response time: symstat's request report has none",
        ),
    ),
    Measurement(
        "storage_group",
        'A PowerMax storage group, from Unisphere (5-minute interval).',
        {
            "kind": 'the array kind',
            "sid": 'the Symmetrix ID',
            "storage": 'the [[storage]] name',
            "storage_group": 'the PowerMax storage group',
        },
        fields=fields(
            "avg_latency_ms", "read_bytes_per_s", "read_iops", "read_latency_ms", "total_iops",
            "write_bytes_per_s", "write_iops", "write_latency_ms",
        ),
    ),
)
