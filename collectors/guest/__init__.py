"""Guest OS measurements (CPU, memory, disks as iostat computes them, network)."""
