"""vCenter / ESXi collector (raw SOAP): inventory facts in bulk and batched realtime perf."""
