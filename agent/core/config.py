"""The one TOML config file, validated into typed, frozen sections.

Every section is a dataclass; the loader walks the dataclass fields and converts each TOML
value, so a new key is one annotated field. Every problem raises ConfigError naming the
file, the key, the offending value and what was expected. Section and key names are a
contract (docs/configuration.md); add keys, never rename them.

This module holds what every section shares (the value markers, references between
sections, secrets), the sections of the core (store, stacks, InfluxDB, views, checks) and the
loader. A collector's own section lives in its package (`collectors/<name>/config.py`); the
whole file's class is made from the registry's sections by `config_class` one layer up
(agent/config.py), so the core never imports a collector.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import operator
import os
import re
import tomllib
import types
import typing
from collections.abc import Iterable, Iterator
from dataclasses import MISSING, dataclass, field, fields, is_dataclass, replace
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import urlparse

from db2vtop.agent.core import tls
from db2vtop.agent.core.paths import default_store_path
from db2vtop.agent.core.secrets import SecretRef
from db2vtop.agent.core.text import did_you_mean
from db2vtop.agent.core.trust import untrusted
from db2vtop.agent.core.units import format_bytes, format_duration, parse_duration, parse_size

SECRET_KEYS = frozenset({"password", "token", "secret", "passwd", "api_key"})
log = logging.getLogger(__name__)


class ConfigError(Exception):
    def __init__(self, file: str, key: str, problem: str):
        super().__init__(f"{file}: {key}: {problem}" if key else f"{file}: {problem}")
        self.file, self.key, self.problem = file, key, problem


class Invalid(Exception):  # noqa: N818 - raised by a section's check(), read as "the section is invalid"
    """What a section's own `check()` raises: `key` within the section ("" for the section as a
    whole); the loader adds the file and the section's place."""

    def __init__(self, key: str, problem: str):
        super().__init__(problem)
        self.key, self.problem = key, problem

    @classmethod
    def value(cls, key: str, value: Any, expected: str) -> Invalid:
        return cls(key, f"{_show(key, value)} is not valid; expected {expected}")


def _show(key: str, value: Any) -> str:
    if key.rsplit(".", 1)[-1] in SECRET_KEYS:
        return "<hidden>"
    return _USERINFO.sub(r"\1<hidden>@", shown(value))


_USERINFO = re.compile(r"(://)[^/@\s]*@")  # the credentials of a URL, never quoted back


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
class Marker:
    """What one TOML value must be: `convert` returns it typed or raises ValueError."""

    expected: str

    def convert(self, value: Any) -> Any:  # pragma: no cover - overridden
        raise NotImplementedError

    def span(self) -> str:
        """The allowed range as docs/configuration.md writes it ("500ms–1d"), or "" if unranged."""
        return ""


@dataclass(frozen=True)
class _Duration(Marker):
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
class _Size(Marker):
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
class _Choice(Marker):
    choices: tuple[str, ...] = ()

    def convert(self, value: Any) -> str:
        if not isinstance(value, str) or value not in self.choices:
            raise ValueError
        return value


_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:@-]{0,63}$")


class _Name(Marker):
    def convert(self, value: Any) -> str:
        if not isinstance(value, str) or not _NAME_RE.match(value):
            raise ValueError
        return value


class _Url(Marker):
    def convert(self, value: Any) -> str:
        if not isinstance(value, str):
            raise ValueError
        u = urlparse(value)
        # user:password@ would be written wherever the URL is (the start line, error texts, the store)
        if u.scheme not in ("http", "https") or not u.hostname or u.username is not None or u.password is not None:
            raise ValueError
        return value


