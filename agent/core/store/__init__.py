"""Embedded time-series store: one SQLite file in WAL mode.

Layout: `series` gives each (measurement, tag set) an integer id. New samples land in the
head, `samples`, clustered on (series_id, ts) WITHOUT ROWID: a row's fields are a JSON array
of values plus the id of its `fieldsets` row (the field names, stored once). Once a
30-minute span is over, the writer seals each series' rows of that span into one `chunks`
row (agent/core/chunks.py: columns encoded by codec, then zstd), about 1.4 bytes a value
instead of 8. The newest row of every series stays in the head, so the live view's "latest
value" reads never decode a chunk. Reads merge chunks and head inside one read transaction,
so a reader never sees a row twice or misses one while the writer moves it.

One process writes (a lock file enforces it); readers in other processes see each committed
batch at once. WAL with synchronous=NORMAL means a kill -9 loses at most the transaction
being written and never corrupts the file.

Its rooms, each a module: files.py (the file, its schema and the writer's lock), encoding.py (a row and a
document as text), writing.py, sealing.py (sealing and retention), reading.py, store.py (`Store`: one connection
and its rooms) and writer.py (`StoreWriter`: the thread that owns the writer's connection).
"""

from db2vtop.agent.core.store.files import (
    CHUNK_SPAN_NS,
    SCHEMA_VERSION,
    StoreAccessError,
    StoreError,
    StoreLockedError,
    store_writer,
)
from db2vtop.agent.core.store.store import Store
from db2vtop.agent.core.store.writer import MAX_PENDING, StoreWriter, WriterStats
from db2vtop.agent.core.store.writing import ROWS_PER_STATEMENT

__all__ = [
    "CHUNK_SPAN_NS", "MAX_PENDING", "ROWS_PER_STATEMENT", "SCHEMA_VERSION", "Store", "StoreAccessError", "StoreError",
    "StoreLockedError", "StoreWriter", "WriterStats", "store_writer",
]
