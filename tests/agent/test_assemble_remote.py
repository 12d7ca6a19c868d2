"""Config for remote collectors, and their assembly: one SSH target per [[ssh]] section, shared."""

from __future__ import annotations

import logging

import pytest

from db2vtop.agent.assemble import build_collectors
from db2vtop.collectors.esxtop.collector import EsxtopCollector
from db2vtop.collectors.guest.remote import RemoteGuestCollector
from db2vtop.collectors.storage.linux.collector import LinuxStorageCollector
from db2vtop.collectors.storage.ontap.collector import OntapCollector
from tests.infra import configs

SSH = """
[[ssh]]
name = "db2prod01"
host = "db2prod01.example.com"
user = "db2inst1"
[[ssh]]
name = "db2aix01"
host = "db2aix01.example.com"
user = "db2inst1"
[[ssh]]
name = "esx01-root"
host = "esx01.example.com"
user = "root"
"""


def load(tmp_path, text: str):
    return configs.load(tmp_path, SSH + text)


def test_remote_sections_become_collectors_sharing_targets(tmp_path, caplog):
    cfg = load(tmp_path, """
[guest]
enabled = false
[[remote_guest]]
ssh = "db2aix01"
os = "aix"
interval = "10s"
[[storage]]
name = "san-gw1"
kind = "linux"
ssh = "db2prod01"
[[storage]]
name = "netapp1"
kind = "ontap"
ssh = "db2prod01"
[[esxtop]]
name = "esx01.example.com"
ssh = "esx01-root"
delay = "5s"
[[stack]]
name = "prod"
guest = "db2prod01"
[[stack]]
name = "aix"
guest = "db2aix01"
""")
    with caplog.at_level(logging.WARNING):
        collectors = build_collectors(cfg)
    by_name = {c.name: c for c in collectors}
    guests = [c for c in collectors if isinstance(c, RemoteGuestCollector)]
    assert sorted(c.name for c in guests) == ["guest:db2aix01", "guest:db2prod01"]  # the stack's guest too
    assert by_name["guest:db2aix01"].cfg.os == "aix" and by_name["guest:db2aix01"].interval == 10.0
    assert by_name["guest:db2prod01"].cfg.os == "auto" and by_name["guest:db2prod01"].interval == 5.0
    (storage,) = [c for c in collectors if isinstance(c, LinuxStorageCollector)]
    assert storage.target is by_name["guest:db2prod01"].target  # one connection per host
    (esx,) = [c for c in collectors if isinstance(c, EsxtopCollector)]
    assert esx.argv() == ["esxtop", "-b", "-a", "-d", "5", "-n", "1"]
    (ontap,) = [c for c in collectors if isinstance(c, OntapCollector)]
    assert ontap.source.target is storage.target  # the array shares the host's connection too
    assert "not collected" not in caplog.text


@pytest.mark.parametrize("text, key, expected", [
    ('[[remote_guest]]\nssh = "nope"', "remote_guest[0].ssh", "names no [[ssh]]"),
    ('[[remote_guest]]\nssh = "db2aix01"\n[[remote_guest]]\nssh = "db2aix01"', "remote_guest[1].ssh", "twice"),
    ('[[remote_guest]]\nssh = "db2aix01"\nos = "hpux"', "remote_guest[0].os", '"auto", "linux", "aix"'),
    ('[[esxtop]]\nname = "e"\nssh = "esx01-root"\ndelay = "soon"', "esxtop[0].delay", "a duration"),
    ('[[esxtop]]\nname = "e"\nssh = "esx01-root"\ndelay = "1s"', "esxtop[0].delay", "from 2s to 1h"),
    ('[[esxtop]]\nname = "e"\nssh = "esx01-root"\ndelay = "10s"', "esxtop[0].delay", "less than the interval"),
])
def test_remote_config_errors_name_the_key(tmp_path, text, key, expected):
    e = configs.error_of(tmp_path, SSH + text)
    assert e.key == key and expected in str(e)
