"""The one TOML config file, validated into typed, frozen sections.

Every section is a dataclass; `_load` walks the dataclass fields and converts each TOML
value, so a new key is one annotated field. Every problem raises ConfigError naming the
file, the key, the offending value and what was expected. Section and key names are a
contract (DESIGN.md); add keys, never rename them.
"""

from __future__ import annotations

import os
import re
import tomllib
import types
import typing
from dataclasses import MISSING, dataclass, field, fields, is_dataclass, replace
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import urlparse

from db2vtop.agent.core.paths import default_config_path, default_store_path, state_dir
from db2vtop.agent.core.secrets import SecretRef
from db2vtop.agent.core.units import format_bytes, format_duration, parse_duration, parse_size

SECRET_KEYS = frozenset({"password", "token", "secret", "passwd", "api_key"})


class ConfigError(Exception):
    def __init__(self, file: str, key: str, problem: str):
        super().__init__(f"{file}: {key}: {problem}" if key else f"{file}: {problem}")
        self.file, self.key, self.problem = file, key, problem


def _show(key: str, value: Any) -> str:
    if key.rsplit(".", 1)[-1] in SECRET_KEYS:
        return "<hidden>"
    return shown(value)


def shown(value: Any) -> str:
    """A config value as an error message quotes it: at most 60 characters, and never an
    exception (a 5,000-digit hex literal is an int that repr() refuses to write out)."""
    try:
        text = repr(value)
    except ValueError:
        text = f"<an integer of {value.bit_length():,} bits>" if isinstance(value, int) else "<a value too large>"
    return text if len(text) <= 60 else text[:57] + "..."


# --- value markers used with typing.Annotated ----------------------------------------


@dataclass(frozen=True)
class _Marker:
    expected: str

    def convert(self, value: Any) -> Any:  # pragma: no cover - overridden
        raise NotImplementedError

    def span(self) -> str:
        """The allowed range as docs/configuration.md writes it ("500ms–1d"), or "" if unranged."""
        return ""


@dataclass(frozen=True)
class _Duration(_Marker):
    low: float = 0.0
    high: float = 0.0

    def convert(self, value: Any) -> float:
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            raise ValueError
        seconds = parse_duration(value)  # finite and >= 0, else ValueError
        if not self.low <= seconds <= self.high:
            raise ValueError
        return seconds

    def span(self) -> str:
        return f"{format_duration(self.low)}–{format_duration(self.high)}"


@dataclass(frozen=True)
class _Size(_Marker):
    low: int = 0
    high: int = 0

    def convert(self, value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, str | int):
            raise ValueError
        size = parse_size(value)
        if not self.low <= size <= self.high:
            raise ValueError
        return size

    def span(self) -> str:
        return f"{_size_text(self.low)}–{_size_text(self.high)}"


def _size_text(n: int) -> str:
    return format_bytes(n).replace(".0", "")


@dataclass(frozen=True)
class _Choice(_Marker):
    choices: tuple[str, ...] = ()

    def convert(self, value: Any) -> str:
        if not isinstance(value, str) or value not in self.choices:
            raise ValueError
        return value


_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:@-]{0,63}$")


class _Name(_Marker):
    def convert(self, value: Any) -> str:
        if not isinstance(value, str) or not _NAME_RE.match(value):
            raise ValueError
        return value


class _Url(_Marker):
    def convert(self, value: Any) -> str:
        if not isinstance(value, str):
            raise ValueError
        u = urlparse(value)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ValueError
        return value


