"""Where db2vtop keeps its files, following the XDG base directory spec."""

from __future__ import annotations

import os
from pathlib import Path


def _xdg(var: str, fallback: str) -> Path:
    value = os.environ.get(var)
    return Path(value) if value and os.path.isabs(value) else Path.home() / fallback


def data_dir() -> Path:
    return _xdg("XDG_DATA_HOME", ".local/share") / "db2vtop"


def state_dir() -> Path:
    return _xdg("XDG_STATE_HOME", ".local/state") / "db2vtop"


def config_dir() -> Path:
    return _xdg("XDG_CONFIG_HOME", ".config") / "db2vtop"


def default_store_path() -> Path:
    return data_dir() / "metrics.db"


def default_config_path() -> Path:
    return config_dir() / "config.toml"