@dataclass(frozen=True)
class _Range(Marker):
    low: int = 0
    high: int = 0

    def convert(self, value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or not self.low <= value <= self.high:
            raise ValueError
        return value

    def span(self) -> str:
        return f"{self.low:,}–{self.high:,}"


class _EnvName(Marker):
    def convert(self, value: Any) -> str:
        if not isinstance(value, str) or not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", value):
            raise ValueError
        return value


class _Thumbprint(Marker):
    def convert(self, value: Any) -> str:
        digest = value.replace(":", "") if isinstance(value, str) else ""
        if len(digest) not in (40, 64, 128) or not re.fullmatch(r"[0-9A-Fa-f]+", digest):
            raise ValueError
        return value


_NAME = _Name("a name of letters, digits, '-', '_', '.', ':' or '@' (at most 64)")
Name = Annotated[str, _NAME]
Url = Annotated[str, _Url("an http:// or https:// URL with a host name and no user:password@ (secrets go in "
                          "*_env or *_file)")]
EnvName = Annotated[str, _EnvName("an environment variable name such as VC1_PASSWORD")]
#: a TLS certificate's digest, as vSphere shows them (`openssl x509 -fingerprint -sha256` prints one)
Thumbprint = Annotated[str, _Thumbprint("a TLS certificate's SHA-256 thumbprint (or SHA-1, SHA-512) in hex, colons "
                                        'allowed, such as "3B:9F:...:A0"')]


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


def Range(expected: str, low: int, high: int) -> Any:  # noqa: N802
    """A whole number within [low, high], described as `expected` says."""
    return Annotated[int, _Range(expected, low, high)]


def Count(what: str, low: int, high: int) -> Any:  # noqa: N802
    return Range(f"{what} {low:,}-{high:,}", low, high)


Port = Range("a TCP port number 1-65535", 1, 65535)


@dataclass(frozen=True, eq=False)
class Reference:
    """The value names an item of another section (`[[ssh]]`, `[[storage]]`); with `once`, no two
    items of this section name the same one."""

    section: str
    once: bool = False


def Ref(section: str, once: bool = False) -> Any:  # noqa: N802
    """A name that must be the `name` of one `[[section]]`."""
    return Annotated[str, _NAME, Reference(section, once)]


MINUTE, HOUR, DAY = 60.0, 3600.0, 86400.0
#: a collector's own cycle timeout (default: its interval)
Timeout = Duration(1.0, HOUR)


# --- what sections share ---------------------------------------------------------------


@dataclass(frozen=True)
class Secret:
    """Mixin for sections with a password: at most one source (the loader checks), never inline."""

    def password(self) -> SecretRef | None:
        env, file, ring = (getattr(self, "password_" + k, None) for k in ("env", "file", "keyring"))
        if env or file or ring:
            return SecretRef(env=env, file=file, keyring=ring)
        return None


def check_secret(section: Any) -> None:
    given = [k for k in ("password_env", "password_file", "password_keyring") if getattr(section, k, None)]
    if len(given) > 1:
        raise Invalid("", f"{' and '.join(given)} are both set; give only one")


CheckValue = float | int | str | bool


# --- the core's sections ----------------------------------------------------------------


@dataclass(frozen=True)
class StoreConfig:
    path: Path = field(default_factory=default_store_path)
    retention: Duration(HOUR, 3650 * DAY) = 7 * 86400.0
    #: a time from outside (a source's clock, a marker) further than this from now is not stored
    max_clock_skew: Duration(MINUTE, 3650 * DAY) = DAY


@dataclass(frozen=True)
class StackConfig:
    name: Name
    db2: Ref("db2") | None = None
    vm: str | None = None
    vcenter: Ref("vcenter") | None = None
    guest: Ref("ssh") | None = None
    storage: list[Ref("storage")] = field(default_factory=list)
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
    allow_plaintext: bool = False
    spool_max_bytes: Size(64 * 1024, 2**44) = 2**30
    spool_dir: Path | None = None  # None: beside the store, `<store>.spool` (spool_of)
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
    #: one answer to a query (`--source influxdb`), inflated (agent/core/httpclient.py)
    max_response_bytes: Size(2**20, 2**32) = 64 * 2**20

    def token(self) -> SecretRef | None:
        if self.token_env or self.token_file:
            return SecretRef(env=self.token_env, file=self.token_file)
        return None

    def check(self) -> None:
        if self.token_env and self.token_file:
            raise Invalid("", "token_env and token_file are both set; give only one")
        if self.max_retry_delay < self.retry_interval:
            raise Invalid("max_retry_delay", f"{self.max_retry_delay:g}s is not valid; expected at least "
                                             f"retry_interval ({self.retry_interval:g}s)")


#: the layers an alert can name (the verdict's, and its findings' subjects)
ALERT_LAYERS = ("db2", "guest", "vm", "host", "storage", "storage-network")


@dataclass(frozen=True)
class AlertConfig:
    """A receiver of the agent's alerts (docs/alerts.md): Prometheus Alertmanager's v2 API, or a JSON webhook
    (one POST per change). Each has its own spool: what it has not taken yet waits there on disk."""

    name: Name
    url: Url
    kind: Choice("alertmanager", "webhook") = "alertmanager"
    min_severity: Choice("warning", "critical") = "warning"
    stacks: list[str] = field(default_factory=list)  # globs of stack names; empty: every stack
    layers: list[Choice(*ALERT_LAYERS)] = field(default_factory=list)  # empty: every layer
    token_env: EnvName | None = None  # sent as `Authorization: Bearer <token>`
    token_file: Path | None = None
    secret_env: EnvName | None = None  # webhook: the key of its HMAC-SHA256 signature header
    secret_file: Path | None = None
    verify_tls: bool = True
    ca_file: Path | None = None
    allow_plaintext: bool = False
    timeout: Duration(1.0, 10 * MINUTE) = 10.0
    resend_interval: Duration(1.0, HOUR) = 60.0  # firing alerts again, inside Alertmanager's resolve_timeout
    retry_interval: Duration(0.1, HOUR) = 1.0
    max_retry_delay: Duration(0.1, DAY) = 60.0
    spool_dir: Path | None = None  # None: [alerting] state_dir / name
    spool_max_bytes: Size(64 * 1024, 2**40) = 16 * 2**20

    def token(self) -> SecretRef | None:
        if self.token_env or self.token_file:
            return SecretRef(env=self.token_env, file=self.token_file)
        return None

    def secret(self) -> SecretRef | None:
        if self.secret_env or self.secret_file:
            return SecretRef(env=self.secret_env, file=self.secret_file)
        return None

    def check(self) -> None:
        for what in ("token", "secret"):
            if getattr(self, what + "_env") and getattr(self, what + "_file"):
                raise Invalid("", f"{what}_env and {what}_file are both set; give only one")
        if self.secret() is not None and self.kind != "webhook":
            raise Invalid("secret_env" if self.secret_env else "secret_file",
                          'signs a webhook\'s body; this receiver\'s kind is "alertmanager"')
        if self.max_retry_delay < self.retry_interval:
            raise Invalid("max_retry_delay", f"{self.max_retry_delay:g}s is not valid; expected at least "
                                             f"retry_interval ({self.retry_interval:g}s)")


@dataclass(frozen=True)
class AlertingConfig:
    """How the agent judges its alerts: every `interval`, from the live verdicts and findings; an alert that clears
    is resolved once it has stayed clear for `flap_guard` (a condition back within it was never resolved: it pages
    once)."""

    interval: Duration(1.0, 10 * MINUTE) = 20.0
    flap_guard: Duration(MINUTE, HOUR) = MINUTE
    state_dir: Path | None = None  # None: beside the store, `<store>.alerts` (alerts_of)


@dataclass(frozen=True)
class CoreConfig:
    """The core's part of the whole file. Each collector's section (`[guest]`, `[[vcenter]]`,
    `[[storage]]`, ...) is a field of the subclass `config_class` makes from the registry: readers
    below the collectors (checks) see it as an attribute of the Config they are handed (agent/config.py
    makes that whole-file class; this one is its base, the core's part)."""

    store: StoreConfig = field(default_factory=StoreConfig)
    stack: list[StackConfig] = field(default_factory=list)
    influxdb: InfluxConfig | None = None
    vsphere: VSphereConfig = field(default_factory=VSphereConfig)
    view: ViewConfig = field(default_factory=ViewConfig)
    checks: dict[str, dict[str, CheckValue]] = field(default_factory=dict)
    alert: list[AlertConfig] = field(default_factory=list)
    alerting: AlertingConfig = field(default_factory=AlertingConfig)
    source: Path | None = field(default=None, metadata={"toml": False})


@dataclass(frozen=True, eq=False)
class Section:
    """A section a collector package brings: `[[name]]` tables (`many`) or one `[name]` table, loaded
    into `config`. Several sections of one name (the `[[storage]]` vendors) are told apart by the
    value of their `kind` key, each class allowing its own."""

    name: str
    config: type
    many: bool = True


def config_class(sections: Iterable[Section], module: str) -> type[CoreConfig]:
    """The whole file's Config: the core's sections plus one field per registered section name."""
    by_name: dict[str, list[Section]] = {}
    for s in sections:
        by_name.setdefault(s.name, []).append(s)
    extra: list[tuple[str, Any, Any]] = []
    for name, group in by_name.items():
        if len({s.many for s in group}) != 1 or (len(group) > 1 and not group[0].many):
            raise TypeError(f"[{name}]: sections of one name are all [[{name}]] tables")
        one: Any = functools.reduce(operator.or_, (s.config for s in group))
        if group[0].many:
            extra.append((name, list[one], field(default_factory=list)))
        else:
            extra.append((name, one, field(default_factory=group[0].config)))
    cls = dataclasses.make_dataclass("Config", extra, bases=(CoreConfig,), frozen=True)
    cls.__module__, cls.__doc__ = module, "The whole config file: the core's sections and every registered one."
    return cls


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
                raise self.error(where, f"unknown key{did_you_mean(k, known)}; expected one of "
                                        + ", ".join(sorted(known)))
        values = {}
        for name, f in known.items():
            where = f"{key}.{name}" if key else name
            if name in table:
                values[name] = self.value(hints[name], table[name], where)
            elif f.default is MISSING and f.default_factory is MISSING:
                raise self.error(where, "missing; this key is required")
        return cls(**values)

    def variant(self, classes: tuple[type, ...], table: Any, key: str) -> Any:
        """One of several sections of a name, by the value of its `kind` key."""
        if not isinstance(table, dict):
            raise self.bad(key, table, "a table")
        kinds = {c: _choices(c, KIND) for c in classes}
        expected = "one of " + ", ".join(f'"{k}"' for k in sorted(k for ks in kinds.values() for k in ks))
        if KIND not in table:
            raise self.error(f"{key}.{KIND}", f"missing; this key is required ({expected})")
        chosen = next((c for c, ks in kinds.items() if table[KIND] in ks), None)
        if chosen is None:
            near = did_you_mean(table[KIND], [k for ks in kinds.values() for k in ks]) \
                if isinstance(table[KIND], str) else ""
            raise self.bad(f"{key}.{KIND}", table[KIND], expected + near)
        return self.section(chosen, table, key)

    def value(self, tp: Any, value: Any, key: str) -> Any:
        origin = typing.get_origin(tp)
        if origin is Annotated:
            marker = typing.get_args(tp)[1]
            try:
                return marker.convert(value)
            except ValueError:
                near = did_you_mean(value, marker.choices) if isinstance(marker, _Choice) and \
                    isinstance(value, str) else ""
                raise self.bad(key, value, marker.expected + near) from None
        if origin in (types.UnionType, typing.Union):
            inner = [a for a in typing.get_args(tp) if a is not type(None)]
            if len(inner) == 1:
                return self.value(inner[0], value, key)
            if all(is_dataclass(a) for a in inner):
                return self.variant(tuple(inner), value, key)
            for a in inner:  # scalar unions: check thresholds, typed and ranged by their rule (validate_overrides)
                if _is_instance(value, a):
                    return value
            raise self.bad(key, value, " or ".join(_EXPECTED[a] for a in inner))
        if origin is list:
            (item,) = typing.get_args(tp)
            if not isinstance(value, list):
                raise self.bad(key, value, f"[[{key}]] tables" if _is_section(item) else "a list")
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


#: the key that tells sections of one name apart (`[[storage]] kind = "ontap"`)
KIND = "kind"


def _choices(cls: type, key: str) -> tuple[str, ...]:
    tp = typing.get_type_hints(cls, include_extras=True).get(key)
    marker = typing.get_args(tp)[1] if typing.get_origin(tp) is Annotated else None
    if not isinstance(marker, _Choice):
        raise TypeError(f"{cls.__name__}: sections that share a name need a `{key}` Choice")
    return marker.choices


def _is_section(tp: Any) -> bool:
    """A dataclass, or a union of them (sections of one name)."""
    if typing.get_origin(tp) in (types.UnionType, typing.Union):
        return all(is_dataclass(a) for a in typing.get_args(tp))
    return is_dataclass(tp)


def _is_instance(value: Any, tp: type) -> bool:
    if tp is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if tp is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, tp)


