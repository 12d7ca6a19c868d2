"""Answers from outside that no bound held: a 2 GiB ONTAP REST answer and one that trickles, against the real
`agent --once`; 2 GiB InfluxDB query answers (plain and gzip'd) and a malformed one, against the real
`db2vtop query --source influxdb`. The servers (tests/faults/hostile_http.py) make each answer as they send it.

Before: ONTAP REST answers went through netapp-ontap and requests unbounded (100 MB kept a worker busy for
11 minutes at 749 MB after its cycle timed out, and `--once` never exited); a trickling one held the worker
as long as it trickled (requests' timeout is per read); `--source influxdb` took 1.8 GB for a 0.5 MB gzip
answer, and a malformed answer was a raw traceback. Now each answer is counted as it arrives, inflated
within the bound, each call is one deadline, and each is one clear error.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from tests.faults.agent import AGENT, run_measured
from tests.faults.hostile_http import Answer, HostileHTTP, gzip_of, repeated

BOUND_MB = 400
GIB = 2**30
#: the child may reserve this much address space: the unbounded reads of before stop with a MemoryError
#: instead of taking the machine's memory
ADDRESS_SPACE = 4 * GIB
ONTAP_RECORD = (b'{"name": "db2data", "svm": {"name": "vs1"}, "metric": {"status": "ok", "duration": "PT15S", '
                b'"iops": {"total": 300, "read": 200, "write": 100, "other": 0}, "latency": {"total": 1633, '
                b'"read": 1200, "write": 2500, "other": 0}, "throughput": {"read": 1638400, "write": 819200}}},')
ENV = {"NA_PW": "pw"}


def measured(argv: list[str], log: Path, timeout: float) -> tuple[int, float, str]:
    """Run a db2vtop command: its exit status, its own peak RSS in MB and what it printed; it must end by `timeout`."""
    status, peak_mb = run_measured(argv, log, {**os.environ, **ENV}, timeout, ADDRESS_SPACE)
    return status, peak_mb, log.read_text(errors="replace")


def ontap_config(tmp_path: Path, url: str, extra: str = "") -> Path:
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'[store]\npath = "{tmp_path / "m.db"}"\n[guest]\ninterval = "1s"\n'
                   f'[[storage]]\nname = "n1"\nkind = "ontap"\ntransport = "rest"\nurl = "{url}"\nuser = "monitor"\n'
                   f'password_env = "NA_PW"\nallow_plaintext = true\n{extra}')
    return cfg


@pytest.mark.parametrize("framing", ["length", "chunked"])
def test_a_2_gib_ontap_answer_is_refused_at_the_bound_and_once_exits(tmp_path, framing):
    """Announced with its Content-Length (refused before reading) or chunked (read and counted up to the bound)."""
    def answer(method: str, path: str, body: bytes) -> Answer:
        chunks, length = repeated(b'{"records": [', ONTAP_RECORD, b'{}], "num_records": 1}', 2 * GIB)
        return Answer(200, chunks, {"Content-Type": "application/json"}, length if framing == "length" else None)

    with HostileHTTP(answer) as server:
        rc, peak_mb, log = measured([*AGENT, "agent", "-c", str(ontap_config(tmp_path, server.url)), "--once"],
                                    tmp_path / "agent.log", 240)
    assert rc == 1 and "storage:n1: " in log and "an answer larger than 67108864 bytes" in log, log[-3000:]
    assert "Traceback" not in log, log[-3000:]
    assert peak_mb < BOUND_MB, f"peak RSS {peak_mb:.0f} MB"
    assert server.sent < 8 * 64 * 2**20, server.sent  # it stopped reading at the bound: 2 GiB were never sent


def test_an_ontap_answer_that_trickles_ends_at_the_deadline_and_once_exits(tmp_path):
    def trickle() -> object:
        yield b'{"records": ['
        for _ in range(100_000):  # a byte every 0.2 s: no read ever waits long enough for a socket timeout
            time.sleep(0.2)
            yield b" "

    with HostileHTTP(lambda m, p, b: Answer(200, trickle(), {"Content-Type": "application/json"}, 200_000)) as server:
        cfg = ontap_config(tmp_path, server.url, 'interval = "20s"\ntimeout = "4s"\n')
        rc, _, log = measured([*AGENT, "agent", "-c", str(cfg), "--once"], tmp_path / "agent.log", 120)
    assert rc == 1 and "storage:n1: " in log and "timed out after" in log, log[-3000:]
    assert "after the stop" not in log, log[-3000:]  # ended by the deadline, not by the shutdown watchdog


MEASUREMENTS = (b'{"results":[{"statement_id":0,"series":[{"name":"measurements","columns":["name"],"values":[',
                b'["guest_cpu"],', b'["guest_disk"]]}]}]}')


def influx_config(tmp_path: Path, url: str) -> Path:
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'[store]\npath = "{tmp_path / "m.db"}"\n[influxdb]\nurl = "{url}"\nbucket = "db2vtop"\n')
    return cfg


@pytest.mark.parametrize("encoding", ["identity", "chunked", "gzip"])
def test_a_2_gib_influxdb_answer_is_refused_at_the_bound(tmp_path, encoding):
    gzipped = gzip_of(*MEASUREMENTS, 2 * GIB) if encoding == "gzip" else b""

    def answer(method: str, path: str, body: bytes) -> Answer:
        if encoding == "gzip":  # 2 MB on the wire
            return Answer(200, [gzipped], {"Content-Type": "application/json", "Content-Encoding": "gzip"},
                          len(gzipped))
        chunks, length = repeated(*MEASUREMENTS, 2 * GIB)
        return Answer(200, chunks, {"Content-Type": "application/json"}, length if encoding == "identity" else None)

    with HostileHTTP(answer) as server:
        argv = [*AGENT, "query", "--source", "influxdb", "-c", str(influx_config(tmp_path, server.url)),
                "-m", "guest_cpu"]
        rc, peak_mb, out = measured(argv, tmp_path / "query.log", 240)
    assert rc == 1 and "answered more than 67108864 bytes (max_response_bytes)" in out, out[-3000:]
    assert "Traceback" not in out and len(out.splitlines()) == 1, out[-3000:]
    assert peak_mb < BOUND_MB, f"peak RSS {peak_mb:.0f} MB"


@pytest.mark.parametrize("doc", [
    b'{"results":[{"statement_id":0,"series":[{"name":"measurements","columns":["name"],"values":[[1],[2]]}]}]}',
    b'{"results":[{"statement_id":0,"series":[{"name":"measurements","columns":["name"],"values":"guest_cpu"}]}]}',
    b'{"results":"none"}',
    b'[1, 2, 3]',
])
def test_a_malformed_influxdb_answer_is_a_clear_error(tmp_path, doc):
    with HostileHTTP(lambda m, p, b: Answer(200, [doc], {"Content-Type": "application/json"}, len(doc))) as server:
        argv = [*AGENT, "query", "--source", "influxdb", "-c", str(influx_config(tmp_path, server.url)),
                "-m", "guest_cpu"]
        rc, _, out = measured(argv, tmp_path / "query.log", 60)
    assert rc == 1 and out.startswith(f"db2vtop: influxdb at {server.url} answered"), out
    assert "Traceback" not in out and len(out.splitlines()) == 1, out
