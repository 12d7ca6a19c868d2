"""What the TUI remembers between runs (esxtop's `W` without the key): the Fleet's chosen fields.

One small JSON file in the state directory; a file that cannot be read or written is ignored
(the defaults are shown), never an error that stops the UI.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import Any

from db2vtop.agent.core.paths import state_dir


def path() -> Path:
    return state_dir() / "tui.json"


def load() -> dict[str, Any]:
    try:
        data = json.loads(path().read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def hidden_columns(screen: str) -> frozenset[str]:
    value = load().get(screen, {})
    names = value.get("hidden", []) if isinstance(value, dict) else []
    return frozenset(n for n in names if isinstance(n, str))


def save_hidden_columns(screen: str, names: frozenset[str]) -> None:
    data = load()
    data[screen] = {**(data.get(screen) if isinstance(data.get(screen), dict) else {}), "hidden": sorted(names)}
    target = path()
    with contextlib.suppress(OSError):
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, indent=1), encoding="utf-8")
        os.replace(tmp, target)
