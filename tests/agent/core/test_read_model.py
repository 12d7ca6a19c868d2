"""The read side is one model (docs/architecture.md): one Source interface, one resolver of a stack's entities
that every consumer calls, one figure table checked against the declared measurements, levels that are a
value and never a number in the code, and every measurement and field name the checks and the TUI write
declared by a collector."""

from __future__ import annotations

import ast
import dataclasses
import importlib
import inspect
import re
import time

import pytest

from db2vtop.agent.assemble import measurement_catalog
from db2vtop.agent.config import Config
from db2vtop.agent.core.config import StackConfig
from db2vtop.agent.core.influx_source import InfluxSource
from db2vtop.agent.core.model import Fact, Sample
from db2vtop.agent.core.runs import BEGIN, END, edge_marker, find_run
from db2vtop.agent.core.source import CachedSource, MemorySource, Source
from db2vtop.agent.core.store import Store
from db2vtop.checks import figures, topology
from db2vtop.checks.scales import SCALES, Level
from db2vtop.checks.thresholds import levels, rule_thresholds
from db2vtop.tui.data import Reader
from tests.checks.test_verdict import HEALTHY, LUN, STACK, WHERE
from tests.conftest import ROOT
from tests.infra.name_scan import level_literals, scan, scan_source

T0 = 1_700_000_000 * 10**9
S = 10**9
CODE = ("agent", "checks", "collectors", "tui")


def _grep(pattern: str) -> list[str]:
    rx = re.compile(pattern, re.M)
    return sorted(f"{p.relative_to(ROOT)}:{text[:m.start()].count(chr(10)) + 1}"
                  for folder in CODE for p in (ROOT / folder).rglob("*.py")
                  for text in [p.read_text()] for m in rx.finditer(text))


def test_one_source_interface_one_inference_one_normaliser():
    assert [x.split(":")[0] for x in _grep(r"^class \w*Source\(Protocol\)")] == ["agent/core/source.py"]
    assert [x.split(":")[0] for x in _grep(r"^def infer_stacks\b")] == ["checks/topology.py"]
    assert [x.split(":")[0] for x in _grep(r"^def (short_name|_short)\b")] == ["checks/topology.py"]
    # one LUN name normaliser (lun_name()), and no other module's own take on an NAA id's prefix
    assert [x.split(":")[0] for x in _grep(r"^def lun_name\b")] == ["checks/topology.py"]
    assert [x.split(":")[0] for x in _grep(r"removeprefix\(\"naa\.\"\)")] == []
    # the TUI's source is typed with the interface, not "any callable"
    app = (ROOT / "tui" / "app.py").read_text()
    assert "Callable[[], Source]" in app and "Callable[[], Any]" not in app


@pytest.mark.parametrize("cls", [Store, InfluxSource, MemorySource, CachedSource, Reader])
def test_every_reader_of_samples_is_a_source(cls):
    """Each implementation has every method of the interface, with its parameters."""
    for name, want in inspect.getmembers(Source, inspect.isfunction):
        if name.startswith("_"):
            continue
        have = getattr(cls, name, None)
        assert have is not None, f"{cls.__name__} has no {name}"
        assert list(inspect.signature(have).parameters) == list(inspect.signature(want).parameters), (cls, name)


def _rows(n: int = 12) -> list[Sample]:
    return [Sample(m, t, HEALTHY[k], T0 + i * 20 * S) for i in range(n) for k, (m, t) in WHERE.items()]


def test_samples_in_memory_read_like_the_store(tmp_path):
    rows = _rows()
    facts = [Fact("vsphere_vm", {"vcenter": "vc1", "vm": "db2prod01"}, {"host": "esx01"}, T0)]
    with Store(tmp_path / "s.db", writer=True) as w:
        w.write(rows, facts=facts)
    mem = MemorySource(rows, facts)
    with Store(tmp_path / "s.db") as store:
        assert isinstance(store, Source) and isinstance(mem, Source)
        keys = [{s.id: (s.measurement, tuple(sorted(s.tags.items()))) for s in src.series()} for src in (store, mem)]

        def norm(found):  # series ids differ between the two: compare by measurement and tags
            return sorted((r.ts, r.measurement, tuple(sorted(r.tags.items())), tuple(sorted(r.fields.items())))
                          for r in found)

        assert store.measurements() == mem.measurements()
        assert sorted(keys[0].values()) == sorted(keys[1].values())
        for m in store.measurements():
            assert norm(store.rows(m, T0 + 40 * S, T0 + 100 * S)) == norm(mem.rows(m, T0 + 40 * S, T0 + 100 * S))
            assert norm(store.latest(m, 0, T0 + 50 * S)) == norm(mem.latest(m, 0, T0 + 50 * S))
            a = sorted((keys[0][i], ts) for i, ts in store.newest(m, T0, T0 + 90 * S))
            assert a == sorted((keys[1][i], ts) for i, ts in mem.newest(m, T0, T0 + 90 * S))
        s1 = next(s for s in store.series("vsphere_vm"))
        s2 = next(s for s in mem.series("vsphere_vm"))
        assert store.window(s1.id, "cpu_ready_pct", T0, T0 + 60 * S) == mem.window(s2.id, "cpu_ready_pct", T0,
                                                                                   T0 + 60 * S)
        assert store.time_range() == mem.time_range()
        assert [f.data for f in store.facts("vsphere_vm")] == [f.data for f in mem.facts("vsphere_vm")]


