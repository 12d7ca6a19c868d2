"""Two collectors failing at once under the real agent: both are in the log.

Before: the log's repeat filter kept one record a minute per message template, and every collector's
cycle error shares the runtime's one template, so the first collector to fail hid every other's errors
(74 errors of a remote guest and 4 of a vCenter recorded, 2 lines logged, both the guest's). Now the
filter keys on the collector as well: each one's first error is logged, the repeats of each counted.
"""

from __future__ import annotations

import re

from db2vtop.agent.core.model import SELF_MEASUREMENT
from db2vtop.agent.core.store import Store
from tests.faults.agent import start, write_config
from tests.infra.influxd import refused_url

ENV = {"VC_TEST_PASSWORD": "anything"}


def test_two_failing_collectors_are_both_in_the_log(tmp_path):
    store = tmp_path / "m.db"
    with refused_url() as a, refused_url() as b:  # ports bound and never listened on: refused at once
        vcenters = "".join(f'[[vcenter]]\nname = "{name}"\nurl = "{url.replace("http", "https")}/sdk"\n'
                           f'user = "monitor"\npassword_env = "VC_TEST_PASSWORD"\n'
                           for name, url in (("vcdead1", a), ("vcdead2", b)))
        cfg = write_config(tmp_path / "config.toml", store, extra=vcenters)
        agent = start(cfg, store, tmp_path / "agent.log", "--duration", "4", env=ENV)
        status = agent.wait()
    log = agent.text()
    assert status == 0, log[-3000:]
    with Store(store) as s:
        failed = {r.tags["collector"] for r in s.rows(SELF_MEASUREMENT, 0) if r.fields["status"] == "error"}
    assert failed == {"vsphere:vcdead1", "vsphere:vcdead2"}, failed
    logged = set(re.findall(r"collector (vsphere:vcdead\d): ", log))
    assert logged == failed, log[-3000:]  # each collector's errors, not only the first one's
