"""A config file written from a test's text and loaded as the agent loads it (db2vtop.agent.config.load_config),
or the ConfigError it is refused with."""

from __future__ import annotations

from pathlib import Path

import pytest

from db2vtop.agent.config import Config, load_config
from db2vtop.agent.core.config import ConfigError


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "db2vtop.toml"
    p.write_text(text)
    return p


def load(tmp_path: Path, text: str) -> Config:
    return load_config(write(tmp_path, text))


def error_of(tmp_path: Path, text: str) -> ConfigError:
    with pytest.raises(ConfigError) as e:
        load(tmp_path, text)
    return e.value