# --- every consumer asks the one resolver -----------------------------------------------------------------


def _store(tmp_path):
    path = tmp_path / "m.db"
    now = time.time_ns()
    with Store(path, writer=True) as w:
        w.write([Sample(m, t, HEALTHY[k], now - (30 - i) * 20 * S) for i in range(30) for k, (m, t) in WHERE.items()],
                facts=[Fact("vsphere_vm", {"vcenter": "vc1", "vm": "db2prod01"},
                            {"host": "esx01", "disks": [{"instance": "scsi0:1", "datastore": "ds_data",
                                                          "luns": [LUN]}]}, now)],
                annotations=[edge_marker("r", BEGIN, ts=now - 500 * S), edge_marker("r", END, ts=now - 20 * S)])
    return path, now


def _verdict(path, now):
    from db2vtop.checks.verdict import stack_verdict
    with Store(path) as s:
        stack_verdict(s, STACK, now - 600 * S, now)


def _report(path, now):
    from db2vtop.checks.report import build_report
    with Store(path) as s:
        build_report(s, [STACK], find_run(s.annotations(), "r"), now_ns=now)


def _triage(path, now):
    from db2vtop.checks.triage import judge
    with Store(path) as s:
        samples = [r for m in s.measurements() for r in s.rows(m)]
        judge(Config(), samples, s.facts(), {"store": "ok"}, 600, now, [STACK], targeted=True)


def _engine(path, now):
    from db2vtop.checks.engine import Engine
    from db2vtop.checks.rules import all_rules
    stack = dataclasses.replace(STACK, checks={"cpu-ready": {"warn_pct": 2.0}})
    with Store(path) as s:
        engine = Engine(all_rules(), {}, [stack])
        engine.feed(facts=s.facts())
        rule = next(r for r in all_rules() if r.id == "cpu-ready")
        assert engine.thresholds(rule, {"layer": "vm", "vcenter": "vc1", "vm": "db2prod01"})["warn_pct"] == 2.0


def _stack_screen(path, now):
    from db2vtop.tui.loaders.stack import Geometry, load_stack
    from db2vtop.tui.stacks import Target
    with Store(path) as s:
        rd = Reader(s)
        rd.begin()
        from db2vtop.tui.data import TableState
        load_stack(rd, Target.of_stack(STACK), now - 300 * S, now, "u", Geometry(), TableState(), levels())


def _fleet(path, now):
    from db2vtop.tui.data import TableState
    from db2vtop.tui.loaders.fleet import load_fleet
    with Store(path) as s:
        rd = Reader(s)
        rd.begin()
        load_fleet(rd, [STACK], now - 300 * S, now, TableState(), 10, levels())


CONSUMERS = {"db2vtop.checks.verdict": _verdict, "db2vtop.checks.report": _report, "db2vtop.checks.triage": _triage,
             "db2vtop.checks.engine": _engine, "db2vtop.tui.stacks": _stack_screen,
             "db2vtop.tui.loaders.fleet": _fleet}


@pytest.mark.parametrize("path", sorted(CONSUMERS))
def test_each_consumer_resolves_its_stacks_through_the_one_resolver(path, tmp_path, monkeypatch):
    module = importlib.import_module(path)
    assert module.resolve is topology.resolve  # the one resolver, not a copy of it
    seen = []

    def spy(source, stack, since, until, host=None):
        seen.append(stack.name)
        return topology.resolve(source, stack, since, until, host)

    monkeypatch.setattr(module, "resolve", spy)
    store, now = _store(tmp_path)
    CONSUMERS[path](store, now)
    assert STACK.name in seen, path


