"""Config: defaults, the template, and a clear error (file, key, value, expectation) for bad input."""

from __future__ import annotations

import contextlib
import io
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from db2vtop.agent import cli, service
from db2vtop.agent.config import Config, load_config, resolve_config, template
from db2vtop.agent.core.config import ConfigError
from db2vtop.collectors.registry import INPUTS
from tests.conftest import run_cli
from tests.infra.configs import error_of, write

TEMPLATE = template()  # `config init`'s text: the core's sections and each source package's template.toml


def test_no_config_means_local_guest_monitoring():
    cfg = resolve_config(None)
    assert cfg == Config()
    assert cfg.guest.enabled and cfg.guest.interval == 5.0
    assert cfg.store.retention == 7 * 86400
    assert str(cfg.store.path).endswith("db2vtop/metrics.db")


def test_default_config_file_is_used_when_present(isolated_home):
    path = isolated_home / "config" / "db2vtop" / "config.toml"
    path.parent.mkdir(parents=True)
    path.write_text('[guest]\ninterval = "2s"\n')
    assert resolve_config(None).guest.interval == 2.0


def test_template_as_written_is_valid(tmp_path):
    cfg = load_config(write(tmp_path, TEMPLATE))
    assert cfg.guest.enabled and not cfg.vcenter


def test_template_examples_uncommented_are_valid(tmp_path, monkeypatch):
    """Every example section of `config init` is a working configuration once uncommented."""
    lines = [line[2:] if line.startswith("# ") else line for line in TEMPLATE.splitlines()]
    monkeypatch.setenv("VC1_PASSWORD", "x")
    cfg = load_config(write(tmp_path, "\n".join(lines)))
    assert [v.name for v in cfg.vcenter] == ["vc1", "esx01"]
    assert [s.name for s in cfg.ssh] == ["db2prod01", "netapp1-admin", "esx01-root", "symcli01"]
    assert cfg.db2[0].ssh == "db2prod01" and cfg.storage[0].kind == "ontap" and cfg.esxtop[0].ssh == "esx01-root"
    assert cfg.stack[0].storage == ["netapp1"]
    assert cfg.influxdb is not None and cfg.influxdb.spool_max_bytes == 2**30
    assert cfg.checks == {"cpu-ready": {"warn_pct": 5}}
    assert cfg.vcenter[0].verify_tls is True
    assert [(a.name, a.kind) for a in cfg.alert] == [("oncall", "alertmanager"), ("chat", "webhook")]


def test_values_are_typed(tmp_path):
    cfg = load_config(write(tmp_path, """
[store]
path = "~/x/m.db"
retention = "36h"
[guest]
interval = 1
[[ssh]]
name = "h1"
host = "127.0.0.1"
user = "me"
port = 2222
command_timeout = "1m"
[influxdb]
url = "http://127.0.0.1:8086"
bucket = "b/autogen"
spool_max_bytes = "512MiB"
"""))
    assert cfg.store.path == Path.home() / "x/m.db"
    assert cfg.store.retention == 36 * 3600
    assert cfg.guest.interval == 1.0 and isinstance(cfg.guest.interval, float)
    assert cfg.ssh[0].port == 2222 and cfg.ssh[0].command_timeout == 60 and cfg.ssh[0].host_key_policy == "reject"
    assert cfg.influxdb.spool_max_bytes == 512 * 2**20


@pytest.mark.parametrize("text, key, expected", [
    ('[guest]\ninterval = "20x"', "guest.interval", "a duration"),
    ("[guest]\ninterval = true", "guest.interval", "a duration"),
    ('[guest]\nenabled = "yes"', "guest.enabled", "true or false"),
    ("[store]\npath = 5", "store.path", "a file path"),
    ('[store]\nretention = "forever"', "store.retention", "a duration"),
    ('[[ssh]]\nname = "a"\nhost = "h"\nuser = "u"\nport = 70000', "ssh[0].port", "1-65535"),
    ('[[ssh]]\nname = "a"\nhost = "h"\nuser = "u"\nhost_key_policy = "auto"', "ssh[0].host_key_policy",
     '"reject", "accept-new"'),
    ('[[storage]]\nname = "n"\nkind = "emc"\nssh = "x"', "storage[0].kind", '"linux", "ontap"'),
    ('[influxdb]\nurl = "ftp://x"\nbucket = "b"', "influxdb.url", "http:// or https://"),
    ('[influxdb]\nurl = "http://x"\nbucket = "b"\nspool_max_bytes = "lots"', "influxdb.spool_max_bytes", "a size"),
    ("vcenter = 5", "vcenter", "[[vcenter]] tables"),
    ('[[vcenter]]\nname = "has space"\nurl = "https://x/sdk"\nuser = "u"\npassword_env = "P"', "vcenter[0].name",
     "a name"),
    ("[checks.cpu-ready]\nwarn_pct = [1]", "checks.cpu-ready.warn_pct", "a number or an integer or a string"),
    ('[[vcenter]]\nname = "v"\nurl = "https://x/sdk"\nuser = "u"\npassword_env = "P"\nthumbprint = "AB:CD"',
     "vcenter[0].thumbprint", "SHA-256 thumbprint"),
    ('[[vcenter]]\nname = "v"\nurl = "https://x/sdk"\nuser = "u"\npassword_env = "P"\nthumbprint = "' + "g" * 64 + '"',
     "vcenter[0].thumbprint", "in hex"),
    ('[[vcenter]]\nname = "v"\nurl = "https://x/sdk"\nuser = "u"\npassword_env = "P"\nproxy = "https://p:3128"',
     "vcenter[0].proxy", "the http:// URL of an HTTP CONNECT proxy"),
    ('[[vcenter]]\nname = "v"\nurl = "https://x/sdk"\nuser = "u"\npassword_env = "P"\nproxy = "http://u:pw@p:3128"',
     "vcenter[0].proxy", "no user:password@"),
])
def test_errors_name_file_key_value_and_expectation(tmp_path, text, key, expected):
    e = error_of(tmp_path, text)
    message = str(e)
    assert message.startswith(str(tmp_path / "db2vtop.toml") + ": ")
    assert e.key == key
    assert expected in message
    assert "is not valid" in message


