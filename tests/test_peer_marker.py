"""The `peer` marker that `make check` leaves out (tests/conftest.py) is told from what a test imports and uses."""

from __future__ import annotations

import shutil
import types

from tests.conftest import needs_peer, reaches_peer


def _item(module: str, fixtures=(), function=None) -> types.SimpleNamespace:
    return types.SimpleNamespace(module=types.SimpleNamespace(__name__=module), fixturenames=list(fixtures),
                                 function=function)


def _runs_the_browser():
    return shutil.which("chromium")


def _names_the_browser():
    return "the report as chromium would render it"


def _pure():
    return 1


def test_a_file_that_reaches_a_peers_helper_is_peer_even_through_another_test_file():
    assert reaches_peer("tests.collectors.ssh.test_ssh")  # imports tests.infra.sshd
    # through tests.collectors.guest.test_guest_remote, which imports tests.infra.sshd
    assert reaches_peer("tests.collectors.esxtop.test_esxtop")
    assert reaches_peer("tests.faults.test_vcenter")  # tests.infra.vsphere_sim
    assert reaches_peer("tests.agent.sinks.test_influx_sink")  # tests.infra.influxd
    assert not reaches_peer("tests.checks.test_topology") and not reaches_peer("tests.agent.core.test_units")
    assert not reaches_peer("tests.checks.test_triage")  # tests.conftest (which every test has) does not count


def test_a_peer_fixture_or_a_peer_program_marks_one_test_of_a_plain_file():
    assert not needs_peer(_item("tests.agent.core.test_units", ("tmp_path",), _pure))
    assert needs_peer(_item("tests.agent.core.test_units", ("tmp_path", "tmux"), _pure))
    assert needs_peer(_item("tests.agent.core.test_units", ("influx_version",), _pure))
    assert needs_peer(_item("tests.agent.core.test_units", (), _runs_the_browser))
    # a program's name alone is not running it
    assert not needs_peer(_item("tests.agent.core.test_units", (), _names_the_browser))
