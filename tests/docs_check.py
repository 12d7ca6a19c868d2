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
FIGURES_BEGIN = ("<!-- generated from checks/figures.py (its figures marked `report`) by `python -m tests.docs_check "
                 "--write`; do not edit -->")


def figures_markdown() -> str:
    """The report's figures, per layer, as docs/runs.md lists them."""
    from db2vtop.checks.figures import LAYER_TITLES, LAYERS
    from db2vtop.checks.figures import REPORTED as FIGURES

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
    from db2vtop.checks.figures import REPORTED as FIGURES

    declared = {m.name: {f.name: f.type for f in m.fields} for ms in measurement_catalog().values() for m in ms}
    for f in FIGURES:
        if declared.get(f.measurement, {}).get(f.field) != "number":
            problems.append(f"checks/figures.py: figure {f.id} is not a declared number field (agent/core/schema.py)")
    _generated_block(problems, write, RUNS_DOC, FIGURES_BEGIN, figures_markdown(), "figure",
                     "checks/figures.py")


CHECKS_DOC = ROOT / "docs" / "checks.md"
CATALOG_BEGIN = "<!-- generated from checks/catalog.json by `python -m tests.docs_check --write`; do not edit -->"


def check_catalog_counts(problems: list[str], write: bool = False) -> None:
    """docs/checks.md's count of the catalog's practices and baselines is the catalog's: adding a rule for a new
    practice touches its class and its catalog entry, and this number follows (`--write`)."""
    from db2vtop.checks.catalog import baselines, practices

    _generated_block(problems, write, CHECKS_DOC, CATALOG_BEGIN,
                     f"It holds {len(practices())} practices and {len(baselines())} DB2 configuration baselines.",
                     "catalog count", "checks/catalog.json")


ARCH_DOC = ROOT / "docs" / "architecture.md"
HOWTO = "## How to add a source, a rule or a screen"


def howto_parts(text: str) -> dict[str, tuple[str, list[str], str]]:
    """docs/architecture.md's how-to section: kind ("source", "rule", "screen") -> (its heading's count words,
    its bullets, the prose after them)."""
    _, found, rest = text.partition(HOWTO)
    parts: dict[str, tuple[str, list[str], str]] = {}
    for block in rest.split("\n## ")[0].split("\n### ")[1:] if found else []:
        heading, _, body = block.partition("\n")
        kind, _, count = heading.removeprefix("A ").partition(": ")
        bullets = re.split(r"\n(?=- )", body.strip().split("\n\n")[0])
        parts[kind] = (count, [" ".join(b.split()) for b in bullets if b.startswith("- ")],
                       " ".join(body.strip().split("\n\n", 1)[1:]))
    return parts


def _lead(bullet: str) -> str:
    return CODE.search(bullet).group(1) if CODE.search(bullet) else ""


def _rel(module: typing.Any) -> str:
    return Path(module.__file__).resolve().relative_to(ROOT).as_posix()


def _named_in(folders: tuple[str, ...], pattern: re.Pattern[str]) -> Iterator[tuple[str, str]]:
    """(file, match) for each match of `pattern` in the product's .py files under `folders`."""
    for folder in folders:
        for path in sorted((ROOT / folder).rglob("*.py")):
            for m in pattern.findall(path.read_text(encoding="utf-8")):
                yield path.relative_to(ROOT).as_posix(), m


def _check_count(problems: list[str], kind: str, count: str, bullets: list[str]) -> None:
    n = re.match(r"(\d+) files?$", count)
    if n and int(n.group(1)) != len(bullets):
        problems.append(f"docs/architecture.md: a {kind} says {count} but lists {len(bullets)}")


def _check_paths(problems: list[str], kind: str, bullets: list[str], code: set[str]) -> None:
    named = {_lead(b) for b in bullets}
    if named != code:
        problems.append(f"docs/architecture.md: a {kind} touches {sorted(code)} in the code, "
                        f"the section lists {sorted(named)}")


def check_source_howto(problems: list[str], count: str, bullets: list[str], prose: str) -> None:
    """A source is its package plus one line of collectors/registry.py's INPUTS; outside collectors/ nothing
    names a source's package but what the section excepts."""
    from db2vtop.collectors import registry
    from db2vtop.collectors.registry import INPUTS

    _check_paths(problems, "source", bullets, {"collectors/<source>/", _rel(registry)})
    lines = Path(registry.__file__).read_text(encoding="utf-8").partition("INPUTS")[2].splitlines()
    for i in INPUTS:
        module = sys.modules[i.package]
        names = [n for n, v in vars(module).items() if v is i]
        at = [line for line in lines if any(re.search(rf"\b{i.package.rsplit('.', 1)[1]}\.{n}\b", line)
                                            for n in names)]
        if len(at) != 1:
            problems.append(f"collectors/registry.py: {i.package} is in {len(at)} lines of INPUTS, not 1")
    if not re.match(r"its package, and (\d+) line in the registry$", count):
        problems.append(f"docs/architecture.md: a source's heading is {count!r}")
    packages = {i.package.split(".")[2] for i in INPUTS}
    files = set(CODE.findall(bullets[0] if bullets else "")) - {"collectors/<source>/"}
    folders = [ROOT.joinpath("collectors", *i.package.split(".")[2:]) for i in INPUTS]
    have = {f for folder in folders for f in files  # a file the [[storage]] vendors share sits one folder up
            if any((d / f).exists() for d in (folder, *folder.parents) if d.is_relative_to(ROOT / "collectors"))}
    for f in sorted({f for f in files if re.fullmatch(r"[\w.]+\.(py|toml|md)", f)} - have):
        problems.append(f"docs/architecture.md: a source's `{f}` is in no registered source's package")
    excepted = {p for p in CODE.findall(prose) if p.endswith(".py")}
    pattern = re.compile(rf"db2vtop\.collectors\.({'|'.join(packages)})\b|"
                         rf"from db2vtop\.collectors import .*\b({'|'.join(packages)})\b")
    for path, m in _named_in(("agent", "checks", "tui"), pattern):
        if path not in excepted:
            problems.append(f"{path}: names the source package {''.join(m)} (only the registry should)")