def test_unknown_key_lists_the_known_ones(tmp_path):
    e = error_of(tmp_path, "[guest]\nintervall = 5")
    assert e.key == "guest.intervall" and "unknown key" in str(e) and "interval" in str(e)


@pytest.mark.parametrize(("text", "words"), [
    ('[[vcenter]]\nname = "v"\nurl = "https://x/sdk"\nuser = "u"\npassword_env = "P"\nverfy_tls = false',
     "vcenter[0].verfy_tls: unknown key (did you mean verify_tls?); expected one of allow_plaintext"),
    ('[[storage]]\nname = "n"\nkind = "ontapp"\nssh = "x"', '"xtremio" (did you mean ontap?)'),
    ('[[ssh]]\nname = "a"\nhost = "h"\nuser = "u"\nhost_key_policy = "rejct"', "(did you mean reject?)"),
    ("[checks.cpu-redy]\nwarn_pct = 5", "checks.cpu-redy: no such rule (did you mean cpu-ready?); `db2vtop rules`"),
    ("[checks.cpu-ready]\nwarn_pc = 5", "warn_pc: unknown threshold (did you mean warn_pct?); expected one of"),
])
def test_a_mistyped_name_gets_the_near_ones(tmp_path, text, words):
    """A typo in a key, a kind, a choice, a rule or a threshold: the error says which name was probably meant."""
    path = tmp_path / "db2vtop.toml"
    path.write_text(text)
    r = run_cli("config", "check", "-c", str(path))
    assert r.returncode == 2 and words in r.stderr, r.stderr


def test_missing_required_key(tmp_path):
    e = error_of(tmp_path, '[[vcenter]]\nname = "vc1"\nuser = "u"\npassword_env = "P"')
    assert e.key == "vcenter[0].url" and "required" in str(e)


def test_inline_secret_is_refused_without_echoing_it(tmp_path):
    e = error_of(tmp_path, '[[vcenter]]\nname = "vc1"\nurl = "https://x/sdk"\nuser = "u"\npassword = "hunter2"')
    assert e.key == "vcenter[0].password" and "password_env" in str(e)
    assert "hunter2" not in str(e)


def test_bad_secret_value_is_hidden(tmp_path):
    e = error_of(tmp_path, '[influxdb]\nurl = "http://x"\nbucket = "b"\ntoken = "s3cr3t-token"')
    assert "s3cr3t-token" not in str(e)


@pytest.mark.parametrize("text, key, words", [
    ('[[db2]]\nname = "p"\ndatabase = "P"\nssh = "nope"', "db2[0].ssh", "names no [[ssh]]"),
    ('[[db2]]\nname = "p"\ndatabase = "P"', "db2[0].ssh", "clp"),
    ('[[stack]]\nname = "s"\nstorage = ["a"]', "stack[0].storage[0]", "names no [[storage]]"),
    ('[[ssh]]\nname = "a"\nhost = "h"\nuser = "u"\n[[ssh]]\nname = "a"\nhost = "h"\nuser = "u"', "ssh[1].name",
     "unique"),
    ('[[vcenter]]\nname = "v"\nurl = "https://x/sdk"\nuser = "u"', "vcenter[0]", "no password source"),
    ('[[vcenter]]\nname = "v"\nurl = "https://x/sdk"\nuser = "u"\npassword_env = "A"\npassword_file = "/f"',
     "vcenter[0]", "give only one"),
    ('[[vcenter]]\nname = "v"\nurl = "https://x/sdk"\ntoken_env = "T"\ntoken_file = "/t"', "vcenter[0]",
     "token_env and token_file are both set"),
    ('[[vcenter]]\nname = "v"\nurl = "https://x/sdk"\nuser = "u"\npassword_env = "A"\ntoken_env = "T"', "vcenter[0]",
     "give one way to log in"),
    ('[[vcenter]]\nname = "v"\nurl = "https://x/sdk"\npassword_env = "A"', "vcenter[0].user",
     "required with a password"),
    ('[[vcenter]]\nname = "v"\nurl = "https://x/sdk"\nuser = "u"\npassword_env = "A"\nverify_tls = false\n'
     'thumbprint = "' + "a" * 64 + '"', "vcenter[0].thumbprint", "verify_tls = false"),
    ('[[vcenter]]\nname = "v"\nurl = "https://x/sdk"\nuser = "u"\npassword_env = "A"\nca_file = "/ca.pem"\n'
     'thumbprint = "' + "a" * 64 + '"', "vcenter[0].thumbprint", "remove ca_file or thumbprint"),
])
def test_cross_references(tmp_path, text, key, words):
    e = error_of(tmp_path, text)
    assert e.key == key and words in str(e)


