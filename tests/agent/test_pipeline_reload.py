"""A reload whose new sink or alerts cannot be built goes on with the ones before (agent/pipeline.py)."""

from __future__ import annotations

import logging
from pathlib import Path
from types import SimpleNamespace

from db2vtop.agent.pipeline import Pipeline
from db2vtop.agent.sinks.spool import SpoolError


def test_what_cannot_be_rebuilt_from_the_new_config_is_built_from_the_one_before(caplog):
    old, new, previous = object(), object(), object()
    built: list[object] = []

    def build(cfg, path, supervisor):
        built.append(cfg)
        if cfg is new:
            raise SpoolError("spool_dir not writable")
        return ("made of", cfg, path, supervisor)

    me = SimpleNamespace(cfg=old, writer=SimpleNamespace(path=Path("/store")), supervisor="sup")
    with caplog.at_level(logging.ERROR):
        made, cfg = Pipeline._rebuilt(me, build, new, "alerts", "[[alert]] sections", previous)  # type: ignore[arg-type]
    assert built == [new, old] and made == ("made of", old, Path("/store"), "sup") and cfg is previous
    assert caplog.messages == ["reload: alerts: spool_dir not writable; keeping the previous [[alert]] sections"]

    made, cfg = Pipeline._rebuilt(me, lambda c, p, s: ("made of", c), old, "alerts", "x", previous)  # type: ignore[arg-type]
    assert made == ("made of", old) and cfg is old