def test_a_stack_is_its_vcenters_and_its_lun_is_one_name(tmp_path):
    """Two vCenters with a VM `db01` on a host `esx01`: each stack takes its own vCenter's series only, and a LUN
    reported as `naa.600A...`, `600a...` and `NAA.600a...` is one LUN."""
    rows = []
    for vc, ready in (("vc-prod", 15.0), ("vc-dr", 0.5)):
        base = {"vcenter": vc, "vm": "db01", "host": "esx01"}
        for i in range(6):
            ts = T0 + i * 20 * S
            rows += [Sample("vsphere_vm", base, {"cpu_ready_pct": ready}, ts),
                     Sample("vsphere_vm_disk", {**base, "instance": "scsi0:0", "lun": "naa.600A0000" + vc[-2:]},
                            {"write_latency_ms": 1.0}, ts),
                     Sample("vsphere_host_lun", {"vcenter": vc, "host": "esx01", "lun": "naa.600a0000" + vc[-2:]},
                            {"kernel_latency_ms": ready}, ts),
                     Sample("storage_lun", {"storage": "a-" + vc, "naa": "600A0000" + vc[-2:]},
                            {"avg_latency_ms": 1.0}, ts)]
    source = CachedSource(MemorySource(rows))
    stacks = {i.stack.name: i.stack for i in topology.infer_stacks(Config(), source)}
    assert stacks == {}  # no vCenter facts: nothing says these VMs are stacks
    for vc in ("vc-prod", "vc-dr"):
        e = topology.resolve(source, StackConfig(name=vc, vm="db01", vcenter=vc), T0, T0 + 200 * S)
        assert (e.hosts, e.arrays, list(e.luns)) == (("esx01",), ("a-" + vc,), ["naa.600a0000" + vc[-2:]])
        for entity, m in (("vm", "vsphere_vm"), ("lun", "vsphere_host_lun"), ("volume", "storage_lun")):
            (s,) = e.select(entity, m)
            assert s.tags.get("vcenter", vc) == vc and s.tags.get("storage", "a-" + vc) == "a-" + vc
        assert e.owns({"layer": "vm", "vcenter": vc, "vm": "db01"})
        assert not e.owns({"layer": "vm", "vcenter": "vc-prod" if vc == "vc-dr" else "vc-dr", "vm": "db01"})
    bare = topology.resolve(source, StackConfig(name="db01", vm="db01"), T0, T0 + 200 * S)
    assert bare.vcenter is None  # a bare name held by two vCenters names neither


# --- the figure table ----------------------------------------------------------------------------------


def _declared() -> dict:
    return {m.name: m for ms in measurement_catalog().values() for m in ms}


def test_the_figure_table_is_the_declared_schema():
    declared = _declared()
    for f in figures.TABLE:
        m = declared.get(f.measurement)
        assert m is not None, f"{f.id}: no measurement {f.measurement} is declared"
        kind = {x.name: x.type for x in m.fields}.get(f.field)
        assert kind == "number", f"{f.id}: not a declared number field"
        assert all(k in m.tags for k, _ in f.where), f"{f.id}: where {f.where} names an undeclared tag"
        assert f.layer in figures.LAYERS and f.entity in topology.ENTITIES and f.combine in figures.COMBINE, f.id
        assert f.level is None or f.level in SCALES, f"{f.id}: no scale {f.level}"
    for name, figs in figures.ROLES.items():  # a role's figures are one quantity from several sources
        assert len({(f.unit, f.level) for f in figs}) == 1, name
    # the verdict reads its inputs by role and nothing else
    verdict = ast.parse((ROOT / "checks" / "verdict.py").read_text())
    read = {n.slice.value for n in ast.walk(verdict) if isinstance(n, ast.Subscript) and isinstance(n.value, ast.Name)
            and n.value.id in ("v", "f") and isinstance(n.slice, ast.Constant)}
    assert read and read <= set(figures.ROLES), read - set(figures.ROLES)
    # each layer row of the Stack screen: every name shown with one level and one format
    for layer in figures.LAYERS:
        shown: dict[str, set] = {}
        for f in figures.of_layer(layer):
            if f.screen:
                shown.setdefault(f.screen, set()).add((f.level, f.digits, f.suffix, f.alternate))
        assert shown and all(len(v) == 1 for v in shown.values()), (layer, shown)


def test_the_report_and_the_screen_read_the_table():
    from db2vtop.checks.report import FIGURES
    from db2vtop.tui import layers
    assert FIGURES == figures.REPORTED and set(FIGURES) <= set(figures.TABLE)
    source = inspect.getsource(layers)
    assert not re.search(r'"[a-z_]+_(ms|pct|bytes|per_s|iops)"', source)  # no field named there: from the table


# --- levels --------------------------------------------------------------------------------------------


def test_levels_are_a_value():
    lv = levels({"cpu-ready": {"warn_pct": 2}})
    with pytest.raises(dataclasses.FrozenInstanceError):
        lv.overrides = {}  # type: ignore[misc]
    with pytest.raises(TypeError):
        lv.by_scale["ready"] = Level(1.0)  # type: ignore[index]
    assert lv["ready"] == Level(2.0, 10.0) and levels()["ready"] == Level(5.0, 10.0)
    assert levels()["hit_ratio"].grade(90.0) == "warn" and levels()["hit_ratio"].grade(99.0) is None  # lower is worse
    assert all(s.rule in rule_thresholds() for s in SCALES.values() if s.rule)


