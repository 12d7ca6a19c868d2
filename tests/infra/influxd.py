"""Real InfluxDB servers on 127.0.0.1 for the sink tests and bench/influx.py: 1.8.10 and 2.7.

1.8.10 is built once by tests/infra/build-influxd.sh (`go install`, cached), 2.7.12 by
build-influxd2.sh (its Go module and the Rust Flux library, cached). Every server gets free
ports and its own data directories, binds only to loopback, and is stopped by its owner
(fixture teardown, bench exit); stop() and start() keep the data, so a test can take the
server away for a while and bring it back on the same port.

Both answer the same calls: `create_db` gives what the agent's `bucket` key names (1.8: the
database and its retention policy; 2.7: a bucket with a DBRP mapping of the same name, so the
InfluxQL read side finds it), `query` is InfluxQL over /query, `agent_section` is the
`[influxdb]` keys an agent needs for it (2.7 always asks for a token: an operator token made at
setup, in a file of the server's own directory). `server(version, base)` makes either.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from db2vtop.agent.core.config import InfluxConfig

ROOT = Path(__file__).resolve().parent.parent.parent
GOBIN = Path(os.environ.get("DB2VTOP_GOBIN") or
             Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "db2vtop" / "gobin")
ADMIN = ("admin", "s3cret")
#: the servers every InfluxDB test runs against (the `influx_version` fixture's parameters)
VERSIONS = ("1.8", "2.7")
V2_VERSION = "2.7.12"
V2_ORG = "db2vtop"


def influxd_binary(version: str = "1.8") -> Path:
    name, script = ("influxd", "build-influxd.sh") if version == "1.8" else \
        (f"influxd-{V2_VERSION}", "build-influxd2.sh")
    binary = GOBIN / name
    if not binary.exists():
        subprocess.run([str(ROOT / "tests" / "infra" / script)], check=True,
                       env={**os.environ, "DB2VTOP_GOBIN": str(GOBIN)})
    return binary


def end_process(proc: subprocess.Popen | None) -> None:
    """SIGTERM, then SIGKILL after 30 s: a server of a test ends whatever it does."""
    if proc is not None and proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def wait_ready(proc: subprocess.Popen, url: str, status: int, timeout: float, what: str, log: Path) -> None:
    """Until `url` answers `status` (bounded); the process ended (its log named) or the time out raise."""
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode}; see {log}")
        try:
            with urllib.request.urlopen(url, timeout=1) as r:
                if r.status == status:
                    return
        except OSError:
            pass
        if time.monotonic() > deadline:
            end_process(proc)
            raise RuntimeError(f"{what} did not answer {url} within {timeout:.0f}s")
        time.sleep(0.1)


def ident(name: str) -> str:
    """An InfluxQL double-quoted identifier."""
    return '"' + name.replace("\\", "\\\\").replace('"', '\\"') + '"'


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def refused_url() -> Iterator[str]:
    """An InfluxDB URL that refuses every connection for as long as it is held: its port is bound and
    never listened on, so no other test's server can start there meanwhile (one did, and accepted a
    spool's first points as delivered)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        yield f"http://127.0.0.1:{s.getsockname()[1]}"


