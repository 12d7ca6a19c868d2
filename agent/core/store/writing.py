"""Writing: a batch of samples, facts, annotations and findings in one transaction, into the head (`samples`),
the versioned facts and the other tables; series ids and facts' digests remembered between batches."""

from __future__ import annotations

import functools
import hashlib
import sqlite3
from collections.abc import Iterator, Sequence
from typing import Any

from db2vtop.agent.core.model import Annotation, Fact, Finding, Sample, canonical_tags
from db2vtop.agent.core.store.encoding import Fieldsets, doc, encode

#: rows one statement carries at most (a power of two; fewer where SQLite allows fewer parameters). sqlite3 lets
#: the GIL go for each step of a statement and must win it back after, from threads that may keep it for their
#: whole switch interval: executemany's step per row left the store writer of a 10,000-VM first cycle waiting most
#: of its time (a convoy; 100,000 rows beside two threads that never wait: 9 s in 256-row statements, minutes one
#: row a step; beside the agent's own threads, which wait often, a few ms). Larger statements cost memory: sqlite3
#: keeps each prepared (a 4,096-row one held some MB, a 2,000-VM agent's peak grew by 9 MB)
ROWS_PER_STATEMENT = 256


@functools.lru_cache(maxsize=64)
def _values(width: int, n: int) -> str:
    """`VALUES (?,?),(?,?)...`: n rows of `width` parameters."""
    return "VALUES " + ",".join(["(" + ",".join("?" * width) + ")"] * n)


def _parts(items: Sequence[Any], per: int) -> Iterator[Sequence[Any]]:
    """`items` in parts of at most `per` (a power of two), each a power of two long: however batches vary, a
    statement has one of a few shapes, each prepared once."""
    i, n = 0, len(items)
    while i < n:
        k = per
        while k > n - i:
            k //= 2
        yield items[i:i + k]
        i += k


def _series_keys(samples: Sequence[Sample]) -> list[str]:
    """Each sample's series key: the measurement and its sorted tags in one string (cheaper than the canonical
    text, same identity). Made once per tags dict: a collector's samples of one series share theirs (a first
    cycle reaching back hands on ten of each)."""
    made: dict[tuple[str, int], str] = {}
    out = []
    for s in samples:
        key = made.get((s.measurement, id(s.tags)))
        if key is None:
            key = made[(s.measurement, id(s.tags))] = "\0".join(
                (s.measurement, *(f"{k}\0{v}" for k, v in sorted(s.tags.items()))))
        out.append(key)
    return out


def _digest(doc: str) -> bytes:
    """What the writer remembers of each entity's current facts: enough to see a change, not the text."""
    return hashlib.blake2b(doc.encode(), digest_size=16).digest()


