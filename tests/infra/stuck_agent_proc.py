"""`db2vtop agent` as shipped, plus stand-in collectors that never end (tests/agent/test_agent_shutdown.py).

argv: MODE AGENT-ARGS...; MODE is "spin" (a collector that, from its fifth cycle, never yields the
event loop again) and/or "block" (one whose every cycle blocks a worker thread forever), joined
with "+". The self-monitor (10 s timeout) is left out so the shutdown grace stays short.
"""

from __future__ import annotations

import sys
import threading

from db2vtop.agent import cli, pipeline
from db2vtop.collectors.base import BaseCollector


class Spins(BaseCollector):
    def __init__(self) -> None:
        super().__init__("spins", 1.0)
        self.calls = 0

    async def collect(self) -> list:
        self.calls += 1
        if self.calls >= 5:
            while True:  # the point: a coroutine that never yields
                pass
        return []


class Blocks(BaseCollector):
    async def collect(self) -> list:
        await self.run_blocking(threading.Event().wait)
        return []


def main() -> int:
    modes = set(sys.argv[1].split("+"))
    build = pipeline.build_collectors

    def with_stand_ins(cfg, store_path=None, sinks=(), alerter=None):
        out = [c for c in build(cfg, store_path, sinks, alerter) if c.name != "self"]
        return out + ([Spins()] if "spin" in modes else []) + ([Blocks("blocks", 1.0)] if "block" in modes else [])

    pipeline.build_collectors = with_stand_ins
    return cli.main(["agent", *sys.argv[2:]])


if __name__ == "__main__":
    sys.exit(main())
