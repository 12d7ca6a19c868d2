"""Peers for the array tests: an sshd whose login shell is the ONTAP stand-in, and
local HTTP(S) servers (see rest_server.py)."""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.infra.sshd import SSHServer

CLUSTERSHELL = Path(__file__).resolve().parent / "clustershell.py"


class ClustershellServer(SSHServer):
    """Debian's sshd on 127.0.0.1 whose sessions run the clustershell stand-in, not sh."""

    def setup(self) -> None:
        super().setup()
        self.state = self.root / "state.json"
        self.set_state({"stats": {}, "tables": {}})
        (self.root / "logcmd").write_text(
            f'#!/bin/sh\nprintf "%s\\n" "$SSH_ORIGINAL_COMMAND" >> {self.commands_log}\n'
            f"exec {sys.executable} {CLUSTERSHELL} {self.state}\n")

    def set_state(self, state: dict) -> None:
        tmp = self.state.with_suffix(".tmp")
        tmp.write_text(json.dumps(state))
        tmp.replace(self.state)


@contextlib.contextmanager
def running(server: ClustershellServer) -> Iterator[ClustershellServer]:
    server.setup()
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def ontap_sshd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClustershellServer]:
    with running(ClustershellServer(tmp_path_factory.mktemp("ontap-sshd"))) as server:
        yield server
