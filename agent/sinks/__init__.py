"""Outputs beyond the embedded store: InfluxDB through a durable on-disk spool."""