class InfluxServer:
    version = "1.8"
    org = "-"

    def __init__(self, base: Path, auth: bool = False):
        self.base = Path(base)
        self.auth = auth
        self.port = free_port()
        self.rpc_port = free_port()
        self.proc: subprocess.Popen | None = None
        self.url = f"http://127.0.0.1:{self.port}"
        self.base.mkdir(parents=True, exist_ok=True)
        self.config = self.base / "influxdb.conf"
        self.config.write_text(f"""reporting-disabled = true
bind-address = "127.0.0.1:{self.rpc_port}"
[meta]
  dir = "{self.base}/meta"
[data]
  dir = "{self.base}/data"
  wal-dir = "{self.base}/wal"
  query-log-enabled = false
[monitor]
  store-enabled = false
[http]
  enabled = true
  bind-address = "127.0.0.1:{self.port}"
  auth-enabled = {"true" if auth else "false"}
  log-enabled = false
  flux-enabled = true
  unix-socket-enabled = false
  max-row-limit = 0
[logging]
  level = "warn"
[continuous_queries]
  enabled = false
[subscriber]
  enabled = false
""")

    def start(self, timeout: float = 60.0) -> None:
        with open(self.base / "influxd.log", "ab") as log:
            self.proc = subprocess.Popen([str(influxd_binary()), "run", "-config", str(self.config)],
                                         stdout=log, stderr=log, stdin=subprocess.DEVNULL)
        wait_ready(self.proc, self.url + "/ping", 204, timeout, "influxd", self.base / "influxd.log")
        if self.auth:
            # allowed without credentials while no admin exists; a restart finds it there already
            self.query(f"CREATE USER {ADMIN[0]} WITH PASSWORD '{ADMIN[1]}' WITH ALL PRIVILEGES", ignore_errors=True,
                       login=False)

    def stop(self) -> None:
        end_process(self.proc)
        self.proc = None

    @property
    def token(self) -> str:
        return ":".join(ADMIN)

    def authorization(self) -> str:
        """The Authorization header of the tests' own queries."""
        return "Basic " + base64.b64encode(":".join(ADMIN).encode()).decode()

    def token_file(self) -> Path | None:
        """A file holding the token, mode 600, when the server asks for one."""
        if not self.auth:
            return None
        path = self.base / "token"
        path.write_text(self.token + "\n")
        path.chmod(0o600)
        return path

    def agent_section(self, bucket: str, token_file: Path | None = None) -> str:
        """The `[influxdb]` keys that reach this server (url, bucket, org, the token's file)."""
        token_file = token_file or self.token_file()
        # influxd on 127.0.0.1 speaks plain http: a token then needs allow_plaintext (warned at every start)
        token = f'token_file = "{token_file}"\nallow_plaintext = true\n' if token_file else ""
        return f'url = "{self.url}"\nbucket = "{bucket}"\norg = "{self.org}"\n{token}'

    def sink_config(self, bucket: str, spool: Path, **kw: Any) -> InfluxConfig:
        """An InfluxConfig for this server (the sink in-process), `kw` on top."""
        token_file = self.token_file()
        extra: dict[str, Any] = {"token_file": token_file, "allow_plaintext": True} if token_file else {}
        return InfluxConfig(url=self.url, bucket=bucket, org=self.org, spool_dir=spool, **{**extra, **kw})

    def query(self, q: str, db: str | None = None, ignore_errors: bool = False, login: bool = True) -> list[dict]:
        """InfluxQL over /query (epoch=ns); returns the statements' results."""
        params = {"q": q, "epoch": "ns"}
        if db:
            params["db"] = db
        req = urllib.request.Request(self.url + "/query", data=urllib.parse.urlencode(params).encode(), method="POST")
        if self.auth and login:
            req.add_header("Authorization", self.authorization())
        try:
            with urllib.request.urlopen(req, timeout=60) as r:
                doc = json.load(r)
        except urllib.error.HTTPError as e:
            if ignore_errors:
                return []
            raise RuntimeError(f"{q}: {e.code} {e.read().decode(errors='replace')}") from None
        errors = [r["error"] for r in doc.get("results", []) if "error" in r]
        if errors and not ignore_errors:
            raise RuntimeError(f"{q}: {errors}")
        return doc.get("results", [])

    def create_db(self, name: str) -> str:
        self.query(f'CREATE DATABASE "{name}"')
        return f"{name}/autogen"

    def write(self, db: str, lines: Iterable[str]) -> None:
        """Line protocol (ns) straight into a database, as another writer would: the v1 /write both versions
        answer (2.7 through the DBRP mapping)."""
        req = urllib.request.Request(f"{self.url}/write?db={urllib.parse.quote(db)}&precision=ns",
                                     data="\n".join(line.rstrip("\n") for line in lines).encode(), method="POST")
        if self.auth:
            req.add_header("Authorization", self.authorization())
        with urllib.request.urlopen(req, timeout=30) as r:
            if r.status != 204:
                raise RuntimeError(f"write to {db}: {r.status}")

    def points(self, db: str, measurement: str) -> list[tuple[int, dict[str, str], dict]]:
        """Every point of a measurement as (ts, tags, fields without nulls), oldest first."""
        out = []
        for res in self.query(f"SELECT * FROM {ident(measurement)} GROUP BY *", db):
            for series in res.get("series", []):
                cols = series["columns"]
                tags = {k: v for k, v in series.get("tags", {}).items() if v != ""}  # "" = not in this series
                for row in series["values"]:
                    fields = {c: v for c, v in zip(cols[1:], row[1:], strict=True) if v is not None}
                    out.append((row[0], tags, fields))
        return sorted(out, key=lambda p: p[0])

    def measurements(self, db: str) -> list[str]:
        res = self.query("SHOW MEASUREMENTS", db)
        return [v[0] for s in res[0].get("series", []) for v in s["values"]] if res else []

    def field_types(self, db: str, measurement: str) -> dict[str, str]:
        res = self.query(f"SHOW FIELD KEYS FROM {ident(measurement)}", db)
        return {k: t for s in res[0].get("series", []) for k, t in s["values"]}


