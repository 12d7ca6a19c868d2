"""db2vtop agent: config, sample model, embedded store, runtime and CLI."""

__version__ = "0.1.0"