@dataclass(frozen=True)
class _Range(_Marker):
    low: int = 0
    high: int = 0

    def convert(self, value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or not self.low <= value <= self.high:
            raise ValueError
        return value

    def span(self) -> str:
        return f"{self.low:,}–{self.high:,}"


class _Sid(_Marker):
    def convert(self, value: Any) -> str:
        if not isinstance(value, str) or not re.fullmatch(r"[0-9]{12}", value):
            raise ValueError
        return value


class _EnvName(_Marker):
    def convert(self, value: Any) -> str:
        if not isinstance(value, str) or not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", value):
            raise ValueError
        return value


Name = Annotated[str, _Name("a name of letters, digits, '-', '_', '.', ':' or '@' (at most 64)")]
Url = Annotated[str, _Url('an http:// or https:// URL with a host name')]
Port = Annotated[int, _Range("a TCP port number 1-65535", 1, 65535)]
Member = Annotated[int, _Range("-2 (all members), -1 (the member connected to) or a member number", -2, 999)]
EnvName = Annotated[str, _EnvName("an environment variable name such as VC1_PASSWORD")]


def Choice(*choices: str) -> Any:  # noqa: N802 - reads like a type in annotations
    return Annotated[str, _Choice("one of " + ", ".join(f'"{c}"' for c in choices), choices)]


def Duration(low: float, high: float) -> Any:  # noqa: N802
    """A duration within [low, high] seconds: every interval and timeout has a floor (no
    busy loop, no collect that times out at once) and a ceiling (no typo of 20 digits)."""
    return Annotated[float, _Duration(f"a duration from {format_duration(low)} to {format_duration(high)} such as "
                                      '"20s", "5m", "1h30m" or a number of seconds', low, high)]


def Size(low: int, high: int) -> Any:  # noqa: N802
    return Annotated[int, _Size(f"a size from {_size_text(low)} to {_size_text(high)} such as \"512MiB\", "
                                '"1GiB" or a number of bytes', low, high)]


def Count(what: str, low: int, high: int) -> Any:  # noqa: N802
    return Annotated[int, _Range(f"{what} {low:,}-{high:,}", low, high)]


MINUTE, HOUR, DAY = 60.0, 3600.0, 86400.0
#: a collector's own cycle timeout (default: its interval)
Timeout = Duration(1.0, HOUR)


# --- sections -------------------------------------------------------------------------


@dataclass(frozen=True)
class _Secret:
    """Mixin for sections with a password: exactly one source, never inline."""

    def password(self) -> SecretRef | None:
        env, file, ring = (getattr(self, "password_" + k, None) for k in ("env", "file", "keyring"))
        if env or file or ring:
            return SecretRef(env=env, file=file, keyring=ring)
        return None


CheckValue = float | int | str | bool


@dataclass(frozen=True)
class StoreConfig:
    path: Path = field(default_factory=default_store_path)
    retention: Duration(HOUR, 3650 * DAY) = 7 * 86400.0


@dataclass(frozen=True)
class GuestConfig:
    enabled: bool = True
    interval: Duration(0.5, DAY) = 5.0  # /proc reads take milliseconds
    timeout: Timeout | None = None
    devices_exclude: list[str] = field(default_factory=lambda: ["loop*", "ram*"])
    interfaces_exclude: list[str] = field(default_factory=lambda: ["lo", "veth*"])


@dataclass(frozen=True)
class RemoteGuestConfig:
    """A guest read over SSH; its samples are tagged guest = the [[ssh]] target's name."""

    ssh: Name
    os: Choice("auto", "linux", "aix") = "auto"
    interval: Duration(1.0, DAY) = 5.0
    timeout: Timeout | None = None
    devices_exclude: list[str] = field(default_factory=lambda: ["loop*", "ram*"])
    interfaces_exclude: list[str] = field(default_factory=lambda: ["lo", "veth*"])


@dataclass(frozen=True)
class VCenterConfig(_Secret):
    name: Name
    url: Url
    user: str
    password_env: EnvName | None = None
    password_file: Path | None = None
    password_keyring: str | None = None
    verify_tls: bool = True
    ca_file: Path | None = None
    interval: Duration(20.0, DAY) = 20.0  # vCenter's realtime sampling period
    timeout: Timeout | None = None
    workers: Count("a number of threads", 1, 16) = 4
    max_query_entities: Count("a number of entities per QueryPerf call", 1, 5000) = 250
    max_query_metrics: Count("a number of metric ids per QueryPerf call (0 = no own cap)", 0, 100_000) = 0


@dataclass(frozen=True)
class SSHConfig(_Secret):
    name: Name
    host: str
    user: str
    port: Port = 22
    key_file: Path | None = None
    password_env: EnvName | None = None
    password_file: Path | None = None
    password_keyring: str | None = None
    known_hosts: Path | None = None
    host_key_policy: Choice("reject", "accept-new") = "reject"
    connect_timeout: Duration(1.0, 10 * MINUTE) = 10.0
    command_timeout: Duration(1.0, HOUR) = 30.0
    keepalive: Duration(1.0, HOUR) = 30.0
    max_sessions: Count("a number of channels", 1, 64) = 4


@dataclass(frozen=True)
class DB2Config(_Secret):
    name: Name
    database: str
    ssh: Name | None = None
    transport: Choice("clp", "ibm_db") = "clp"
    user: str | None = None
    password_env: EnvName | None = None
    password_file: Path | None = None
    password_keyring: str | None = None
    interval: Duration(1.0, DAY) = 10.0
    timeout: Timeout | None = None
    instance_profile: str = "~/sqllib/db2profile"
    member: Member = -2
    facts_interval: Duration(10.0, DAY) = 900.0
    host: str | None = None
    port: Port = 50000
    tls: bool = False
    ca_file: Path | None = None


@dataclass(frozen=True)
class StorageConfig(_Secret):
    name: Name
    kind: Choice("linux", "ontap", "xtremio", "powermax")
    ssh: Name | None = None
    interval: Duration(1.0, DAY) = 20.0
    timeout: Timeout | None = None
    # arrays (ontap, xtremio, powermax): transport, REST endpoint and what to read
    transport: Choice("ssh", "rest") | None = None  # default: rest for xtremio, else ssh
    url: Url | None = None
    user: str | None = None
    password_env: EnvName | None = None
    password_file: Path | None = None
    password_keyring: str | None = None
    verify_tls: bool = True
    ca_file: Path | None = None
    vserver: Name | None = None
    min_ops_for_latency: Count("a number of operations", 0, 10**9) = 10
    sid: Annotated[str, _Sid("a Symmetrix ID of 12 digits, such as \"000197900123\"")] | None = None
    storage_groups: list[Name] = field(default_factory=list)
    sample_interval: Duration(1.0, HOUR) = 10.0
    devices_exclude: list[str] = field(default_factory=lambda: ["loop*", "ram*", "zram*"])  # kind = "linux"

    @property
    def effective_transport(self) -> str:
        return self.transport or ("rest" if self.kind == "xtremio" else "ssh")


@dataclass(frozen=True)
class EsxtopConfig:
    name: Name
    ssh: Name
    interval: Duration(2.0, DAY) = 10.0  # esxtop samples every 2 s at the fastest
    timeout: Timeout | None = None
    delay: Duration(2.0, HOUR) = 2.0  # esxtop -d: the window each sample averages over (esxtop's minimum is 2 s)


@dataclass(frozen=True)
class StackConfig:
    name: Name
    db2: Name | None = None
    vm: str | None = None
    vcenter: Name | None = None
    guest: Name | None = None
    storage: list[Name] = field(default_factory=list)
    checks: dict[str, dict[str, CheckValue]] = field(default_factory=dict)


@dataclass(frozen=True)
class VSphereConfig:
    """Which vCenter VMs are DB2 VMs, for the per-VM rules: besides those a [[stack]] names or a
    [[db2]] runs on, the VMs whose names match `db2_vms` (globs); empty: every VM."""

    db2_vms: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class ViewConfig:
    """Where watch, replay, triage and query read from (their --source overrides it)."""

    source: Choice("store", "influxdb") = "store"


@dataclass(frozen=True)
class InfluxConfig:
    url: Url
    bucket: str
    org: str = "-"
    token_env: EnvName | None = None
    token_file: Path | None = None
    verify_tls: bool = True
    ca_file: Path | None = None
    spool_max_bytes: Size(64 * 1024, 2**44) = 2**30
    spool_dir: Path = field(default_factory=lambda: state_dir() / "spool")
    spool_fsync: Choice("interval", "always", "never") = "interval"
    spool_fsync_interval: Duration(0.01, HOUR) = 1.0
    tags: dict[str, str] = field(default_factory=dict)
    batch_size: Count("a number of lines per write", 1, 1_000_000) = 5000
    max_in_flight: Count("a number of requests", 1, 8) = 2
    flush_interval: Duration(0.1, HOUR) = 2.0
    gzip: bool = True
    timeout: Duration(1.0, 10 * MINUTE) = 10.0
    retry_interval: Duration(0.1, HOUR) = 1.0
    max_retry_delay: Duration(0.1, DAY) = 30.0
    flush_timeout: Duration(0.1, HOUR) = 10.0
    stats_interval: Duration(1.0, DAY) = 10.0

    def token(self) -> SecretRef | None:
        if self.token_env or self.token_file:
            return SecretRef(env=self.token_env, file=self.token_file)
        return None


@dataclass(frozen=True)
class Config:
    store: StoreConfig = field(default_factory=StoreConfig)
    guest: GuestConfig = field(default_factory=GuestConfig)
    remote_guest: list[RemoteGuestConfig] = field(default_factory=list)
    vcenter: list[VCenterConfig] = field(default_factory=list)
    ssh: list[SSHConfig] = field(default_factory=list)
    db2: list[DB2Config] = field(default_factory=list)
    storage: list[StorageConfig] = field(default_factory=list)
    esxtop: list[EsxtopConfig] = field(default_factory=list)
    stack: list[StackConfig] = field(default_factory=list)
    influxdb: InfluxConfig | None = None
    vsphere: VSphereConfig = field(default_factory=VSphereConfig)
    view: ViewConfig = field(default_factory=ViewConfig)
    checks: dict[str, dict[str, CheckValue]] = field(default_factory=dict)
    source: Path | None = field(default=None, metadata={"toml": False})


# --- loading --------------------------------------------------------------------------

_EXPECTED = {str: "a string", bool: "true or false", int: "an integer",
             float: "a number", Path: "a file path (string)"}


class _Loader:
    def __init__(self, file: str):
        self.file = file

    def error(self, key: str, problem: str) -> ConfigError:
        return ConfigError(self.file, key, problem)

    def bad(self, key: str, value: Any, expected: str) -> ConfigError:
        return self.error(key, f"{_show(key, value)} is not valid; expected {expected}")

    def section(self, cls: type, table: Any, key: str) -> Any:
        if not isinstance(table, dict):
            raise self.bad(key, table, "a table")
        hints = typing.get_type_hints(cls, include_extras=True)
        known = {f.name: f for f in fields(cls) if f.metadata.get("toml", True)}
        for k in table:
            if k not in known:
                where = f"{key}.{k}" if key else k
                if k in SECRET_KEYS:
                    raise self.error(where, f"secrets are never written in the config; use {k}_env"
                                            f" (an environment variable) or {k}_file (a file only you can read)")
                raise self.error(where, "unknown key; expected one of " + ", ".join(sorted(known)))
        values = {}
        for name, f in known.items():
            where = f"{key}.{name}" if key else name
            if name in table:
                values[name] = self.value(hints[name], table[name], where)
            elif f.default is MISSING and f.default_factory is MISSING:
                raise self.error(where, "missing; this key is required")
        return cls(**values)

    def value(self, tp: Any, value: Any, key: str) -> Any:
        origin = typing.get_origin(tp)
        if origin is Annotated:
            marker = typing.get_args(tp)[1]
            try:
                return marker.convert(value)
            except ValueError:
                raise self.bad(key, value, marker.expected) from None
        if origin in (types.UnionType, typing.Union):
            inner = [a for a in typing.get_args(tp) if a is not type(None)]
            if len(inner) == 1:
                return self.value(inner[0], value, key)
            for a in inner:  # scalar unions: check thresholds, typed and ranged by their rule (validate_overrides)
                if _is_instance(value, a):
                    return value
            raise self.bad(key, value, " or ".join(_EXPECTED[a] for a in inner))
        if origin is list:
            (item,) = typing.get_args(tp)
            if not isinstance(value, list):
                raise self.bad(key, value, "a list" if not is_dataclass(item) else f"[[{key}]] tables")
            return [self.value(item, v, f"{key}[{i}]") for i, v in enumerate(value)]
        if origin is dict:
            _, item = typing.get_args(tp)
            if not isinstance(value, dict):
                raise self.bad(key, value, "a table")
            return {k: self.value(item, v, f"{key}.{k}") for k, v in value.items()}
        if is_dataclass(tp):
            return self.section(tp, value, key)
        if tp is Path:
            if not isinstance(value, str) or not value or "\x00" in value:
                raise self.bad(key, value, _EXPECTED[Path])
            return Path(os.path.expanduser(value))
        if not _is_instance(value, tp):
            raise self.bad(key, value, _EXPECTED[tp])
        return float(value) if tp is float else value


def _is_instance(value: Any, tp: type) -> bool:
    if tp is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if tp is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, tp)