def sections_of(cfg: CoreConfig) -> Iterator[tuple[str, str, Any]]:
    """(section name, where, section) of every loaded section, in the file's class order."""
    for f in fields(cfg):
        value = getattr(cfg, f.name)
        if isinstance(value, list):
            yield from ((f.name, f"{f.name}[{i}]", v) for i, v in enumerate(value) if is_dataclass(v))
        elif is_dataclass(value):
            yield f.name, f.name, value


def _references(section: Any) -> Iterator[tuple[str, str, Reference]]:
    """(key, value, reference) of every value in `section` that names another section's item."""
    for name, tp in typing.get_type_hints(type(section), include_extras=True).items():
        ref = _reference(_element(tp))
        value = getattr(section, name)
        if ref is None or value is None:
            continue
        if isinstance(value, list):
            yield from ((f"{name}[{j}]", v, ref) for j, v in enumerate(value))
        else:
            yield name, value, ref


def _reference(tp: Any) -> Reference | None:
    """The Reference among an Annotated type's markers."""
    if typing.get_origin(tp) is not Annotated:
        return None
    return next((m for m in typing.get_args(tp)[2:] if isinstance(m, Reference)), None)


def _check(cfg: CoreConfig, err: _Loader) -> None:
    """What one key cannot say alone: unique names, references between sections, each section's own rules."""
    names: dict[str, set[str]] = {}
    for section, where, item in sections_of(cfg):
        if isinstance(getattr(cfg, section), list) and "name" in {f.name for f in fields(item)}:
            seen = names.setdefault(section, set())
            if item.name in seen:
                raise err.error(f"{where}.name", f"{item.name!r} is used twice; names must be unique")
            seen.add(item.name)
    once: dict[tuple[str, str], set[str]] = {}
    for section, where, item in sections_of(cfg):
        for key, value, ref in _references(item):
            targets = names.get(ref.section, set())
            if value not in targets:
                known = ", ".join(sorted(targets)) or f"none defined; add a [[{ref.section}]] section"
                raise err.error(f"{where}.{key}", f"{value!r} names no [[{ref.section}]]; known: {known}")
            if ref.once:
                used = once.setdefault((section, key), set())
                if value in used:
                    raise err.error(f"{where}.{key}", f"{value!r} is used twice; one [[{section}]] per target")
                used.add(value)
    for _, where, item in sections_of(cfg):
        try:
            check_secret(item)
            if hasattr(item, "check"):
                item.check()
        except Invalid as e:
            raise err.error(f"{where}.{e.key}" if e.key else where, e.problem) from None
        problem = tls.contradiction(item)
        if problem:
            raise err.error(f"{where}.ca_file", problem)
        if sends_in_clear(item) and not getattr(item, "allow_plaintext", False):
            raise err.error(f"{where}.url", "http:// would send the password or token unencrypted; use https://, "
                                            "or set allow_plaintext = true in this section to accept that")


