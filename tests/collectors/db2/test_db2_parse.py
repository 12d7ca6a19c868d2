"""The DB2 output parser, the statement allowlist and the CLP session script, without a network:
CLP output is produced by the same stand-in the sshd tests use (tests/infra/db2clp.py) and then
fuzzed. Nothing but the collector's own error type may escape."""

from __future__ import annotations

import contextlib
import io
import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from db2vtop.collectors.base import CollectorError
from db2vtop.collectors.db2.clp import MARK, clp_input, connect_statement, parse_output, profile_word, session_script
from db2vtop.collectors.db2.collector import Db2Collector, server_clock
from db2vtop.collectors.db2.config import DB2Config
from db2vtop.collectors.db2.metrics import Rates, bufferpool_fields
from db2vtop.collectors.db2.queries import QUERIES, Db2Error, check_statement
from db2vtop.collectors.db2.session import Outcome, Session, parse_messages, split_row
from db2vtop.collectors.db2.transport import DriverTransport
from tests.infra.db2clp import Clp, DbApi, install

FIXTURES = Path(__file__).resolve().parent / "fixtures"


class _NoSSH:
    def shim(self, name, script):
        return None


@pytest.fixture(scope="module")
def scenario(tmp_path_factory) -> Path:
    d = install(_NoSSH(), tmp_path_factory.mktemp("db2") / "db2", clock="2026-11-22-10.00.00.000000")
    for f in (FIXTURES / "v11_5").iterdir():
        shutil.copy(f, d / "tables" / f.name)
    return d


class Replay:
    """A transport that hands the collector a Session parsed from given CLP output."""

    name, where, connects = "clp", "db2 test", 1

    def __init__(self, text: str, tags: list[str]):
        self.text, self.tags = text, tags

    def run(self, statements, timeout):
        return parse_output(self.text, self.tags, self.where, "~/sqllib/db2profile")

    def close(self):
        pass


def collector() -> Db2Collector:
    return Db2Collector(DB2Config(name="prod", database="PROD", ssh="x"), Replay("", []))


def clp_output(scenario: Path, facts: bool = True) -> tuple[str, list[tuple[str, str]]]:
    """What the remote shell sends back for one session: the CLP's output (trailing blanks cut, as
    the remote sed does) and the exit status line."""
    statements = collector().statements(facts)
    clp = Clp(scenario)
    clp.out = io.StringIO()
    rc = clp.run(clp_input(connect_statement("PROD"), statements))
    text = "\n".join(line.rstrip() for line in clp.out.getvalue().splitlines())
    return f"{text}\n{MARK}rc={rc}\n", statements


def test_a_clean_session_parses_into_every_query(scenario):
    text, statements = clp_output(scenario)
    s = parse_output(text, [t for t, _ in statements], "w", "p")
    assert s.rc == 0 and s.connect.error is None and s.banner["Database server"] == "DB2/LINUXX8664 11.5.8.0"
    assert set(s.results) == {q.tag for q in QUERIES}
    assert all(o.error is None for o in s.results.values())
    assert len(s.results["ct"].rows) == 4 and s.results["ct"].rows[3][2] == "/db2/daten2/db2inst1/PROD/straße|c1.dat"
    rows = collector().digest(s)
    assert rows["db"][0]["TOTAL_APP_COMMITS"] == 10000 and rows["db"][0]["CLOCK"] == "2026-11-22-10.00.00.000000"


def test_wrapped_messages_and_the_clp_wrapper_around_them():
    lines = ["DB21034E  The command was processed as an SQL statement because it was not a",
             "valid Command Line Processor command.  During SQL processing it returned:",
             'SQL0551N  "DB2MON" does not have the required authorization or privilege to',
             'perform operation "EXECUTE" on object "SYSPROC.MON_GET_BUFFERPOOL".',
             "SQLSTATE=42501", "", "bp|stray|"]
    messages, other = parse_messages(lines)
    assert [m.code for m in messages] == ["DB21034E", "SQL0551N"] and other == ["bp|stray|"]
    assert messages[1].sqlstate == "42501" and messages[1].number == "SQL0551"
    assert messages[1].text.endswith('"SYSPROC.MON_GET_BUFFERPOOL". SQLSTATE=42501')
    assert Outcome(messages=messages).error.code == "SQL0551N"  # the SQL error, not the CLP's wrapper


