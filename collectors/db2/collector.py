"""The DB2 collector: one session per cycle, fallbacks by DB2 level, rates, resets, facts.

A cycle is one round trip: when facts are due, describe() runs the facts queries and the
monitoring queries in the same session and hands the monitoring rows to collect().
"""

from __future__ import annotations

import logging
import re
import time
from collections import defaultdict
from datetime import UTC, datetime
from typing import Any, Protocol

from db2vtop.agent.core.clock import CLOCK
from db2vtop.agent.core.model import Annotation, Fact, Record, Sample
from db2vtop.collectors.base import BaseCollector
from db2vtop.collectors.db2.config import DB2Config
from db2vtop.collectors.db2.facts import build_facts
from db2vtop.collectors.db2.metrics import RATE_FIELDS, Baselines, MonRow, memory_fields, system_fields
from db2vtop.collectors.db2.queries import BY_TAG, MEMORY, QUERIES, SYSTEM, Db2Error, Query, Variant
from db2vtop.collectors.db2.session import Message, Session

log = logging.getLogger(__name__)

FALLBACK = {"SQL0204", "SQL0206", "SQL0440"}       # no such object, column or signature at this level
PRIVILEGE = {"SQL0551", "SQL0552", "SQL1092", "SQL1060", "SQL0567"}
_CLOCK = re.compile(r"(\d{4})-(\d\d)-(\d\d)[-T ](\d\d)[.:](\d\d)[.:](\d\d)(?:[.,](\d{1,12}))?")


class Transport(Protocol):
    name: str  # clp | ibm_db: what [[db2]] transport names it
    where: str
    connects: int

    def run(self, statements: list[tuple[str, str]], timeout: float) -> Session: ...

    def close(self) -> None: ...


_CONNECT_ADVICE = {
    "SQL1032": "the DB2 instance is not started ({text}); start it with db2start, or point instance_profile at "
               "the instance that holds the database",
    "SQL1013": "database {database} is not known to this instance ({text}); set [[db2]] database to an alias from "
               "`db2 list database directory`",
    "SQL30081": "cannot reach the DB2 server ({text}); check host and port, and that the instance listens on TCP/IP "
                "(DB2COMM=TCPIP, svcename)",
    "SQL30082": "DB2 refused the user or password ({text})",
    **{code: "not allowed to connect to {database} ({text}); GRANT CONNECT ON DATABASE TO USER <user>"
       for code in PRIVILEGE},
}


def connect_error(msg: Message, database: str, where: str) -> Db2Error:
    advice = _CONNECT_ADVICE.get(msg.number, "CONNECT TO {database} failed: {text}")
    return Db2Error(f"{where}: " + advice.format(database=database, text=msg.text[:300]))


def server_clock(text: object) -> float | None:
    """The CLOCK column (UTC, DB2's CHAR(TIMESTAMP) form) as epoch seconds."""
    m = _CLOCK.match(str(text or ""))
    if not m:
        return None
    y, mo, d, h, mi, s, frac = m.groups()
    try:
        base = datetime(int(y), int(mo), int(d), int(h), int(mi), int(s), tzinfo=UTC).timestamp()
    except ValueError:
        return None
    return base + (int(frac) / 10 ** len(frac) if frac else 0.0)


class _Layout:
    """Where a variant's numbers, strings and always-NULL columns sit in its rows (parsing is hot)."""

    def __init__(self, q: Query, v: Variant):
        self.width = len(v.items)
        nulls = {name for name, expr in v.items if expr == "''"}
        self.nulls = tuple(nulls)
        self.texts = tuple((n, i) for i, (n, _) in enumerate(v.items) if n in q.strings and n not in nulls)
        self.number_at = tuple(i for i, (n, _) in enumerate(v.items) if n not in q.strings and n not in nulls)
        self.numbers = tuple(v.items[i][0] for i in self.number_at)


