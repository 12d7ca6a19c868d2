"""Sealing and retention: the writer's upkeep. Each series' head rows of a 30-minute span that is over go into
one `chunks` row (agent/core/chunks.py: columns encoded by codec, then zstd, about 1.4 bytes a value instead
of 8), the newest row of every series staying in the head; what is older than the retention is deleted. Both
work a few series at a time in short transactions, so readers are never held up for long."""

from __future__ import annotations

from collections.abc import Callable

from db2vtop.agent.core import chunks
from db2vtop.agent.core.model import FieldValue
from db2vtop.agent.core.store.encoding import Fieldsets, row_at
from db2vtop.agent.core.store.files import CHUNK_SPAN_NS, END, StoreError, StoreFile


class Sealing:
    """The upkeep room of one writer connection. `forget_series` and `forget_chunk` tell the other rooms what
    it removed: a series retention deleted, a chunk a late row's merge replaced."""

    def __init__(self, file: StoreFile, fieldsets: Fieldsets, forget_series: Callable[[int], None],
                 forget_chunk: Callable[[int], None]):
        self.file = file
        self.db = file.db
        self.fieldsets = fieldsets
        self.forget_series = forget_series
        self.forget_chunk = forget_chunk
        self._retention_cursor = 0
        self._seal_cursor = 0

    def enforce_retention(self, cutoff_ns: int, budget: int = 20000) -> int:
        """Delete up to `budget` rows (head rows and whole chunks) older than the cutoff, a few series
        at a time. A chunk goes once its newest row is past the cutoff.

        Called repeatedly by the writer, so a large backlog (after a retention change)
        is worked off in short transactions that never block readers for long.
        """
        deleted = 0
        ids = [r[0] for r in self.db.execute("SELECT id FROM series WHERE id > ? ORDER BY id LIMIT 500",
                                             (self._retention_cursor,))]
        for sid in ids:
            left = budget - deleted
            if left <= 0:
                return deleted
            with self.db:
                if self.file.chunked:
                    deleted += self.db.execute(
                        "DELETE FROM chunks WHERE id IN (SELECT id FROM chunks WHERE series_id=? AND last_ts < ?"
                        " ORDER BY span LIMIT ?)", (sid, cutoff_ns, left)).rowcount
                    left = budget - deleted
                edge = self.db.execute(
                    "SELECT ts FROM samples WHERE series_id=? AND ts < ? ORDER BY ts LIMIT 1 OFFSET ?",
                    (sid, cutoff_ns, max(left, 1) - 1)).fetchone()
                bound, op = (edge[0], "<=") if edge else (cutoff_ns, "<")
                deleted += self.db.execute(f"DELETE FROM samples WHERE series_id=? AND ts {op} ?",
                                           (sid, bound)).rowcount
                if edge is None and not self._has_data(sid):
                    self.db.execute("DELETE FROM series WHERE id=?", (sid,))
                    self.forget_series(sid)
            if edge is None:
                self._retention_cursor = sid
        if len(ids) < 500:  # a full pass is done: small tables, then start over
            self._retention_cursor = 0
            with self.db:
                self.db.execute("DELETE FROM annotations WHERE ts < ?", (cutoff_ns,))
                self.db.execute("DELETE FROM findings WHERE resolved_at < ?", (cutoff_ns,))
                self.db.execute(
                    "DELETE FROM facts WHERE last_seen < ? AND id NOT IN"
                    " (SELECT max(id) FROM facts GROUP BY kind, entity)",
                    (cutoff_ns,))
        return deleted

    def _has_data(self, sid: int) -> bool:
        if self.db.execute("SELECT 1 FROM samples WHERE series_id=? LIMIT 1", (sid,)).fetchone():
            return True
        return bool(self.file.chunked and self.db.execute("SELECT 1 FROM chunks WHERE series_id=? LIMIT 1",
                                                      (sid,)).fetchone())


    def seal_step(self, before_ns: int, budget: int = 20000) -> tuple[int, bool]:
        """Move up to about `budget` head rows older than `before_ns` into chunks, a few series at a
        time, in one short transaction; the newest row of each series stays in the head. Returns
        (rows moved, whether a pass over every series is complete). Late rows of a span that is
        already sealed are merged into its chunk."""
        moved = 0
        self.db.execute("BEGIN IMMEDIATE")
        try:
            ids = [r[0] for r in self.db.execute("SELECT id FROM series WHERE id > ? ORDER BY id LIMIT 200",
                                                 (self._seal_cursor,))]
            for sid in ids:
                newest = self.db.execute("SELECT max(ts) FROM samples WHERE series_id=?", (sid,)).fetchone()[0]
                if newest is not None:
                    limit = max(budget - moved, 1000)
                    rows = self.db.execute(
                        "SELECT ts, fieldset, vals FROM samples WHERE series_id=? AND ts < ? ORDER BY ts LIMIT ?",
                        (sid, min(before_ns, newest), limit)).fetchall()
                    if rows:
                        self._seal_rows(sid, rows)
                        moved += len(rows)
                        if len(rows) == limit:  # more of this series left: the next step goes on with it
                            break
                self._seal_cursor = sid
                if moved >= budget:
                    break
            else:
                if len(ids) < 200:
                    self._seal_cursor = 0
            self.db.execute("COMMIT")
        except BaseException:
            if self.db.in_transaction:
                self.db.execute("ROLLBACK")
            self.fieldsets.forget()
            raise
        return moved, self._seal_cursor == 0 and moved < budget

    def _seal_rows(self, sid: int, rows: list[tuple[int, int, str]]) -> None:
        by_span: dict[int, list[tuple[int, int, str]]] = {}
        for row in rows:
            by_span.setdefault(row[0] // CHUNK_SPAN_NS, []).append(row)
        for span, part in by_span.items():
            merged: dict[int, dict[str, FieldValue]] = {}
            old = self.db.execute("SELECT id, fieldset, data FROM chunks WHERE series_id=? AND span=?",
                                  (sid, span)).fetchone()
            if old is not None:
                merged = self._chunk_rows(*old)
                self.forget_chunk(old[0])
            for ts, fid, vals in part:  # the head's value wins, as in a write of the same time twice
                fields = self.fieldsets.decode(fid, vals)
                merged[ts] = {**merged[ts], **fields} if ts in merged else fields
            stamps = sorted(merged)
            names = tuple(dict.fromkeys(n for ts in stamps for n in merged[ts]))
            columns = [[merged[ts].get(n) for ts in stamps] for n in names]
            self.db.execute(
                "INSERT OR REPLACE INTO chunks(series_id, span, first_ts, last_ts, fieldset, n, data)"
                " VALUES (?,?,?,?,?,?,?)",
                (sid, span, stamps[0], stamps[-1], self.fieldsets.id_of(names), len(stamps),
                 chunks.encode(stamps, columns)))
            self.db.execute("DELETE FROM samples WHERE series_id=? AND ts >= ? AND ts <= ?",
                            (sid, part[0][0], part[-1][0]))

    def _chunk_rows(self, cid: int, fieldset: int, data: bytes) -> dict[int, dict[str, FieldValue]]:
        """The rows of a sealed chunk, by time."""
        try:
            ts, columns = chunks.decode(data)
        except chunks.ChunkError as e:
            raise StoreError(f"{self.file.path}: chunk {cid}: {e}") from None
        names = self.fieldsets.names(fieldset)
        return {t: row_at(names, columns, i) for i, t in enumerate(ts)}

    def compact(self) -> int:
        """Seal everything but the newest row of each series now (tests, benchmarks, imports)."""
        total, done = 0, False
        self._seal_cursor = 0
        while not done:
            moved, done = self.seal_step(END)
            total += moved
        self.release_free_pages()
        return total

    def release_free_pages(self) -> None:
        """Give the pages freed by sealing and retention back to the file system."""
        self.db.executescript("PRAGMA incremental_vacuum;")  # execute() would free only one page

