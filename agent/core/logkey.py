"""Whose work a log record is about: the collector whose cycle or worker thread logs it.

The log's repeat filter (agent/logs.py) writes one record per minute for each message template and
counts the rest; keyed on the template alone, one collector failing every second hid every other
collector's errors, which share the runtime's templates. The runtime sets `COLLECTOR` in each
collector's loop (its cycles inherit it) and a collector's worker threads run in its cycle's context,
so the filter keys on the collector as well.
"""

from __future__ import annotations

from contextvars import ContextVar

#: the name of the collector the current task or thread works for (None outside any)
COLLECTOR: ContextVar[str | None] = ContextVar("collector", default=None)
