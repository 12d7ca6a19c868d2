"""esxtop batch mode over SSH to ESXi: per-VM NUMA locality and CPU contention, per-LUN queues."""
