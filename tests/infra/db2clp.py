"""A stand-in for IBM's `db2` command line processor, for tests over a real sshd.

No DB2 server can run here, so this program plays the CLP for the session db2vtop sends:
it reads `-t` statements from stdin (interactive mode, +p), prints the connection banner,
SQLnnnnN messages (wrapped as the CLP wraps them, on stdout), ECHO text and `-x` rows
right-padded to the column's display width, and exits with the OR of the statement codes
(0 ok, 1 no rows, 2 warning, 4 error, 8 system error), as "Command line processor return
codes" and "CLP options" in IBM Docs describe.

It answers a SELECT the way DB2 would from the tables of a scenario directory: a table
file per table function or view, in the CLP's own tabular form (heading, dashes, rows,
NULL as `-`) as the IBM page named in its first lines shows it; a table function's file
also carries the page's syntax (`-- Syntax: NAME(arg, arg)`). A missing view is SQL0204N,
a missing column SQL0206N, and a table function that does not exist, or not with that
many arguments, SQL0440N (Db2 message reference: "No authorized routine named ... having
compatible arguments was found"): that is how an old DB2 level looks to the collector.
Our SELECT items (see collectors/db2/queries.py) are evaluated against those rows,
including SUM ... GROUP BY T.MEMBER and NOT LIKE filters.

`scenario.json` bends the behaviour: connect_error, deny (SQL0551N), garbage, truncate,
hang_s, exit_code. Every call's argv and stdin are appended to calls.jsonl.
"""

from __future__ import annotations

import json
import os
import re
import signal
import sys
import textwrap
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

MESSAGES = {
    "SQL1032N": "No start database manager command was issued.  SQLSTATE=57019",
    "SQL1013N": 'The database alias name or database name "{db}" could not be found.  SQLSTATE=42705',
    "SQL1024N": "A database connection does not exist.  SQLSTATE=08003",
    "SQL30082N": 'Security processing failed with reason "24" ("USERNAME AND/OR PASSWORD INVALID").  '
                 "SQLSTATE=08001",
}


@dataclass
class Table:
    """A table in the CLP's printed form: heading, a dashes line, rows; NULL shows as '-'."""

    columns: list[str]
    rows: list[dict[str, str | None]] = field(default_factory=list)
    header: list[str] = field(default_factory=list)  # the `--` lines naming the IBM page

    @classmethod
    def parse(cls, text: str) -> Table:
        lines = text.splitlines()
        header = [ln for ln in lines if ln.startswith("--") and not set(ln) <= {"-", " "}]
        body = [ln for ln in lines if ln not in header]
        dash_at = next(i for i, ln in enumerate(body) if ln.strip() and set(ln.strip()) <= {"-", " "})
        spans = [(m.start(), m.end()) for m in re.finditer(r"-+", body[dash_at])]
        names = body[dash_at - 1].split()
        assert len(names) == len(spans), f"heading {names} does not match the dashes"
        rows = []
        for ln in body[dash_at + 1:]:
            if not ln.strip():
                break
            values = [ln[a:b if i < len(spans) - 1 else None].strip() for i, (a, b) in enumerate(spans)]
            rows.append({n: (None if v == "-" else v) for n, v in zip(names, values, strict=True)})
        return cls(names, rows, header)

    @classmethod
    def load(cls, path: Path) -> Table:
        return cls.parse(path.read_text(encoding="utf-8"))

    def render(self) -> str:
        def show(v: str | None) -> str:
            return "-" if v is None else str(v)

        numeric = {c: all(r.get(c) is None or re.fullmatch(r"[-+0-9.E]+", str(r[c])) for r in self.rows)
                   for c in self.columns}
        widths = {c: max([len(c), *(len(show(r.get(c))) for r in self.rows)]) for c in self.columns}
        just = {c: (str.rjust if numeric[c] else str.ljust) for c in self.columns}
        out = [*self.header, "", " ".join(c.ljust(widths[c]) for c in self.columns).rstrip(),
               " ".join("-" * widths[c] for c in self.columns)]
        out += [" ".join(just[c](show(r.get(c)), widths[c]) for c in self.columns).rstrip() for r in self.rows]
        out += ["", f"  {len(self.rows)} record(s) selected.", ""]
        return "\n".join(out)

    def save(self, path: Path) -> None:
        path.write_text(self.render(), encoding="utf-8")

    def syntax(self, name: str) -> list[str]:
        """The parameters of the table function this file is the result of, from its `-- Syntax:` line."""
        line = next((h for h in self.header if h.startswith(f"-- Syntax: {name}(")), None)
        assert line is not None, f"the {name} fixture names no syntax"
        params = line[len(f"-- Syntax: {name}("):line.index(")")]
        return [p.strip() for p in params.split(",") if p.strip()]

    def set(self, where: dict[str, str], **values: object) -> None:
        """Change the rows matching `where` (for a later cycle, a reset, a level)."""
        hits = [r for r in self.rows if all(r.get(k) == v for k, v in where.items())]
        assert hits, f"no row matches {where}"
        for r in hits:
            r.update({k: None if v is None else str(v) for k, v in values.items()})


