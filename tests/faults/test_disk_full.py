"""A disk that fills and frees under a running agent: the store and the InfluxDB spool on a small
file system (tests/faults/disk.py), InfluxDB unreachable so every point goes through the spool.

The spool-writer thread used to end on the first ENOSPC and never come back (exit 0, nothing more
spooled); now both writers keep what they could not write, retry with backoff, say so once, and
write it all when space returns. A disk still full at exit is a non-zero exit status.
The spool holds every sample the store holds, compared by exact timestamp: by whole seconds, a second
with two samples in the store (the 1 s grid on a second's edge) once read as seconds missing from the spool.
"""

from __future__ import annotations

import errno
import os
import time
from pathlib import Path

import pytest

from db2vtop.agent.core.model import Sample
from db2vtop.agent.core.store import Store, StoreWriter
from db2vtop.agent.core.supervise import Supervisor
from db2vtop.agent.sinks.spool import MAGIC, Spool
from tests.faults.agent import guest_times, nothing_lost, start, wait_past, wait_seconds, write_config
from tests.faults.disk import small_fs
from tests.infra.influxd import refused_url

FULL_S = 5.0
T0 = 1_700_000_000_000_000_000


def influx(spool: Path, url: str) -> str:
    return (f'[influxdb]\nurl = "{url}"\nbucket = "b"\nspool_dir = "{spool}"\n'
            'retry_interval = "200ms"\nmax_retry_delay = "1s"\nflush_timeout = "1s"\nstats_interval = "1s"\n')


def spooled_times(spool: Path) -> list[int]:
    """The timestamps (ns) of the total-CPU points in the spool (read, never delivered), one per point; a
    record the spool could not read back (a bad checksum) or dropped for room fails the test here."""
    s = Spool(spool, 2**30)
    try:
        out = []
        while (b := s.read(10**9, 1 << 24)) is not None:
            for line in b.data.decode().split("\n"):
                if line.startswith("guest_cpu,") and ",cpu=total," in line.split(" ", 1)[0] + ",":
                    out.append(int(line.rsplit(" ", 1)[1]))
        assert s.corrupt == s.dropped == 0, (s.corrupt, s.dropped)
        return sorted(out)
    finally:
        s.close()


def test_a_disk_that_fills_and_frees_loses_nothing(tmp_path):
    with small_fs(tmp_path) as fs, refused_url() as url:
        store, spool = fs.path / "m.db", fs.path / "spool"
        cfg = write_config(tmp_path / "config.toml", store, extra=influx(spool, url))
        agent = start(cfg, store, tmp_path / "agent.log")
        try:
            wait_seconds(store, 3)
            filled = time.time()
            fs.fill((agent.proc.pid,))
            time.sleep(FULL_S)
            fs.free()
            freed = time.time()
            wait_past(store, freed + 3)
        finally:
            status = agent.stop()
        log = agent.log_of_exit(status)
        seconds = nothing_lost(store)
        assert seconds[0] < filled - 1 and seconds[-1] > freed + 2  # the fault is inside what was kept
        # every sample stored is in the spool too, once, by exact time (a whole second can hold two samples)
        stored = guest_times(store)
        spooled = spooled_times(spool)
        assert spooled == stored, (sorted(set(stored) - set(spooled)), len(spooled), len(stored))
    # when it is over, each says what it was (with RLIMIT_FSIZE the log file cannot grow meanwhile either)
    assert "store-writer: working again (after: store write failed: " in log, log[-3000:]
    assert "influx-spool: working again (after: cannot write the spool" in log
    if fs.mounted:  # and, at the start, once, that it is retrying (the retries are counted, not logged)
        assert log.count("store-writer: store write failed: database or disk is full") == 1
        assert log.count("influx-spool: cannot write the spool") == 1
    assert "Traceback" not in log and "set aside" not in log and "cannot go on" not in log, log[-3000:]


def test_a_disk_still_full_at_exit_is_a_failed_exit(tmp_path):
    with small_fs(tmp_path) as fs, refused_url() as url:
        store = fs.path / "m.db"
        cfg = write_config(tmp_path / "config.toml", store, extra=influx(fs.path / "spool", url))
        agent = start(cfg, store, tmp_path / "agent.log")
        try:
            wait_seconds(store, 2)
            fs.fill((agent.proc.pid,))
            time.sleep(2)
            if fs.mounted:  # a write that fits in a file's last page still succeeds on a full tmpfs: stop only once
                # both writers have met the full disk (the log lives outside it; RLIMIT_FSIZE fails every append)
                deadline = time.monotonic() + 30
                while not all(w in agent.text() for w in ("store-writer: store write failed",
                                                          "influx-spool: cannot write the spool")):
                    assert time.monotonic() < deadline, agent.text()[-3000:]
                    time.sleep(0.2)
            status = agent.stop()
        finally:
            agent.kill()
            fs.free()
    log = agent.log_of_exit(status, 1)
    assert "samples could not be written at exit" in log and "points could not be written to the spool" in log


