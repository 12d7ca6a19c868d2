"""How a row is held as text (agent/core/store/encoding.py): values as one JSON array beside the id of their field
names, names learnt from the file when another connection wrote them."""

from __future__ import annotations

import json
import math

from db2vtop.agent.core.store import Store
from db2vtop.agent.core.store.encoding import Fieldsets, doc, encode


def test_values_are_one_json_array_and_non_finite_ones_are_left_out():
    assert encode({"a": 1, "b": 0.5, "c": "µs", "d": True}) == (("a", "b", "c", "d"), '[1,0.5,"µs",true]')
    assert encode({"a": 1, "nan": math.nan, "inf": -math.inf}) == (("a",), "[1]")
    assert doc({"b": 1, "a": [1, "x"]}) == '{"a":[1,"x"],"b":1}'  # one text for one value, whatever its key order


def test_field_names_written_by_another_connection_are_learnt_from_the_file(store_path):
    with Store(store_path, writer=True) as w, Store(store_path) as r:
        first = w.fieldsets.id_of(("a", "b"))
        assert w.fieldsets.id_of(("a", "b")) == first  # known: no statement
        assert r.fieldsets.names(first) == ("a", "b")
        later = w.fieldsets.id_of(("c",))
        assert r.fieldsets.names(later) == ("c",) and r.fieldsets.decode(later, "[7]") == {"c": 7}
        rows = w.db.execute("SELECT id, names FROM fieldsets ORDER BY id").fetchall()
    assert [(i, json.loads(n)) for i, n in rows] == [(first, ["a", "b"]), (later, ["c"])]


def test_forgotten_ids_are_asked_of_the_file_again(store_path):
    """After a rollback the ids a transaction made are gone: nothing remembered of them is used again."""
    with Store(store_path, writer=True) as w:
        fs = Fieldsets(w.db)
        w.db.execute("BEGIN IMMEDIATE")
        made = fs.id_of(("x",))
        w.db.execute("ROLLBACK")
        fs.forget()
        assert w.db.execute("SELECT count(*) FROM fieldsets").fetchone() == (0,)
        assert fs.id_of(("y",)) == made  # SQLite gives the rolled-back id again: a remembered one would be wrong
        x = fs.id_of(("x",))
        assert w.db.execute("SELECT names FROM fieldsets WHERE id=?", (x,)).fetchone() == ('["x"]',)
        assert (fs.names(made), fs.names(x)) == (("y",), ("x",))