def check_rule_howto(problems: list[str], count: str, bullets: list[str], prose: str) -> None:
    """A rule is its class in checks/rules/<layer>.py's RULES and its catalog entry; no other product module
    writes its id but those the section names."""
    import importlib
    import inspect

    from db2vtop.checks import catalog, rules
    from db2vtop.checks.rule import Rule

    _check_count(problems, "rule", count, bullets)
    _check_paths(problems, "rule", bullets, {"checks/rules/<layer>.py",
                                             (Path(catalog.__file__).parent / "catalog.json").relative_to(ROOT)
                                             .as_posix()})
    ids: set[str] = set()
    for info in sorted((ROOT / "checks" / "rules").glob("[!_]*.py")):
        module = importlib.import_module(f"db2vtop.checks.rules.{info.stem}")
        listed = {type(r) for r in getattr(module, "RULES", [])}
        ids |= {r.id for r in getattr(module, "RULES", [])}
        for name, cls in vars(module).items():
            if (inspect.isclass(cls) and issubclass(cls, Rule) and cls.__module__ == module.__name__
                    and not name.startswith("_") and getattr(cls, "id", None) and cls not in listed):
                problems.append(f"checks/rules/{info.stem}.py: rule {name} is not in the module's RULES")
    for r in rules.all_rules():
        if r.id not in catalog.practices() and type(r).practice is Rule.practice:
            problems.append(f"checks/catalog.json: no practice for rule {r.id}")
    named = set(CODE.findall(prose))
    pattern = re.compile(r"""["']([a-z0-9]+(?:-[a-z0-9]+)+)["']""")
    for path, m in _named_in(("agent", "checks", "collectors", "tui"), pattern):
        if m in ids and not path.startswith("checks/rules/") and path not in named and m not in named:
            problems.append(f"{path}: writes rule id {m!r} (docs/architecture.md's how-to does not say so)")


def check_screen_howto(problems: list[str], count: str, bullets: list[str], prose: str) -> None:
    """A screen is its module in tui/screens/, its loader in tui/loaders/ and one line of tui/commands.py's
    SCREENS (plus its `:` verb in COMMANDS)."""
    from db2vtop.tui import app, commands

    _check_count(problems, "screen", count, bullets)
    _check_paths(problems, "screen", bullets, {"tui/screens/<screen>.py", "tui/loaders/<screen>.py",
                                               _rel(commands)})
    lines = Path(commands.__file__).read_text(encoding="utf-8").partition("\nSCREENS")[2].partition("\n)")[0]
    verbs = {c.verb for c in commands.COMMANDS}
    for s in commands.SCREENS:
        if not (ROOT / "tui" / "screens" / f"{s.name}.py").exists():
            problems.append(f"tui/screens/{s.name}.py: no such screen module")
        loader = ROOT / "tui" / "loaders" / f"{s.name}.py"
        if not loader.exists() or f"\ndef load_{s.name}(" not in loader.read_text(encoding="utf-8"):
            problems.append(f"tui/loaders/{s.name}.py: no load_{s.name}")
        if sum(f'"{s.name}"' in line for line in lines.splitlines()) != 1 or s.name not in verbs:
            problems.append(f"tui/commands.py: screen {s.name} is not one line of SCREENS with its `:` verb")
    for name, cls in app.Db2vtopApp.MODES.items():
        if cls.__module__ != f"db2vtop.tui.screens.{name}":
            problems.append(f"tui/app.py: MODES[{name!r}] is not tui/screens/{name}.py's")


def check_howto(problems: list[str], text: str | None = None) -> None:
    """docs/architecture.md's "How to add a source, a rule or a screen" is what the code needs."""
    parts = howto_parts(ARCH_DOC.read_text() if text is None else text)
    checks = {"source": check_source_howto, "rule": check_rule_howto, "screen": check_screen_howto}
    if set(parts) != set(checks):
        problems.append(f"docs/architecture.md: the how-to section has {sorted(parts)}, not {sorted(checks)}")
    for kind, (count, bullets, prose) in parts.items():
        if kind in checks:
            checks[kind](problems, count, bullets, prose)


def main() -> int:
    problems: list[str] = []
    check_sources_table(problems, write="--write" in sys.argv[1:])  # first: check_config reads the table
    check_config(problems)
    check_cli(problems)
    check_examples(problems)
    check_measurements(problems, write="--write" in sys.argv[1:])
    check_figures(problems, write="--write" in sys.argv[1:])
    check_catalog_counts(problems, write="--write" in sys.argv[1:])
    check_howto(problems)
    grafana_rules.check(problems, write="--write" in sys.argv[1:])
    for p in problems:
        print(p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
