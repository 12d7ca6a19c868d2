"""Markers queued by `db2vtop mark` or the TUI while this process writes the store.

Each JSON file of the inbox (agent/markers.py) becomes an Annotation, so markers reach
the store and every sink in order with the samples around them.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from db2vtop.agent.core.markers import inbox_of
from db2vtop.agent.core.model import Annotation, Record
from db2vtop.collectors.base import BaseCollector

log = logging.getLogger(__name__)


class MarkerInbox(BaseCollector):
    def __init__(self, store_path: Path, interval: float = 1.0, name: str = "markers"):
        super().__init__(name, interval)
        self.inbox = inbox_of(store_path)

    def _drain(self) -> list[Record]:
        out: list[Record] = []
        for path in sorted(self.inbox.glob("*.json")):
            try:
                doc = json.loads(path.read_text(encoding="utf-8"))
                out.append(Annotation(str(doc.get("kind", "marker")), str(doc["name"]),
                                      {str(k): str(v) for k, v in dict(doc.get("tags") or {}).items()},
                                      str(doc.get("text", "")), int(doc["ts"])))
            except (OSError, ValueError, KeyError, TypeError) as e:
                log.warning("marker inbox: ignoring %s: %s", path.name, e)
            path.unlink(missing_ok=True)
        return out

    async def collect(self) -> list[Record]:
        if not self.inbox.is_dir():
            return []
        return await self.run_blocking(self._drain)
