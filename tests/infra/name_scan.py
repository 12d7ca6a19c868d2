"""The measurement and field names that the read side's code (checks/, tui/) writes as string literals,
found by parsing it: tests/agent/core/test_read_model.py checks each against what the collectors declare.

A name is taken where the code uses it as one: as a measurement (`series("guest_cpu")`, `latest_at(...)`,
a rule's `measurement = ...`, any literal that has a measurement's prefix) or as a field (`value(fields,
"busy_pct")`, `max_of`/`sum_of`/`Trend.of(...)`, `window(id, "f", ...)`, `row.fields["f"]`, a rule's
`field = ...`, the names a comprehension feeds to one of those, and any literal that ends in a unit suffix).
Keys of other mappings (a fact's `data`, thresholds, evidence and JSON dicts) are not sample fields; fact
keys are checked against the facts' declarations elsewhere.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

from db2vtop.agent.core.schema import UNITS

#: where a measurement's name starts
PREFIXES = ("db2_", "guest_", "vsphere_", "esxtop_", "storage_", "db2vtop_")
#: call -> the positions of its measurement argument (negative: from the keyword) and of its field arguments
MEASUREMENT_AT = {"series": 0, "by_tag": 0, "latest": 0, "latest_at": 0, "find": 0, "rows": 0, "newest": 0,
                  "period": 0, "select": 1, "_db2_rows": 2, "_now": 3}
FIELDS_FROM = {"value": 1, "max_of": 1, "sum_of": 1, "of": 1, "window": 1, "points": 1, "buckets": 1}


@dataclass(frozen=True)
class Name:
    kind: str  # measurement | field
    name: str
    where: str  # path:line
    measurement: str | None = None  # when the code says which measurement the field is of


def _strings(node: ast.AST) -> list[ast.Constant]:
    """The string literals of an expression that stand for names (not inside f-strings, not keys of kwargs)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node]
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return [c for e in node.elts for c in _strings(e)]
    if isinstance(node, ast.Starred):
        return _strings(node.value)
    return []


def _call_name(call: ast.Call) -> str | None:
    f = call.func
    return f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else None


def _is_fields(node: ast.AST) -> bool:
    """`x.fields`, or a name that holds a sample's fields by this code's convention."""
    return isinstance(node, ast.Attribute) and node.attr == "fields"


class _Scan(ast.NodeVisitor):
    def __init__(self, where: str):
        self.where = where
        self.found: list[Name] = []
        self.docstrings: set[int] = set()

    def add(self, kind: str, c: ast.Constant, measurement: str | None = None) -> None:
        self.found.append(Name(kind, c.value, f"{self.where}:{c.lineno}", measurement))

    def generic_visit(self, node: ast.AST) -> None:
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) and \
                isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
            self.docstrings.add(id(body[0].value))
        super().generic_visit(node)

    def visit_Call(self, call: ast.Call) -> None:
        name = _call_name(call)
        if name in MEASUREMENT_AT and len(call.args) > MEASUREMENT_AT[name]:
            for c in _strings(call.args[MEASUREMENT_AT[name]]):
                self.add("measurement", c)
        if name in ("Figure", "F") and len(call.args) >= 3:  # the figure table: (layer, measurement, field, ...)
            (m,), fields = _strings(call.args[1]) or (None,), _strings(call.args[2])
            for c in fields:
                self.add("field", c, m.value if m is not None else None)
        elif name in FIELDS_FROM:
            for a in call.args[FIELDS_FROM[name]:]:
                for c in _strings(a):
                    self.add("field", c)
        if name == "get" and isinstance(call.func, ast.Attribute) and _is_fields(call.func.value) and call.args:
            for c in _strings(call.args[0]):
                self.add("field", c)
        self.generic_visit(call)

    def visit_Subscript(self, node: ast.Subscript) -> None:
        if _is_fields(node.value):
            for c in _strings(node.slice):
                self.add("field", c)
        self.generic_visit(node)

    def visit_comprehension(self, node: ast.comprehension) -> None:
        self.generic_visit(node)

    def _fed(self, comp: ast.AST) -> None:
        """`[value(f, k) for k in ("a_ms", "b_ms")]`: the names iterated feed a field argument."""
        gens = getattr(comp, "generators", [])
        for g in gens:
            if not isinstance(g.target, ast.Name):
                continue
            used = any(isinstance(n, ast.Call) and _call_name(n) in FIELDS_FROM and
                       any(isinstance(a, ast.Name) and a.id == g.target.id for a in n.args[1:])
                       for n in ast.walk(comp))
            if used:
                for c in _strings(g.iter):
                    self.add("field", c)

    def visit_ListComp(self, node: ast.ListComp) -> None:
        self._fed(node)
        self.generic_visit(node)

    visit_GeneratorExp = visit_SetComp = visit_DictComp = visit_ListComp  # noqa: N815

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        """A rule's `measurement = "..."` and `field = "..."` (also as tuple assignments)."""
        for stmt in node.body:
            if not isinstance(stmt, ast.Assign):
                continue
            for target in stmt.targets:
                names = [target] if isinstance(target, ast.Name) else \
                    list(target.elts) if isinstance(target, ast.Tuple) else []
                values = [stmt.value] if len(names) == 1 else \
                    list(stmt.value.elts) if isinstance(stmt.value, ast.Tuple) else []
                for n, v in zip(names, values, strict=False):
                    if isinstance(n, ast.Name) and n.id in ("measurement", "field"):
                        for c in _strings(v):
                            self.add(n.id, c)
        self.generic_visit(node)

    def visit_Constant(self, node: ast.Constant) -> None:
        """Any literal shaped like a measurement's or a field's name is one, wherever it stands."""
        v = node.value
        if not isinstance(v, str) or id(node) in self.docstrings or not v.isidentifier() or v != v.lower() \
                or v.startswith("_") or v.endswith("_"):
            return
        if v.startswith(PREFIXES):
            self.add("measurement?", node)
        elif any(v.endswith(suffix) for suffix, _ in UNITS):
            self.add("field?", node)


