"""How a row is held as text: its field names once in `fieldsets` (a `Fieldsets` keeps both directions in
memory, for every room of one connection), its values a JSON array; facts and findings as JSON documents."""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from db2vtop.agent.core.model import FieldValue, clean_fields

_VALUES_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def encode(fields: dict[str, FieldValue]) -> tuple[tuple[str, ...], str]:
    """(names, JSON array of values) of one sample's fields."""
    try:
        return tuple(fields), _VALUES_ENCODER.encode(list(fields.values()))
    except ValueError:  # NaN or infinity from a careless collector: drop those values only
        fields = clean_fields(fields)
        return tuple(fields), _VALUES_ENCODER.encode(list(fields.values()))


def row_at(names: tuple[str, ...], columns: list[list[Any]], i: int) -> dict[str, FieldValue]:
    """Row i of a decoded chunk: the fields it has."""
    return {n: c[i] for n, c in zip(names, columns, strict=True) if c[i] is not None}


def doc(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


class Fieldsets:
    """The `fieldsets` table as one connection knows it: a tuple of field names by id and back."""

    def __init__(self, db: sqlite3.Connection):
        self.db = db
        self._ids: dict[tuple[str, ...], int] = {}
        self._names: dict[int, tuple[str, ...]] = {}

    def forget(self) -> None:
        """After a rollback: ids inserted by the rolled-back transaction are gone."""
        self._ids.clear()
        self._names.clear()

    def id_of(self, names: tuple[str, ...]) -> int:
        fid = self._ids.get(names)
        if fid is None:
            text = json.dumps(names, ensure_ascii=False, separators=(",", ":"))
            self.db.execute("INSERT OR IGNORE INTO fieldsets(names) VALUES (?)", (text,))
            fid = self.db.execute("SELECT id FROM fieldsets WHERE names=?", (text,)).fetchone()[0]
            self._ids[names] = fid
            self._names[fid] = names
        return fid

    def names(self, fieldset: int) -> tuple[str, ...]:
        names = self._names.get(fieldset)
        if names is None:  # written by another process since we last looked
            for fid, text in self.db.execute("SELECT id, names FROM fieldsets WHERE id >= ?", (fieldset,)):
                self._names[fid] = tuple(json.loads(text))
            names = self._names[fieldset]
        return names

    def decode(self, fieldset: int, vals: str) -> dict[str, FieldValue]:
        return dict(zip(self.names(fieldset), json.loads(vals), strict=True))