def test_invalid_toml_and_unreadable_file(tmp_path):
    e = error_of(tmp_path, "[guest\ninterval=1")
    assert "invalid TOML" in str(e) and "line 1" in str(e)
    with pytest.raises(ConfigError) as missing:
        load_config(tmp_path / "nope.toml")
    assert "cannot read" in str(missing.value) and "nope.toml" in str(missing.value)
    binary = tmp_path / "bin.toml"
    binary.write_bytes(b"\xff\xfe[guest]")
    with pytest.raises(ConfigError, match="not UTF-8"):
        load_config(binary)


def _check(path: Path) -> tuple[int, str]:
    """`db2vtop config check` in-process (hypothesis runs it hundreds of times)."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = cli.main(["config", "check", "-c", str(path)])
    return code, err.getvalue()


@settings(max_examples=300, suppress_health_check=[HealthCheck.function_scoped_fixture], deadline=None)
@given(st.text(max_size=300))
def test_garbage_text_gives_a_clear_error_never_a_traceback(tmp_path, text):
    path = tmp_path / "garbage.toml"
    path.write_text(text, encoding="utf-8")
    code, err = _check(path)
    assert code in (0, 2)
    if code == 2:
        assert err.startswith(f"db2vtop: config error: {path}: ")
        assert "Traceback" not in err


def test_a_vcenter_token_thumbprint_and_proxy_load_and_config_check_reads_the_token(tmp_path):
    token = tmp_path / "vc1.token"
    token.write_text("<saml2:Assertion/>")
    token.chmod(0o600)
    good = write(tmp_path, f'[[vcenter]]\nname = "esx1"\nurl = "https://esx1/sdk"\ntoken_file = "{token}"\n'
                           'thumbprint = "3b:9f:' + "00:" * 29 + 'a0"\nproxy = "http://proxy.example.com:3128"\n')
    (vc,) = load_config(good).vcenter
    assert (vc.user, vc.token().file, vc.proxy) == ("", token, "http://proxy.example.com:3128")
    assert _check(good)[0] == 0
    token.chmod(0o644)  # config check reads the token as it reads a password file
    code, err = _check(good)
    assert code == 2 and "vcenter[0]: secret not readable" in err and "readable by group or others" in err


def test_config_check_subprocess(tmp_path, monkeypatch):
    good = write(tmp_path, '[[vcenter]]\nname = "v"\nurl = "https://x/sdk"\nuser = "u"\npassword_env = "VCPW"\n')
    r = run_cli("config", "check", "-c", str(good), env={"VCPW": "pw"})
    assert r.returncode == 0, r.stderr
    assert "OK" in r.stdout and "1 vcenter" in r.stdout
    unset = run_cli("config", "check", "-c", str(good), env={"VCPW": ""})
    assert unset.returncode == 2
    assert "vcenter[0]" in unset.stderr and "VCPW is not set" in unset.stderr
    bad = tmp_path / "bad.toml"
    bad.write_text('[guest]\ninterval = "soon"\n')
    r = run_cli("config", "check", "-c", str(bad))
    assert r.returncode == 2
    assert r.stderr.strip() == (f'db2vtop: config error: {bad}: guest.interval: \'soon\' is not valid; expected a '
                                'duration from 500ms to 1d such as "20s", "5m", "1h30m" or a number of seconds')
    r = run_cli("agent", "--once", "-c", str(bad))
    assert r.returncode == 2 and "guest.interval" in r.stderr and "Traceback" not in r.stderr


def test_secret_file_must_be_private(tmp_path):
    secret = tmp_path / "pw"
    secret.write_text("pw\n")
    secret.chmod(0o644)
    cfg = write(tmp_path, f'[[vcenter]]\nname = "v"\nurl = "https://x/sdk"\nuser = "u"\npassword_file = "{secret}"\n')
    r = run_cli("config", "check", "-c", str(cfg))
    assert r.returncode == 2 and "readable by group or others" in r.stderr and "chmod 600" in r.stderr
    secret.chmod(0o600)
    r = run_cli("config", "check", "-c", str(cfg))
    assert r.returncode == 0, r.stderr
    assert "pw" not in r.stdout.replace(str(secret), "")


def test_the_template_has_every_section_and_every_kind(tmp_path, monkeypatch):
    """`config init` is assembled from the registered sources: each one's section, each [[storage]] kind."""
    lines = [line[2:] if line.startswith("# ") else line for line in TEMPLATE.splitlines()]
    monkeypatch.setenv("VC1_PASSWORD", "x")
    cfg = load_config(write(tmp_path, "\n".join(lines)))
    for i in INPUTS:
        assert f"[[{i.name}]]" in TEMPLATE or f"[{i.name}]" in TEMPLATE, i.name
        assert i.sections(cfg), f"no example of {i.config.__name__} in the template"


