"""`make docs-check`: the docs name every config key and CLI option the code has, and nothing else;
every TOML example in them is a valid config; every collector's README (and docs/measurements.md
for the agent's own) carries the field tables its declarations generate.

The code is the single source: the config dataclasses (agent/core/config.py and each source's
`collectors/<name>/config.py`, as agent/config.py assembles them) and the argparse parser
(agent/cli.py) are read, and the documentation tables are parsed and compared with them,
so a key or flag added, renamed or removed without its documentation fails `make test`.
Run: `python -m tests.docs_check` (exit 1 with one line per problem).
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import sys
import tempfile
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated

from db2vtop.agent.assemble import catalog, measurement_catalog
from db2vtop.agent.cli import build_parser
from db2vtop.agent.config import Config, load_config
from db2vtop.agent.core import config
from db2vtop.agent.core.schema import markdown
from tests import grafana_rules

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
CONFIG_DOC = ROOT / "docs" / "configuration.md"
CODE = re.compile(r"`([^`]+)`")


def _section_classes(hint: typing.Any) -> tuple[type, ...]:
    """The dataclasses behind a Config field: `X`, `X | None`, `list[X]`, or `list[X | Y]` (the
    [[storage]] vendors, told apart by `kind`)."""
    for arg in (hint, *typing.get_args(hint)):
        if dataclasses.is_dataclass(arg):
            return (arg,)
        inner = typing.get_args(arg)
        if inner and all(dataclasses.is_dataclass(a) for a in inner):
            return inner
        if inner and dataclasses.is_dataclass(inner[0]):
            return (inner[0],)
    return ()


def sections() -> dict[str, tuple[type, ...]]:
    """Section as written in TOML (`[store]`, `[[vcenter]]`) -> its dataclasses (none: `[checks.RULE]`)."""
    out: dict[str, tuple[type, ...]] = {}
    hints = typing.get_type_hints(Config, include_extras=True)
    for f in dataclasses.fields(Config):
        if f.metadata.get("toml", True) is False:
            continue
        classes = _section_classes(hints[f.name])
        if not classes:  # [checks.RULE]: its keys are the rules' thresholds, listed by `db2vtop rules`
            out[f"[{f.name}.RULE]"] = ()
            continue
        many = typing.get_origin(hints[f.name]) is list
        out[f"[[{f.name}]]" if many else f"[{f.name}]"] = classes
    return out


def config_keys() -> dict[str, set[str]]:
    """Section as written in TOML -> its keys (of every class it loads into), from the dataclasses."""
    return {section: {k.name for cls in classes for k in dataclasses.fields(cls)}
            for section, classes in sections().items()}


def table_rows(text: str, columns: int) -> Iterator[list[str]]:
    """The cells of each row of the Markdown tables in `text` that have at least `columns` columns (not the line
    under a table's head)."""
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and len(cells) >= columns and not (set(cells[0]) <= {"-"} and cells[0]):
            yield cells


def documented_keys(text: str) -> dict[str, set[str]]:
    """The configuration table's rows: a section cell carries over to the rows below it."""
    out: dict[str, set[str]] = {}
    section = None
    for cells in table_rows(text, 2):
        if cells[0]:
            first = CODE.findall(cells[0])
            if not first or not first[0].startswith("["):
                continue
            section = first[0]
            out.setdefault(section, set())
        if section is not None:
            out[section].update(k for k in CODE.findall(cells[1]) if re.fullmatch(r"[a-z0-9_*.]+", k))
    return out


def documented_ranges(text: str) -> list[tuple[str, list[str], str]]:
    """(section, keys, range cell) of each configuration table row that has a range column."""
    out, section = [], None
    for cells in table_rows(text, 5):
        if cells[0]:
            first = CODE.findall(cells[0])
            section = first[0] if first and first[0].startswith("[") else None
        if section is not None:
            out.append((section, CODE.findall(cells[1]), cells[3]))
    return out


def allowed_range(cls: type, key: str) -> str:
    """The range the code enforces for `key` of section `cls`, as the docs write it ("20s–1d"), "" if none."""
    tp = config._element(typing.get_type_hints(cls, include_extras=True)[key])
    return typing.get_args(tp)[1].span() if typing.get_origin(tp) is Annotated else ""


def check_ranges(problems: list[str], text: str) -> None:
    """Each row's range cell is what the code enforces for its keys, in their order."""
    classes = sections()
    for section, keys, cell in documented_ranges(text):
        having = {k: next((c for c in classes.get(section, ()) if k in {f.name for f in dataclasses.fields(c)}), None)
                  for k in keys}
        if not having or None in having.values():  # wildcards or a key that is not in the code: check_config says
            continue
        want = ", ".join(r for r in (allowed_range(cls, k) for k, cls in having.items()) if r)
        if cell != want:
            problems.append(f"{CONFIG_DOC.relative_to(ROOT)}: {section} {', '.join(keys)}: range {cell!r} "
                            f"is not the code's {want!r}")


def check_config(problems: list[str], text: str | None = None) -> None:
    text = CONFIG_DOC.read_text() if text is None else text
    check_ranges(problems, text)
    doc = documented_keys(text)
    for section, keys in config_keys().items():
        if section not in doc:
            problems.append(f"{CONFIG_DOC.relative_to(ROOT)}: section {section} is not documented")
            continue
        wild = [k[:-1] for k in doc[section] if k.endswith("*")]
        for key in sorted(keys):
            if key not in doc[section] and not any(key.startswith(w) for w in wild):
                problems.append(f"{CONFIG_DOC.relative_to(ROOT)}: {section} {key} is not documented")
        for key in sorted(doc[section] - keys):
            if not key.endswith("*") and section != "[checks.RULE]":
                problems.append(f"{CONFIG_DOC.relative_to(ROOT)}: {section} {key} is documented but not a key")
    for section in sorted(set(doc) - set(config_keys())):
        problems.append(f"{CONFIG_DOC.relative_to(ROOT)}: section {section} is documented but not in the code")


def commands(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> dict[tuple[str, ...], list]:
    """Every (sub)command path -> its options (each a list of option strings)."""
    out: dict[tuple[str, ...], list] = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                out.update(commands(sub, (*path, name)))
    opts = [a.option_strings for a in parser._actions
            if a.option_strings and not isinstance(a, argparse._HelpAction)]
    if path and not any(isinstance(a, argparse._SubParsersAction) for a in parser._actions):
        out[path] = opts
    return out


def check_cli(problems: list[str], text: str | None = None) -> None:
    rows = {}
    for line in (README.read_text() if text is None else text).splitlines():
        m = re.match(r"\| `db2vtop ([a-z]+(?: [a-z]+)?)\b((?:[^|\\]|\\.)*)\|", line)  # `\|` inside a cell
        if m:
            rows[tuple(m.group(1).split())] = m.group(0)
    for path, opts in commands(build_parser()).items():
        name = " ".join(path)
        row = rows.get(path) or rows.get(path[:1])
        if row is None:
            problems.append(f"README.md: command `db2vtop {name}` is not in the command table")
            continue
        for strings in opts:
            if not any(re.search(re.escape(s) + r"\b", row) for s in strings):
                problems.append(f"README.md: `db2vtop {name}` option {'/'.join(strings)} is not in its row")
    for path in sorted(set(rows) - set(commands(build_parser())) - {p[:1] for p in commands(build_parser())}):
        problems.append(f"README.md: command `db2vtop {' '.join(path)}` is documented but does not exist")


def check_examples(problems: list[str]) -> None:
    for doc in (README, *sorted((ROOT / "docs").glob("*.md"))):
        for i, block in enumerate(re.findall(r"```toml\n(.*?)```", doc.read_text(), re.S), 1):
            with tempfile.TemporaryDirectory() as tmp:
                path = Path(tmp) / "config.toml"
                path.write_text(block)
                try:
                    load_config(path)
                except config.ConfigError as e:
                    problems.append(f"{doc.relative_to(ROOT)}: TOML example {i} is not a valid config: {e}")


BEGIN = ("<!-- generated from the declarations (schema.toml, schema.py) by `python -m tests.docs_check --write`; "
         "do not edit -->")
END = "<!-- end of generated -->"


SOURCES_BEGIN = ("<!-- generated from each source's config.md (collectors/*/config.md) by `python -m tests.docs_check "
                 "--write`; do not edit -->")


def source_rows() -> str:
    """docs/configuration.md's sources table: each registry source's rows, from the nearest config.md up from its
    package's folder (the [[storage]] vendors share collectors/storage's), in the registry's order. A source is
    then documented by its package alone: adding one touches no doc outside it."""
    from db2vtop.collectors.registry import INPUTS

    files: list[Path] = []
    for i in INPUTS:
        folder = ROOT.joinpath("collectors", *i.package.split(".")[2:])
        while not (folder / "config.md").exists() and folder.parent != ROOT:
            folder = folder.parent
        if (folder / "config.md").exists() and folder / "config.md" not in files:
            files.append(folder / "config.md")
    rows = [line for f in files for line in f.read_text().splitlines() if line.startswith("|")]
    return "\n".join(["| section | key | default | range | meaning |", "|---|---|---|---|---|", *rows])


def check_sources_table(problems: list[str], write: bool = False) -> None:
    _generated_block(problems, write, CONFIG_DOC, SOURCES_BEGIN, source_rows(), "sources", "the sources' config.md")


def measurement_docs() -> dict[Path, str]:
    """Where each collector's declared measurements and facts are documented, and the text they generate."""
    return {(ROOT / "docs" / "measurements.md" if where == "self" else ROOT / "collectors" / where / "README.md"):
            markdown(schema) for where, schema in catalog().items()}


def check_measurements(problems: list[str], write: bool = False) -> None:
    """The generated blocks equal what the declarations generate (`--write` regenerates them)."""
    for path, text in measurement_docs().items():
        _generated_block(problems, write, path, BEGIN, text, "measurement", "the declarations")


def _generated_block(problems: list[str], write: bool, path: Path, begin_marker: str, text: str, what: str,
                     source: str) -> None:
    """The block after `begin_marker` in a doc equals `text` (`--write` rewrites it)."""
    doc = path.read_text()
    head, begin, rest = doc.partition(begin_marker)
    _, end, tail = rest.partition(END)
    if not begin or not end:
        problems.append(f"{path.relative_to(ROOT)}: no generated {what} block ({begin_marker})")
        return
    fresh = f"{head}{begin_marker}\n{text}\n{END}{tail}"
    if fresh != doc:
        if write:
            path.write_text(fresh)
        else:
            problems.append(f"{path.relative_to(ROOT)}: the {what} tables differ from {source}; "
                            "run `python -m tests.docs_check --write`")


RUNS_DOC = ROOT / "docs" / "runs.md"
FIGURES_BEGIN = "<!-- generated from checks/report.py FIGURES by `python -m tests.docs_check --write`; do not edit -->"


def figures_markdown() -> str:
    """The report's figures, per layer, as docs/runs.md lists them."""
    from db2vtop.checks.figures import LAYER_TITLES, LAYERS
    from db2vtop.checks.report import FIGURES

    out = []
    for layer in LAYERS:
        out += [f"### {LAYER_TITLES[layer]} (`{layer}`)", "", "| figure | unit | what | across series | key |",
                "|---|---|---|---|---|"]
        for f in FIGURES:
            if f.layer == layer:
                where = "".join(f", `{k}` = `{v}`" for k, v in f.where)
                out.append(f"| `{f.id}` | {f.unit} | {f.label}{where} | {f.combine} | {'key' if f.key else ''} |")
        out.append("")
    return "\n".join(out)


def check_figures(problems: list[str], write: bool = False) -> None:
    """Every figure of the report is a declared field of a declared measurement, and docs/runs.md
    lists them as the code has them."""
    from db2vtop.checks.report import FIGURES

    declared = {m.name: {f.name: f.type for f in m.fields} for ms in measurement_catalog().values() for m in ms}
    for f in FIGURES:
        if declared.get(f.measurement, {}).get(f.field) != "number":
            problems.append(f"checks/report.py: figure {f.id} is not a declared number field (agent/core/schema.py)")
    _generated_block(problems, write, RUNS_DOC, FIGURES_BEGIN, figures_markdown(), "figure",
                     "checks/report.py FIGURES")


def main() -> int:
    problems: list[str] = []
    check_sources_table(problems, write="--write" in sys.argv[1:])  # first: check_config reads the table
    check_config(problems)
    check_cli(problems)
    check_examples(problems)
    check_measurements(problems, write="--write" in sys.argv[1:])
    check_figures(problems, write="--write" in sys.argv[1:])
    grafana_rules.check(problems, write="--write" in sys.argv[1:])
    for p in problems:
        print(p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
