"""The check engine's start from the store's history (agent/pipeline.py): read and judged in time slices, so a
10,000-VM store's last minutes are never held whole, with the same judgement as one read."""

from __future__ import annotations

import time
from itertools import pairwise

from db2vtop.agent import pipeline as pipeline_mod
from db2vtop.agent.config import load_config
from db2vtop.agent.core.model import Sample
from db2vtop.agent.core.store import Store
from db2vtop.agent.pipeline import Pipeline
from db2vtop.checks.engine import Engine

S = 10**9


def watch_history(monkeypatch) -> list[list]:
    """Each batch of history the engine starts from (still judged by the real engine)."""
    batches: list[list] = []
    start_from = Engine.start_from

    def watched(self, history):
        batch = list(history)
        batches.append(batch)
        start_from(self, batch)
    monkeypatch.setattr(Engine, "start_from", watched)
    return batches


def test_the_stores_history_is_judged_in_bounded_batches_in_time_order(tmp_path, monkeypatch):
    store = tmp_path / "m.db"
    now = time.time_ns()
    guests = 300
    with Store(store, writer=True) as w:  # 300 guests' last 90 s, one of them swapping all along
        w.write([Sample("guest_mem", {"guest": f"g{g:03d}"},
                        {"swap_in_bytes_per_s": float(4 << 20) if g == 7 else 0.0}, now - k * 10 * S)
                 for k in range(1, 10) for g in range(guests)])
    cfg = tmp_path / "c.toml"
    cfg.write_text("[guest]\nenabled = false\n")
    monkeypatch.setattr(pipeline_mod, "HISTORY_BATCH", 1_000)
    batches = watch_history(monkeypatch)
    p = Pipeline(load_config(cfg), store)
    p.close()

    rows = [r for b in batches for r in b if r.measurement == "guest_mem"]
    assert len(rows) == 9 * guests  # every row of the span, once
    assert len(batches) >= 3 and max(len(b) for b in batches) <= 1_000 + guests  # a slice: a sample of each more
    spans = [(min(r.ts for r in b), max(r.ts for r in b)) for b in batches if b]
    assert all(a[1] < b[0] for a, b in pairwise(spans)), "batches out of time order"
    with Store(store) as s:
        (f,) = [f for f in s.findings(open_only=False) if f.rule == "guest-swap-zero"]
    assert f.subject["guest"] == "g007" and f.first_seen == now - 9 * 10 * S and f.resolved_at is None


def test_a_restarts_vcenter_history_is_read_from_the_store_with_only_what_rules_read(tmp_path, monkeypatch):
    """A restart resumes vCenter's realtime samples after the newest the store holds (collectors/vsphere asks
    for nothing older): the store's copy of their history is what the engine starts from, and so is that of
    the quickStats (which vCenter keeps no history of), each row with only the fields a live rule reads. A
    series of another vCenter resumes nothing: that collector reaches back itself, its measurements not read."""
    store = tmp_path / "m.db"
    now = time.time_ns()
    tags = {"vcenter": "vc1", "vm": "db01", "host": "esx01"}
    with Store(store, writer=True) as w:
        w.write([Sample("vsphere_vm", tags, {"cpu_ready_pct": 30.0, "cpu_usage_pct": 5.0}, now - k * 20 * S)
                 for k in range(1, 6)] +
                [Sample("vsphere_vm_quickstats", tags, {"balloon_bytes": 0, "cpu_usage_mhz": 900}, now - k * 20 * S)
                 for k in range(1, 6)])
    monkeypatch.setenv("VC1_PASSWORD", "secret")
    reads = {}
    for name in ("vc1", "vc2"):
        cfg = tmp_path / f"{name}.toml"
        cfg.write_text(f'[guest]\nenabled = false\n[[vcenter]]\nname = "{name}"\nurl = "https://127.0.0.1:9/sdk"\n'
                       'user = "u"\npassword_env = "VC1_PASSWORD"\n')
        cfg.chmod(0o600)
        batches = watch_history(monkeypatch)
        p = Pipeline(load_config(cfg), store)
        (c,) = [c for c in p.runtime.collectors if c.name.startswith("vsphere")]
        marks = dict(c._stored)
        p.close()  # the history is judged on the checks' thread, before it ends
        reads[name] = ([r for b in batches for r in b], marks)
        monkeypatch.undo()
        monkeypatch.setenv("VC1_PASSWORD", "secret")
    seen, marks = reads["vc1"]
    assert marks == {("vm", "db01"): (now - 20 * S) // S}
    assert {r.measurement for r in seen} == {"vsphere_vm", "vsphere_vm_quickstats"}
    assert len(seen) == 10
    assert all(set(r.fields) == {"balloon_bytes"} for r in seen if r.measurement == "vsphere_vm_quickstats")
    assert all(set(r.fields) == {"cpu_ready_pct"} for r in seen if r.measurement == "vsphere_vm")
    seen, marks = reads["vc2"]
    assert marks == {} and {r.measurement for r in seen} == {"vsphere_vm_quickstats"}