def test_config_init_writes_the_template(tmp_path):
    r = run_cli("config", "init")
    assert r.returncode == 0 and r.stdout == TEMPLATE
    out = tmp_path / "new.toml"
    assert run_cli("config", "init", "-o", str(out)).returncode == 0
    assert out.read_text() == TEMPLATE and (out.stat().st_mode & 0o777) == 0o600
    again = run_cli("config", "init", "-o", str(out))
    assert again.returncode == 2 and "--force" in again.stderr
    assert run_cli("config", "init", "-o", str(out), "--force").returncode == 0


# --- issue 19: every value has a type and a range -------------------------------------

VC = '[[vcenter]]\nname = "v"\nurl = "https://x/sdk"\nuser = "u"\npassword_env = "VCPW"\n'
SSH = '[[ssh]]\nname = "h"\nhost = "127.0.0.1"\nuser = "u"\n'
INFLUX = '[influxdb]\nurl = "http://127.0.0.1:8086"\nbucket = "b"\n'
HUGE = "9" * 2000  # beyond a float, within the digits Python's int() reads


@pytest.mark.parametrize("text, key, allowed", [
    ("[guest]\ninterval = nan", "guest.interval", "from 500ms to 1d"),
    ("[guest]\ninterval = inf", "guest.interval", "from 500ms to 1d"),
    ("[guest]\ninterval = -inf", "guest.interval", "from 500ms to 1d"),
    ("[guest]\ninterval = 1e400", "guest.interval", "from 500ms to 1d"),
    ('[guest]\ninterval = "nan"', "guest.interval", "from 500ms to 1d"),
    ('[guest]\ninterval = "inf"', "guest.interval", "from 500ms to 1d"),
    ('[guest]\ninterval = "0s"', "guest.interval", "from 500ms to 1d"),
    ("[guest]\ninterval = 0", "guest.interval", "from 500ms to 1d"),
    ("[guest]\ninterval = -5", "guest.interval", "from 500ms to 1d"),
    ('[guest]\ninterval = "99999999999999999999d"', "guest.interval", "from 500ms to 1d"),
    (f'[guest]\ninterval = "{HUGE}s"', "guest.interval", "from 500ms to 1d"),
    (f"[guest]\ninterval = {HUGE}", "guest.interval", "from 500ms to 1d"),
    ('[guest]\ntimeout = "0s"', "guest.timeout", "from 1s to 1h"),
    ('[store]\nretention = "5m"', "store.retention", "from 1h to 3650d"),
    ("[store]\nretention = nan", "store.retention", "from 1h to 3650d"),
    (VC + 'interval = "5s"', "vcenter[0].interval", "from 20s to 1d"),
    (VC + "workers = 0", "vcenter[0].workers", "1-16"),
    (VC + f"max_query_metrics = {HUGE}", "vcenter[0].max_query_metrics", "0-100,000"),
    (SSH + '[[esxtop]]\nname = "e"\nssh = "h"\ninterval = "1s"', "esxtop[0].interval", "from 2s to 1d"),
    (SSH + "connect_timeout = 0", "ssh[0].connect_timeout", "from 1s to 10m"),
    (SSH + "keepalive = -1", "ssh[0].keepalive", "from 1s to 1h"),
    (SSH + "max_sessions = 1000", "ssh[0].max_sessions", "1-64"),
    (SSH + '[[db2]]\nname = "d"\ndatabase = "D"\nssh = "h"\nfacts_interval = "1s"', "db2[0].facts_interval",
     "from 10s to 1d"),
    (SSH + '[[storage]]\nname = "s"\nkind = "linux"\nssh = "h"\ninterval = 0.5', "storage[0].interval",
     "from 1s to 1d"),
    (INFLUX + 'spool_max_bytes = "1KiB"', "influxdb.spool_max_bytes", "from 64KiB to 16TiB"),
    (INFLUX + f'spool_max_bytes = "{HUGE}TiB"', "influxdb.spool_max_bytes", "from 64KiB to 16TiB"),
    (INFLUX + "spool_max_bytes = 1e400", "influxdb.spool_max_bytes", "a size from 64KiB"),
    (INFLUX + "flush_interval = nan", "influxdb.flush_interval", "from 100ms to 1h"),
    (INFLUX + "batch_size = 0", "influxdb.batch_size", "1-1,000,000"),
    (INFLUX + 'retry_interval = "10s"\nmax_retry_delay = "5s"', "influxdb.max_retry_delay", "at least retry_interval"),
    ("[checks.cpu-ready]\nwarn_pct = nan", "checks.cpu-ready.warn_pct", "a percentage from 0 to 100"),
    (f"[checks.cpu-ready]\nwarn_pct = {HUGE}", "checks.cpu-ready.warn_pct", "a percentage from 0 to 100"),
], ids=lambda v: v[:40] if isinstance(v, str) else None)
def test_every_value_is_finite_and_in_its_range(tmp_path, text, key, allowed):
    """`config check` exits 2 naming file, key, value and the allowed range (issue 19's cases)."""
    path = write(tmp_path, text)
    code, err = _check(path)
    assert code == 2, err
    assert err.startswith(f"db2vtop: config error: {path}: {key}: ")
    assert allowed in err and "Traceback" not in err and err.count("\n") == 1


