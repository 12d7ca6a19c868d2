"""The supervisor of crash-only threads, and the escaping of remote text."""

from __future__ import annotations

import threading

from db2vtop.agent.core.supervise import FAILED, OK, RETRYING, Supervisor
from db2vtop.agent.core.text import printable


def test_a_thread_that_ends_by_an_error_is_failed_and_the_agent_told():
    sup = Supervisor()
    told = threading.Event()
    sup.on_failure(lambda name, why: told.set() if name == "w" and "KeyError" in why else None)

    def work() -> None:
        raise KeyError("boom")

    sup.start("w", work).join(5)
    assert told.is_set() and sup.failed and sup.failures == ["w: KeyError: 'boom'"]
    assert {h.name: h.state for h in sup.snapshot()} == {"w": FAILED}
    sup.release("w")  # a failed thread stays reported
    assert [h.name for h in sup.snapshot()] == ["w"]


def test_set_aside_counts_and_retrying_then_recovered_changes_state(caplog):
    sup = Supervisor()
    sup.register("w")
    sup.set_aside("w", "sample m at 10**30", OverflowError("too large"))
    sup.set_aside("w", "sample m2", "bad time")
    sup.retrying("w", OSError(28, "No space left on device"))
    sup.retrying("w", OSError(28, "No space left on device"))
    (h,) = sup.snapshot()
    assert (h.state, h.set_aside, h.retries) == (RETRYING, 2, 2)
    sup.recovered("w")
    (h,) = sup.snapshot()
    assert h.state == OK and not sup.failed
    assert caplog.text.count("retrying") == 1  # the first of a run is logged, the rest counted
    assert "working again" in caplog.text


def test_remote_text_is_escaped_before_it_is_printed():
    evil = "\x1b]0;OWNED\x07\x1b[2Jhi\x9b31m\u202eevil\nforged"
    assert printable(evil) == "\\x1b]0;OWNED\\x07\\x1b[2Jhi\\x9b31m\\u202eevil\\x0aforged"
    assert printable("a\n\tb\x1b", lines=True) == "a\n\tb\\x1b"
    assert printable("plain text, é ü 日本") == "plain text, é ü 日本"
    assert printable("x" * 10, limit=4) == "xxxx…"


def test_a_log_line_is_one_line_with_nothing_that_acts_on_the_terminal():
    import io
    import logging

    from db2vtop.agent.logs import setup_logging

    out = io.StringIO()
    setup_logging("info", stream=out)
    try:
        logging.getLogger("db2vtop.test").warning("collector %s: %s", "guest:db2host",
                                                  "the remote sh exited 1: \x1b]0;OWNED\x07\x1b[2J\nforged line")
    finally:
        setup_logging("info")
    line = out.getvalue()
    assert line.count("\n") == 1 and "\x1b" not in line and "\\x1b]0;OWNED\\x07\\x1b[2J\\x0aforged" in line