class InfluxServer2(InfluxServer):
    """influxd 2.7: one org, an operator token made at setup, a bucket and a DBRP mapping per `create_db`.
    It always asks for a token (`auth` is accepted for the same calls as 1.8 and changes nothing)."""

    version = "2.7"
    org = V2_ORG

    def __init__(self, base: Path, auth: bool = True):
        self.base = Path(base)
        self.auth = True
        self.port = free_port()
        self.proc = None
        self.url = f"http://127.0.0.1:{self.port}"
        self.base.mkdir(parents=True, exist_ok=True)
        self._token = "op-" + base64.urlsafe_b64encode(os.urandom(24)).decode().rstrip("=")
        self._org_id = ""

    @property
    def token(self) -> str:
        return self._token

    def start(self, timeout: float = 60.0) -> None:
        # influxd reads a config file from its working directory: its own directory, which holds none
        with open(self.base / "influxd.log", "ab") as log:
            self.proc = subprocess.Popen(
                [str(influxd_binary(self.version)), "--bolt-path", str(self.base / "influxd.bolt"),
                 "--engine-path", str(self.base / "engine"), "--sqlite-path", str(self.base / "influxd.sqlite"),
                 "--http-bind-address", f"127.0.0.1:{self.port}", "--reporting-disabled", "--log-level", "warn"],
                stdout=log, stderr=log, stdin=subprocess.DEVNULL, cwd=self.base,
                env={k: v for k, v in os.environ.items() if not k.startswith("INFLUXD_")})
        wait_ready(self.proc, self.url + "/health", 200, timeout, "influxd", self.base / "influxd.log")
        if self._api("GET", "/api/v2/setup", login=False)["allowed"]:  # a restart finds it set up already
            self._api("POST", "/api/v2/setup", {"username": ADMIN[0], "password": ADMIN[1] * 2, "org": self.org,
                                                "bucket": "setup", "token": self._token}, login=False)
        self._org_id = self._api("GET", "/api/v2/orgs?org=" + urllib.parse.quote(self.org))["orgs"][0]["id"]

    def _api(self, method: str, path: str, body: dict | None = None, login: bool = True) -> dict:
        req = urllib.request.Request(self.url + path, method=method,
                                     data=json.dumps(body).encode() if body is not None else None)
        req.add_header("Content-Type", "application/json")
        if login:
            req.add_header("Authorization", self.authorization())
        try:
            with urllib.request.urlopen(req, timeout=60) as r:
                return json.loads(r.read() or b"{}")
        except urllib.error.HTTPError as e:
            raise RuntimeError(f"{method} {path}: {e.code} {e.read().decode(errors='replace')}") from None

    def create_db(self, name: str) -> str:
        bucket = self._api("POST", "/api/v2/buckets", {"orgID": self._org_id, "name": name, "retentionRules": []})
        self._api("POST", "/api/v2/dbrps", {"orgID": self._org_id, "bucketID": bucket["id"], "database": name,
                                            "retention_policy": "autogen", "default": True})
        return name

    def authorization(self) -> str:
        return f"Token {self._token}"


