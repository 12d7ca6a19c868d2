"""Config files written from the schema with arbitrary types and values per key (issue 19).

The strategies are derived from the config dataclasses and the rules' thresholds, not from a
hand-kept key list: a key added to the code is fuzzed without touching this file. Each key gets
values near its range (both ends, just outside), values of the wrong type, NaN, infinities and
numbers too large for a float. `db2vtop config check` must exit 0 or 2 with one line naming the
file, never a traceback; a handful of accepted local configurations also run `agent`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import types
import typing
from pathlib import Path
from typing import Annotated, Any

import pytest
import tomli_w
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from db2vtop.agent import cli
from db2vtop.agent.config import Config
from db2vtop.agent.core.units import format_duration
from db2vtop.checks.rule import thresholds_of
from db2vtop.checks.rules import all_rules
from db2vtop.collectors.guest.config import GuestConfig
from tests.conftest import run_cli

NAMES = ["a", "b", "h1"]  # so that references between sections sometimes resolve
PASSWORD_ENV = "DB2VTOP_PROPERTY_PW"

junk = st.one_of(
    st.integers(-(10**30), 10**30), st.floats(), st.booleans(), st.text(max_size=10),
    st.sampled_from(["", " ", "0s", "-1s", "nan", "inf", "-inf", "1e400", "99999999999999999999d", "1h30x"]),
    st.integers(10**300, 10**320), st.lists(st.integers(0, 9), max_size=2),
    st.dictionaries(st.sampled_from(NAMES), st.integers(0, 9), max_size=2))


def _numbers_around(low: float, high: float) -> st.SearchStrategy:
    ends = [low, high, low - 1, high + 1, low / 2, high * 2]
    return st.one_of(st.sampled_from(ends), st.floats(min_value=low, max_value=high), st.floats())


def _marker(marker: Any) -> st.SearchStrategy:
    kind = type(marker).__name__
    if kind == "_Duration":
        return st.one_of(_numbers_around(marker.low, marker.high),
                         st.sampled_from([format_duration(marker.low), format_duration(marker.high), "20s", "5m"]))
    if kind == "_Size":
        return st.one_of(st.integers(marker.low - 1, marker.high + 1), st.sampled_from(["64KiB", "1GiB", "1TiB", "1k"]))
    if kind == "_Range":
        return st.integers(marker.low - 2, marker.high + 2)
    if kind == "_Choice":
        return st.sampled_from(marker.choices)
    if kind == "_Name":
        return st.sampled_from(NAMES)
    if kind == "_Url":
        return st.sampled_from(["https://127.0.0.1:9/sdk", "http://127.0.0.1:9"])
    if kind == "_EnvName":
        return st.just(PASSWORD_ENV)
    if kind == "_Sid":
        return st.just("000197900123")
    if kind == "_Thumbprint":
        return st.sampled_from(["ab" * 32, "AB:" * 19 + "AB", "ab" * 31, "zz" * 32])
    raise AssertionError(f"no strategy for {marker!r}; add one")


def _typed(tp: Any, wild: bool) -> st.SearchStrategy:
    """Plausible values for annotation `tp` (the loader's own view of it)."""
    origin = typing.get_origin(tp)
    if origin is Annotated:
        return _marker(typing.get_args(tp)[1])
    if origin in (types.UnionType, typing.Union):
        return st.one_of([_typed(a, wild) for a in typing.get_args(tp) if a is not type(None)])
    if origin is list:
        return st.lists(_value(typing.get_args(tp)[0], wild), max_size=2)
    if origin is dict:
        return st.dictionaries(st.sampled_from(NAMES), _value(typing.get_args(tp)[1], wild), max_size=2)
    if dataclasses.is_dataclass(tp):
        return _table(tp, wild)
    return {bool: st.booleans(), str: st.sampled_from(["PROD", "u", "127.0.0.1", "~/x"]), int: st.integers(-3, 9),
            float: _numbers_around(0, 100), Path: st.sampled_from(["/nonexistent/db2vtop/x", "rel.pem", "~/x"])}[tp]


def _value(tp: Any, wild: bool) -> st.SearchStrategy:
    """Values for a key: of its type near its range, and if `wild` also anything at all."""
    return st.one_of(_typed(tp, wild), junk) if wild else _typed(tp, wild)


def _thresholds(wild: bool) -> st.SearchStrategy:
    """[checks.RULE] tables: real rule ids and their threshold keys, plus unknown ones."""
    keys: dict[str, set[str]] = {}
    for r in all_rules():
        keys.setdefault(r.id, {"enabled"}).update(thresholds_of(r))
    value = st.one_of(_numbers_around(0, 100), st.integers(-1, 1001), st.booleans(), *([junk] if wild else []))
    table = st.sampled_from([*sorted(keys), "no-such-rule"]).flatmap(lambda rid: st.tuples(
        st.just(rid), st.dictionaries(st.sampled_from([*sorted(keys.get(rid, {"x"})), "bogus"]), value, max_size=3)))
    return st.lists(table, max_size=3).map(dict)


def _table(cls: type, wild: bool) -> st.SearchStrategy:
    hints = typing.get_type_hints(cls, include_extras=True)
    required, optional = {}, {}
    for f in dataclasses.fields(cls):
        if not f.metadata.get("toml", True):
            continue
        strategy = _thresholds(wild) if f.name == "checks" else _value(hints[f.name], wild)
        missing = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        (required if missing else optional)[f.name] = strategy
    return st.fixed_dictionaries(required, optional=optional)


documents = st.one_of(_table(Config, wild=False), _table(Config, wild=True))
local_documents = st.fixed_dictionaries({}, optional={
    "guest": _table(GuestConfig, wild=False), "checks": _thresholds(wild=False)})


def _check(path: Path) -> tuple[int, str, str]:
    """`db2vtop config check` in-process: an exception it does not turn into exit 2 fails the test."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        code = cli.main(["config", "check", "-c", str(path)])
    return code, out.getvalue(), err.getvalue()


def _write(path: Path, doc: dict) -> bool:
    try:
        path.write_text(tomli_w.dumps(doc))
    except (TypeError, ValueError):  # not representable as TOML (or an int beyond str()'s digit limit)
        return False
    return True


@settings(max_examples=250, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
          deadline=None)
@given(documents)
def test_config_check_never_tracebacks(tmp_path, monkeypatch, doc):
    monkeypatch.setenv(PASSWORD_ENV, "pw")
    path = tmp_path / "fuzz.toml"
    if not _write(path, doc):
        return
    code, out, err = _check(path)
    event(f"exit {code}")
    assert code in (0, 2), err
    if code == 2:
        assert err.startswith(f"db2vtop: config error: {path}: ") and err.count("\n") == 1, err
        assert "Traceback" not in err
    else:
        assert out.startswith(f"{path}: OK")


@settings(max_examples=4, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
          deadline=None)
@given(local_documents)
def test_an_accepted_local_config_runs_the_agent_to_a_clean_exit(tmp_path, monkeypatch, doc):
    """Every file `config check` accepts runs `agent --duration 2s` to exit 0 within 10 s, with a
    bounded log. Local sections only (guest, checks): remote ones would need their peers."""
    path = tmp_path / "local.toml"
    if not _write(path, doc) or _check(path)[0] != 0:
        event("rejected")
        return
    event("agent ran")
    r = run_cli("agent", "-c", str(path), "--store", str(tmp_path / "m.db"), "--duration", "2s", timeout=10)
    assert r.returncode == 0, r.stderr[-2000:]
    assert len(r.stderr) + len(r.stdout) < 64 * 1024 and "Traceback" not in r.stderr


@pytest.mark.parametrize("doc", [{"guest": {"interval": "500ms"}}, {"checks": {"cpu-ready": {"warn_pct": 1}}}])
def test_local_strategy_examples_are_accepted(tmp_path, doc):
    """The agent property above only proves something if accepted local files exist."""
    path = tmp_path / "c.toml"
    assert _write(path, doc) and _check(path)[0] == 0
