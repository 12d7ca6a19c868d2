"""The store's file format: a store written by an earlier db2vtop (tests/fixtures/store/, made by `write_store`
below with the code of the commit that added it, before agent/core/store.py was split in rooms) opens and reads
the same, and today's code writes the same tables from the same records.

Regenerate (only for a deliberate format change, with the code that makes it):
`python -m tests.agent.store.test_format tests/fixtures/store`."""

from __future__ import annotations

import gzip
import json
import random
import sqlite3
import sys
from pathlib import Path

from db2vtop.agent.core.model import Annotation, Fact, Finding, Sample
from db2vtop.agent.core.store import CHUNK_SPAN_NS, Store
from tests.conftest import ROOT

FIXTURE = ROOT / "tests" / "fixtures" / "store"
T0 = 1_700_000_000_000_000_000 // CHUNK_SPAN_NS * CHUNK_SPAN_NS
S = 10**9
MIN = 60 * S


def write_store(path: Path) -> None:
    """Every kind of record, sealed chunks beside head rows, a late row merged into a sealed span."""
    rng = random.Random(7)
    samples = []
    for vm in range(3):
        counter = rng.randrange(10**9)
        for i in range(80):  # a minute apart: two spans sealed, the third in the head
            if rng.random() < 0.05:
                continue
            counter += rng.randrange(5000)
            fields: dict = {"ready_pct": round(rng.uniform(0, 9), 2), "bytes": counter, "flat": 4.0,
                            "ratio": rng.random(), "state": "on" if i % 20 else "off"}
            if i % 7 == 0:
                fields["rare_ms"] = rng.uniform(0, 3)
            samples.append(Sample("vm", {"vm": f"vm{vm}", "host": f"esx{vm % 2}"}, fields, T0 + i * MIN))
    samples.append(Sample("host", {"host": "esx0"}, {"cpu_pct": 41.5, "note": "µs ✓"}, T0 + 3 * MIN))
    vm0 = {"vm": "vm0", "host": "esx0"}
    with Store(path, writer=True) as w:
        w.write(samples[:100])
        w.write(samples[100:])
        w.write(facts=[Fact("vm", vm0, {"num_cpu": 8, "memory_mb": 65536}, T0),
                       Fact("vm", {"vm": "vm1"}, {"num_cpu": 4}, T0),
                       Fact("vm", {"vm": "gone"}, {"num_cpu": 2}, T0)])
        w.write(facts=[Fact("vm", vm0, {"num_cpu": 12, "memory_mb": 65536}, T0 + 10 * MIN),
                       Fact("vm", {"vm": "vm1"}, {"num_cpu": 4}, T0 + 10 * MIN),
                       Fact.removal("vm", {"vm": "gone"}, T0 + 10 * MIN)])
        w.write(annotations=[Annotation("marker", "run-2 start", {"by": "me"}, "", T0 + 5 * MIN),
                             Annotation("reset", "db2 counters reset", {"db2": "prod"}, "went back", T0 + 50 * MIN)])
        opened = Finding("balloon-zero", "warning", {"layer": "vm", "vm": "vm0"}, "balloon 512 MiB",
                         {"balloon_bytes": 536870912}, "why", "fix", ["a-document"], T0, T0)
        w.write(findings=[opened, Finding("ready", "critical", {"vm": "vm1"}, "ready 12%", {"ready_pct": 12.0},
                                          "why", "fix", [], T0 + MIN, T0 + MIN)])
        resolved = Finding("balloon-zero", "warning", {"layer": "vm", "vm": "vm0"}, "balloon 512 MiB",
                           {"balloon_bytes": 536870912}, "why", "fix", ["a-document"], T0, T0 + 20 * MIN,
                           resolved_at=T0 + 20 * MIN)
        w.write(findings=[resolved])
        while not w.seal_step(T0 + 2 * CHUNK_SPAN_NS)[1]:
            pass
        w.write([Sample("vm", vm0, {"late": 1}, T0 + 10 * MIN + 30 * S)])  # a late row of a sealed span
        while not w.seal_step(T0 + 2 * CHUNK_SPAN_NS)[1]:
            pass
        w.release_free_pages()
        w.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")