class Writing:
    """The writing room of one writer connection."""

    def __init__(self, db: sqlite3.Connection, fieldsets: Fieldsets):
        self.db = db
        self.fieldsets = fieldsets
        self._series: dict[str, int] = {}
        self._facts: dict[tuple[str, str], bytes] = {}  # (kind, entity) -> the digest of its newest stored version

    def forget_series(self, sid: int) -> None:
        """A series deleted (by retention): a sample of its tags later makes it again."""
        self._series = {k: v for k, v in self._series.items() if v != sid}

    def _series_id(self, key: str, measurement: str, tags: dict[str, str], text: str | None = None) -> int:
        sid = self._series.get(key)
        if sid is None:  # one statement for a new series (a first cycle makes thousands), two for a known one
            row = (measurement, text or canonical_tags(tags))
            found = self.db.execute("INSERT INTO series(measurement, tags) VALUES (?, ?) ON CONFLICT DO NOTHING "
                                    "RETURNING id", row).fetchone()
            if found is None:
                found = self.db.execute("SELECT id FROM series WHERE measurement=? AND tags=?", row).fetchone()
            sid = self._series[key] = found[0]
        return sid

    def _learn_series(self, samples: Sequence[Sample], keys: list[str]) -> dict[str, str]:
        """The ids of the series this batch names and the cache does not know yet, a few hundred a
        statement (a first cycle of a large vCenter names tens of thousands): stored ones looked up, new
        ones made in one statement and looked up in turn; the canonical tags of those still unknown (a
        lone one, made by _series_id), by key."""
        unknown: dict[tuple[str, str], str] = {}
        asked: set[str] = set()  # a series' samples share its key: its canonical text made once, not per sample
        for s, key in zip(samples, keys, strict=True):
            if key not in self._series and key not in asked:
                asked.add(key)
                unknown.setdefault((s.measurement, canonical_tags(s.tags)), key)
        if len(unknown) > 1:
            self._look_up(unknown)
        if len(unknown) > 1:
            self._insert("INSERT INTO series(measurement, tags)", list(unknown), " ON CONFLICT DO NOTHING")
            self._look_up(unknown)
        return {key: text for (_, text), key in unknown.items()}

    def _look_up(self, unknown: dict[tuple[str, str], str]) -> None:
        """Cache the ids of the stored series among `unknown` ((measurement, tags) -> key), taken out of it."""
        by_measurement: dict[str, list[str]] = {}
        for measurement, text in unknown:
            by_measurement.setdefault(measurement, []).append(text)
        for measurement, texts in by_measurement.items():
            for part in _parts(texts, self._per_statement(1) // 2):
                # one row, not one per series: a step each (see ROWS_PER_STATEMENT). Canonical tags are JSON, in
                # which a control character such as the record separator is always escaped
                ids, found = self.db.execute(
                    "SELECT group_concat(id, ','), group_concat(tags, char(30)) FROM series WHERE measurement=? "
                    f"AND tags IN ({','.join(['?'] * len(part))})", (measurement, *part)).fetchone()
                for sid, text in zip(ids.split(",") if ids else (), found.split("\x1e") if ids else (), strict=True):
                    self._series[unknown.pop((measurement, text))] = int(sid)

    def write(self, samples: Sequence[Sample] = (), facts: Sequence[Fact] = (),
              annotations: Sequence[Annotation] = (), findings: Sequence[Finding] = ()) -> None:
        """Write everything in one transaction: all of it is stored, or none of it."""
        self.db.execute("BEGIN IMMEDIATE")
        try:
            samples = [s for s in samples if s.fields]
            # cheaper than the canonical text, same identity; one string, not a tuple of pairs (a fleet has
            # tens of thousands of series)
            keys = _series_keys(samples)
            texts = self._learn_series(samples, keys)
            rows = []
            for s, key in zip(samples, keys, strict=True):
                names, vals = encode(s.fields)
                rows.append((self._series_id(key, s.measurement, s.tags, texts.get(key)), s.ts,
                             self.fieldsets.id_of(names), vals))
            before = self.db.total_changes
            self._insert("INSERT INTO samples(series_id, ts, fieldset, vals)", rows, " ON CONFLICT DO NOTHING")
            if self.db.total_changes - before < len(rows):
                self._merge_conflicts(rows)
            self._write_facts(facts)
            self.db.executemany(
                "INSERT INTO annotations(ts, kind, name, tags, text) VALUES (?, ?, ?, ?, ?)",
                [(a.ts, a.event, a.name, canonical_tags(a.tags), a.text) for a in annotations])
            for f in findings:
                self._write_finding(f)
            self.db.execute("COMMIT")
        except BaseException:
            if self.db.in_transaction:
                self.db.execute("ROLLBACK")
            self._series.clear()  # ids inserted by the rolled-back transaction are gone
            self.fieldsets.forget()
            self._facts.clear()
            raise

    def _merge_conflicts(self, rows: list[tuple[int, int, int, str]]) -> None:
        """Same series and timestamp written twice: keep the union of fields, the newer value winning
        (InfluxDB's semantics). The stored rows are read 500 series a statement: a restart's first cycle
        reaching back over what the store holds (vCenter's last samples) meets thousands."""
        for i in range(0, len(rows), 500):
            part = rows[i:i + 500]
            sids = sorted({r[0] for r in part})
            stored = {(sid, ts): (fid, vals) for sid, ts, fid, vals in self.db.execute(
                f"SELECT series_id, ts, fieldset, vals FROM samples WHERE series_id IN ({','.join(['?'] * len(sids))})"
                " AND ts BETWEEN ? AND ?", (*sids, min(r[1] for r in part), max(r[1] for r in part)))}
            for sid, ts, fid, vals in part:
                old = stored.get((sid, ts))
                if old is None or old == (fid, vals):
                    continue
                was = self.fieldsets.decode(*old)
                merged = {**was, **self.fieldsets.decode(fid, vals)}
                if merged == was:  # what the store holds already (a reach-back over stored samples): no write
                    continue
                names, text = encode(merged)
                stored[(sid, ts)] = (self.fieldsets.id_of(names), text)
                self.db.execute("UPDATE samples SET fieldset=?, vals=? WHERE series_id=? AND ts=?",
                                (*stored[(sid, ts)], sid, ts))

    def _per_statement(self, width: int) -> int:
        """The most rows of `width` parameters a statement carries: a power of two."""
        most = max(1, min(ROWS_PER_STATEMENT, self.db.getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER) // width))
        return 1 << (most.bit_length() - 1)

    def _insert(self, head: str, rows: Sequence[tuple], tail: str = "") -> None:
        """`head VALUES ... tail` of these rows, a few hundred a statement (see ROWS_PER_STATEMENT)."""
        if not rows:
            return
        width = len(rows[0])
        for part in _parts(rows, self._per_statement(width)):
            self.db.execute(f"{head} {_values(width, len(part))}{tail}", [x for r in part for x in r])

    def _write_facts(self, facts: Sequence[Fact]) -> None:
        """Each fact a new version of its entity, or, the same as its newest stored version, that version's
        last_seen moved on; in a few statements however many facts (a 10,000-VM facts pass), not a few each."""
        if not facts:
            return
        keyed = [((f.kind, canonical_tags(f.tags)), f) for f in facts]
        self._recall_facts(list({key for key, _ in keyed if key not in self._facts}))
        inserts: list[tuple[str, str, str, int, int]] = []
        added: dict[tuple[str, str], int] = {}  # entity -> its newest version in `inserts`
        seen: dict[int, list[tuple[str, str]]] = {}  # ts -> the entities whose stored newest version it saw again
        for key, f in keyed:
            data = doc(f.data)
            digest = _digest(data)
            if self._facts.get(key) == digest:
                if key in added:  # this batch's own version, seen again
                    row = inserts[added[key]]
                    inserts[added[key]] = (*row[:4], max(row[4], f.ts))
                else:
                    seen.setdefault(f.ts, []).append(key)
                continue
            added[key] = len(inserts)
            inserts.append((*key, data, f.ts, f.ts))
            self._facts[key] = digest
        for ts, keys in seen.items():  # before the inserts: their newest version is the stored one
            for part in _parts(keys, self._per_statement(2) // 2):
                self.db.execute("UPDATE facts SET last_seen=max(last_seen, ?) WHERE id IN (SELECT max(id) FROM facts "
                                f"WHERE (kind, entity) IN ({_values(2, len(part))}) GROUP BY kind, entity)",
                                (ts, *(x for k in part for x in k)))
        self._insert("INSERT INTO facts(kind, entity, data, first_seen, last_seen)", inserts)

    def _recall_facts(self, keys: list[tuple[str, str]]) -> None:
        """The digests of these entities' newest stored versions (a first facts pass finds none)."""
        for part in _parts(keys, self._per_statement(2)):
            for kind, entity, data in self.db.execute(
                    "SELECT kind, entity, data FROM facts WHERE id IN (SELECT max(id) FROM facts "
                    f"WHERE (kind, entity) IN ({_values(2, len(part))}) GROUP BY kind, entity)",
                    [x for k in part for x in k]):
                self._facts[(kind, entity)] = _digest(data)

    def _write_finding(self, f: Finding) -> None:
        """Open a finding, refresh the open one with the same rule and subject, or resolve it."""
        args = (f.severity, f.summary, doc(f.evidence), f.why, f.fix, doc(f.references), f.last_seen,
                f.resolved_at, f.key)
        cur = self.db.execute(
            "UPDATE findings SET severity=?, summary=?, evidence=?, why=?, fix=?, refs=?, last_seen=?, resolved_at=? "
            "WHERE key=? AND resolved_at IS NULL", args)
        if cur.rowcount == 0 and f.resolved_at is None:
            self.db.execute(
                "INSERT INTO findings(key, rule, severity, subject, summary, evidence, why, fix, refs,"
                " first_seen, last_seen) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                (f.key, f.rule, f.severity, doc(f.subject), f.summary, doc(f.evidence), f.why, f.fix,
                 doc(f.references), f.first_seen, f.last_seen))

