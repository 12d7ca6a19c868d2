"""The Fleet's figure columns and the CPU panel's are the figure table's (checks/figures.py): one declaration of
a figure's field, header, unit, decimals, level and chart floor, read by every view."""

from __future__ import annotations

import inspect
import re

from db2vtop.checks import figures
from db2vtop.checks.thresholds import levels
from db2vtop.tui import panels
from db2vtop.tui.layers import cell_of, header_of
from db2vtop.tui.loaders import fleet as fleet_view

FIELD = re.compile(r'"[a-z_]+_(ms|pct|bytes|per_s|iops)"')


def test_each_fleet_column_is_one_figure():
    for name, _ in fleet_view.FIGURE_COLUMNS:
        figs = fleet_view.FLEET_FIGURES[name]
        assert figs, name
        # one header, unit, format and level a column: the first figure speaks for all
        assert len({(f.unit, f.digits, f.suffix) for f in figs}) == 1, name
        assert len({f.level for f in figs} - {None}) <= 1, name
    names = [c.name for c in fleet_view.COLUMNS]
    assert names[2:8] == ["cpu%", "rdy%", "balloon", "I/O ms", "log ms", "TPS"]
    # every field the Fleet reads is a figure of its column, or one of the few the table has none of
    table = {(f.measurement, f.field) for f in figures.TABLE if f.fleet}
    others = {pair for pairs in fleet_view.NOT_FIGURES.values() for pair in pairs}
    assert {(m, n) for m, names in fleet_view.FIELDS.items() for n in names} == table | others
    assert not table & others


def test_the_views_name_no_field_the_table_declares():
    """Field names outside the declarations would be a second declaration: the Fleet's are read from the table."""
    source = inspect.getsource(fleet_view)
    declared = inspect.getsource(fleet_view).split("NOT_FIGURES = ", 1)[1].split("\n\n", 1)
    assert not FIELD.search(source.replace(declared[0], "")), FIELD.findall(source.replace(declared[0], ""))
    cpu = inspect.getsource(panels.cpu_panel)
    for f in (panels.VM_USAGE, panels.VM_READY, panels.VM_COSTOP, panels.ESX_READY, panels.ESX_NUMA):
        assert f'"{f.field}"' not in cpu, f.id


def test_a_figure_column_takes_its_header_format_and_level_from_the_table():
    lv = levels()
    assert [header_of(f) for f in (panels.VM_USAGE, panels.VM_READY, panels.VM_COSTOP, panels.ESX_READY,
                                   panels.ESX_NUMA)] == ["usage%", "rdy%", "cstp%", "%RDY", "N%L"]
    assert header_of(fleet_view.IO, "I/O") == "I/O ms" and header_of(fleet_view.BALLOON, "balloon") == "balloon"
    log = figures.BY_ID["db2_log.log_write_ms"]
    assert cell_of(log, 1.5, lv)[0] == "1.50"  # its two decimals
    assert cell_of(log, 500.0, lv)[1] == "bold red"  # its scale's critical level
    assert cell_of(figures.BY_ID["esxtop_vm.numa_local_pct"], 97.4, lv) == ("97", "")


def test_the_ready_floor_is_declared_once():
    ready = figures.BY_ID["vsphere_vm.cpu_ready_pct"]
    assert ready.chart is not None and fleet_view._floor(fleet_view.READY) == ready.chart.floor
    for module in (fleet_view, panels):  # the Fleet's rdy% trend and the CPU panel's read it
        assert not re.search(r"floor=(5|LATENCY)", inspect.getsource(module) if module is fleet_view else
                             inspect.getsource(panels.cpu_panel)), module.__name__
