"""Guest OS measurements (CPU, memory, disks as iostat computes them, network): this machine's
([guest], on with no config) and guests read over SSH ([[remote_guest]], and each [[stack]] guest)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from db2vtop.collectors.guest.config import GuestConfig, RemoteGuestConfig
from db2vtop.collectors.input import Input, Wiring

if TYPE_CHECKING:
    from db2vtop.collectors.base import BaseCollector


def make_local(section: GuestConfig, wiring: Wiring) -> BaseCollector | None:
    from db2vtop.collectors.guest.local import LocalGuestCollector

    return LocalGuestCollector(section) if section.enabled else None


def build_remote(sections: Sequence[RemoteGuestConfig], wiring: Wiring) -> list[BaseCollector]:
    """Every [[remote_guest]], and each [[stack]] guest without one (with the section's defaults)."""
    guests = list(sections)
    named = {g.ssh for g in guests}
    for st in wiring.cfg.stack:
        if st.guest is not None and st.guest not in named:
            guests.append(RemoteGuestConfig(ssh=st.guest))
            named.add(st.guest)
    if not guests:
        return []
    from db2vtop.collectors.guest.remote import RemoteGuestCollector

    return [RemoteGuestCollector(g, wiring.ssh(g.ssh)) for g in guests]


LOCAL = Input("guest", GuestConfig, __name__, make_local, many=False)
REMOTE = Input("remote_guest", RemoteGuestConfig, __name__, build=build_remote)