def reads(store: Store) -> dict:
    """What every read of the Source (and the store's own) answers."""
    vms = store.series("vm")
    moments = [T0 + k * 13 * MIN + 7 * S for k in range(7)]
    return {
        "measurements": store.measurements(),
        "series": [(s.id, s.measurement, s.tags) for s in store.series()],
        "rows": {m: [r.to_json() for r in store.rows(m)] for m in store.measurements()},
        "slices": [[r.to_json() for r in part] for part in store.slices("vm", T0, T0 + 90 * MIN, 25 * MIN, ("bytes",))],
        "rows_of": [r.to_json() for r in store.rows_of(vms[1:], T0 + 20 * MIN, T0 + 70 * MIN)],
        "latest": [r.to_json() for r in store.latest("vm")],
        "latest_at": [[r.to_json() for r in store.latest("vm", 0, t)] for t in moments],
        "latest_fields_at": [[r.to_json() for r in store.latest("vm", 0, t, fields=("ready_pct", "rare_ms"))]
                             for t in moments],
        "latest_of_at": [[r.to_json() for r in store.latest_of(vms[:2], T0, t)] for t in moments],
        "newest": [store.newest("vm", T0 + 20 * MIN, t) for t in moments],
        "window": [store.window(s.id, f, T0, T0 + 90 * MIN) for s in vms for f in ("ready_pct", "rare_ms", "late")],
        "time_range": store.time_range(),
        "facts": [(f.kind, f.tags, f.data, f.ts) for f in store.facts()],
        "fact_history": [(f.data, f.ts) for f in store.fact_history("vm", {"vm": "gone"})],
        "annotations": [(a.event, a.name, a.tags, a.text, a.ts) for a in store.annotations()],
        "findings": [(f.key, f.severity, f.first_seen, f.last_seen, f.resolved_at, f.references)
                     for f in store.findings(open_only=False)],
    }


def tables(path: Path) -> dict:
    """Every row of every table of a store, as SQLite holds it."""
    db = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    try:
        names = [n for (n,) in db.execute("SELECT name FROM sqlite_master WHERE type='table' ORDER BY name")]
        out = {n: db.execute(f"SELECT * FROM {n} ORDER BY 1, 2").fetchall() for n in names}
        out["schema"] = db.execute("SELECT type, name, sql FROM sqlite_master ORDER BY name").fetchall()
        out["page_size"] = db.execute("PRAGMA page_size").fetchone()
        out["auto_vacuum"] = db.execute("PRAGMA auto_vacuum").fetchone()
        return out
    finally:
        db.close()


def normal(x: object) -> object:
    """Tuples as the JSON of the fixture holds them (lists)."""
    return json.loads(json.dumps(x))


def test_a_store_written_before_the_split_reads_the_same(tmp_path):
    path = tmp_path / "old.db"
    path.write_bytes(gzip.decompress((FIXTURE / "schema3.db.gz").read_bytes()))
    expected = json.loads(gzip.decompress((FIXTURE / "schema3-reads.json.gz").read_bytes()))
    with Store(path) as r:
        assert normal(reads(r)) == expected
    with Store(path, writer=True) as w:  # a writer opens it as it is, and reads it the same
        assert normal(reads(w)) == expected


def test_the_same_records_are_written_as_the_earlier_store_holds_them(tmp_path):
    old = tmp_path / "old.db"
    old.write_bytes(gzip.decompress((FIXTURE / "schema3.db.gz").read_bytes()))
    write_store(tmp_path / "new.db")
    assert tables(tmp_path / "new.db") == tables(old)


if __name__ == "__main__":
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    db = out / "schema3.db"
    for p in (db, Path(f"{db}-wal"), Path(f"{db}-shm"), Path(f"{db}-writer.lock")):
        p.unlink(missing_ok=True)
    write_store(db)
    with Store(db) as store:
        got = reads(store)
    (out / "schema3.db.gz").write_bytes(gzip.compress(db.read_bytes(), 9, mtime=0))
    (out / "schema3-reads.json.gz").write_bytes(gzip.compress(json.dumps(got).encode(), 9, mtime=0))
    for p in (db, Path(f"{db}-wal"), Path(f"{db}-shm"), Path(f"{db}-writer.lock")):
        p.unlink(missing_ok=True)