class Clp:
    def __init__(self, scenario: Path):
        self.dir = scenario
        self.cfg = json.loads((scenario / "scenario.json").read_text())
        self.connected = False
        self.rc = 0
        self.out = sys.stdout

    def write(self, text: str) -> None:
        self.out.write(text)
        self.out.flush()

    def message(self, code: str, text: str, rc: int = 4) -> None:
        self.rc |= rc
        wrapped = textwrap.wrap(f"{code}  {text}", width=79, break_long_words=False)
        self.write("\n".join(wrapped) + "\n")

    def run(self, stdin: str) -> int:
        for stmt in split_statements(stdin):
            self.statement(stmt)
        return self.cfg.get("exit_code", self.rc)

    def statement(self, stmt: str) -> None:
        word = stmt.split(None, 1)[0].upper()
        if word == "ECHO":
            self.write(stmt.split(None, 1)[1] + "\n" if " " in stmt else "\n")
        elif word == "CONNECT":
            self.connect(stmt)
        elif word == "TERMINATE":
            self.connected = False
            self.write("DB20000I  The TERMINATE command completed successfully.\n")
        elif word == "SELECT":
            if not self.connected:
                self.message("SQL1024N", MESSAGES["SQL1024N"])
            else:
                self.select(stmt)
        else:
            self.message("DB21034E", "The command was processed as an SQL statement because it was not a valid "
                                     "Command Line Processor command.  During SQL processing it returned:", 0)
            self.message("SQL0104N", f'An unexpected token "{word}" was found.  SQLSTATE=42601')

    def connect(self, stmt: str) -> None:
        m = re.match(r"CONNECT TO (\S+)(?: USER (\S+) USING (\S+))?$", stmt, re.I)
        err = self.cfg.get("connect_error")
        db = m.group(1).upper() if m else "?"
        if err is None and db != self.cfg.get("database", "PROD"):
            err = "SQL1013N"
        if m and m.group(2) and m.group(3) != self.cfg.get("password", m.group(3)):
            err = "SQL30082N"
        if err:
            self.message(err, MESSAGES[err].format(db=db))
            return
        self.connected = True
        user = (m.group(2) if m and m.group(2) else self.cfg.get("os_user", "db2inst1")).upper()
        self.write("\n   Database Connection Information\n\n"
                   f" Database server        = DB2/LINUXX8664 {self.cfg.get('level', '11.5.8.0')}\n"
                   f" SQL authorization ID   = {user}\n"
                   f" Local database alias   = {db}\n\n")

    def select(self, stmt: str) -> None:
        try:
            rows, width = answer(self.dir, self.cfg, stmt)
        except SqlError as e:
            self.message(e.code, e.text)
            return
        if isinstance(rows, str):  # garbage instead of rows
            self.write(rows + "\n")
            return
        out = [r.ljust(width) for r in rows]
        if out and self.cfg.get("truncate") and self.cfg["truncate"] in stmt:
            self.write("\n".join(out)[: max(1, len(out[0]) // 2)])
            os.kill(os.getppid(), signal.SIGKILL)  # the remote shell dies mid-output, as on a dropped session
            os._exit(0)
        if not out:
            self.rc |= 1
            return
        self.write("\n".join(out) + "\n\n")


class SqlError(Exception):
    def __init__(self, code: str, text: str):
        super().__init__(f"{code}  {text}")
        self.code, self.text = code, text


def answer(scenario: Path, cfg: dict, stmt: str) -> tuple[list[str] | str, int]:
    """Evaluate one of db2vtop's SELECTs against the scenario's tables: its rows (each one
    delimited VARCHAR) and that column's display width, or garbage, or an SqlError."""
    lines = [ln.strip() for ln in stmt.splitlines()]
    tag = re.match(r"SELECT '(\w+)'$", lines[0])
    source_line = next((ln for ln in lines if ln.startswith("FROM ")), "")
    fn = re.match(r"FROM TABLE\((\w+)\((.*)\)\) AS T$", source_line)
    view = re.match(r"FROM (\w+)\.(\w+) AS T$", source_line)
    if not tag or not (fn or view):
        raise SqlError("SQL0104N", 'An unexpected token "END-OF-STATEMENT" was found.  SQLSTATE=42601')
    name = fn.group(1) if fn else f"{view.group(1)}.{view.group(2)}"
    qualified = f"SYSPROC.{name}" if fn else name
    path = scenario / "tables" / f"{name}.txt"
    no_routine = SqlError("SQL0440N", f'No authorized routine named "{name}" of type "FUNCTION" having compatible '
                                      "arguments was found.  SQLSTATE=42884")
    if not path.exists():
        if fn:
            raise no_routine
        raise SqlError("SQL0204N", f'"{qualified}" is an undefined name.  SQLSTATE=42704')
    if name in cfg.get("deny", []):
        raise SqlError("SQL0551N", f'"{cfg.get("os_user", "db2inst1").upper()}" does not have the required '
                       f'authorization or privilege to perform operation "{"EXECUTE" if fn else "SELECT"}" on '
                       f'object "{qualified}".  SQLSTATE=42501')
    if name in cfg.get("garbage", {}):
        return cfg["garbage"][name], 0
    table = Table.load(path)
    if fn and len(split_arguments(fn.group(2))) != len(table.syntax(name)):
        raise no_routine
    exprs = []
    for item in (ln[len("||'|'||"):] for ln in lines if ln.startswith("||'|'||")):
        e = evaluate(item)
        if e is None:
            raise SqlError("SQL0104N", f'An unexpected token "{item[:20]}" was found.  SQLSTATE=42601')
        if e[1] and e[1] not in table.columns:
            raise SqlError("SQL0206N", f'"{e[1]}" is not valid in the context where it is used.  SQLSTATE=42703')
        exprs.append(e)
    rows = table.rows
    for ln in lines:
        like = re.match(r"WHERE T\.(\w+) NOT LIKE '([^%']*)%'$", ln)
        if like:
            rows = [r for r in rows if not str(r.get(like.group(1)) or "").startswith(like.group(2))]
    if "GROUP BY T.MEMBER" in lines:
        rows = group_by_member(rows)
    width = len(tag.group(1)) + 1 + sum(width_of(e) + 1 for e in exprs)
    return [tag.group(1) + "|" + "".join(value_of(e, r, cfg.get("clock")) + "|" for e in exprs) for r in rows], width


def split_arguments(text: str) -> list[str]:
    """A call's arguments, split at commas outside quotes."""
    if not text.strip():
        return []
    out, cur, quoted = [], "", False
    for ch in text:
        if ch == "'":
            quoted = not quoted
        if ch == "," and not quoted:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    return [*out, cur.strip()]


def split_statements(text: str) -> list[str]:
    """`-t` input: statements end at ';' outside single-quoted literals."""
    out, cur, quoted = [], [], False
    for ch in text:
        if ch == "'":
            quoted = not quoted
        if ch == ";" and not quoted:
            stmt = "".join(cur).strip()
            if stmt:
                out.append(stmt)
            cur = []
        else:
            cur.append(ch)
    return out


def evaluate(item: str) -> tuple[str, str] | None:
    if item == "''":
        return ("null", "")
    if item == "RTRIM(CHAR(CURRENT TIMESTAMP - CURRENT TIMEZONE))":
        return ("clock", "")
    m = re.fullmatch(r"COALESCE\(RTRIM\(CHAR\(SUM\(T\.(\w+)\)\)\),''\)", item)
    if m:
        return ("num", m.group(1))
    m = re.fullmatch(r"COALESCE\(RTRIM\(CHAR\(T\.(\w+)\)\),''\)", item)
    if m:
        return ("num", m.group(1))
    m = re.fullmatch(r"COALESCE\(REPLACE\(REPLACE\(REPLACE\(RTRIM\(T\.(\w+)\),.*\),''\)", item)
    if m:
        return ("text", m.group(1))
    return None


def group_by_member(rows: list[dict]) -> list[dict]:
    groups: dict[str, dict] = {}
    for r in rows:
        g = groups.setdefault(r["MEMBER"], {"MEMBER": r["MEMBER"]})
        for k, v in r.items():
            if k != "MEMBER" and v is not None and re.fullmatch(r"-?\d+", v):
                g[k] = str(int(g.get(k) or 0) + int(v))
    return list(groups.values())


def width_of(e: tuple[str, str]) -> int:
    kind, col = e
    if kind == "text":
        return 256 if col == "CONTAINER_NAME" else 128
    return {"null": 0, "clock": 26}.get(kind, 20)


def value_of(e: tuple[str, str], row: dict, clock: str | None) -> str:
    kind, col = e
    if kind == "null":
        return ""
    if kind == "clock":
        return clock or datetime.now(UTC).strftime("%Y-%m-%d-%H.%M.%S.%f")
    v = row.get(col)
    if v is None:
        return ""
    if kind == "text":
        return v.replace("\\", "\\\\").replace("|", "\\|").replace("\n", "\\n")
    return v


def main(scenario: str) -> None:
    sys.stdout.reconfigure(encoding="utf-8")  # DB2CODEPAGE=1208: the CLP speaks UTF-8
    sc = Path(scenario)
    stdin = sys.stdin.read()
    with open(sc / "calls.jsonl", "a", encoding="utf-8") as f:
        f.write(json.dumps({"argv": sys.argv, "stdin": stdin, "pid": os.getpid()}) + "\n")
    cfg = json.loads((sc / "scenario.json").read_text())
    hang = min(float(cfg.get("hang_s", 0)), 120.0)  # bounded: never outlives the test run for long
    if hang:
        (sc / "hung.pid").write_text(str(os.getpid()))
        time.sleep(hang)
    sys.exit(Clp(sc).run(stdin))


def install(sshd, scenario: Path, **cfg: object) -> Path:
    """Write scenario.json and put a `db2` running this module on the remote PATH."""
    scenario.mkdir(parents=True, exist_ok=True)
    (scenario / "tables").mkdir(exist_ok=True)
    (scenario / "scenario.json").write_text(json.dumps(cfg))
    root = Path(__file__).resolve().parents[2]
    sshd.shim("db2", f"#!{sys.executable}\nimport sys\nsys.path.insert(0, {str(root)!r})\n"
                     f"from tests.infra.db2clp import main\nmain({str(scenario)!r})\n")
    return scenario


def calls(scenario: Path) -> list[dict]:
    path = scenario / "calls.jsonl"
    return [json.loads(ln) for ln in path.read_text().splitlines()] if path.exists() else []


class DbApi:
    """The DB-API 2.0 surface of IBM's ibm_db_dbi over the same scenario tables, for the
    ibm_db transport (no DB2 server can run here, so no real driver connection can succeed)."""

    class Error(Exception):
        pass

    def __init__(self, scenario: Path):
        self.dir = scenario
        self.dsns: list[str] = []
        self.executed: list[str] = []

    def connect(self, dsn: str, user: str, password: str) -> _Connection:
        self.dsns.append(dsn)
        cfg = json.loads((self.dir / "scenario.json").read_text())
        err = cfg.get("connect_error")
        if err:
            raise self.Error(f"[IBM][CLI Driver] {err}  {MESSAGES[err].format(db='?')} SQLCODE=-{int(err[3:-1])}")
        return _Connection(self)


class _Connection:
    def __init__(self, api: DbApi):
        self.api = api

    def cursor(self) -> _Cursor:
        return _Cursor(self)

    def close(self) -> None:
        pass


class _Cursor:
    def __init__(self, conn: _Connection):
        self.conn = conn
        self.rows: list[tuple[str]] = []

    def execute(self, sql: str) -> None:
        self.conn.api.executed.append(sql)
        try:
            rows, _ = answer(self.conn.api.dir, json.loads((self.conn.api.dir / "scenario.json").read_text()), sql)
        except SqlError as e:
            raise self.conn.api.Error(f"[IBM][CLI Driver][DB2/LINUXX8664] {e.code}  {e.text} "
                                      f"SQLCODE=-{int(e.code[3:-1])}") from None
        self.rows = [(r,) for r in rows] if isinstance(rows, list) else [(rows,)]

    def fetchall(self) -> list[tuple[str]]:
        return self.rows

    def close(self) -> None:
        pass