def test_two_apps_keep_their_own_levels(tmp_path):
    from db2vtop.tui.app import Db2vtopApp
    strict = Db2vtopApp(tmp_path / "none.db", None, overrides={"cpu-ready": {"warn_pct": 1}})
    plain = Db2vtopApp(tmp_path / "none.db", None)
    assert strict.levels["ready"].warn == 1.0 and plain.levels["ready"].warn == 5.0


def test_no_level_is_a_number_in_the_code():
    """A sample's value compared with a number written in checks/ or tui/ is a level no `[checks]` override
    moves: levels come from the rules' thresholds (checks/scales.py) only."""
    found = [x for folder in ("checks", "tui") for p in sorted((ROOT / folder).rglob("*.py"))
             if "rules" not in p.parts for x in level_literals(p.read_text(), str(p.relative_to(ROOT)))]
    assert found == []
    planted = ("def f(x, lv):\n    vals = [value(x.fields, k) for k in ('hit_pct',)]\n    low = vals[0] < 95\n"
               "    v = value(x.fields, 'lock_wait_pct')\n    bar = 'y' if (v or 0) >= 20 else 'c'\n"
               "    ok = (v or 0) >= lv['lock_wait'].warn and len(vals) == 1\n")
    assert [x.split(": ", 1)[1] for x in level_literals(planted, "planted")] == ["vals[0] < 95", "(v or 0) >= 20"]


# --- names ---------------------------------------------------------------------------------------------


def _fact_kinds() -> set[str]:
    """The fact kinds the collectors make (`Fact("kind", ...)`, `FactRow("kind", ...)`)."""
    rx = re.compile(r'\b(?:Fact|FactRow)\(\s*"([a-z_0-9]+)"')
    return {m.group(1) for p in (ROOT / "collectors").rglob("*.py") for m in rx.finditer(p.read_text())}


def _undeclared(names) -> list[str]:
    declared = _declared()
    fields = {f.name for m in declared.values() for f in m.fields}
    tags = {t for m in declared.values() for t in m.tags}
    own = set(rule_thresholds().get("stack-verdict", {})) | {k for v in rule_thresholds().values() for k in v} \
        | set(figures.ROLES) | set(SCALES)  # the read model's own names: thresholds, the verdict's roles, scales
    out = []
    for n in names:
        if n.kind == "measurement":
            ok = n.name in declared
        elif n.kind == "measurement?":
            ok = n.name in declared or n.name in tags or n.name in fields or n.name in _fact_kinds() or n.name in own
        elif n.measurement is not None:
            ok = n.measurement in declared and n.name in {f.name for f in declared[n.measurement].fields}
        else:
            ok = n.name in fields or (n.kind == "field?" and n.name in own)
        if not ok:
            out.append(f"{n.where}: {n.kind.rstrip('?')} {n.name!r}")
    return sorted(set(out))


def test_every_measurement_and_field_name_in_checks_and_tui_is_declared():
    names = scan(ROOT)
    assert len({n.name for n in names if n.kind.startswith("measurement")}) >= 25  # the scan sees the code
    assert len({n.name for n in names if n.kind.startswith("field")}) >= 120
    assert _undeclared(names) == []
    planted = scan_source('def f(rd, x):\n    rows = rd.latest_at("vsphere_vm_dsk", 0)\n'
                          '    return value(x.fields, "cpu_redy_pct"), x.fields["write_await"]\n', "planted")
    assert _undeclared(planted) == ["planted:2: measurement 'vsphere_vm_dsk'", "planted:3: field 'cpu_redy_pct'",
                                    "planted:3: field 'write_await'"]


def test_finding_subjects_and_stack_findings_agree(tmp_path):
    """The Stack screen, triage and the report file a finding under the same stacks (StackEntities.owns)."""
    source = CachedSource(MemorySource(_rows()))
    e = topology.resolve(source, STACK, T0, T0 + 200 * S)
    mine = [{"layer": "host", "vcenter": "vc1", "host": "esx01", "lun": LUN},
            {"layer": "vm", "vcenter": "vc1", "vm": "db2prod01"}, {"layer": "db2", "db2": "prod"},
            {"layer": "storage", "storage": "netapp1", "lun": "/vol/db/l0"}, {"layer": "host", "host": "esx01"}]
    theirs = [{"layer": "host", "vcenter": "vc1", "host": "esx01", "lun": "naa.other"},
              {"layer": "vm", "vcenter": "vc2", "vm": "db2prod01"}, {"layer": "host", "host": "esx09"}]
    assert all(e.owns(s) for s in mine) and not any(e.owns(s) for s in theirs)
