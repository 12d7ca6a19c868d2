"""A vCenter fault with an 8 MiB message, then healthy answers, against the real agent: a proxy in front of the
simulator (tests/faults/hostile_vcenter.py, here with one fault of its own) answers the first QueryPerf with a
SOAP fault whose faultstring is 8 MiB of text that does not compress, with a CSI and a right-to-left override
in front.

Before: every later "ok" cycle's self-metric carried the 8 MiB as its last_error: the store grew by 8 MiB a
cycle (1.4 to 35 MB in 4 cycles), InfluxDB with it, about 34 GiB a day from one answer. Now the runtime cuts an
error text to a few KB (escaped) and an ok cycle carries none: what the store holds per cycle stays small.
"""

from __future__ import annotations

import base64
import itertools
import os
from http.server import BaseHTTPRequestHandler

from db2vtop.agent.core.model import SELF_MEASUREMENT
from db2vtop.agent.core.store import Store
from tests.faults.agent import start
from tests.faults.hostile_vcenter import HostileVCenter
from tests.faults.test_vcenter import ENV, SCENARIO
from tests.infra.vsphere_sim import Simulator

PER_CYCLE_BYTES = 100 * 1024
FAULT_TEXT = "\u009b2J\u202e" + base64.b64encode(os.urandom(6 * 2**20)).decode()  # 8 MiB


class FaultOnce(HostileVCenter):
    """Answers the first QueryPerf with a SOAP fault carrying FAULT_TEXT, passes everything else through."""

    faulted = False

    def _serve(self, h: BaseHTTPRequestHandler, body: bytes) -> None:
        if self.faulted or b"<QueryPerf" not in body:
            return super()._serve(h, body)
        self.faulted = True
        data = ('<?xml version="1.0" encoding="UTF-8"?><soapenv:Envelope xmlns:soapenv="http://schemas.xmlsoap.org/'
                'soap/envelope/"><soapenv:Body><soapenv:Fault><faultcode>ServerFaultCode</faultcode><faultstring>'
                f'{FAULT_TEXT}</faultstring></soapenv:Fault></soapenv:Body></soapenv:Envelope>').encode()
        h.send_response(500)
        h.send_header("Content-Type", "text/xml; charset=utf-8")
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        h.wfile.write(data)


def payload(fields: dict) -> int:
    """What one row holds, as text: its field names and values."""
    return sum(len(k) + len(str(v)) for k, v in fields.items())


def test_one_huge_fault_is_stored_once_cut_and_not_again_with_every_ok_cycle(tmp_path):
    store = tmp_path / "m.db"
    cfg = tmp_path / "c.toml"
    (tmp_path / "sim").mkdir()
    with Simulator.of(SCENARIO, tmp_path / "sim") as sim, FaultOnce(sim.url) as proxy:
        cfg.write_text(f'[store]\npath = "{store}"\n[guest]\nenabled = false\n[[vcenter]]\nname = "vc1"\n'
                       f'url = "{proxy.url}"\nuser = "monitor"\npassword_env = "VC_TEST_PASSWORD"\n'
                       'allow_plaintext = true\n')
        agent = start(cfg, store, tmp_path / "agent.log", "--duration", "75", env=ENV)
        rc = agent.wait(180)
    assert rc == 0 and proxy.faulted, agent.text()[-3000:]
    with Store(store) as s:
        cycles = sorted((r for r in s.rows(SELF_MEASUREMENT, 0) if r.tags["collector"] == "vsphere:vc1"),
                        key=lambda r: r.ts)
        rows = [r for m in s.measurements() for r in s.rows(m, 0)]
    statuses = [r.fields["status"] for r in cycles]
    assert "error" in statuses and statuses.count("ok") >= 2, statuses
    error = next(r.fields["last_error"] for r in cycles if r.fields["status"] == "error")
    assert error.startswith("\\x9b2J\\u202e") or "\\x9b2J\\u202e" in error[:200], error[:200]
    assert len(error) <= 8 * 1024, len(error)
    assert all(r.fields["last_error"] == "" for r in cycles if r.fields["status"] == "ok")
    # what each cycle after the fault added to the store, every measurement's rows of its 20 s
    after = [r.ts for r in cycles[statuses.index("error"):]]
    for start_ns, end_ns in itertools.pairwise(after):
        added = sum(payload(r.fields) for r in rows if start_ns < r.ts <= end_ns)
        assert added < PER_CYCLE_BYTES, (added, start_ns)
    size = sum(p.stat().st_size for p in tmp_path.glob("m.db*") if p.is_file())
    assert size < 8 * 2**20, size  # one 8 MiB text stored whole even once would pass this
    assert FAULT_TEXT[1000:1100] not in agent.text()  # the log holds the cut text only
