"""Every realtime counter the vSphere collector asks vCenter for is read by something: a rule, the verdict,
the report or a TUI view. A counter is a metric id per VM in every QueryPerf request (vCenter parses each
of them for every VM, every cycle), so one nobody reads is a cost with nothing to show for it."""

from __future__ import annotations

import ast
from pathlib import Path

from db2vtop.collectors.vsphere.counters import HOST_COUNTERS, MEASUREMENT_OF, VM_COUNTERS

ROOT = Path(__file__).resolve().parents[3]
READERS = ("checks", "tui")


def _scopes() -> list[tuple[str, set[str]]]:
    """The string constants of each top-level statement (a function, a class, a table) of the readers."""
    out = []
    for package in READERS:
        for path in sorted((ROOT / package).rglob("*.py")):
            for node in ast.parse(path.read_text()).body:
                names = {n.value for n in ast.walk(node) if isinstance(n, ast.Constant) and isinstance(n.value, str)}
                out.append((f"{path.relative_to(ROOT)}:{node.lineno}", names))
    return out


def _asked() -> list[tuple[str, str, str]]:
    """(measurement, field, counter) of every row a counter gives."""
    out = []
    for kind, counters in (("vm", VM_COUNTERS), ("host", HOST_COUNTERS)):
        for c in counters:
            group = c.name.split(".", 1)[0]
            measurement = MEASUREMENT_OF.get((kind, group, c.per_instance))
            assert measurement is not None, f"{kind} counter {c.name} gives no row"
            out.append((measurement, c.field, c.name))
    return out


def _unread(asked: list[tuple[str, str, str]], scopes: list[tuple[str, set[str]]]) -> list[str]:
    """Rows no single top-level statement of a reader names both the measurement and the field of."""
    return [f"{m}.{f} ({name})" for m, f, name in asked if not any(m in names and f in names for _, names in scopes)]


def test_every_counter_asked_is_read_by_a_rule_the_verdict_the_report_or_a_view():
    unread = _unread(_asked(), _scopes())
    assert not unread, f"asked of vCenter and read by nothing in {'/'.join(READERS)}/: {', '.join(unread)}"


def test_a_counter_nobody_reads_is_found():
    scopes = _scopes()
    readiness = ("vsphere_vm", "cpu_readiness_pct", "cpu.readiness.average")
    assert _unread([readiness, ("vsphere_vm", "cpu_ready_pct", "cpu.ready.summation")], scopes) == [
        "vsphere_vm.cpu_readiness_pct (cpu.readiness.average)"]