def sends_in_clear(section: Any) -> bool:
    """Whether a section sends a password or token to a plain http:// URL."""
    url = getattr(section, "url", None)
    if not isinstance(url, str) or urlparse(url).scheme != "http":
        return False
    refs = [getattr(section, m)() for m in ("password", "token") if callable(getattr(section, m, None))]
    return any(r is not None for r in refs)


def plaintext_warnings(cfg: CoreConfig) -> list[str]:
    """What to say at every start about the sections that send credentials in clear (allow_plaintext)."""
    return [f"{where}: the password or token is sent unencrypted to {item.url} (allow_plaintext = true); "
            "anyone on the path can read it" for _, where, item in sections_of(cfg) if sends_in_clear(item)]


def names_a_secret(cfg: CoreConfig) -> bool:
    return any(callable(getattr(item, m, None)) and getattr(item, m)() is not None
               for _, _, item in sections_of(cfg) for m in ("password", "token"))


def spool_of(store_path: Path) -> Path:
    """The InfluxDB spool's directory when [influxdb] spool_dir is not set: beside the store, as its
    marker inbox is, so two agents with different stores never share one."""
    return store_path.with_name(store_path.name + ".spool")


def alerts_of(store_path: Path) -> Path:
    """The alerts' directory when [alerting] state_dir is not set: beside the store, as the InfluxDB spool is."""
    return store_path.with_name(store_path.name + ".alerts")


