"""The whole config file: the core's sections (agent/core/config.py) and every registered source's
(collectors/registry.py), loaded and validated as one; and `db2vtop config init`'s template,
assembled from the core's parts and each source package's template.toml in the registry's order."""

from __future__ import annotations

from pathlib import Path

from db2vtop.agent.core.config import CoreConfig, config_class, load
from db2vtop.agent.core.paths import default_config_path
from db2vtop.agent.core.schema import package_text
from db2vtop.collectors.registry import INPUTS

Config = config_class((i.section for i in INPUTS), __name__)

#: the line of agent/config_template.toml where the sources' sections go
SOURCES_AT = "## @sources\n"


def load_config(path: Path) -> CoreConfig:
    """Read and validate one config file; raises ConfigError, never anything else."""
    return load(path, Config)


def resolve_config(path: Path | None) -> CoreConfig:
    """The config for a command: -c FILE, else the XDG default file if present, else defaults."""
    if path is not None:
        return load_config(path)
    default = default_config_path()
    if default.is_file():
        return load_config(default)
    return Config()


def template() -> str:
    """The commented template `config init` writes: every section, each source's beside its code."""
    core = package_text("db2vtop.agent", "config_template.toml")
    head, _, tail = core.partition(SOURCES_AT)
    parts = {i.package: i.template() for i in INPUTS}  # one per package, in the registry's order
    return head + "\n".join(parts.values()) + "\n" + tail