@pytest.mark.parametrize("key, text", [
    ("guest.interval", "[guest]\ninterval = " + "9" * 5000),
    ("vcenter[1].interval", VC + VC.replace('"v"', '"w"') + "interval = " + "1_" * 5000 + "0"),
    ("checks.cpu-ready.warn_pct", "[checks.cpu-ready]\nwarn_pct = -" + "7" * 5000),
], ids=["guest", "vcenter-underscores", "checks-negative"])
def test_a_5000_digit_number_is_a_config_error(tmp_path, key, text):
    """tomllib refuses integers beyond Python's digit limit with a ValueError: named, not raised."""
    path = write(tmp_path, text)
    code, err = _check(path)
    assert code == 2 and "Traceback" not in err and err.count("\n") == 1
    assert f"{path}: {key}: a number of " in err and " digits (line " in err
    if key.endswith(".interval"):
        assert "from 500ms to 1d" in err or "from 20s to 1d" in err


@pytest.mark.parametrize("text", [
    "x = " + "[" * 5000 + "]" * 5000,
    "x = " + "{a = " * 3000 + "1" + "}" * 3000,
    "[checks.cpu-ready]\nwarn_pct = " + "[" * 400 + "]" * 400,
], ids=["arrays", "inline-tables", "check-value"])
def test_deep_nesting_is_a_config_error(tmp_path, text):
    code, err = _check(write(tmp_path, text))
    assert code == 2 and "Traceback" not in err and err.count("\n") == 1


def test_leading_byte_order_mark_is_accepted(tmp_path):
    path = tmp_path / "bom.toml"
    path.write_bytes(b'\xef\xbb\xbf[guest]\r\ninterval = "2s"\r\n')
    assert load_config(path).guest.interval == 2.0
    assert _check(path)[0] == 0


@pytest.mark.parametrize("data, words", [
    ('[guest]\ninterval = "2s"\n'.encode("utf-16"), "not UTF-8"),
    ('[guest]\ninterval = "2s" # caf\xe9\n'.encode("latin-1"), "not UTF-8"),
    (b'[guest]\ninterval = "2\x00s"\n', "invalid TOML"),
    (b"\xef\xbb\xbf\xef\xbb\xbf[guest]\n", "invalid TOML"),
])
def test_odd_encodings_are_a_one_line_error(tmp_path, data, words):
    path = tmp_path / "odd.toml"
    path.write_bytes(data)
    code, err = _check(path)
    assert code == 2 and words in err and err.count("\n") == 1 and "Traceback" not in err


@pytest.mark.parametrize("text, attr, value", [
    ('[guest]\ninterval = "500ms"', "guest.interval", 0.5),
    ('[guest]\ninterval = "1d"', "guest.interval", 86400.0),
    ('[store]\nretention = "3650d"', "store.retention", 3650 * 86400.0),
    (VC + 'interval = "20s"', "vcenter[0].interval", 20.0),
    (INFLUX + 'spool_max_bytes = "64KiB"', "influxdb.spool_max_bytes", 65536),
])
def test_range_ends_are_accepted(tmp_path, monkeypatch, text, attr, value):
    monkeypatch.setenv("VCPW", "x")
    cfg = load_config(write(tmp_path, text))
    section, _, name = attr.rpartition(".")
    obj = getattr(cfg, section.split("[")[0])
    assert getattr(obj[0] if "[" in section else obj, name) == value


CPU = "[checks.cpu-ready]\n"
STACK = '[[stack]]\nname = "s"\n[stack.checks.cpu-ready]\n'