def test_an_append_the_full_disk_cuts_short_leaves_no_trace_and_is_written_whole_later(tmp_path, monkeypatch):
    """The exact write a full disk breaks: a record longer than what is left of its segment's last page is
    written in part by the kernel, then ENOSPC. The spool cuts it back and the caller keeps it; a record that
    fits that page still goes in meanwhile; when space returns the kept one is written whole, after it."""
    page = os.sysconf("SC_PAGE_SIZE")
    with small_fs(tmp_path) as fs:
        if not fs.mounted:
            pytest.skip("needs a file system of its own that really fills (a tmpfs: root)")
        s = Spool(fs.path / "spool", 2**20)
        seg = next((fs.path / "spool").glob("seg-*.spool"))
        first = b"m v=0i 0\n" * ((page + 2000 - len(MAGIC) - 12) // 9)  # the segment ends 2,000 bytes into a page
        s.append(first, first.count(b"\n"))
        slack = -seg.stat().st_size % page
        assert 1000 < slack < page
        fs.fill()
        cut, fits = b"m v=1i 1\n" * (slack // 9 + 50), b"m v=2i 2\n" * 10
        writes: list[tuple[int, int]] = []
        real = os.write

        def spy(fd: int, data: bytes) -> int:  # the real write, its outcome noted
            try:
                n = real(fd, data)
            except OSError as e:
                writes.append((len(data), -e.errno))
                raise
            writes.append((len(data), n))
            return n

        with monkeypatch.context() as m:
            m.setattr(os, "write", spy)
            size = seg.stat().st_size
            with pytest.raises(OSError) as e:
                s.append(cut, cut.count(b"\n"))
            assert e.value.errno == errno.ENOSPC
            assert writes == [(len(cut) + 12, slack)]  # the kernel took what the page had left
            assert seg.stat().st_size == size  # and it was cut back
            s.append(fits, 10)  # what fits the page still goes in
        fs.free()
        s.append(cut, cut.count(b"\n"))
        got = []
        while (b := s.read(10**9, 1 << 20)) is not None:
            got += b.payloads
        assert got == [first, fits, cut] and s.corrupt == s.dropped == 0
        s.close()
        s = Spool(fs.path / "spool", 2**20)  # and read again from the file, as after a restart
        assert [p for b in iter(lambda: s.read(10**9, 1 << 20), None) for p in b.payloads] == [first, fits, cut]
        assert s.corrupt == s.dropped == 0
        s.close()


def test_a_long_disk_full_bounds_the_store_writers_memory_and_counts_what_it_drops(tmp_path, caplog):
    """The store writer kept every batch it could not write for as long as the disk stayed full: hours of a
    large agent's samples in memory. Now past `max_pending` samples waiting (here 200, not the agent's
    100,000) the oldest are dropped, and each one dropped is counted in the thread's health and logged; the
    newest `max_pending` and everything written before the disk filled are in the store once it frees."""
    bound, batch, batches = 200, 100, 20  # ten times the bound queued while the disk is full
    sup = Supervisor()

    def samples(first: int) -> list[Sample]:
        return [Sample("m", {"i": str(i)}, {"v": i}, T0 + i * 10**9) for i in range(first, first + batch)]

    with small_fs(tmp_path) as fs:
        w = StoreWriter(fs.path / "m.db", retention_s=10**9, supervisor=sup, max_pending=bound)
        try:
            w.submit(samples(0))
            w.flush()
            fs.fill((os.getpid(),))  # without a mount of its own, this process's file size limit
            for n in range(1, batches + 1):
                w.submit(samples(n * batch))
            lost = batches * batch - bound
            deadline = time.monotonic() + 8
            while w.stats.dropped < lost or w.backlog.queued > bound:
                assert time.monotonic() < deadline, (w.stats, w.backlog.queued)
                time.sleep(0.05)
            time.sleep(0.6)  # another retry, still full: nothing more dropped, the bound held
            health = {h.name: h for h in sup.snapshot()}["store-writer"]
            assert (w.stats.dropped, w.stats.pending, w.backlog.queued) == (lost, bound, bound)
            assert health.state == "retrying" and health.set_aside == lost
            assert "dropped, the oldest of more than 200 waiting" in health.last_error
        finally:
            fs.free()
        w.flush()
        w.close()
        with Store(fs.path / "m.db") as r:
            kept = sorted(int(row.tags["i"]) for row in r.rows("m"))
    assert kept == [*range(batch), *range((batches + 1) * batch - bound, (batches + 1) * batch)]
    said = [r.getMessage() for r in caplog.records if "store-writer: set aside" in r.getMessage()]
    assert said and f"({lost} set aside so far)" in said[-1], said
    assert "samples of 2023-11-14T22:15:00Z to " in said[0], said
    if fs.mounted:  # a file size limit is EFBIG, an I/O error to SQLite
        assert "database or disk is full" in said[0], said
    assert not sup.failed
