"""Every source db2vtop reads: one line each. The config loader (agent/config.py), the wiring
(agent/assemble.py), `db2vtop config init`'s template and the docs all read this list, so adding a
source is a package under collectors/ exporting an Input (collectors/input.py) and its line here.

The order is the template's and the collectors'.
"""

from __future__ import annotations

from db2vtop.collectors import db2, esxtop, guest, ssh, vsphere
from db2vtop.collectors.input import Input
from db2vtop.collectors.storage import linux, ontap, powermax, xtremio

INPUTS: tuple[Input, ...] = (
    guest.LOCAL,
    guest.REMOTE,
    vsphere.INPUT,
    ssh.INPUT,
    db2.INPUT,
    ontap.INPUT,
    xtremio.INPUT,
    powermax.INPUT,
    linux.INPUT,
    esxtop.INPUT,
)
