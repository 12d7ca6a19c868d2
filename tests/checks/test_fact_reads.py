"""Every fact kind and fact key that checks/ and tui/ read is declared (each source's schema.toml, or
vSphere's schema.py): a kind or key renamed on the collector side, or misspelt on the reading side,
fails here rather than reading None forever.

Read from the code itself (its syntax tree), so every path counts, not only those a test runs: a kind
is what `facts.of("k")`, `facts.find("k", ...)`, `store.facts("k")`, `fact_history("k", ...)` or a
rule's `fact_kind = "k"` name; a key is what `x.data.get("k")`, `x.data["k"]` or a rule's `evidence`
and `list_key` name. A rule's evidence, list_key and what its `problem(f)` reads of `f` must be keys of
its `fact_kind` (its own or a base's); any other key must be declared by some kind.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

from db2vtop.agent.assemble import catalog
from tests.conftest import ROOT

READERS = ("checks", "tui")
KIND_CALLS = {"of", "find"}  # on a FactIndex (`facts.of`, `self.facts.find`)
STORE_CALLS = {"facts", "fact_history"}  # on a store or source
KEY_ATTRIBUTES = {"evidence", "list_key"}


def _text(node: ast.AST | None) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _names(node: ast.AST) -> str:
    """`self.facts.of` -> "self.facts.of": the receiver chain of a call."""
    if isinstance(node, ast.Attribute):
        return _names(node.value) + "." + node.attr
    return node.id if isinstance(node, ast.Name) else ""


@dataclass
class Read:
    where: str
    line: int
    name: str
    of: str | None = None  # the kind whose key it must be: a rule's `fact_kind`, for its evidence and problem()


class Reads(ast.NodeVisitor):
    """The fact kinds a file names and the fact keys it reads."""

    def __init__(self, path: Path):
        self.where = str(path.relative_to(ROOT))
        self.kinds: list[Read] = []
        self.keys: list[Read] = []
        self.rule_kinds: dict[str, str] = {}  # class -> its fact_kind, its own or a base's in this file
        self.classes: list[str | None] = []  # the fact_kind of each enclosing class
        self.in_problem = False

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        own = next((_text(v) for stmt in node.body if isinstance(stmt, ast.Assign) for n, v in _pairs(stmt)
                    if n == "fact_kind"), None)
        inherited = next((self.rule_kinds[b.id] for b in node.bases if isinstance(b, ast.Name)
                          and b.id in self.rule_kinds), None)
        kind = own or inherited
        if kind:
            self.rule_kinds[node.name] = kind
        self.classes.append(kind)
        self.generic_visit(node)
        self.classes.pop()

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        outer, self.in_problem = self.in_problem, node.name == "problem"  # problem(f): f is of the rule's kind
        self.generic_visit(node)
        self.in_problem = outer

    def _key(self, name: str, line: int, of_rule: bool) -> None:
        kind = self.classes[-1] if self.classes and of_rule else None
        self.keys.append(Read(self.where, line, name, kind))

    def visit_Call(self, node: ast.Call) -> None:
        receiver, _, method = _names(node.func).rpartition(".")
        first = _text(node.args[0]) if node.args else None
        if first and ((method in KIND_CALLS and receiver.endswith("facts")) or method in STORE_CALLS):
            self.kinds.append(Read(self.where, node.lineno, first))
        if first and method == "get" and receiver.endswith(".data"):
            self._key(first, node.lineno, self.in_problem)
        self.generic_visit(node)

    def visit_Subscript(self, node: ast.Subscript) -> None:
        if isinstance(node.value, ast.Attribute) and node.value.attr == "data" and _text(node.slice):
            self._key(_text(node.slice), node.lineno, self.in_problem)
        self.generic_visit(node)

    def visit_Assign(self, node: ast.Assign) -> None:
        for name, value in _pairs(node):
            if name == "fact_kind" and _text(value):
                self.kinds.append(Read(self.where, node.lineno, _text(value)))
            elif name in KEY_ATTRIBUTES:
                for v in value.elts if isinstance(value, ast.Tuple) else [value]:
                    if _text(v):
                        self._key(_text(v), node.lineno, True)
        self.generic_visit(node)


def _pairs(node: ast.Assign) -> list[tuple[str, ast.AST]]:
    """(name, value) of `name = value` and of `a, b = x, y`."""
    out: list[tuple[str, ast.AST]] = []
    for target in node.targets:
        if isinstance(target, ast.Name):
            out.append((target.id, node.value))
        elif isinstance(target, ast.Tuple) and isinstance(node.value, ast.Tuple):
            out += [(t.id, v) for t, v in zip(target.elts, node.value.elts, strict=False) if isinstance(t, ast.Name)]
    return out


def reads() -> tuple[list[Read], list[Read]]:
    kinds, keys = [], []
    for top in READERS:
        for path in sorted((ROOT / top).rglob("*.py")):
            visitor = Reads(path)
            visitor.visit(ast.parse(path.read_text(encoding="utf-8")))
            kinds += visitor.kinds
            keys += visitor.keys
    return kinds, keys


def test_every_fact_kind_and_key_read_is_declared():
    declared = {k.name: k for schema in catalog().values() for k in schema.facts}
    kinds, keys = reads()
    problems = [f"{r.where}:{r.line}: fact kind {r.name!r} is not declared" for r in kinds if r.name not in declared]
    for r in keys:
        if r.of is not None and r.of in declared:
            if r.name not in {k.name for k in declared[r.of].keys} and not declared[r.of].other:
                problems.append(f"{r.where}:{r.line}: fact key {r.name!r} is not a key of {r.of}")
        elif not any(r.name in {k.name for k in kind.keys} for kind in declared.values()):
            problems.append(f"{r.where}:{r.line}: fact key {r.name!r} is declared by no fact kind")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("source, problem", [
    ('def f(facts):\n    return facts.of("vsphere_vmm")', "fact kind 'vsphere_vmm' is not declared"),
    ('class R:\n    fact_kind = "vsphere_vm"\n    def problem(self, f, t):\n        return f.data.get("numa_nodes")',
     "fact key 'numa_nodes' is not a key of vsphere_vm"),
    ('class R:\n    fact_kind, evidence = "storage_lun", ("mtu",)', "fact key 'mtu' is not a key of storage_lun"),
    ('class A:\n    fact_kind = "storage_port"\nclass B(A):\n    list_key = "luns"',
     "fact key 'luns' is not a key of storage_port"),
    ('def f(x):\n    return x.data["no_such_key"]', "'no_such_key' is declared by no fact kind"),
])
def test_the_reader_finds_what_is_wrong(tmp_path, monkeypatch, source, problem):
    """The scan above can fail: an undeclared kind, a key of another kind, a key of none."""
    folder = tmp_path / "checks"
    folder.mkdir()
    (folder / "bad.py").write_text(source)
    monkeypatch.setattr(f"{__name__}.ROOT", tmp_path)
    with pytest.raises(AssertionError) as e:
        test_every_fact_kind_and_key_read_is_declared()
    assert problem in str(e.value)