def _check_references(cfg: Config, err: _Loader) -> None:
    names: dict[str, set[str]] = {}
    for section in ("vcenter", "ssh", "db2", "storage", "esxtop", "stack"):
        seen: set[str] = set()
        for i, item in enumerate(getattr(cfg, section)):
            if item.name in seen:
                raise err.error(f"{section}[{i}].name", f"{item.name!r} is used twice; names must be unique")
            seen.add(item.name)
        names[section] = seen

    def ref(section: str, i: int, key: str, value: str | None, target: str) -> None:
        if value is not None and value not in names[target]:
            known = ", ".join(sorted(names[target])) or f"none defined; add a [[{target}]] section"
            raise err.error(f"{section}[{i}].{key}", f"{value!r} names no [[{target}]]; known: {known}")

    for i, d in enumerate(cfg.db2):
        ref("db2", i, "ssh", d.ssh, "ssh")
        _check_db2(d, f"db2[{i}]", err)
    for i, s in enumerate(cfg.storage):
        ref("storage", i, "ssh", s.ssh, "ssh")
        _check_storage(s, f"storage[{i}]", err)
    for i, e in enumerate(cfg.esxtop):
        ref("esxtop", i, "ssh", e.ssh, "ssh")
        if e.delay >= e.interval:
            raise err.error(f"esxtop[{i}].delay", f"{e.delay:g}s is not valid; expected at least 2s (esxtop's "
                                                  f"minimum) and less than the interval ({e.interval:g}s)")
    guests: set[str] = set()
    for i, g in enumerate(cfg.remote_guest):
        ref("remote_guest", i, "ssh", g.ssh, "ssh")
        if g.ssh in guests:
            raise err.error(f"remote_guest[{i}].ssh", f"{g.ssh!r} is used twice; one [[remote_guest]] per target")
        guests.add(g.ssh)
    for i, st in enumerate(cfg.stack):
        ref("stack", i, "db2", st.db2, "db2")
        ref("stack", i, "vcenter", st.vcenter, "vcenter")
        ref("stack", i, "guest", st.guest, "ssh")
        for j, s in enumerate(st.storage):
            ref("stack", i, f"storage[{j}]", s, "storage")
    for section in ("vcenter", "ssh", "db2", "storage"):
        for i, item in enumerate(getattr(cfg, section)):
            given = [k for k in ("password_env", "password_file", "password_keyring") if getattr(item, k)]
            if len(given) > 1:
                raise err.error(f"{section}[{i}]", f"{' and '.join(given)} are both set; give only one")
    for i, v in enumerate(cfg.vcenter):
        if v.password() is None:
            raise err.error(f"vcenter[{i}]", "no password source; set password_env, password_file or password_keyring")
    if cfg.influxdb and cfg.influxdb.token_env and cfg.influxdb.token_file:
        raise err.error("influxdb", "token_env and token_file are both set; give only one")
    if cfg.influxdb and cfg.influxdb.max_retry_delay < cfg.influxdb.retry_interval:
        raise err.error("influxdb.max_retry_delay", f"{cfg.influxdb.max_retry_delay:g}s is not valid; expected at "
                                                    f"least retry_interval ({cfg.influxdb.retry_interval:g}s)")


