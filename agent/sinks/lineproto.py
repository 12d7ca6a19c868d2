"""Samples, annotations and findings as InfluxDB line protocol, encoded in bulk.

Line protocol is written here, not by a client library's point objects, so a cycle's
samples cost one format call each: the escaped series key is cached per (measurement,
tags) and a format template per field layout, so only values are formatted per point.

Naming is stable: a sample's measurement, tags and field names go out unchanged (plus
the configured global tags, which never override a sample's own). Text cannot hold
every character line protocol reserves, so: backslashes in measurement, tag and field
names become "/", line breaks anywhere become spaces (InfluxDB 2.x/3.x refuse them), and a
leading "#" of a measurement becomes "_" (line protocol would read the line as a comment).

Field types are stable too (InfluxDB refuses a point whose field changes type, the
"field type conflict" of glances#750): int -> integer, float -> float, bool ->
boolean, str -> string, and the first type seen for a (measurement, field) is kept in
`field_types.json` beside the spool, so later an int in a float field is written as a
float and an integral float in an integer field as an integer, across restarts too.
A value that still cannot match (text in a numeric field) is left for InfluxDB to
refuse; the sink dead-letters that one point with InfluxDB's reason.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from db2vtop.agent.core.files import write_private
from db2vtop.agent.core.influx_source import ANNOTATION_MEASUREMENT, FACT_MEASUREMENT, FINDING_MEASUREMENT
from db2vtop.agent.core.model import Annotation, Fact, Finding, Sample

log = logging.getLogger(__name__)


_NAME = str.maketrans({"\\": "/", "\n": "\\ ", "\r": "\\ ", ",": "\\,", "=": "\\=", " ": "\\ "})
_MEASUREMENT = str.maketrans({"\\": "/", "\n": "\\ ", "\r": "\\ ", ",": "\\,", " ": "\\ "})
_STRING = str.maketrans({"\\": "\\\\", '"': '\\"', "\n": " ", "\r": " "})
_INFLUX_TYPE = {bool: "boolean", int: "integer", float: "float", str: "string"}
_CACHE_LIMIT = 100_000


def _string(v: str) -> str:
    return '"' + v.translate(_STRING) + '"'


class FieldTypes:
    """The first type seen for each (measurement, field), kept across restarts."""

    def __init__(self, path: Path | None = None):
        self.path = path
        self.known: dict[str, dict[str, str]] = {}
        self._dirty = False
        if path is not None and path.exists():
            try:
                doc = json.loads(path.read_text(encoding="utf-8"))
                if not (isinstance(doc, dict) and all(isinstance(m, dict) and all(
                        isinstance(k, str) for k in m.values()) for m in doc.values())):
                    raise ValueError("not a table of measurements and field types")
                self.known = doc
            except Exception as e:  # garbage of any shape: the types are learned again
                log.warning("ignoring unreadable %s: %s", path, e)

    def of(self, measurement: str, name: str, tp: type) -> str:
        m = self.known.setdefault(measurement, {})
        known = m.get(name)
        if known is None:
            known = m[name] = _INFLUX_TYPE.get(tp, "float")
            self._dirty = True
        return known

    def save(self) -> None:
        if not self._dirty or self.path is None:
            return
        write_private(self.path, json.dumps(self.known, sort_keys=True, indent=1).encode())
        self._dirty = False


class LineEncoder:
    def __init__(self, global_tags: dict[str, str] | None = None, types: FieldTypes | None = None):
        self.global_tags = dict(global_tags or {})
        self.types = types or FieldTypes()
        self._keys: dict[tuple, str] = {}
        self._templates: dict[tuple, tuple[str, bool, bool]] = {}

    def _series_key(self, measurement: str, tags: dict[str, str]) -> str:
        cache_key = (measurement, *tags, *tags.values())
        key = self._keys.get(cache_key)
        if key is None:
            merged = {str(k): str(v) for k, v in {**self.global_tags, **tags}.items() if v is not None}
            name = measurement.translate(_MEASUREMENT)
            parts = ["_" + name[1:] if name.startswith("#") else name]  # "#" would make the line a comment
            parts += [f"{k.translate(_NAME)}={v.translate(_NAME)}" for k, v in sorted(merged.items()) if k and v]
            key = ",".join(parts) + " "
            if len(self._keys) >= _CACHE_LIMIT:
                self._keys.clear()
            self._keys[cache_key] = key
        return key

    def _template(self, measurement: str, names: tuple[str, ...], types: tuple[type, ...]) -> tuple[str, bool, bool]:
        """(format string, has text values, exact) for one field layout; exact=False means per-field."""
        parts, has_str, exact = [], False, True
        for name, tp in zip(names, types, strict=True):
            known = self.types.of(measurement, name, tp)
            key = name.translate(_NAME).replace("%", "%%") + "="
            if tp is bool or tp is str:
                parts.append(key + "%s")  # True/False are valid line-protocol booleans
                has_str = has_str or tp is str
            elif tp is int:
                parts.append(key + ("%d" if known == "float" else "%di"))
            elif tp is float and known != "integer":
                parts.append(key + "%r")
            else:  # a float in an integer field, or a type line protocol has no word for
                exact = False
        return ",".join(parts) + " %d\n", has_str, exact

    def _fields_slow(self, measurement: str, fields: dict[str, Any]) -> str:
        parts = []
        for name, v in fields.items():
            tp = type(v)
            if tp is float and not math.isfinite(v):
                continue
            known = self.types.of(measurement, name, tp)
            key = name.translate(_NAME) + "="
            if tp is bool:
                parts.append(key + ("true" if v else "false"))
            elif tp is int:
                parts.append(key + (repr(float(v)) if known == "float" else f"{v}i"))
            elif tp is float:
                parts.append(key + (f"{int(v)}i" if known == "integer" and v.is_integer() else repr(v)))
            elif tp is str:
                parts.append(key + _string(v))
            elif isinstance(v, int | float):  # numpy scalars, Decimal-like ints
                parts.append(key + repr(float(v)))
        return ",".join(parts)

    def line(self, measurement: str, tags: dict[str, str], fields: dict[str, Any], ts: int) -> str | None:
        """One point as a line ending in "\\n", or None when no field can be written."""
        lines = self._encode(((measurement, tags, fields, ts),))
        return lines[0] if lines else None

    def _encode(self, points: Iterable[tuple[str, dict[str, str], dict[str, Any], int]]) -> list[str]:
        keys, templates, out = self._keys, self._templates, []
        append = out.append
        for measurement, tags, fields, ts in points:
            key = keys.get((measurement, *tags, *tags.values()))
            if key is None:
                key = self._series_key(measurement, tags)
            values = tuple(fields.values())
            layout = (measurement, *fields, *map(type, values))
            tpl = templates.get(layout)
            if tpl is None:
                tpl = self._template(measurement, tuple(fields), tuple(map(type, values)))
                if len(templates) >= _CACHE_LIMIT:
                    templates.clear()
                templates[layout] = tpl
            fmt, has_str, exact = tpl
            if exact and values:
                if has_str:
                    values = tuple(_string(v) if type(v) is str else v for v in values)
                text = fmt % (*values, ts)
                if "nan" not in text and "inf" not in text:
                    append(key + text)
                    continue
            body = self._fields_slow(measurement, fields)
            if body:
                append(f"{key}{body} {ts}\n")
        return out

    def samples(self, samples: Iterable[Sample]) -> list[str]:
        return self._encode((s.measurement, s.tags, s.fields, s.ts) for s in samples)

    def annotations(self, annotations: Iterable[Annotation]) -> list[str]:
        return self._encode((ANNOTATION_MEASUREMENT, {**a.tags, "kind": a.event, "name": a.name}, {"text": a.text},
                             a.ts) for a in annotations)

    def findings(self, findings: Iterable[Finding]) -> list[str]:
        """Everything a view shows of a finding, so `--source influxdb` reads it back whole."""
        return self._encode(_finding_point(f) for f in findings)

    def facts(self, facts: Iterable[Fact]) -> list[str]:
        """A fact as one point: its kind and entity tags, its data as a JSON document."""
        return self._encode((FACT_MEASUREMENT, {**f.tags, "fact": f.kind}, {"data": _json(f.data)}, f.ts)
                            for f in facts)


def _finding_point(f: Finding) -> tuple[str, dict[str, str], dict[str, Any], int]:
    state = "open" if f.resolved_at is None else "resolved"
    fields = {"summary": f.summary, "state": state, "first_seen_ns": int(f.first_seen),
              "evidence": _json(f.evidence), "why": f.why, "fix": f.fix, "refs": _json(f.references)}
    ts = f.last_seen if f.resolved_at is None else f.resolved_at
    return FINDING_MEASUREMENT, {**f.subject, "rule": f.rule, "severity": f.severity}, fields, ts

def _json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
