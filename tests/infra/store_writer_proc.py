"""A writer process for the store's multi-process tests.

Writes batch after batch (each batch: SERIES samples tagged with the batch number) and
prints "committed N" once batch N is committed, so the parent knows what must survive.
With a fifth argument `seal`, batches are a minute apart and everything but each series'
newest row is sealed into chunks after every batch, as the writer thread does with old spans.
"""

import sys
import time
from pathlib import Path

from db2vtop.agent.core.model import Sample
from db2vtop.agent.core.store import Store

path, batches, per_batch, pause = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
seal = sys.argv[5:] == ["seal"]
step = 60 * 10**9 if seal else 1000
with Store(path, writer=True) as store:
    print("ready", flush=True)
    base = time.time_ns()
    for b in range(batches):
        store.write([Sample("bench", {"series": str(i)}, {"batch": b, "v": float(i), "pad": "x" * 40},
                            base + b * step + i) for i in range(per_batch)])
        print(f"committed {b}", flush=True)
        if seal:
            store.compact()
        time.sleep(pause)
