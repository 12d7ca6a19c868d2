"""What the esxtop collector writes (esxtop batch mode over SSH)."""

from db2vtop.agent.core.schema import Measurement, fields

MEASUREMENTS = (
    Measurement(
        "esxtop_vm",
        'A VM as esxtop batch mode shows it: CPU, memory and NUMA locality.',
        {
            "host": "the ESXi host (the one running the VM at the sample's time)",
            "vm": "the VM's display name",
        },
        fields=fields(
            run_pct="esxtop %RUN: scheduled time, summed over the VM's worlds",
            swap_read_bytes_per_s="esxtop SWR/s: host swap-ins", swap_write_bytes_per_s="esxtop SWW/s: host swap-outs",
            system_pct="esxtop %SYS: VMkernel time for the VM", used_pct="esxtop %USED: CPU used",
            wait_pct="esxtop %WAIT: blocked or idle",
            balloon_bytes='esxtop MCTLSZ: memory the balloon driver holds',
            costop_pct='esxtop %CSTP: co-stop, summed over the VM\'s worlds',
            max_limited_pct='esxtop %MLMTD: ready because of a CPU limit',
            memory_size_bytes='esxtop MEMSZ: configured memory',
            numa_home_node='esxtop NHN: the NUMA home node',
            numa_home_nodes='NHN of a VM spread over several nodes, such as "0,1"',
            numa_local_pct='esxtop N%L: share of memory on the home node',
            numa_migrations='NMIG, since power-on',
            numa_remote_bytes='esxtop NRMEM: memory on other NUMA nodes',
            numa_local_bytes='esxtop NLMEM: memory on the home node',
            ready_pct='esxtop %RDY, summed over the VM\'s worlds (divide by vCPUs for per-vCPU)',
            swap_wait_pct='esxtop %SWPWT: waiting for swapped-in memory',
            swapped_bytes='esxtop SWCUR: memory swapped by the host',
            text=('numa_home_nodes',),
        ),
    ),
    Measurement(
        "esxtop_device",
        'A LUN as esxtop batch mode shows it: queue and latency (DAVG/KAVG/GAVG/QAVG).',
        {
            "device": "the block device (a LUN's NAA id for esxtop, the PowerMax device number)",
            "host": "the ESXi host (the one running the VM at the sample's time)",
        },
        fields=fields(
            "aborts_per_s", "commands_per_s", "guest_read_latency_ms", "guest_write_latency_ms", "load",
            "read_bytes_per_s", "reads_per_s", "resets_per_s", "write_bytes_per_s", "writes_per_s",
            active='esxtop ACTV: commands active in the device',
            device_latency_ms='esxtop DAVG: latency below the host (HBA, fabric, array)',
            guest_latency_ms='esxtop GAVG: what the VMs see (DAVG + KAVG)',
            kernel_latency_ms='esxtop KAVG: time in the hypervisor\'s storage stack',
            queue_depth='esxtop DQLEN: the LUN\'s queue depth',
            queue_latency_ms='esxtop QAVG: time queued in the hypervisor',
            queued='esxtop QUED: commands waiting for a queue slot',
            used_pct='esxtop %USD: ACTV against DQLEN',
        ),
    ),
)
