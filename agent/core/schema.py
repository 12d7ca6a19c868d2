"""Measurements and facts declared once: each collector lists what it writes (tags, fields, units,
meaning; each fact kind's keys) beside its code (a `schema.toml` in its package, or a `schema.py`
where the declaration derives from the code's own table), as Glances' `fields_description` does. The
docs, `make docs-check`, the test session (tests/schema_check.py checks every sample and fact the
collectors make against these declarations) and the runtime (which flags an undeclared fact) read
them; nothing else repeats the names.

Units follow from the field name's suffix (the project's convention: `_pct` 0-100, `_ms`,
`_bytes`, `_per_s`), so a declaration states a unit only by naming the field right; a fact key
whose name cannot say it (vCenter's `memory_mb`) states it.
"""

from __future__ import annotations

import importlib
import tomllib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: suffix -> unit, longest first
UNITS = (("_bytes_per_s", "bytes/s"), ("_per_s", "per second"), ("_pct", "%"), ("_ms", "ms"), ("_us", "µs"),
         ("_bytes", "bytes"), ("_iops", "I/O per second"), ("_mhz", "MHz"))


def unit_of(name: str) -> str:
    return next((unit for suffix, unit in UNITS if name.endswith(suffix)), "")


@dataclass(frozen=True)
class Field:
    name: str
    meaning: str = ""
    type: str = "number"  # number | string | bool

    @property
    def unit(self) -> str:
        return unit_of(self.name)


@dataclass(frozen=True)
class Measurement:
    name: str
    doc: str  # one line: what a sample of it is
    tags: dict[str, str]  # tag -> what it names
    fields: tuple[Field, ...]


def fields(*names: str, text: tuple[str, ...] = (), **meanings: str) -> tuple[Field, ...]:
    """Fields in order: plain names first, then those with a meaning; `text` names string fields."""
    return tuple(Field(n, meanings.get(n, ""), "string" if n in text else "number")
                 for n in (*names, *(m for m in meanings if m not in names)))


#: a fact key's value: JSON's types, "any" for a key that holds more than one
KEY_TYPES: dict[str, tuple[type, ...]] = {"number": (int, float), "string": (str,), "bool": (bool,),
                                          "list": (list,), "table": (dict,), "any": (object,)}


@dataclass(frozen=True)
class Key:
    """One key of a fact's data."""

    name: str
    type: str
    meaning: str = ""
    unit_text: str = ""  # when the name's suffix cannot say it

    @property
    def unit(self) -> str:
        return self.unit_text or unit_of(self.name)

    def accepts(self, value: Any) -> bool:
        """None is every key's "not known"; a bool is no number."""
        if value is None:
            return True
        if isinstance(value, bool) and self.type == "number":
            return False
        return isinstance(value, KEY_TYPES[self.type])


@dataclass(frozen=True)
class FactKind:
    """A kind of fact: the entity its tags identify and the settings its keys hold. `other`, when
    set, says what any undeclared key is (a table of parameters by their vendor's names)."""

    name: str
    doc: str
    tags: dict[str, str]
    keys: tuple[Key, ...]
    other: str = ""

    def problems(self, tags: dict[str, str], data: dict[str, Any]) -> list[str]:
        """How a fact of this kind departs from its declaration ([] when it does not)."""
        out = []
        if extra := sorted(set(tags) - set(self.tags)):
            out.append(f"fact {self.name}: tags not declared: {', '.join(extra)}")
        keys = {k.name: k for k in self.keys}
        if not self.other and (extra := sorted(set(data) - set(keys))):
            out.append(f"fact {self.name}: keys not declared: {', '.join(extra)}")
        if wrong := sorted(k for k, v in data.items() if k in keys and not keys[k].accepts(v)):
            out.append(f"fact {self.name}: keys not of their declared type: "
                       + ", ".join(f"{k} ({keys[k].type})" for k in wrong))
        return out


def keys(**declared: tuple[str, ...]) -> tuple[Key, ...]:
    """Fact keys in order, each (type, meaning) or (type, meaning, unit): a declaration written in code."""
    return tuple(Key(name, *spec[:2], *spec[2:]) for name, spec in declared.items())


@dataclass(frozen=True)
class Schema:
    """What one package declares."""

    measurements: tuple[Measurement, ...] = ()
    facts: tuple[FactKind, ...] = ()


def load(package: str) -> Schema:
    """A collector package's `schema.toml`: one table per measurement with `doc`, `tags` (tag ->
    meaning), `fields` (field -> meaning, in order) and `text` (the fields that hold strings); one
    `[fact.KIND]` per fact kind with `doc`, `tags`, `keys` (key -> { type, meaning, unit }) and `other`."""
    doc = tomllib.loads(package_text(package, "schema.toml"))
    facts = doc.pop("fact", {})
    return Schema(
        tuple(Measurement(name, m["doc"], dict(m["tags"]),
                          tuple(Field(f, meaning, "string" if f in m.get("text", ()) else "number")
                                for f, meaning in m["fields"].items()))
              for name, m in doc.items()),
        tuple(FactKind(name, f["doc"], dict(f["tags"]),
                       tuple(Key(k, d["type"], d.get("meaning", ""), d.get("unit", "")) for k, d in f["keys"].items()),
                       f.get("other", ""))
              for name, f in facts.items()))


def package_text(package: str, name: str) -> str:
    """A data file of a package, read from its folder (as importlib.resources.files finds it for a
    package installed as files, which pip's are, without importing zipfile and lzma: ~20 ms of the
    agent's start-up)."""
    return (Path(importlib.import_module(package).__path__[0]) / name).read_text(encoding="utf-8")


class FactCheck:
    """Facts against their declarations: what the runtime flags (and keeps) and the test session fails on."""

    def __init__(self, kinds: Iterable[FactKind]):
        self.kinds = {k.name: k for k in kinds}

    def problems(self, kind: str, tags: dict[str, str], data: dict[str, Any]) -> list[str]:
        declared = self.kinds.get(kind)
        if declared is None:
            return [f"fact kind {kind} is not declared"]
        return declared.problems(tags, data)


def markdown(schema: Schema) -> str:
    """The reference tables a collector's README shows, generated (`make docs-check` compares)."""
    out = []
    for m in schema.measurements:
        out.append(f"### `{m.name}`\n\n{m.doc}\n")
        out.append(f"Tags: {_tags(m.tags)}.\n")
        out.append("| field | unit | meaning |\n|---|---|---|")
        for f in m.fields:
            unit = f.unit or ("text" if f.type == "string" else "")
            out.append(f"| `{f.name}` | {unit} | {f.meaning} |")
        out.append("")
    for k in schema.facts:
        out.append(f"### Fact `{k.name}`\n\n{k.doc}\n")
        out.append(f"Tags: {_tags(k.tags)}.\n")
        out.append("| key | type | unit | meaning |\n|---|---|---|---|")
        out += [f"| `{key.name}` | {key.type} | {key.unit} | {key.meaning} |" for key in k.keys]
        if k.other:
            out.append(f"| any other | | | {k.other} |")
        out.append("")
    return "\n".join(out)


def _tags(tags: dict[str, str]) -> str:
    return ", ".join(f"`{t}` ({meaning})" if meaning else f"`{t}`" for t, meaning in tags.items())
