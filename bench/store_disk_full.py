"""The store writer through a long disk full (issue 42). Prints JSON.

The writer on a small file system (tests/faults/disk.py: a tmpfs as root, else this process's file
size limit) that is filled once the first cycle is written; then `--times` (default 10) times its
bound of waiting samples (store.MAX_PENDING) is handed to it in cycles of a 2,000-VM agent
(tests/infra/tui_fixture.py: one 20 s step, about 10,000 samples), each once the writer has taken the one
before, as the runtime's back-pressure would. It reports the process's RSS after each bound's worth,
the samples kept and dropped (both must add up to what was handed in, and the kept ones be the
bound), and how long the kept ones take to write once the disk frees. The retry interval is shortened
to 0.5 s (it changes nothing held; it makes the run quicker). Runs by hand (not in `make bench`): it
mounts a tmpfs.
"""

from __future__ import annotations

import argparse
import gc
import json
import logging
import os
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import db2vtop.agent.core.store.writer as store_mod
from db2vtop.agent.core.store import MAX_PENDING, StoreWriter
from db2vtop.agent.core.supervise import Supervisor
from tests.faults.disk import small_fs
from tests.infra.tui_fixture import Fleet, _step

MIB = 2**20


def held_mib(f: Fleet, n: int, per_step: int) -> float:
    """What n samples of the fleet take in memory, by tracemalloc."""
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    held = [s for k in range(1, 1 + -(-n // per_step)) for s in _step(f, k)][:n]
    size = tracemalloc.get_traced_memory()[0] - base
    del held
    tracemalloc.stop()
    gc.collect()
    return round(size / MIB, 1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--times", type=int, default=10, help="how many times the bound is handed in while full")
    args = ap.parse_args()
    store_mod._MAX_RETRY_S = 0.5
    logging.disable(logging.ERROR)  # one "set aside" line per retry: the counts are below
    f = Fleet(vms=2000, hosts=50, stacks=100, minutes=60)
    first = _step(f, 0)
    out: dict = {"max_pending": MAX_PENDING, "samples_per_step": len(first),
                 "max_pending_held_mib": held_mib(f, MAX_PENDING, len(first)), "rss_mib": []}
    proc = psutil.Process()
    with tempfile.TemporaryDirectory() as tmp, small_fs(Path(tmp), mib=256) as fs:
        out["full_by"] = "tmpfs" if fs.mounted else "RLIMIT_FSIZE"
        sup = Supervisor()
        w = StoreWriter(fs.path / "m.db", retention_s=10**9, supervisor=sup)
        w.submit(first)
        w.flush()
        fs.fill((os.getpid(),))
        out["rss_mib_filled"] = round(proc.memory_info().rss / MIB)
        n, k = 0, 1
        while n < args.times * MAX_PENDING:
            batch = _step(f, k)
            k += 1
            w.submit(batch)
            n += len(batch)
            del batch
            while w.backlog.queued > MAX_PENDING + 2 * len(first):
                time.sleep(0.05)
            if n // MAX_PENDING != (n - len(first)) // MAX_PENDING:
                out["rss_mib"].append([n, round(proc.memory_info().rss / MIB)])
        deadline = time.monotonic() + 30
        while w.backlog.queued > MAX_PENDING and time.monotonic() < deadline:
            time.sleep(0.1)
        health = {h.name: h for h in sup.snapshot()}["store-writer"]
        out.update(handed_in=n, pending=w.stats.pending, dropped=w.stats.dropped, set_aside=health.set_aside,
                   state=health.state, adds_up=w.stats.dropped + w.stats.pending == n)
        fs.free()
        t0 = time.monotonic()
        w.flush(120)
        out["kept_written_s"] = round(time.monotonic() - t0, 2)
        out["written"] = w.stats.samples
        w.close()
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