@pytest.mark.parametrize(("body", "fields"), [
    ("0|IBMDEFAULTBP|12|", ["0", "IBMDEFAULTBP", "12"]),
    ("0||-|", ["0", None, None]),  # NULL as an empty field, or as the CLP's dash
    ("/a b\\|c\\\\d\\ne|x|", ["/a b|c\\d\ne", "x"]),
])
def test_rows_split_on_unescaped_bars(body, fields):
    assert split_row(body, "w") == fields


def test_a_cut_row_is_an_error():
    with pytest.raises(Db2Error, match="cut short"):
        split_row("0|IBMDEFAULTBP|12", "w")


def test_server_clock_is_utc_and_tolerant_of_separators():
    assert server_clock("2026-11-22-10.00.10.250000") == server_clock("2026-11-22 10:00:10.25")
    assert server_clock("2026-11-22-10.00.10.250000") - server_clock("2026-11-22-10.00.00.000000") == 10.25
    assert server_clock("garbage") is None and server_clock("2026-13-40-10.00.00") is None


# --- the allowlist --------------------------------------------------------------------------------------


def test_every_statement_db2vtop_sends_is_on_the_allowlist():
    for q in QUERIES:
        for v in q.variants:
            for member in (-2, -1, 3):
                check_statement(v.sql(q.tag, member))
    for s in ("CONNECT TO PROD", "CONNECT TO PROD USER db2mon USING pw.x-1", "TERMINATE", f"ECHO {MARK}q:bp"):
        check_statement(s)


@pytest.mark.parametrize("stmt", [
    "SELECT * FROM SYSIBM.SYSDUMMY1",
    "SELECT T.X FROM USERS.SALARY AS T",
    "DELETE FROM SYSCAT.TABLES",
    "UPDATE SYSIBMADM.DBCFG SET VALUE = 1",
    "CALL SYSPROC.ADMIN_CMD('UPDATE DB CFG USING LOGBUFSZ 1')",
    "SELECT 1 FROM SYSCAT.TABLES; DROP TABLE X",
    "SELECT X FROM SYSCAT.TABLES WHERE X IN (SELECT Y FROM PAYROLL.T)",
    "SELECT X FROM SYSCAT.TABLES AS T, PAYROLL.T",
    "SELECT X FROM SYSCAT.TABLES AS T JOIN PAYROLL.T ON 1=1",
    "SELECT MYSCHEMA.SIDE_EFFECT(T.X) FROM SYSCAT.TABLES AS T",
    "SELECT T.X FROM TABLE(MYSCHEMA.MON_GET_FAKE(-2)) AS T",
    "SELECT T.X FROM TABLE(SNAP_GET_DB('',-2)) AS T",
    "WITH X AS (SELECT 1 FROM SYSCAT.TABLES) SELECT * FROM X",
    "SELECT 'a FROM SYSCAT.TABLES",
    "SELECT 1 FROM SYSCAT.TABLES -- comment",
    "VALUES 1",
    "EXPORT TO /tmp/x OF DEL SELECT * FROM SYSCAT.TABLES",
    "CONNECT TO PROD USER x USING a;b",
    "ECHO hello",
    "QUIT",
    "FORCE APPLICATION ALL",
])
def test_anything_else_is_refused(stmt):
    with pytest.raises(Db2Error, match="refusing"):
        check_statement(stmt)