def server(version: str, base: Path, auth: bool = False) -> InfluxServer:
    """A server of `version` (one of VERSIONS), not started."""
    if version not in VERSIONS:
        raise ValueError(f"no influxd {version!r}; one of {', '.join(VERSIONS)}")
    return InfluxServer(base, auth) if version == "1.8" else InfluxServer2(base, auth)


@contextlib.contextmanager
def running(version: str, base: Path, auth: bool = False) -> Iterator[InfluxServer]:
    """A server of `version`, started, and stopped when the block ends."""
    srv = server(version, base, auth)
    srv.start()
    try:
        yield srv
    finally:
        srv.stop()


Key = tuple[str, tuple[tuple[str, str], ...], int]


def _tags(tags: dict[str, str]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((k, v) for k, v in tags.items() if v != ""))


def store_keys(path: Path, findings: bool = False) -> set[Key]:
    """(measurement, tags, ts) of every sample and annotation in an embedded store.

    With findings=True, those of its findings instead, as db2vtop_finding points at their
    last change (the store keeps one row per finding, InfluxDB a point per change).
    """
    from db2vtop.agent.core.store import Store

    with Store(path) as s:
        if findings:
            return {("db2vtop_finding", _tags({**f.subject, "rule": f.rule, "severity": f.severity}),
                     f.resolved_at or f.last_seen) for f in s.findings(open_only=False)}
        keys = {(m, _tags(r.tags), r.ts) for m in s.measurements() for r in s.rows(m)}
        keys |= {("db2vtop_annotation", _tags({**a.tags, "kind": a.event, "name": a.name}), a.ts)
                 for a in s.annotations()}
    return keys


def influx_keys(srv: InfluxServer, db: str, findings: bool = False, facts: bool = False) -> set[Key]:
    """(measurement, tags, ts) of every point in a database: db2vtop_finding's, db2vtop_fact's, or all
    others (facts are a point per facts pass where the store keeps a version per change: fact_entities)."""
    wanted = "db2vtop_finding" if findings else "db2vtop_fact" if facts else None
    return {(m, _tags(tags), ts) for m in srv.measurements(db)
            if (m == wanted if wanted else m not in ("db2vtop_finding", "db2vtop_fact"))
            for ts, tags, _ in srv.points(db, m)}


def fact_entities(srv: InfluxServer, db: str) -> set[tuple[str, tuple[tuple[str, str], ...]]]:
    """(kind, entity tags) of every fact written to a database."""
    return {(tags["fact"], _tags({k: v for k, v in tags.items() if k != "fact"}))
            for _, tags, _ in srv.points(db, "db2vtop_fact")}


def store_fact_entities(path: Path) -> set[tuple[str, tuple[tuple[str, str], ...]]]:
    from db2vtop.agent.core.store import Store

    with Store(path) as s:
        return {(f.kind, _tags(f.tags)) for f in s.facts()}


def wait_for(cond, timeout: float = 30.0, what: str = "condition"):
    """Poll until cond() is truthy (bounded); returns its value."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = cond()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")


def write_agent_config(path: Path, srv: InfluxServer, bucket: str, store: Path, token_file: Path | None = None) -> Path:
    """An agent config feeding this server quickly (short intervals), the spool beside the file."""
    path.write_text(f"""
[store]
path = "{store}"
[guest]
interval = "500ms"
[influxdb]
{srv.agent_section(bucket, token_file)}spool_dir = "{path.parent / 'spool'}"
flush_interval = "200ms"
retry_interval = "200ms"
max_retry_delay = "1s"
flush_timeout = "30s"
stats_interval = "1s"
""")
    return path