def _check_storage(s: StorageConfig, where: str, err: _Loader) -> None:
    """Each kind and transport needs its own keys; say which one is missing and why."""
    transport = s.effective_transport
    if transport == "ssh":
        if s.kind == "xtremio":
            raise err.error(f"{where}.transport", '"ssh" is not available for kind "xtremio"; it is read over the XMS'
                                                  ' REST API (transport = "rest" with url, user, password_env)')
        if s.ssh is None:
            raise err.error(f"{where}.ssh", "missing; storage is read over an [[ssh]] target")
    else:
        if s.kind == "linux":
            raise err.error(f"{where}.transport", '"rest" is not available for kind "linux"; it is read over ssh')
        if s.url is None:
            raise err.error(f"{where}.url", 'missing; transport "rest" needs the array\'s https:// URL')
        if s.user is None or s.password() is None:
            raise err.error(where, 'transport "rest" needs user and a password (password_env, password_file or'
                                   ' password_keyring)')
    if s.kind == "powermax" and s.sid is None:
        raise err.error(f"{where}.sid", "missing; a PowerMax/Symmetrix is addressed by its 12-digit Symmetrix ID")
    if s.kind == "powermax" and transport == "ssh" and s.sample_interval >= (s.timeout or s.interval):
        raise err.error(f"{where}.sample_interval", f"{s.sample_interval:g}s is not shorter than the cycle timeout "
                                                    f"({s.timeout or s.interval:g}s); symstat samples for that long")


