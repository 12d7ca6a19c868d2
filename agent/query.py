"""`db2vtop query`: rows of one measurement as JSON or CSV."""

from __future__ import annotations

import csv
import json
from collections.abc import Iterable
from typing import TextIO

from db2vtop.agent.core.source import Row


def write_json(rows: Iterable[Row], out: TextIO) -> int:
    """A JSON array, streamed row by row so a large window never sits in memory."""
    n = 0
    out.write("[")
    for row in rows:
        out.write(",\n" if n else "\n")
        out.write(json.dumps(row.to_json(), ensure_ascii=False, separators=(",", ":")))
        n += 1
    out.write("\n]\n" if n else "]\n")
    return n


def write_csv(rows: Iterable[Row], out: TextIO) -> int:
    """One column per tag and per field (union over the rows); absent values are empty."""
    rows = list(rows)
    tag_keys = sorted({k for r in rows for k in r.tags})
    field_keys = sorted({k for r in rows for k in r.fields})
    w = csv.writer(out, lineterminator="\n")
    w.writerow(["ts", "measurement", *tag_keys, *field_keys])
    for r in rows:
        w.writerow([r.ts, r.measurement, *(r.tags.get(k, "") for k in tag_keys),
                    *(_cell(r.fields.get(k)) for k in field_keys)])
    return len(rows)


def _cell(v: object) -> object:
    if v is None:
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    return v
