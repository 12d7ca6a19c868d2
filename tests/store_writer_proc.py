"""A writer process for the store's multi-process tests.

Writes batch after batch (each batch: SERIES samples tagged with the batch number) and
prints "committed N" once batch N is committed, so the parent knows what must survive.
"""

import sys
import time
from pathlib import Path

from db2vtop.agent.core.model import Sample
from db2vtop.agent.core.store import Store

path, batches, per_batch, pause = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
with Store(path, writer=True) as store:
    print("ready", flush=True)
    base = time.time_ns()
    for b in range(batches):
        store.write([Sample("bench", {"series": str(i)}, {"batch": b, "v": float(i), "pad": "x" * 40},
                            base + b * 1000 + i) for i in range(per_batch)])
        print(f"committed {b}", flush=True)
        time.sleep(pause)
