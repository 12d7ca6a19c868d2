"""NetApp clustered ONTAP: raw performance counters and configuration over SSH or REST."""