_DB_ALIAS = re.compile(r"^[A-Za-z0-9@#$_]{1,8}$")
_DB_USER = re.compile(r"^[A-Za-z0-9@#$_.-]{1,128}$")


def _check_db2(d: DB2Config, where: str, err: _Loader) -> None:
    if not _DB_ALIAS.match(d.database):
        raise err.bad(f"{where}.database", d.database, "a database alias of 1-8 letters, digits, @, # or $")
    if d.user is not None and not _DB_USER.match(d.user):
        raise err.bad(f"{where}.user", d.user, "a DB2 user name (letters, digits, @ # $ _ . -)")
    if d.transport == "clp":
        if d.ssh is None:
            raise err.error(f"{where}.ssh", 'missing; the "clp" transport runs db2 over an [[ssh]] target')
        if (d.user is None) != (d.password() is None):
            raise err.error(where, "user and a password_* go together; leave both out to connect with the OS "
                                   "authentication of the [[ssh]] user")
    else:
        if d.host is None and d.ssh is None:
            raise err.error(f"{where}.host", 'missing; the "ibm_db" transport connects to host:port '
                                             "(or to the host of its [[ssh]] target)")
        if d.user is None or d.password() is None:
            raise err.error(where, 'the "ibm_db" transport needs user and one of password_env, password_file '
                                   "or password_keyring")


