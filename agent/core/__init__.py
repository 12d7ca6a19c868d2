"""The core every layer shares: the record model, units, paths, secrets and the config loader.

It imports nothing else of db2vtop (import-linter keeps it so): collectors, the store, the
checks, the TUI and the CLI all build on it, never the other way round.
"""