class Db2Collector(BaseCollector):
    def __init__(self, cfg: DB2Config, transport: Transport):
        super().__init__(f"db2:{cfg.name}", cfg.interval, cfg.timeout)
        self.cfg = cfg
        self.transport = transport
        self.facts_interval = cfg.facts_interval
        self.first_delay = min(2.0, cfg.interval)
        self.tags = {"db2": cfg.name, "database": cfg.database.upper()}
        self.variant = {q.tag: 0 for q in QUERIES}
        self.fallbacks: dict[str, str] = {}
        self.unavailable: dict[str, str] = {}
        self.baselines = Baselines()
        self.activation: dict[str, str] = {}
        self.last_session: Session | None = None
        self._notes: list[Annotation] = []
        self._pending: dict[str, list[MonRow]] | None = None
        self._connects: int | None = None
        self._failed = False
        self._clock_source = ""
        self._facts_again = False
        self._layouts: dict[int, _Layout] = {}
        self._answered: dict[str, str] = {}  # query tag -> the variant last logged as answering

    @property
    def session_timeout(self) -> float:
        """A little under the cycle timeout, so the transport reports the hang itself."""
        return max(1.0, self.timeout * 0.9)

    def statements(self, facts: bool) -> list[tuple[str, str]]:
        return [(q.tag, self._variant(q).sql(q.tag, self.cfg.member)) for q in QUERIES
                if (facts or not q.facts) and q.tag not in self.unavailable]

    def _variant(self, q: Query) -> Variant:
        return q.variants[self.variant[q.tag]]

    async def _exchange(self, facts: bool) -> dict[str, list[MonRow]]:
        try:
            session = await self.run_blocking(self.transport.run, self.statements(facts), self.session_timeout)
            self.last_session = session
            rows = self.digest(session)
        except BaseException:
            self._failed = True
            raise
        connects = self.transport.connects
        if self._failed or (self._connects is not None and connects != self._connects):
            self.facts_stale = True  # reconnected or recovered: the configuration may have changed
        self._connects, self._failed = connects, False
        return rows

    def digest(self, session: Session) -> dict[str, list[MonRow]]:
        """Rows by query tag; errors mapped, level fallbacks taken for the next cycle."""
        where = self.transport.where
        err = session.connect.error
        if err is not None:
            raise connect_error(err, self.cfg.database, where)
        hard: list[str] = []
        rows: dict[str, list[MonRow]] = {}
        for tag, out in session.results.items():
            q = BY_TAG[tag]
            v = self._variant(q)
            e = out.error
            if e is None:
                rows[tag] = [self._row(q, v, fields) for fields in out.rows]
                if len(q.variants) > 1 and self._answered.get(tag) != v.label:
                    self._answered[tag] = v.label
                    log.info("db2 %s: query %r answered by %s", self.name, q.tag, v.label)
            elif e.number in FALLBACK:
                self._fall_back(q, v, e)
            elif e.number in PRIVILEGE:
                hard.append(f"{v.label}: {e.text[:240]} Grant the monitoring user: {v.grant} "
                            "(or SQLADM authority on the database)")
            else:
                hard.append(f"{v.label}: {e.text[:240]}")
        if hard:
            raise Db2Error(f"{where}: " + "; ".join(hard))
        return rows

    def _row(self, q: Query, v: Variant, fields: list[str | None]) -> MonRow:
        layout = self._layouts.get(id(v))
        if layout is None:
            layout = self._layouts[id(v)] = _Layout(q, v)
        if len(fields) != layout.width:
            raise Db2Error(f"{self.transport.where}: {v.label} returned {len(fields)} fields, expected {layout.width}")
        numbers = [fields[i] for i in layout.number_at]
        try:
            row: MonRow = dict(zip(layout.numbers, map(int, numbers), strict=True))  # nearly all: counters
        except (TypeError, ValueError):  # a NULL, a DOUBLE or a DECIMAL among them
            row = {n: q.parse_value(n, f) for n, f in zip(layout.numbers, numbers, strict=True)}
        for name, i in layout.texts:
            row[name] = fields[i]
        for name in layout.nulls:
            row[name] = None
        if v.adapt:
            v.adapt(row)
        return row

    def _fall_back(self, q: Query, v: Variant, e: Message) -> None:
        i = self.variant[q.tag] + 1
        missing = "lacks a column" if e.number == "SQL0206" else "is not available"
        why = f"{v.label} {missing} at this DB2 level ({e.text[:120]})"
        if i < len(q.variants):
            self.variant[q.tag] = i
            text = self.fallbacks[q.tag] = f"{why}; using {q.variants[i].label}"
        else:
            text = self.unavailable[q.tag] = f"{why}; not collected"
        log.warning("db2 %s: %s", self.name, text)
        self._notes.append(Annotation("db2_fallback", f"{self.name}: {q.tag}", dict(self.tags), text))
        self._facts_again = True

    async def start(self) -> None:
        rows = await self._exchange(facts=False)
        self.records(rows, CLOCK.now_ns())  # the baseline; its records are not rates yet

    async def describe(self) -> list[Fact]:
        rows = await self._exchange(facts=True)
        self._pending = rows
        status = {"transport": self.transport.name, "fallbacks": dict(self.fallbacks),
                  "unavailable": dict(self.unavailable),
                  "sources": {q.tag: self._variant(q).label for q in QUERIES if q.tag not in self.unavailable}}
        banner = self.last_session.banner if self.last_session else {}
        return build_facts(self.tags, rows, banner, status, CLOCK.now_ns())

    async def collect(self) -> list[Record]:
        pending, self._pending = self._pending, None
        rows = pending if pending is not None else await self._exchange(facts=False)
        out = self.records(rows, CLOCK.now_ns())
        notes, self._notes = self._notes, []
        if self._facts_again:  # a fallback left this cycle's facts incomplete: read them again next cycle
            self.facts_stale, self._facts_again = True, False
        return notes + out

    def _clock(self, rows: dict[str, list[MonRow]]) -> float:
        server = next((c for r in rows.get("db", []) if (c := server_clock(r.get("CLOCK"))) is not None), None)
        source = "server" if server is not None else "local"
        if source != self._clock_source:
            self.baselines.rows.clear()  # never subtract a local time from a server time
            self._clock_source = source
        return server if server is not None else time.monotonic()

    def records(self, rows: dict[str, list[MonRow]], ts: int) -> list[Record]:
        """Samples (and reset annotations) from one cycle's rows, moving the baselines on."""
        clock = self._clock(rows)
        resets: dict[str, list[str]] = defaultdict(list)
        for r in rows.get("db", []):
            member, act = str(r["MEMBER"]), r.get("DB_CONN_TIME")
            if act:
                before = self.activation.get(member)
                self.activation[member] = str(act)
                if before and before != act:
                    self.baselines.forget(member)
                    resets[member].append(f"database activated again at {act} (was {before})")
        out: list[Record] = []
        for tag, (measurement, fields) in RATE_FIELDS.items():
            if tag in rows:
                out += self._rates(BY_TAG[tag], rows[tag], clock, measurement, fields, resets, ts)
        for r in rows.get(MEMORY.tag, []):
            out.append(Sample("db2_memory", self._tags(MEMORY, r), memory_fields(r), ts))
        for r in rows.get(SYSTEM.tag, []):
            tags = self._tags(SYSTEM, r)
            step = self.baselines.step((SYSTEM.tag, tags["member"]), clock, r, SYSTEM.counters)
            out.append(Sample("db2_system", tags, system_fields(step if not isinstance(step, bool) else None, r), ts))
        for member, what in sorted(resets.items()):
            shown = "; ".join(what[:5]) + (f" and {len(what) - 5} more" if len(what) > 5 else "")
            out.append(Annotation("reset", f"{self.name} member {member}", {**self.tags, "member": member},
                                  f"DB2 counters went back (deactivation, restart or failover): {shown}; "
                                  "new baseline, no rates this cycle", ts))
        return out

    def _tags(self, q: Query, r: MonRow) -> dict[str, str]:
        tags = {**self.tags, "member": str(r["MEMBER"])}
        for col, name in q.keys:
            tags[name] = "-" if r.get(col) is None else str(r[col])
        return tags

    def _rates(self, q: Query, rows: list[MonRow], clock: float, measurement: str, fields: Any,
               resets: dict[str, list[str]], ts: int) -> list[Record]:
        out: list[Record] = []
        seen: set[tuple] = set()
        for r in rows:
            tags = self._tags(q, r)
            key = (q.tag, tags["member"], *tags.values())  # Baselines.forget() finds a member at [1]
            seen.add(key)
            step = self.baselines.step(key, clock, r, q.counters)
            if step is True:
                what = "/".join(tags[name] for _, name in q.keys)
                resets[tags["member"]].append(f"{self._variant(q).label}{' ' + what if what else ''}")
            elif step:
                out.append(Sample(measurement, tags, fields(step, r), ts))
        self.baselines.keep_only(seen, {q.tag})
        return out

    async def close(self) -> None:
        self.transport.close()  # not on the worker thread: that one may be stuck in the hung call
        await super().close()