def test_the_session_script_and_the_driver_refuse_before_sending(scenario):
    bad = [("bp", "DELETE FROM SYSCAT.TABLES")]
    with pytest.raises(Db2Error, match="refusing"):
        session_script("~/sqllib/db2profile", "CONNECT TO PROD", bad, 10)
    api = DbApi(scenario)
    t = DriverTransport(DB2Config(name="p", database="PROD", transport="ibm_db", host="h"), "h", driver=api)
    with pytest.raises(Db2Error, match="refusing"):
        t.run(bad, 5)
    assert api.executed == []


def test_the_session_script_is_valid_sh_and_keeps_the_password_in_the_here_document():
    script = session_script("~db2inst1/sqllib/db2profile", connect_statement("PROD", "db2mon", "pw.4711"),
                            [("bp", QUERIES[1].variants[0].sql("bp", -2))], 13).decode()
    assert subprocess.run(["sh", "-n"], input=script, text=True).returncode == 0
    assert "p=~db2inst1/sqllib/db2profile\n" in script and "-lt 13 ];" in script
    heredoc = script.split("<<'@@DB2VTOP_END@@'\n", 1)[1].split("\n@@DB2VTOP_END@@\n", 1)[0]
    assert "CONNECT TO PROD USER db2mon USING pw.4711;" in heredoc and script.count("pw.4711") == 1


@pytest.mark.parametrize(("path", "word"), [
    ("~/sqllib/db2profile", "\"$HOME\"/sqllib/db2profile"),
    ("/home/db2inst1/sqllib/db2profile", "/home/db2inst1/sqllib/db2profile"),
    ("/x/$(reboot)/p", "'/x/$(reboot)/p'"),
    ("~db2inst1", "~db2inst1"),
    ("~$(id)/x", "'~$(id)/x'"),
])
def test_the_instance_profile_is_quoted_for_sh(path, word):
    assert profile_word(path) == word


# --- fuzzing ----------------------------------------------------------------------------------------------------

TAGS = [q.tag for q in QUERIES]


@settings(max_examples=400, deadline=None)
@given(st.text(alphabet=st.characters(codec="utf-8"), max_size=600))
def test_arbitrary_output_never_raises_anything_but_db2error(text):
    c = collector()
    with contextlib.suppress(Db2Error):
        c.records(c.digest(parse_output(text, TAGS, "w", "p")), 0)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_mangled_real_output_never_raises_anything_but_db2error(scenario, data):
    text, _ = clp_output(scenario)
    lines = text.splitlines()
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(0, len(lines) - 1))
        action = data.draw(st.sampled_from(["cut", "drop", "insert", "flip", "truncate_all"]))
        if action == "cut":
            lines[i] = lines[i][: data.draw(st.integers(0, max(0, len(lines[i]) - 1)))]
        elif action == "drop":
            del lines[i]
        elif action == "insert":
            lines.insert(i, data.draw(st.sampled_from([
                "SQL0204N  \"X\" is an undefined name.  SQLSTATE=42704", "bp|1|2|", "db|0|x|", "garbage \x00",
                f"{MARK}q:bp", f"{MARK}rc=4", f"{MARK}rc=x", "SQL1032N  No start database manager command.", ""])))
        elif action == "flip":
            j = data.draw(st.integers(0, max(0, len(lines[i]) - 1)))
            lines[i] = lines[i][:j] + data.draw(st.sampled_from(["|", "\\", "-", "9", "x", "é"])) + lines[i][j + 1:]
        else:
            lines = lines[: i + 1]
        if not lines:
            lines = [""]
    c = collector()
    with contextlib.suppress(Db2Error):
        c.records(c.digest(parse_output("\n".join(lines), TAGS, "w", "p")), 0)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=200))
def test_rows_either_split_or_raise_db2error(body):
    try:
        fields = split_row(body, "w")
    except Db2Error:
        return
    assert isinstance(fields, list)


def test_only_the_collectors_error_type_is_raised():
    assert issubclass(Db2Error, CollectorError)
    c = collector()
    with pytest.raises(Db2Error):
        c.digest(Session(results={"bp": Outcome(rows=[["0", "BP", "1"]])}))  # too few fields


