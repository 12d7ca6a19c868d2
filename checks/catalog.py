"""The practice catalog: every checkable practice of the five white papers db2vtop implements.

`catalog.json` holds the practices of shared/reference/practices.md (one per rule id, grouped under
their topic's title, with the paper's figure, data source, how it is judged (practices.md's kind
column) and citations) and the DB2 configuration baselines of WP-7109's appendixes used for drift
checks; practices.md's own numbering of its lists is not kept: no user reads it. A reference starts
with its document's id ("WP-7109 §5.3 ...", `titles` gives each id's published title, which is what
is shown) or names a published source (VMware KB, vendor and IBM
documentation), else says "db2vtop default" and why: never the file names it was built from.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from importlib.resources import files


@dataclass(frozen=True)
class Practice:
    id: str
    section_title: str  # its topic, as `db2vtop rules` heads its group
    layer: str
    practice: str
    figure: str
    observe_via: str
    judged: str  # practices.md's kind column: L live, S static, D derived, E event ("S/L", "S (info)", ...)
    references: tuple[str, ...]
    published_only: bool  # no white paper sets it: a published source (or a db2vtop default) does


@dataclass(frozen=True)
class Baseline:
    """One DB2 parameter's value in each appendix profile of WP-7109 ("–" = not listed)."""

    id: str
    scope: str  # dbm | db | registry
    parameter: str
    dss: str
    oltp: str
    overalloc: str
    meaning: str


@cache
def _doc() -> dict:
    return json.loads(files("db2vtop.checks").joinpath("catalog.json").read_text(encoding="utf-8"))


#: the file names a finding stored by an older db2vtop cites the white papers by -> their document ids
_OLDER_NAMES = {"000_e991ec30bbd9209f.txt": "WP-7109", "001_6f95067443725955.txt": "VMware-solidDB-x3850-X5",
                "002_0ee3448f3b89575b.txt": "XtremIO-4.0-vSphere-6.0", "003_cbc8cdf65aafcb96.txt": "TR-3581",
                "004_7debb8f6cbbd0cef.txt": "EMC-DMX-DB2-UDB"}


def cite(ref: str) -> str:
    """A reference as a reader can find it: a document's id (or an older recording's file name for it)
    becomes the document's published title."""
    name, _, rest = ref.partition(" ")
    title = _doc()["titles"].get(_OLDER_NAMES.get(name, name))
    return f"{title}, {rest}" if title and rest else title or ref


def references_of(rule: str, stored: list[str]) -> list[str]:
    """What a finding cites, as shown: its rule's references in this catalog (a recording made by an
    older db2vtop may hold file names and its own shorthand), else the stored ones, by title."""
    practice = practices().get(rule)
    return list(practice.references) if practice is not None and practice.references else [cite(r) for r in stored]


@cache
def practices() -> dict[str, Practice]:
    return {r["id"]: Practice(**{**r, "references": tuple(cite(x) for x in r["references"])})
            for r in _doc()["rules"]}


@cache
def baselines() -> list[Baseline]:
    return [Baseline(scope=scope, **row) for scope, rows in _doc()["db2_cfg_profiles"].items() for row in rows]