@pytest.mark.parametrize("text, key, allowed", [
    (CPU + 'warn_pct = "high"', "checks.cpu-ready.warn_pct", "a percentage from 0 to 100"),
    (CPU + "warn_pct = -5", "checks.cpu-ready.warn_pct", "a percentage from 0 to 100"),
    (CPU + "warn_pct = inf", "checks.cpu-ready.warn_pct", "a percentage from 0 to 100"),
    (CPU + "warn_pct = 101", "checks.cpu-ready.warn_pct", "a percentage from 0 to 100"),
    (CPU + "warn_pct = true", "checks.cpu-ready.warn_pct", "a percentage from 0 to 100"),
    (CPU + "warn_pct = 20", "checks.cpu-ready.warn_pct", "below crit_pct (10.0)"),
    (CPU + "crit_pct = 2", "checks.cpu-ready.crit_pct", "above warn_pct (5.0)"),
    (CPU + "warn_pct = 10\ncrit_pct = 10", "checks.cpu-ready.warn_pct", "below crit_pct (10)"),
    ("[checks.db2-bp-warm]\nwarn_pct = 70", "checks.db2-bp-warm.warn_pct", "above crit_pct (80.0)"),
    ("[checks.guest-io-latency]\nwarn_ms = -1", "checks.guest-io-latency.warn_ms", "milliseconds from 0 to 3,600,000"),
    ("[checks.guest-swap-zero]\ncrit_bytes_per_s = nan", "checks.guest-swap-zero.crit_bytes_per_s",
     "a rate per second from 0"),
    ("[checks.balloon-zero]\ngrowth_bytes = -1", "checks.balloon-zero.growth_bytes", "a number of bytes from 0"),
    ("[checks.host-swap-zero]\nsamples = 2.5", "checks.host-swap-zero.samples", "a whole number from 1 to 1,000"),
    ("[checks.host-swap-zero]\nsamples = 6", "checks.host-swap-zero.samples", "at most window (5)"),
    ("[checks.host-swap-zero]\nwindow = 0", "checks.host-swap-zero.window", "a whole number from 1 to 1,000"),
    ("[checks.partition-alignment]\nalign_sectors = 0", "checks.partition-alignment.align_sectors",
     "a whole number from 1 to 1,048,576"),
    ("[checks.mpio-redundant-paths]\nmin_active_paths = -2", "checks.mpio-redundant-paths.min_active_paths",
     "a whole number from 0"),
    ("[checks.db2-cfg-drift]\nenabled = 1", "checks.db2-cfg-drift.enabled", "true or false"),
    ("[checks.db2-cfg-drift]\nprofile = 5", "checks.db2-cfg-drift.profile", "a string"),
    ("[checks.disk-queue-saturation]\ncrit_pct = 20000", "checks.disk-queue-saturation.crit_pct",
     "a percentage from 0 to 10,000"),
    (STACK + "warn_pct = 20", "stack[0].checks.cpu-ready.warn_pct", "below crit_pct (10.0)"),
    (CPU + "crit_pct = 30\n" + STACK + "warn_pct = 40", "stack[0].checks.cpu-ready.warn_pct", "below crit_pct (30)"),
    (STACK + "warn_pct = nan", "stack[0].checks.cpu-ready.warn_pct", "a percentage from 0 to 100"),
])
def test_thresholds_are_typed_ranged_and_ordered(tmp_path, text, key, allowed):
    """Issue 19: a threshold's type and range follow from what it measures, warn stays before crit."""
    path = write(tmp_path, text)
    code, err = _check(path)
    assert code == 2, err
    assert err.startswith(f"db2vtop: config error: {path}: {key}: ") and allowed in err, err
    assert err.count("\n") == 1


@pytest.mark.parametrize("text", [
    CPU + "warn_pct = 5\ncrit_pct = 10",
    CPU + "warn_pct = 0\ncrit_pct = 100",
    CPU + "crit_pct = 30\n" + STACK + "warn_pct = 20",
    "[checks.db2-bp-warm]\nwarn_pct = 90\ncrit_pct = 70",
    "[checks.disk-queue-saturation]\nwarn_pct = 150\ncrit_pct = 300\nwarn_kavg_ms = 1",
    "[checks.host-swap-zero]\nsamples = 5\nwindow = 5\nclear_samples = 1",
    "[checks.guest-swap-zero]\ncrit_bytes_per_s = 1.5e6\nenabled = false",
    '[checks.db2-cfg-drift]\nenabled = true\nprofile = "olap"',
])
def test_thresholds_in_range_and_order_are_accepted(tmp_path, text):
    code, err = _check(write(tmp_path, text))
    assert code == 0, err


