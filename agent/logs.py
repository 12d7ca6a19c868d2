"""Logging for a process that runs for months: plain text for people, JSON for collectors.

JSON lines carry `ts` (RFC 3339, UTC), `level`, `logger`, `msg` and, for errors with a
traceback, `exc`; one object per line, so journald, Loki or Elastic ingest them as-is.
A message that repeats is written once per minute with a count of the others, so no collector,
config or outage can make the log grow faster than a bounded rate. Control characters in a
message (a remote host's stderr, a VM's name) are escaped: one record is one line, and nothing
in it acts on the terminal or the log viewer.
"""

from __future__ import annotations

import json
import logging
import sys
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import IO

from db2vtop.agent.core.logkey import COLLECTOR
from db2vtop.agent.core.text import printable

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
LOG_FORMATS = ("text", "json")


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        doc = {"ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
               "level": record.levelname.lower(), "logger": record.name, "msg": record.getMessage()}
        if record.exc_info:
            doc["exc"] = self.formatException(record.exc_info)
        return json.dumps(doc, ensure_ascii=False)


class RepeatFilter(logging.Filter):
    """Per logger, message template and collector (agent/core/logkey.py): the first record of each
    `window_s` passes, the rest are counted and the next one to pass says how many there were ("...
    (and 1,234 more like it in the last 60 s)"). Templates and collectors are finite, so the log's rate
    is bounded whatever the arguments, and one collector's errors never hide another's."""

    def __init__(self, window_s: float = 60.0, clock: Callable[[], float] = time.monotonic):
        super().__init__()
        self.window_s = window_s
        self.clock = clock
        #: (logger, level, template, collector) -> [window start, suppressed]
        self._seen: dict[tuple[str, int, object, str | None], list[float | int]] = {}
        self._lock = threading.Lock()

    def filter(self, record: logging.LogRecord) -> bool:
        key = (record.name, record.levelno, record.msg, COLLECTOR.get())
        now = self.clock()
        with self._lock:
            seen = self._seen.get(key)
            if seen is not None and now - seen[0] < self.window_s:
                seen[1] += 1
                return False
            suppressed = int(seen[1]) if seen is not None else 0
            self._seen[key] = [now, 0]
            if len(self._seen) > 10_000:  # templates are few; a flood of distinct ones starts over
                self._seen = {key: [now, 0]}
        if suppressed:
            record.msg = f"{record.getMessage()} (and {suppressed:,} more like it in the last {self.window_s:g} s)"
            record.args = None
        return True


class EscapeFilter(logging.Filter):
    """The message with every control character escaped (newlines too: one record, one line)."""

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        safe = printable(text)
        if safe != text:
            record.msg, record.args = safe, None
        return True


def setup_logging(level: str = "info", fmt: str = "text", stream: IO[str] | None = None) -> None:
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else logging.Formatter(TEXT_FORMAT))
    handler.addFilter(RepeatFilter())
    handler.addFilter(EscapeFilter())
    root = logging.getLogger()
    for h in list(root.handlers):
        root.removeHandler(h)
    root.addHandler(handler)
    root.setLevel(level.upper())