def _keys(tree: ast.AST) -> set[int]:
    """Literals that name a key of some other mapping: a dict literal's keys (evidence, JSON out), and what
    is read from any mapping but a sample's fields (a fact's `data`, thresholds `t[...]`): not this scan's."""
    out: set[int] = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.Dict):
            out |= {id(c) for k in n.keys if k is not None for c in _strings(k)}
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "get" and \
                not _is_fields(n.func.value) and n.args:
            out |= {id(c) for c in _strings(n.args[0])}
        if isinstance(n, ast.Subscript) and not _is_fields(n.value):
            out |= {id(c) for c in _strings(n.slice)}
        if isinstance(n, ast.Assign) and any((isinstance(t, ast.Name) and t.id == "evidence") or
                                             (isinstance(t, ast.Tuple) and any(isinstance(e, ast.Name) and
                                                                              e.id == "evidence" for e in t.elts))
                                             for t in n.targets):
            out |= {id(c) for c in ast.walk(n.value) if isinstance(c, ast.Constant)}  # a rule's fact keys
    return out


def scan_source(text: str, where: str) -> list[Name]:
    tree = ast.parse(text)
    s = _Scan(where)
    for node in ast.walk(tree):  # docstrings first, so visit_Constant can skip them
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) and \
                isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
            s.docstrings.add(id(body[0].value))
    s.docstrings |= _keys(tree)
    s.visit(tree)
    return s.found


def scan(root: Path, folders: tuple[str, ...] = ("checks", "tui")) -> list[Name]:
    out = []
    for folder in folders:
        for path in sorted((root / folder).rglob("*.py")):
            out += scan_source(path.read_text(), str(path.relative_to(root)))
    return out


# --- levels written as numbers ------------------------------------------------------------------

#: calls whose result is a sample's value (or a figure made of them)
VALUE_CALLS = {"value", "max_of", "sum_of", "_over", "_max", "figure", "role", "buckets"}


def _numbers(node: ast.AST) -> list[ast.Constant]:
    """The numeric literals of an expression (not 0: "any amount" is no level), outside calls' arguments."""
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return [node] if node.value != 0 else []
    if isinstance(node, ast.UnaryOp):
        return _numbers(node.operand)
    if isinstance(node, ast.BinOp):
        return _numbers(node.left) + _numbers(node.right)
    if isinstance(node, ast.BoolOp):
        return [c for v in node.values for c in _numbers(v)]
    return []


def _count(node: ast.AST) -> bool:
    """`len(...)`, `sum(1 for ...)`: how many, not how much."""
    return isinstance(node, ast.Call) and _call_name(node) in ("len", "sum") and bool(node.args) and (
        _call_name(node) == "len" or (isinstance(node.args[0], ast.GeneratorExp)
        and isinstance(node.args[0].elt, ast.Constant)))


def _tainted(node: ast.AST, names: set[str]) -> bool:
    """Whether an expression holds a sample's value: read from fields, a value call, or a name bound to one."""
    if _count(node):
        return False
    for n in ast.walk(node):
        if _count(n):
            continue
        if isinstance(n, ast.Name) and n.id in names:
            return True
        if isinstance(n, ast.Call) and _call_name(n) in VALUE_CALLS:
            return True
        if _is_fields(n):
            return True
    return False


def _bound(target: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(target) if isinstance(n, ast.Name)}


def level_literals(text: str, where: str) -> list[str]:
    """Comparisons of a sample's value with a number written in the code: a level no override moves."""
    tree = ast.parse(text)
    out = []
    scopes = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)]
    for scope in scopes:
        names: set[str] = set()
        for _ in range(3):  # values flow through a few assignments
            for n in ast.walk(scope):
                if isinstance(n, ast.Assign) and _tainted(n.value, names):
                    for t in n.targets:
                        names |= _bound(t)
                elif isinstance(n, ast.AnnAssign | ast.AugAssign | ast.NamedExpr | ast.For | ast.comprehension):
                    value = n.iter if isinstance(n, ast.For | ast.comprehension) else n.value
                    if value is not None and _tainted(value, names):
                        names |= _bound(n.target)
        for n in ast.walk(scope):
            if not isinstance(n, ast.Compare):
                continue
            sides = [n.left, *n.comparators]
            for i, side in enumerate(sides):
                others = sides[:i] + sides[i + 1:]
                if _numbers(side) and any(_tainted(o, names) for o in others):
                    out.append(f"{where}:{n.lineno}: {ast.unparse(n)}")
                    break
    return sorted(set(out))
