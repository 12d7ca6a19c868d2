"""Hostile Retry-After headers from a real HTTP server in front of a real influxd (tests/faults/hostile_http.py,
tests/infra): every write is answered 503 with the header for a while, then passed through again.

Before: `inf` or `1e300` ended the sender with an OverflowError and the whole agent with it (exit 1, a crash
loop under systemd); `nan` removed the backoff (hundreds of writes a second); `1e9` put the sender to sleep
for 31 years while the spool filled; an HTTP-date was ignored. Now the header is read as seconds or a date and
held to [0, max_retry_delay]: the agent goes on, backs off, honours a date, and delivers everything once the
proxy lets writes through.
"""

from __future__ import annotations

import email.utils
import threading
import time

import pytest

from tests.faults.agent import start
from tests.faults.hostile_http import Answer, HostileHTTP
from tests.infra.influxd import InfluxServer, influx_keys, store_keys, wait_for

FAULT_S = 8
MAX_RETRY_DELAY_S = 10
BUSY = b'{"code":"unavailable","message":"busy"}'


@pytest.fixture(scope="module")
def influxd(tmp_path_factory):
    srv = InfluxServer(tmp_path_factory.mktemp("influxd"))
    srv.start()
    yield srv
    srv.stop()


# 1e300 leaves the reader as max_retry_delay, the very value inf gives (tests/agent/core/test_httpclient.py has
# both), and the sender sees nothing else of the header: a case of its own here would prove nothing more
@pytest.mark.parametrize("value", ["inf", "nan", "1e9", "date"])
def test_a_hostile_retry_after_neither_stops_the_agent_nor_its_backoff_nor_delivery(tmp_path, influxd, value):
    db = f"ra_{value}"  # one server for every case, a database each
    bucket = influxd.create_db(db)
    faulty = threading.Event()
    faulty.set()
    started = time.time()
    # a date is honoured up to max_retry_delay (this one is further); numbers are held to [0, max_retry_delay]
    header = email.utils.formatdate(started + FAULT_S + 30, usegmt=True) if value == "date" else value

    def route(method: str, path: str, body: bytes) -> Answer | None:
        if method == "POST" and path.startswith("/api/v2/write") and faulty.is_set():
            return Answer(503, [BUSY], {"Content-Type": "application/json", "Retry-After": header}, len(BUSY))
        return None

    store = tmp_path / "m.db"
    with HostileHTTP(route, upstream=influxd.url) as proxy:
        cfg = tmp_path / "c.toml"
        cfg.write_text(f'[store]\npath = "{store}"\n[guest]\ninterval = "1s"\n[influxdb]\nurl = "{proxy.url}"\n'
                       f'bucket = "{bucket}"\nspool_dir = "{tmp_path / "spool"}"\nflush_interval = "200ms"\n'
                       f'retry_interval = "200ms"\nmax_retry_delay = "{MAX_RETRY_DELAY_S}s"\nflush_timeout = "20s"\n')
        agent = start(cfg, store, tmp_path / "agent.log")
        try:
            wait_for(lambda: proxy.count("POST", "/api/v2/write"), 60, "the first write")
            first = time.monotonic()
            time.sleep(FAULT_S)
            posts = proxy.count("POST", "/api/v2/write")
            assert agent.proc.poll() is None, agent.text()[-3000:]  # one header stopped the whole agent
            faulty.clear()
            healed = time.time_ns()
            # what was collected during the fault reaches InfluxDB within a delay the agent allows itself
            wait_for(lambda: [p for p in influxd.points(db, "guest_cpu") if p[0] < healed],
                     MAX_RETRY_DELAY_S + 20, "the fault's points in InfluxDB")
            assert agent.proc.poll() is None, agent.text()[-3000:]
        finally:
            rc = agent.stop() if agent.proc.poll() is None else agent.proc.returncode
        assert rc == 0, agent.text()[-3000:]
    seconds = time.monotonic() - first
    if value == "date":  # honoured: one turn of writes, then nothing until the date (the backoff alone: 6 or more)
        assert posts <= 2, posts
    else:  # clamped, or the backoff (a turn every 0.1-10 s): nan removed it (a hundred writes a second)
        assert posts <= 2 * (FAULT_S + 2), (posts, seconds)
    in_store, in_influx = store_keys(store), influx_keys(influxd, db)
    assert in_store and in_influx == in_store  # nothing lost, nothing else
    assert "cannot go on" not in agent.text()
