"""The two ways statements reach DB2: the CLP over SSH (default) and the ibm_db driver.

Both are blocking (the collector calls them through run_blocking), both pass every
statement through the allowlist right before it is sent, and both return a Session.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from db2vtop.agent.core.secrets import SecretError
from db2vtop.collectors.db2.clp import connect_statement, parse_output, session_script
from db2vtop.collectors.db2.config import DB2Config
from db2vtop.collectors.db2.queries import Db2Error, check_statement
from db2vtop.collectors.db2.session import Message, Outcome, Session, split_row

if TYPE_CHECKING:  # paramiko stays unimported for the ibm_db transport
    from db2vtop.collectors.ssh import SSHTarget

_SQLCODE = re.compile(r"\b(SQL\d{4,5}[NWC])\b")
_LOST = ("SQL30081", "SQL30108", "SQL1224", "SQL1776", "SQL0900")  # the connection is gone


def _password(cfg: DB2Config) -> str | None:
    ref = cfg.password()
    if ref is None:
        return None
    try:
        return ref.resolve(cfg.user or "")
    except SecretError as e:
        raise Db2Error(f"db2 {cfg.name}: {e}") from None


def _scrub(text: str, secret: str | None) -> str:
    return text.replace(secret, "********") if secret else text


class ClpTransport:
    """One `sh -s` per cycle on the [[ssh]] target, running the CLP session script."""

    name = "clp"

    def __init__(self, cfg: DB2Config, target: SSHTarget):
        self.cfg = cfg
        self.target = target
        self.where = f"db2 {cfg.name} ({target.where})"

    @property
    def connects(self) -> int:
        return self.target.connects

    def run(self, statements: list[tuple[str, str]], timeout: float) -> Session:
        password = _password(self.cfg)
        script = session_script(self.cfg.instance_profile,
                                connect_statement(self.cfg.database, self.cfg.user, password),
                                statements, watchdog_s=int(timeout) + 3)
        result = self.target.run(["sh", "-s"], stdin=script, timeout=timeout)
        text = _scrub(result.text(), password)
        try:
            session = parse_output(text, [tag for tag, _ in statements], self.where, self.cfg.instance_profile)
        except Db2Error as e:
            err = _scrub(result.stderr.decode("utf-8", "replace"), password).strip()
            if err:
                raise Db2Error(f"{e} (remote stderr: {' '.join(err.split())[:200]})") from None
            raise
        session.bytes_in, session.bytes_out = len(result.stdout) + len(result.stderr), len(script)
        return session

    def close(self) -> None:
        self.target.close()


def load_driver() -> Any:
    """IBM's DB-API module, or a one-line explanation of what to install."""
    try:
        if importlib.util.find_spec("ibm_db_dbi") is None:
            raise Db2Error('transport = "ibm_db" needs IBM\'s Python driver, which is not installed: '
                           "pip install 'db2vtop[ibm_db]' (or pip install ibm_db)")
        return importlib.import_module("ibm_db_dbi")
    except Db2Error:
        raise
    except Exception as e:  # ImportError of libdb2.so, OSError, a driver raising anything at import
        first = (str(e).splitlines() or [type(e).__name__])[0][:160]
        raise Db2Error(f"the ibm_db driver is installed but does not load ({first}); reinstall it with "
                       "pip install --force-reinstall ibm_db, or point IBM_DB_HOME at a working IBM clidriver"
                       ) from None


def _message(error: BaseException, secret: str | None) -> Message:
    text = " ".join(_scrub(str(error), secret).split())
    m = _SQLCODE.search(text)
    if m is None:
        return Message("DB2VTOPE", f"{type(error).__name__}: {text[:300]}")
    return Message(m.group(1), text[m.start():])


def _dsn_value(key: str, v: object) -> str:
    """A connection-string value as IBM's CLI reads it: plain up to the next `;`, or in braces when it
    holds a `;`, starts with `{` or has spaces at its ends. A braced value ends at its first `}` (the
    CLI has no escape for it, unlike ODBC's `}}`), so such a value holding a `}` cannot be passed at all
    and is refused rather than let its rest become keywords of its own."""
    text = str(v)
    if not (";" in text or text.startswith("{") or text != text.strip()):
        return text
    if "}" in text:
        raise Db2Error(f"the {key} value holds a '}}' and a ';' (or a leading '{{', or spaces at its ends): "
                       "IBM's CLI connection string cannot carry that")
    return "{" + text + "}"


class DriverTransport:
    """The same statements over IBM's DB-API driver; one connection kept across cycles."""

    name = "ibm_db"

    def __init__(self, cfg: DB2Config, host: str, driver: Any = None):
        self.cfg = cfg
        self.host = host
        self.where = f"db2 {cfg.name} ({cfg.user}@{host}:{cfg.port}/{cfg.database})"
        self._driver = driver
        self._conn: Any = None
        self.connects = 0

    def _dsn(self, password: str | None, timeout: float) -> str:
        parts: list[tuple[str, object]] = [
            ("DATABASE", self.cfg.database), ("HOSTNAME", self.host), ("PORT", self.cfg.port),
            ("PROTOCOL", "TCPIP"), ("UID", self.cfg.user), ("PWD", password),
            ("CONNECTTIMEOUT", max(1, int(timeout)))]
        if self.cfg.tls:
            parts.append(("SECURITY", "SSL"))
            if self.cfg.ca_file:
                parts.append(("SSLServerCertificate", Path(self.cfg.ca_file)))
        return "".join(f"{k}={_dsn_value(k, v)};" for k, v in parts)

    def run(self, statements: list[tuple[str, str]], timeout: float) -> Session:
        dbapi = self._driver or load_driver()
        password = _password(self.cfg)
        session = Session()
        if self._conn is None:
            try:
                self._conn = dbapi.connect(self._dsn(password, timeout), "", "")
            except Exception as e:
                session.connect = Outcome(messages=[_message(e, password)])
                return session
            self.connects += 1
        session.banner["Database server"] = self.host
        for tag, sql in statements:
            check_statement(sql)
            session.results[tag] = out = Outcome()
            try:
                cur = self._conn.cursor()
                try:
                    cur.execute(sql)
                    rows = cur.fetchall() or []
                finally:
                    cur.close()
            except Exception as e:
                msg = _message(e, password)
                out.messages.append(msg)
                if msg.number in _LOST or msg.sqlstate.startswith("08"):
                    self.close()
                    session.connect = Outcome(messages=[msg])
                    return session
                continue
            prefix = tag + "|"
            for row in rows:
                line = str(row[0]).rstrip() if row and row[0] is not None else ""
                if not line.startswith(prefix):
                    raise Db2Error(f"{self.where}: unexpected row for query {tag!r}: {line[:80]!r}")
                out.rows.append(split_row(line[len(prefix):], f"{self.where}: {tag}"))
                session.bytes_in += len(line)
        return session

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(Exception):  # the connection is being dropped anyway
                conn.close()
