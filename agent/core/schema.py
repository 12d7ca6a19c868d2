"""Measurements declared once: each collector lists what it writes (tags, fields, units, meaning)
beside its code (a `schema.toml` in its package, or a `schema.py` where the declaration derives from
the code's own table), as Glances' `fields_description` does. The docs, `make docs-check` and the test
session (tests/conftest.py checks every sample the collectors emit against these declarations)
read them; nothing else repeats the names.

Units follow from the field name's suffix (the project's convention: `_pct` 0-100, `_ms`,
`_bytes`, `_per_s`), so a declaration states a unit only by naming the field right.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from importlib.resources import files

#: suffix -> unit, longest first
UNITS = (("_bytes_per_s", "bytes/s"), ("_per_s", "per second"), ("_pct", "%"), ("_ms", "ms"), ("_us", "µs"),
         ("_bytes", "bytes"), ("_iops", "I/O per second"), ("_mhz", "MHz"))


def unit_of(name: str) -> str:
    return next((unit for suffix, unit in UNITS if name.endswith(suffix)), "")


@dataclass(frozen=True)
class Field:
    name: str
    meaning: str = ""
    kind: str = "number"  # number | string | bool

    @property
    def unit(self) -> str:
        return unit_of(self.name)


@dataclass(frozen=True)
class Measurement:
    name: str
    doc: str  # one line: what a sample of it is
    tags: dict[str, str]  # tag -> what it names
    fields: tuple[Field, ...]

    def field_names(self) -> set[str]:
        return {f.name for f in self.fields}


def fields(*names: str, text: tuple[str, ...] = (), **meanings: str) -> tuple[Field, ...]:
    """Fields in order: plain names first, then those with a meaning; `text` names string fields."""
    return tuple(Field(n, meanings.get(n, ""), "string" if n in text else "number")
                 for n in (*names, *(m for m in meanings if m not in names)))


def load(package: str) -> tuple[Measurement, ...]:
    """A collector package's `schema.toml`: one table per measurement with `doc`, `tags` (tag ->
    meaning), `fields` (field -> meaning, in order) and `text` (the fields that hold strings)."""
    doc = tomllib.loads(files(package).joinpath("schema.toml").read_text(encoding="utf-8"))
    return tuple(Measurement(name, m["doc"], dict(m["tags"]),
                             tuple(Field(f, meaning, "string" if f in m.get("text", ()) else "number")
                                   for f, meaning in m["fields"].items()))
                 for name, m in doc.items())


def markdown(measurements: tuple[Measurement, ...]) -> str:
    """The reference tables a collector's README shows, generated (`make docs-check` compares)."""
    out = []
    for m in measurements:
        out.append(f"### `{m.name}`\n\n{m.doc}\n")
        tags = ", ".join(f"`{t}` ({meaning})" if meaning else f"`{t}`" for t, meaning in m.tags.items())
        out.append(f"Tags: {tags}.\n")
        out.append("| field | unit | meaning |\n|---|---|---|")
        for f in m.fields:
            unit = f.unit or ("text" if f.kind == "string" else "")
            out.append(f"| `{f.name}` | {unit} | {f.meaning} |")
        out.append("")
    return "\n".join(out)