@pytest.mark.parametrize("text, key", [
    ("[guest]\ninterval = nan", "guest.interval"),
    ('[checks.cpu-ready]\nwarn_pct = "high"', "checks.cpu-ready.warn_pct"),
])
def test_sighup_reload_of_an_invalid_file_keeps_the_running_config(tmp_path, caplog, text, key):
    """The agent's reload reads the file as `config check` does: the bad value is logged, not applied."""
    path = write(tmp_path, text)
    assert service.reread_config(path) is None
    assert f"{path}: {key}: " in caplog.text and "keeping the running configuration" in caplog.text


@pytest.mark.parametrize("text, key", [
    ("[guest]\ninterval = 0x" + "F" * 5000, "guest.interval"),
    ("[guest]\ndevices_exclude = [[0o" + "7" * 8000 + "]]", "guest.devices_exclude[0]"),
    ('[[ssh]]\nname = "a"\nhost = "h"\nuser = "u"\nport = 0b' + "1" * 20000, "ssh[0].port"),
    ("[checks.cpu-ready]\nwarn_pct = 0x" + "F" * 5000, "checks.cpu-ready.warn_pct"),
], ids=["hex-duration", "octal-in-list", "binary-port", "hex-threshold"])
def test_a_huge_hex_octal_or_binary_integer_is_a_config_error(tmp_path, text, key):
    """tomllib reads these (the digit limit is for decimal only), and repr() then refuses them."""
    path = write(tmp_path, text)
    code, err = _check(path)
    assert code == 2 and err.startswith(f"db2vtop: config error: {path}: {key}: <a") and err.count("\n") == 1, err


@pytest.mark.parametrize("make, words", [
    (lambda p: os.mkfifo(p, 0o600), "not a regular file"),
    (lambda p: p.mkdir(mode=0o700), "not a regular file"),
    (lambda p: (p.write_bytes(b"x" * (65 * 1024)), p.chmod(0o600)), "larger than 64KiB"),
], ids=["fifo", "directory", "huge"])
def test_a_secret_file_that_is_not_a_small_regular_file_is_refused(tmp_path, make, words):
    """A FIFO would block `config check` for ever, a huge file fill memory: refused by what they are."""
    secret = tmp_path / "pw"
    make(secret)
    path = write(tmp_path, f'[[vcenter]]\nname = "v"\nurl = "https://x/sdk"\nuser = "u"\npassword_file = "{secret}"\n')
    code, err = _check(path)
    assert code == 2 and "vcenter[0]" in err and words in err and err.count("\n") == 1, err


# --- issue 29: where secrets may go -----------------------------------------------------


def test_credentials_in_a_url_are_refused_and_never_quoted_back(tmp_path):
    e = error_of(tmp_path, '[[vcenter]]\nname = "v"\nurl = "https://administrator:VCurlSecretXYZZY@vc/sdk"\n'
                           'user = "u"\npassword_env = "VCPW"\n')
    assert e.key == "vcenter[0].url" and "no user:password@" in str(e)
    assert "XYZZY" not in str(e) and "<hidden>@vc" in str(e)
    e = error_of(tmp_path, '[influxdb]\nurl = "http://admin:TOKurlSecretXYZZY@127.0.0.1:9"\nbucket = "b"\n')
    assert e.key == "influxdb.url" and "XYZZY" not in str(e)


@pytest.mark.parametrize("text, key", [
    ('[[vcenter]]\nname = "v"\nurl = "http://vc/sdk"\nuser = "u"\npassword_env = "VCPW"\n', "vcenter[0].url"),
    ('[influxdb]\nurl = "http://influx:8086"\nbucket = "b"\ntoken_env = "T"\n', "influxdb.url"),
    ('[[storage]]\nname = "x"\nkind = "xtremio"\nurl = "http://xms"\nuser = "u"\npassword_env = "P"\n',
     "storage[0].url"),
])
def test_plain_http_with_credentials_needs_allow_plaintext_and_is_warned_about(tmp_path, text, key):
    e = error_of(tmp_path, text)
    assert e.key == key and "unencrypted" in e.problem and "allow_plaintext = true" in e.problem
    cfg = write(tmp_path, text + "allow_plaintext = true\n")
    r = run_cli("config", "check", "-c", str(cfg), env={"VCPW": "x", "T": "x", "P": "x"})
    assert r.returncode == 0, r.stderr
    assert "warning:" in r.stderr and "sent unencrypted" in r.stderr


