"""The exit statuses of `db2vtop` commands (README, docs/agent-service.md): 0 success; 1 the command
ran but failed (a collector error in `agent --once`, a part of the agent that could not go on, an
unknown measurement, an unreadable store); 2 bad usage or configuration (also a store or spool
directory that cannot be written); 3 triage could not run (the monitoring-plugin convention)."""

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
EXIT_TRIAGE_UNKNOWN = 3