def load_config(path: Path) -> Config:
    """Read and validate one config file; raises ConfigError, never anything else."""
    file = str(path)
    err = _Loader(file)
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise ConfigError(file, "", f"cannot read the config file: {e.strerror or e}") from None
    try:
        text = raw.decode("utf-8-sig")  # a leading byte-order mark is what Windows editors write
    except UnicodeDecodeError as e:
        raise ConfigError(file, "", f"not UTF-8 text (byte {e.start}); expected a TOML file") from None
    table = _parse(file, text)
    try:
        cfg = err.section(Config, table, "")
    except RecursionError:  # a value nested deeper than any key accepts
        raise ConfigError(file, "", "values nested too deeply") from None
    _check_references(cfg, err)
    return replace(cfg, source=path)


def resolve_config(path: Path | None) -> Config:
    """The config for a command: -c FILE, else the XDG default file if present, else defaults."""
    if path is not None:
        return load_config(path)
    default = default_config_path()
    if default.is_file():
        return load_config(default)
    return Config()


_LONG_NUMBER = re.compile(r"[0-9][0-9_]{999,}")
_KEY_AT = re.compile(r"\s*([A-Za-z0-9_-]+)\s*=")
_HEADER = re.compile(r"^\s*(\[\[?)\s*([A-Za-z0-9_.-]+)\s*\]", re.M)