def load(path: Path, root: type[CoreConfig]) -> CoreConfig:
    """Read and validate one config file into `root`; raises ConfigError, never anything else."""
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
    table = _parse(file, text, root)
    try:
        cfg = err.section(root, table, "")
    except RecursionError:  # a value nested deeper than any key accepts
        raise ConfigError(file, "", "values nested too deeply") from None
    _check(cfg, err)
    _check_trust(path, cfg)
    return replace(cfg, source=path)


def _check_trust(path: Path, cfg: CoreConfig) -> None:
    """A config whoever else can edit or replace decides, for them, where the secrets it names are sent
    (a url of theirs, verify_tls = false): refused then, as OpenSSH refuses such a ~/.ssh/config
    (agent/core/trust.py); without a secret, a warning."""
    problem = untrusted(path)
    if problem is None:
        return
    if names_a_secret(cfg):
        raise ConfigError(str(path), "", f"{problem.why}, and it names secrets: whoever can edit or replace it "
                                         f"can have them sent elsewhere; {problem.fix}")
    log.warning("config %s; %s", problem.why, problem.fix)


_LONG_NUMBER = re.compile(r"[0-9][0-9_]{999,}")
_KEY_AT = re.compile(r"\s*([A-Za-z0-9_-]+)\s*=")
_HEADER = re.compile(r"^\s*(\[\[?)\s*([A-Za-z0-9_.-]+)\s*\]", re.M)


