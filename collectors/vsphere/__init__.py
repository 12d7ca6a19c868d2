"""vCenter / ESXi collector (pyvmomi): inventory facts in bulk and batched realtime perf."""
