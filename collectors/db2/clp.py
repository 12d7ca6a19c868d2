"""The CLP session: one `sh -s` on the DB2 host per cycle, and the parser for what it prints.

The script (on stdin, never on the command line) sources the instance profile, clears
DB2OPTIONS, forces UTF-8 (DB2CODEPAGE=1208) and C-locale messages, and runs ONE `db2`
process that reads every statement from a here-document: CONNECT, then each SELECT
behind an `ECHO @@db2vtop:q:<tag>` marker, then TERMINATE. A password, if configured,
is in that here-document only, so it is never in any process's argv (`ps`). Trailing
blanks of the CLP's fixed-width output are stripped remotely (sed) to save bytes, and a
watchdog ends the remote process group if the CLP hangs after we have given up.

The CLP prints its messages on stdout and exits with the OR of every statement's code
(0 ok, 1 no rows, 2 warning, 4 SQL error, 8 CLP system error), echoed after it ends.
"""

from __future__ import annotations

import re
import shlex

from db2vtop.collectors.db2.queries import Db2Error, check_statement
from db2vtop.collectors.db2.session import Outcome, Session, parse_messages, split_row

MARK = "@@db2vtop:"
END = "@@DB2VTOP_END@@"
_BANNER = re.compile(r"^\s*([A-Za-z][A-Za-z ]*?)\s*=\s*(.*?)\s*$")
_UNSAFE = re.compile(r"[\s;'\"\\]")


def connect_statement(database: str, user: str | None = None, password: str | None = None) -> str:
    if password is None:
        return f"CONNECT TO {database}"
    if not password or _UNSAFE.search(password) or END in password:
        raise Db2Error("the DB2 password contains a blank, quote, ';' or backslash, which the CLP cannot take "
                       "unquoted; use OS authentication or the ibm_db transport")
    return f"CONNECT TO {database} USER {user} USING {password}"


def profile_word(path: str) -> str:
    """The instance profile as a shell word: `~/x` and `~user/x` expand, nothing else does."""
    if path.startswith("~/"):
        return '"$HOME"/' + shlex.quote(path[2:])
    m = re.fullmatch(r"~([A-Za-z_][A-Za-z0-9_.-]*)(/.*)?", path)
    if m:
        return "~" + m.group(1) + (shlex.quote(m.group(2)) if m.group(2) else "")
    return shlex.quote(path)


def clp_input(connect: str, statements: list[tuple[str, str]]) -> str:
    """What the CLP reads: every statement, each through the allowlist, behind its marker."""
    clp = [f"ECHO {MARK}connect", connect]
    for tag, sql in statements:
        clp += [f"ECHO {MARK}q:{tag}", sql]
    clp += [f"ECHO {MARK}terminate", "TERMINATE"]
    body = "".join(check_statement(s) + ";\n" for s in clp)
    if END in body:
        raise Db2Error("refusing a statement that contains the here-document delimiter")
    return body


def session_script(profile: str, connect: str, statements: list[tuple[str, str]], watchdog_s: int) -> bytes:
    """The shell script for one cycle."""
    body = clp_input(connect, statements)
    return f"""{{
LC_ALL=C; export LC_ALL
DB2CODEPAGE=1208; export DB2CODEPAGE
p={profile_word(profile)}
if [ ! -r "$p" ]; then echo "{MARK}noprofile"; exit 0; fi
. "$p"
DB2OPTIONS=; export DB2OPTIONS
command -v db2 >/dev/null 2>&1 || {{ echo "{MARK}nodb2"; exit 0; }}
(i=0; while [ $i -lt {watchdog_s} ]; do sleep 1; kill -0 $$ || exit 0; i=$((i+1)); done; kill -TERM 0) >/dev/null 2>&1 &
{{ db2 -x +p -t 2>&1 <<'{END}'
{body}{END}
echo "{MARK}rc=$?"; }} | sed 's/[[:space:]]*$//'
}} </dev/null
""".encode()


def parse_output(text: str, tags: list[str], where: str, profile: str) -> Session:
    """Split the CLP's output into the connect result and one Outcome per query tag."""
    sections: dict[str, list[str]] = {}
    current = "preamble"
    sections[current] = []
    rc: int | None = None
    for line in text.splitlines():
        stripped = line.strip()
        if stripped[:len(MARK)].lower() != MARK.lower():
            sections[current].append(line)
            continue
        mark = stripped[len(MARK):].strip().lower()
        if mark == "noprofile":
            raise Db2Error(f"{where}: the instance profile {profile} is not readable; set [[db2]] instance_profile "
                           "to the instance owner's sqllib/db2profile (e.g. ~db2inst1/sqllib/db2profile)")
        if mark == "nodb2":
            raise Db2Error(f"{where}: no db2 command on PATH after sourcing {profile}; is that the instance's "
                           "db2profile?")
        if mark.startswith("rc="):
            try:
                rc = int(mark[3:])
            except ValueError:
                raise Db2Error(f"{where}: garbled CLP exit status {mark[3:][:20]!r}") from None
            current = "after"
            sections[current] = []
            continue
        current = mark[2:] if mark.startswith("q:") else mark
        sections[current] = []
    if rc is None:
        seen = [s for s in ("connect", *tags) if s in sections]
        last = seen[-1] if seen else "before connecting"
        raise Db2Error(f"{where}: the CLP output ended early (after {last}; no exit status): cut off, or the CLP "
                       "or remote shell was killed")
    session = Session(rc=rc)
    if "connect" not in sections:
        tail = " ".join(" ".join(sections["preamble"]).split())[:200]
        raise Db2Error(f"{where}: the CLP printed nothing recognisable (exit {rc}){': ' + tail if tail else ''}")
    messages, other = parse_messages(sections["connect"])
    session.connect = Outcome(messages=messages)
    for line in other:
        m = _BANNER.match(line)
        if m:
            session.banner[m.group(1)] = m.group(2)
    if rc & 8 and not session.connect.error:
        found = [m.text for part in sections.values() for m in parse_messages(part)[0] if m.is_error]
        raise Db2Error(f"{where}: the CLP failed with a system error (exit {rc})"
                       + (": " + " ".join(found)[:300] if found else ""))
    for tag in tags:
        if tag not in sections:
            if session.connect.error:
                continue  # nothing after a failed connect matters
            raise Db2Error(f"{where}: no output section for query {tag!r} (exit {rc})")
        session.results[tag] = _outcome(tag, sections[tag], where)
    return session


def _outcome(tag: str, lines: list[str], where: str) -> Outcome:
    prefix = tag + "|"
    rows = []
    rest = []
    for line in lines:
        if line.startswith(prefix):
            rows.append(split_row(line[len(prefix):], f"{where}: {tag}"))
        else:
            rest.append(line)
    messages, other = parse_messages(rest)
    other = [line for line in other if line.strip()]
    if other:
        raise Db2Error(f"{where}: unexpected output from the CLP for query {tag!r}: {other[0].strip()[:80]!r}")
    return Outcome(rows, messages)