def _parse(file: str, text: str, root: type[CoreConfig]) -> dict[str, Any]:
    """tomllib's table, or a one-line ConfigError for what it raises beyond TOMLDecodeError."""
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(file, "", f"invalid TOML: {e}") from None
    except RecursionError:
        raise ConfigError(file, "", "invalid TOML: arrays or tables nested too deeply") from None
    except ValueError:  # Python's limit on the digits int() reads, raised through tomllib
        raise _long_number(file, text, root) from None


def _long_number(file: str, text: str, root: type[CoreConfig]) -> ConfigError:
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
    expected = _expected_at(root, ".".join(p for p in (tables[-1][1] if tables else "", name) if p))
    digits = sum(c.isdigit() for c in m.group())
    line = text.count("\n", 0, start) + 1
    return ConfigError(file, where, f"a number of {digits:,} digits (line {line}) is not valid; expected "
                                    f"{expected or 'a number of at most 4300 digits'}")


def _expected_at(root: type[CoreConfig], dotted: str) -> str:
    """What the key at `dotted` (e.g. "vcenter.interval") expects, from the section dataclasses."""
    tp: Any = root
    for part in dotted.split("."):
        tp = next((c for c in _sections(_element(tp)) if part in typing.get_type_hints(c)), None)
        if tp is None:
            return ""
        tp = typing.get_type_hints(tp, include_extras=True)[part]
    tp = _element(tp)
    return typing.get_args(tp)[1].expected if typing.get_origin(tp) is Annotated else ""


def _sections(tp: Any) -> tuple[type, ...]:
    """The dataclasses a TOML table at this place may load into (several for a shared section name)."""
    if typing.get_origin(tp) in (types.UnionType, typing.Union) and _is_section(tp):
        return typing.get_args(tp)
    return (tp,) if is_dataclass(tp) else ()


def _element(tp: Any) -> Any:
    """X from X | None and list[X]: what one TOML value of that field is checked against."""
    if typing.get_origin(tp) in (types.UnionType, typing.Union):
        inner = [a for a in typing.get_args(tp) if a is not type(None)]
        tp = inner[0] if len(inner) == 1 else tp
    return typing.get_args(tp)[0] if typing.get_origin(tp) is list else tp