def _parse(file: str, text: str) -> dict[str, Any]:
    """tomllib's table, or a one-line ConfigError for what it raises beyond TOMLDecodeError."""
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(file, "", f"invalid TOML: {e}") from None
    except RecursionError:
        raise ConfigError(file, "", "invalid TOML: arrays or tables nested too deeply") from None
    except ValueError:  # Python's limit on the digits int() reads, raised through tomllib
        raise _long_number(file, text) from None


def _long_number(file: str, text: str) -> ConfigError:
    """Name the key of the over-long integer tomllib refused (its line, its table)."""
    m = _LONG_NUMBER.search(text)
    if m is None:
        return ConfigError(file, "", "invalid TOML: a value too large to read")
    start = text.rfind("\n", 0, m.start()) + 1
    key = _KEY_AT.match(text, start)
    tables = _HEADER.findall(text, 0, start)
    table = ""
    if tables:  # [[vcenter]] headers count up: the second one is vcenter[1]
        brackets, section = tables[-1]
        table = f"{section}[{tables.count(tables[-1]) - 1}]" if brackets == "[[" else section
    name = key.group(1) if key else ""
    where = ".".join(p for p in (table, name) if p)
    expected = _expected_at(".".join(p for p in (tables[-1][1] if tables else "", name) if p))
    digits = sum(c.isdigit() for c in m.group())
    line = text.count("\n", 0, start) + 1
    return ConfigError(file, where, f"a number of {digits:,} digits (line {line}) is not valid; expected "
                                    f"{expected or 'a number of at most 4300 digits'}")


def _expected_at(dotted: str) -> str:
    """What the key at `dotted` (e.g. "vcenter.interval") expects, from the section dataclasses."""
    tp: Any = Config
    for part in dotted.split("."):
        tp = _element(tp)
        if not is_dataclass(tp):
            return ""
        tp = typing.get_type_hints(tp, include_extras=True).get(part)
    tp = _element(tp)
    return typing.get_args(tp)[1].expected if typing.get_origin(tp) is Annotated else ""


def allowed_range(cls: type, key: str) -> str:
    """The range of `key` of section `cls` as the docs write it ("20s–1d"), "" if it has none."""
    tp = _element(typing.get_type_hints(cls, include_extras=True)[key])
    return typing.get_args(tp)[1].span() if typing.get_origin(tp) is Annotated else ""


def _element(tp: Any) -> Any:
    """X from X | None and list[X]: what one TOML value of that field is checked against."""
    if typing.get_origin(tp) in (types.UnionType, typing.Union):
        inner = [a for a in typing.get_args(tp) if a is not type(None)]
        tp = inner[0] if len(inner) == 1 else tp
    return typing.get_args(tp)[0] if typing.get_origin(tp) is list else tp
