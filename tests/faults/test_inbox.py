"""A hostile marker inbox under a running agent.

The review's five poison files (a directory, deep nesting, 1e400, a JSON list, a FIFO) each blocked
every later marker for good (the FIFO also the inbox's thread); a time of 10**30 ended the store
writer, so the agent stored nothing more and still exited 0; a link made the agent read another
file. Now the agent keeps storing to the end, records the valid marker queued after them, and
leaves none of their `*.json` in the inbox.
"""

from __future__ import annotations

import json
import time

from db2vtop.agent.core.markers import inbox_of
from db2vtop.agent.core.store import Store
from tests.agent.core.test_markers import hostile_files
from tests.conftest import run_cli
from tests.faults.agent import nothing_lost, start, wait_past, wait_seconds, write_config


def test_an_agent_fed_hostile_markers_keeps_storing_and_records_the_good_one(tmp_path):
    store = tmp_path / "m.db"
    outside = tmp_path / "settings.json"
    outside.write_text(json.dumps({"name": "leak", "ts": time.time_ns(), "text": "content of another file"}))
    agent = start(write_config(tmp_path / "config.toml", store), store, tmp_path / "agent.log")
    try:
        wait_seconds(store, 2)
        box = inbox_of(store)
        assert box.is_dir()  # made by the agent, private
        poisoned = time.time()
        hostile = hostile_files(box, outside)
        r = run_cli("mark", "--store", str(store), "after the poison", "--text", "queued last")
        assert r.returncode == 0 and "queued for db2vtop (pid " in r.stdout, r.stderr
        wait_past(store, poisoned + 4)
    finally:
        status = agent.stop()
    log = agent.log_of_exit(status)
    seconds = nothing_lost(store)
    assert seconds[-1] > poisoned + 3  # storing went on to the end
    with Store(store) as s:
        assert [(a.name, a.text) for a in s.annotations() if a.event == "marker"] == [("after the poison",
                                                                                       "queued last")]
    left = sorted(p.name for p in box.iterdir())
    assert not [n for n in left if n.endswith(".json")], left
    assert len([n for n in left if n.endswith(".json.bad")]) == hostile, left
    assert outside.exists()
    assert log.count("collector:markers: set aside marker file") == 1  # one line a minute; all counted
