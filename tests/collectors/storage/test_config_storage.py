"""[[storage]] keys for arrays: each kind and transport says what it is missing."""

from __future__ import annotations

import pytest

from db2vtop.agent.assemble import build_collectors
from tests.conftest import run_cli
from tests.infra.configs import error_of, load

SSH = '[[ssh]]\nname = "h"\nhost = "127.0.0.1"\nuser = "u"\n'


@pytest.mark.parametrize(("storage", "key", "problem"), [
    ('kind = "xtremio"\nssh = "h"\ntransport = "ssh"', "storage[0].transport", '"ssh" is not available'),
    ('kind = "xtremio"\nuser = "m"\npassword_env = "P"', "storage[0].url", 'transport "rest" needs'),
    ('kind = "ontap"\ntransport = "rest"\nurl = "https://a"', "storage[0]", "needs user and a password"),
    ('kind = "ontap"', "storage[0].ssh", "missing; storage is read over an [[ssh]] target"),
    ('kind = "powermax"\nssh = "h"', "storage[0].sid", "12-digit Symmetrix ID"),
    ('kind = "powermax"\nssh = "h"\nsid = "1979"', "storage[0].sid", "a Symmetrix ID of 12 digits"),
    ('kind = "ontap"\nssh = "h"\nmin_ops_for_latency = -1', "storage[0].min_ops_for_latency", "0-1,000,000,000"),
    ('kind = "powermax"\nssh = "h"\nsid = "000197900123"\ninterval = "10s"', "storage[0].sample_interval",
     "not shorter than the cycle timeout"),
    ('kind = "xtremio"\nurl = "https://x"\nuser = "m"\npassword_env = "P"\npassword_file = "/p"', "storage[0]",
     "password_env and password_file are both set"),
])
def test_array_keys_are_checked(tmp_path, storage, key, problem):
    e = error_of(tmp_path, f'{SSH}[[storage]]\nname = "a"\n{storage}\n')
    assert e.key == key and problem in e.problem


def test_arrays_become_collectors_sharing_one_ssh_target(tmp_path):
    cfg = load(tmp_path, SSH + """
[[storage]]
name = "netapp1"
kind = "ontap"
ssh = "h"
[[storage]]
name = "vmax1"
kind = "powermax"
ssh = "h"
sid = "000197900123"
[[storage]]
name = "xio1"
kind = "xtremio"
url = "https://xms.example.com"
user = "monitor"
password_env = "XMS_PASSWORD"
[guest]
enabled = false
""")
    assert cfg.storage[2].effective_transport == "rest" and cfg.storage[0].effective_transport == "ssh"
    built = {c.name: c for c in build_collectors(cfg)}
    assert {"storage:netapp1", "storage:vmax1", "storage:xio1"} <= set(built)
    assert built["storage:netapp1"].source.target is built["storage:vmax1"].target


def test_config_check_reads_array_passwords(tmp_path):
    p = tmp_path / "c.toml"
    p.write_text('[[storage]]\nname = "xio1"\nkind = "xtremio"\nurl = "https://xms.example.com"\nuser = "m"\n'
                 'password_env = "XMS_PW_FOR_TEST"\n')
    bad = run_cli("config", "check", "-c", str(p), env={"XMS_PW_FOR_TEST": ""})
    assert bad.returncode == 2 and "storage[0]: secret not readable" in bad.stderr
    good = run_cli("config", "check", "-c", str(p), env={"XMS_PW_FOR_TEST": "x"})
    assert good.returncode == 0 and "1 storage" in good.stdout