def _escaped(value: str) -> str:
    """A value as the queries' SQL escapes it (queries.py: backslash, bar and newline)."""
    return value.replace("\\", "\\\\").replace("|", "\\|").replace("\n", "\\n")


@settings(max_examples=300, deadline=None)
@given(st.lists(st.text(alphabet=st.sampled_from(list("ab|\\\n-\ue000\ue001 ")), min_size=1, max_size=12)
                .filter(lambda v: v != "-"), min_size=1, max_size=6))
def test_escaped_rows_split_back_into_their_values(values):
    assert split_row("".join(_escaped(v) + "|" for v in values), "w") == values


def test_a_row_of_backslashes_costs_memory_linear_in_its_size():
    """A hostile DB2 host's row of 2 MB of escaped backslashes took ~66x its size in the regex's
    backtracking; the str.replace split stays within a few copies of it."""
    import tracemalloc

    body = "\\\\" * 2**20 + "|"
    tracemalloc.start()
    try:
        (value,) = split_row(body, "w")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert value == "\\" * 2**20
    assert peak < 8 * len(body), peak


@pytest.mark.parametrize(("password", "pwd"), [("plain", "PWD=plain;"), ("a;b", "PWD={a;b};"),
                                              ("a}b", "PWD=a}b;"), (" lead", "PWD={ lead};")])
def test_connection_string_values_are_quoted_as_ibms_cli_reads_them(password, pwd):
    cfg = DB2Config(name="p", database="PROD", transport="ibm_db", host="db2.example", user="mon",
                    password_env="X")
    assert pwd in DriverTransport(cfg, "db2.example")._dsn(password, 10)


def test_a_value_the_cli_cannot_carry_is_refused_not_turned_into_keywords():
    cfg = DB2Config(name="p", database="PROD", transport="ibm_db", host="db2.example", user="mon",
                    password_env="X")
    with pytest.raises(Db2Error, match="PWD value") as e:
        DriverTransport(cfg, "db2.example")._dsn("pw};HOSTNAME=evil.example;PORT=1;", 10)
    assert "evil" not in str(e.value)


_delta = st.integers(0, 10**6)


@settings(max_examples=300, deadline=None)
@given(st.fixed_dictionaries({k: _delta for k in ("L", "TL", "P", "TP", "FOUND", "ASYNC")}), st.booleans())
def test_buffer_pool_hit_ratios_follow_the_documented_formula(d, has_lbp):
    """Pages the agents found over logical reads where the level has the counters; 1 - physical/logical
    (kept in 0-100) where it does not; no ratio at all without logical reads."""
    found = min(d["FOUND"], d["L"] + d["TL"] + d["ASYNC"])  # agents find at most what they ask for
    cur = {"POOL_DATA_L_READS": d["L"], "POOL_TEMP_DATA_L_READS": d["TL"], "POOL_DATA_P_READS": d["P"],
           "POOL_TEMP_DATA_P_READS": d["TP"], "POOL_DATA_LBP_PAGES_FOUND": found if has_lbp else None,
           "POOL_ASYNC_DATA_LBP_PAGES_FOUND": min(d["ASYNC"], found) if has_lbp else None}
    prev = {k: None if v is None else 0 for k, v in cur.items()}
    f = bufferpool_fields(Rates(prev, cur, 10.0), cur)
    logical = d["L"] + d["TL"]
    if not logical:
        assert f["data_hit_pct"] is None and f["hit_pct"] is None
    elif has_lbp:
        expected = (found - min(d["ASYNC"], found)) / logical * 100
        assert f["data_hit_pct"] == pytest.approx(expected) and f["hit_pct"] == pytest.approx(expected)
    else:
        assert f["data_hit_pct"] == pytest.approx(min(100.0, max(0.0, (1 - (d["P"] + d["TP"]) / logical) * 100)))
        assert 0.0 <= f["hit_pct"] <= 100.0