@pytest.mark.parametrize("text, key", [
    ('[[vcenter]]\nname = "v"\nurl = "https://vc/sdk"\nuser = "u"\npassword_env = "VCPW"\n', "vcenter[0].ca_file"),
    ('[influxdb]\nurl = "https://influx:8086"\nbucket = "b"\n', "influxdb.ca_file"),
    ('[[storage]]\nname = "x"\nkind = "ontap"\ntransport = "rest"\nurl = "https://c"\nuser = "u"\n'
     'password_env = "P"\n', "storage[0].ca_file"),
    ('[[storage]]\nname = "x"\nkind = "xtremio"\nurl = "https://xms"\nuser = "u"\npassword_env = "P"\n',
     "storage[0].ca_file"),
])
def test_verification_off_and_a_ca_file_together_are_refused(tmp_path, text, key):
    """verify_tls = false with ca_file meant verification on for ONTAP and off for vCenter, XtremIO and InfluxDB;
    config check accepted it. One shape for every source: the pair is a contradiction, said so."""
    load_config(write(tmp_path, text + 'ca_file = "/etc/ssl/ca.pem"\n'))
    load_config(write(tmp_path, text + "verify_tls = false\n"))
    e = error_of(tmp_path, text + 'verify_tls = false\nca_file = "/etc/ssl/ca.pem"\n')
    assert e.key == key and "verify_tls = false turns certificate verification off" in e.problem
    r = run_cli("config", "check", "-c", str(write(tmp_path, text + 'verify_tls = false\nca_file = "ca.pem"\n')),
                env={"VCPW": "x", "P": "x"})
    assert r.returncode == 2 and key in r.stderr, r.stderr


def test_plain_http_without_credentials_is_fine(tmp_path):
    load_config(write(tmp_path, '[influxdb]\nurl = "http://127.0.0.1:8086"\nbucket = "b"\n'))


def test_a_config_others_can_write_is_refused_when_it_names_a_secret(tmp_path, caplog):
    path = write(tmp_path, VC)
    path.chmod(0o666)  # whoever can edit it can point url at their own server and receive the password
    with pytest.raises(ConfigError, match=r"writable by group or others \(mode 666\), and it names secrets"):
        load_config(path)
    path.write_text('[guest]\ninterval = "2s"\n')
    path.chmod(0o664)
    assert load_config(path).guest.interval == 2.0
    assert "writable by group or others (mode 664)" in caplog.text and "chmod go-w" in caplog.text


def test_a_config_others_can_replace_through_its_directory_is_refused_when_it_names_a_secret(tmp_path, caplog):
    """The file itself root's and 0600, but in a directory anyone can write: another user renames theirs over
    it. Refused, and so is a private link to it; without a secret, a warning; a sticky directory is fine."""
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    path = write(shared, VC)
    path.chmod(0o600)
    with pytest.raises(ConfigError, match=rf"is in {shared}, which group or others can write \(mode 777\): they "
                                          r"can replace it, and it names secrets"):
        load_config(path)
    link = tmp_path / "db2vtop.toml"
    link.symlink_to(path)
    with pytest.raises(ConfigError, match=rf"{link} \(a link to {path}\) is in {shared}"):
        load_config(link)
    path.write_text('[guest]\ninterval = "2s"\n')
    assert load_config(path).guest.interval == 2.0
    assert f"is in {shared}, which group or others can write" in caplog.text
    shared.chmod(0o1777)  # as /tmp: only a file's owner can rename over it or remove it
    path.write_text(VC)
    assert load_config(path).vcenter[0].name == "v"


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give a file to another user")
def test_a_config_or_a_secret_file_another_user_owns_is_refused(tmp_path):
    """0644 and owned by nobody: nobody decides where the vCenter password goes, or what it is."""
    path = tmp_path / "theirs.toml"
    path.write_text(VC)
    os.chown(path, 65534, 65534)
    with pytest.raises(ConfigError, match=r"is owned by uid 65534, not by this user \(uid 0\) or root, and it "
                                          r"names secrets"):
        load_config(path)
    secret = tmp_path / "pw"
    secret.write_text("pw\n")
    secret.chmod(0o600)
    os.chown(secret, 65534, 65534)
    cfg = write(tmp_path, f'[[vcenter]]\nname = "v"\nurl = "https://x/sdk"\nuser = "u"\npassword_file = "{secret}"\n')
    code, err = _check(cfg)
    assert code == 2 and f"secret file {secret} is owned by uid 65534" in err, err


def test_the_spool_follows_the_store_unless_it_is_set(tmp_path):
    from db2vtop.agent.assemble import build_sink

    cfg = load_config(write(tmp_path, INFLUX))
    assert cfg.influxdb.spool_dir is None
    sink = build_sink(cfg, tmp_path / "a" / "m.db")
    try:
        assert sink.cfg.spool_dir == tmp_path / "a" / "m.db.spool" and sink.cfg.spool_dir.is_dir()
    finally:
        sink.close(timeout=0)


def test_config_init_force_never_writes_through_a_link_and_makes_the_file_private(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("keep me\n")
    link = tmp_path / "config.toml"
    link.symlink_to(victim)
    r = run_cli("config", "init", "-o", str(link), "--force")
    assert r.returncode == 1 and "symbolic link" in r.stderr and victim.read_text() == "keep me\n"
    old = tmp_path / "old.toml"
    old.write_text("")
    old.chmod(0o644)
    assert run_cli("config", "init", "-o", str(old), "--force").returncode == 0
    assert (old.stat().st_mode & 0o777) == 0o600
