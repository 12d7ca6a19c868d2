"""The DB2 collector: MON_GET_* table functions and admin views read through the CLP over SSH
(one remote shell per cycle) or, optionally, the ibm_db driver; cumulative counters turned
into per-member rates, and the configuration facts the practices check."""
