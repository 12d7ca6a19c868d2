"""`db2vtop agent` as shipped, with one part broken beyond repair (tests/faults/test_thread_failure.py).

argv: MODE AGENT-ARGS...; MODE is "store" (from its fourth commit on, every write of the store fails
as a corrupt database file does: `database disk image is malformed`) or "loop" (a collector whose
scheduling breaks on its third turn, so its loop cannot go on).
"""

from __future__ import annotations

import sqlite3
import sys

from db2vtop.agent import cli, pipeline
from db2vtop.agent.core.store import Store
from db2vtop.collectors.base import BaseCollector


class BreaksItsLoop(BaseCollector):
    def __init__(self) -> None:
        super().__init__("breaks", 0.5)
        self.turns = 0

    @property
    def busy(self) -> bool:  # asked by the runtime's loop before each cycle
        self.turns += 1
        if self.turns >= 3:
            raise RuntimeError("the loop's own bookkeeping broke")
        return False

    async def collect(self) -> list:
        return []


def main() -> int:
    mode = sys.argv[1]
    if mode == "store":
        write = Store.write
        calls = [0]

        def corrupt_after_three(self, *args, **kwargs):
            calls[0] += 1
            if calls[0] > 3:
                raise sqlite3.DatabaseError("database disk image is malformed")
            return write(self, *args, **kwargs)

        Store.write = corrupt_after_three
    else:
        build = pipeline.build_collectors

        def with_broken(cfg, *args, **kwargs):
            return [*build(cfg, *args, **kwargs), BreaksItsLoop()]

        pipeline.build_collectors = with_broken
    return cli.main(["agent", *sys.argv[2:]])


if __name__ == "__main__":
    sys.exit(main())
