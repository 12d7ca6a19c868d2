"""The fleet read back from InfluxDB: the embedded store's reader interface over InfluxQL.

InfluxQL, not Flux: it is the one query language InfluxDB 1.8 (`/query`), 2.x (`/query`, the
v1 compatibility API, through a DBRP mapping of the bucket) and 3.x (`/query`) all answer;
InfluxDB 3 dropped Flux. Every query is bounded by time and, where the view names series, by
their tags; the newest row of each series comes from `ORDER BY time DESC LIMIT 1` per series
(`last(*)` would give each field its own time). What the agents write (agent/sinks/lineproto.py)
is read back as it was stored: samples by measurement and tags, annotations, findings and facts
from their own measurements. A failed request raises SourceError, a StoreError, so every view
handles an unreachable InfluxDB as it handles an unreadable store file.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterable, Iterator
from typing import Any

import urllib3

from db2vtop.agent.core.config import InfluxConfig
from db2vtop.agent.core.model import Annotation, Fact, FieldValue, Finding, canonical_tags
from db2vtop.agent.core.store import Row, Series, StoreError

ANNOTATION_MEASUREMENT = "db2vtop_annotation"
FINDING_MEASUREMENT = "db2vtop_finding"
FACT_MEASUREMENT = "db2vtop_fact"
RECORD_MEASUREMENTS = (ANNOTATION_MEASUREMENT, FINDING_MEASUREMENT, FACT_MEASUREMENT)
_END = 2**63 - 1
_SERIES_TTL_S = 30.0  # how long a listing of the series is trusted before it is read again


class SourceError(StoreError):
    """InfluxDB could not be read: says which server and what went wrong (never the token)."""


def ident(name: str) -> str:
    """An InfluxQL identifier, quoted."""
    return '"' + name.replace("\\", "\\\\").replace('"', '\\"') + '"'


def literal(value: str) -> str:
    """An InfluxQL string literal."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _where(since_ns: int, until_ns: int, tags: dict[str, str] | None = None) -> str:
    parts = [f"time >= {int(since_ns)}", f"time <= {int(min(until_ns, _END))}"]
    parts += [f"{ident(k)} = {literal(v)}" for k, v in sorted((tags or {}).items())]
    return " WHERE " + " AND ".join(parts)


def parse_series_key(key: str) -> tuple[str, dict[str, str]]:
    """(measurement, tags) of a `SHOW SERIES` key such as `m,a=1,b=x\\,y`: split at unescaped
    commas, each tag at its first unescaped `=`, escapes removed."""
    items: list[tuple[str, int | None]] = []
    buf: list[str] = []
    eq: int | None = None
    i = 0
    while i < len(key):
        c = key[i]
        if c == "\\" and i + 1 < len(key):
            buf.append(key[i + 1])
            i += 2
            continue
        if c == ",":
            items.append(("".join(buf), eq))
            buf, eq = [], None
        elif c == "=" and eq is None and items:  # the measurement (first item) may hold a "="
            eq = len(buf)
        else:
            buf.append(c)
        i += 1
    items.append(("".join(buf), eq))
    (measurement, _), *pairs = items
    return measurement, {text[:at]: text[at:] for text, at in pairs if at is not None}


class InfluxSource:
    """A read-only connection to the `[influxdb]` the agents write; same methods as Store's readers."""

    def __init__(self, cfg: InfluxConfig):
        self.cfg = cfg
        self.path = cfg.url  # what messages name, as a Store names its file
        self.db, _, self.rp = cfg.bucket.partition("/")
        ref = cfg.token()
        try:
            token = ref.resolve() if ref else ""
        except Exception as e:
            raise SourceError(f"influxdb at {cfg.url}: token: {e}") from None
        self._headers = {"Accept": "application/json"}
        if token:
            self._headers["Authorization"] = f"Token {token}"
        self._http = urllib3.PoolManager(
            cert_reqs="CERT_REQUIRED" if cfg.verify_tls else "CERT_NONE",
            ca_certs=str(cfg.ca_file) if cfg.ca_file else None,
            timeout=urllib3.Timeout(connect=min(cfg.timeout, 5.0), read=cfg.timeout), retries=False)
        self._lock = threading.Lock()
        self._series: dict[tuple[str, str], Series] = {}
        self._listed_at = -_SERIES_TTL_S
        self._version = 0
        self._types: dict[str, dict[str, str]] = {}

    def close(self) -> None:
        self._http.clear()

    def __enter__(self) -> InfluxSource:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- the wire -------------------------------------------------------------------

    def query(self, q: str) -> list[dict[str, Any]]:
        """The series of one InfluxQL statement's result."""
        fields = {"db": self.db, "q": q, "epoch": "ns"}
        if self.rp:
            fields["rp"] = self.rp
        try:
            r = self._http.request("POST", f"{self.cfg.url.rstrip('/')}/query", fields=fields,
                                   headers=self._headers, encode_multipart=False)
        except urllib3.exceptions.HTTPError as e:
            raise SourceError(f"influxdb at {self.cfg.url} did not answer: {_reason(e)}") from None
        try:
            doc = json.loads(r.data or b"{}")
        except ValueError:
            doc = {}
        error = doc.get("error") or next((x.get("error") for x in doc.get("results", []) if x.get("error")), None)
        if r.status != 200 or error:
            raise SourceError(f"influxdb at {self.cfg.url} answered {r.status}: "
                              f"{error or r.data[:200].decode(errors='replace')}")
        results = doc.get("results") or [{}]
        return results[0].get("series") or []

    # --- series ---------------------------------------------------------------------

    def _list_series(self) -> None:
        with self._lock:
            if time.monotonic() - self._listed_at < _SERIES_TTL_S:
                return
            known = dict(self._series)
            for s in self.query("SHOW SERIES"):
                for (key,) in s.get("values") or []:
                    m, tags = parse_series_key(key)
                    if m in RECORD_MEASUREMENTS:
                        continue
                    k = (m, canonical_tags(tags))
                    if k not in known:
                        known[k] = Series(len(known) + 1, m, tags)
            if len(known) != len(self._series):
                self._series = known
                self._version += 1
            self._listed_at = time.monotonic()

    def _series_of(self, measurement: str, tags: dict[str, str]) -> Series:
        k = (measurement, canonical_tags(tags))
        s = self._series.get(k)
        if s is None:  # written since the last listing
            with self._lock:
                s = self._series.setdefault(k, Series(len(self._series) + 1, measurement, tags))
                self._version += 1
        return s

    def measurements(self) -> list[str]:
        names = [v[0] for s in self.query("SHOW MEASUREMENTS") for v in s.get("values") or []]
        return sorted(n for n in names if n not in RECORD_MEASUREMENTS)

    def series(self, measurement: str | None = None) -> list[Series]:
        self._list_series()
        return [s for s in self._series.values() if measurement is None or s.measurement == measurement]

    def series_version(self) -> int:
        self._list_series()
        return self._version

    # --- samples --------------------------------------------------------------------

    def _field_types(self, measurement: str) -> dict[str, str]:
        types = self._types.get(measurement)
        if types is None:
            types = {}
            for s in self.query(f"SHOW FIELD KEYS FROM {ident(measurement)}"):
                types.update({name: kind for name, kind in s.get("values") or []})
            self._types[measurement] = types
        return types

    def _rows(self, measurement: str, q: str) -> list[Row]:
        """Rows of a `... GROUP BY *` query; a float field that JSON gave back as an integer is a float."""
        types = self._field_types(measurement)
        out = []
        for s in self.query(q):
            tags = {k: v for k, v in (s.get("tags") or {}).items() if v != ""}
            columns = s["columns"]
            floats = [i for i, c in enumerate(columns) if types.get(c) == "float"]
            for values in s.get("values") or []:
                for i in floats:
                    if isinstance(values[i], int):
                        values[i] = float(values[i])
                fields = {c: v for c, v in zip(columns[1:], values[1:], strict=True) if v is not None}
                if fields:
                    out.append(Row(values[0], s.get("name", measurement), tags, fields))
        return out

    def rows(self, measurement: str, since_ns: int = 0, until_ns: int | None = None) -> Iterator[Row]:
        """Every sample of one measurement in [since, until], oldest first."""
        found = self._rows(measurement, f"SELECT * FROM {ident(measurement)}"
                                        f"{_where(since_ns, until_ns or _END)} GROUP BY *")
        order = {canonical_tags(s.tags): s.id for s in self.series(measurement)}
        found.sort(key=lambda r: (r.ts, order.get(canonical_tags(r.tags), 0)))
        yield from found

    def _of(self, series: Iterable[Series], select: str, since_ns: int, until_ns: int, tail: str = "") -> list[Row]:
        """Rows of chosen series: one query per measurement, the series' tag sets OR'ed."""
        by_m: dict[str, list[Series]] = {}
        for s in series:
            by_m.setdefault(s.measurement, []).append(s)
        out = []
        for m, chosen in by_m.items():
            wanted = {canonical_tags(s.tags) for s in chosen}
            alts = " OR ".join("(" + " AND ".join(f"{ident(k)} = {literal(v)}" for k, v in sorted(s.tags.items()))
                               + ")" for s in chosen if s.tags)
            where = _where(since_ns, until_ns) + (f" AND ({alts})" if alts else "")
            out += [r for r in self._rows(m, f"SELECT {select} FROM {ident(m)}{where} GROUP BY *{tail}")
                    if canonical_tags(r.tags) in wanted]
        return out

    def rows_of(self, series: Iterable[Series], since_ns: int = 0, until_ns: int | None = None) -> Iterator[Row]:
        chosen = list(series)
        rows = self._of(chosen, "*", since_ns, until_ns or _END)
        order = {(s.measurement, canonical_tags(s.tags)): i for i, s in enumerate(chosen)}
        rows.sort(key=lambda r: (order[r.measurement, canonical_tags(r.tags)], r.ts))
        yield from rows

    def latest(self, measurement: str, since_ns: int = 0, until_ns: int | None = None) -> list[Row]:
        """The newest sample of each series of a measurement in [since, until]."""
        return self._rows(measurement, f"SELECT * FROM {ident(measurement)}{_where(since_ns, until_ns or _END)}"
                                       " GROUP BY * ORDER BY time DESC LIMIT 1")

    def latest_of(self, series: Iterable[Series], since_ns: int = 0, until_ns: int | None = None) -> list[Row]:
        return self._of(series, "*", since_ns, until_ns or _END, " ORDER BY time DESC LIMIT 1")

    def newest(self, measurement: str, since_ns: int, until_ns: int) -> list[tuple[int, int]]:
        return sorted((self._series_of(measurement, r.tags).id, r.ts)
                      for r in self.latest(measurement, since_ns, until_ns))

    def window(self, series_id: int, field_name: str, since_ns: int,
               until_ns: int | None = None) -> list[tuple[int, FieldValue]]:
        s = next((x for x in self._series.values() if x.id == series_id), None)
        if s is None:
            return []
        return [(r.ts, r.fields[field_name]) for r in self._of([s], ident(field_name), since_ns, until_ns or _END)
                if field_name in r.fields]

    def time_range(self) -> tuple[int, int] | None:
        """First and last sample time over every measurement (two queries)."""
        ends = []
        for order in ("ASC", "DESC"):
            found = self.query(f"SELECT * FROM /.*/ ORDER BY time {order} LIMIT 1")
            stamps = [s["values"][0][0] for s in found
                      if s.get("values") and s.get("name") not in RECORD_MEASUREMENTS]
            if not stamps:
                return None
            ends.append(min(stamps) if order == "ASC" else max(stamps))
        return ends[0], ends[1]

    # --- records --------------------------------------------------------------------

    def facts(self, kind: str | None = None) -> list[Fact]:
        """The newest version of every entity's facts the agents wrote (of one kind, or all)."""
        where = f" WHERE {ident('fact')} = {literal(kind)}" if kind else ""
        out = []
        for s in self.query(f"SELECT last({ident('data')}) FROM {FACT_MEASUREMENT}{where} GROUP BY *"):
            tags = {k: v for k, v in (s.get("tags") or {}).items() if v != ""}
            fact_kind = tags.pop("fact", "")
            for ts, data in s.get("values") or []:
                out.append(Fact(fact_kind, tags, json.loads(data), ts))
        out.sort(key=lambda f: (f.kind, canonical_tags(f.tags)))
        return out

    def fact_history(self, kind: str, tags: dict[str, str]) -> list[Fact]:
        """Each version of one entity's facts, oldest first."""
        out: list[Fact] = []
        for s in self.query(f"SELECT {ident('data')} FROM {FACT_MEASUREMENT}"
                            f"{_where(0, _END, {**tags, 'fact': kind})} GROUP BY *"):
            if {k: v for k, v in (s.get("tags") or {}).items() if v != "" and k != "fact"} != tags:
                continue
            for ts, data in s.get("values") or []:
                doc = json.loads(data)
                if not out or out[-1].data != doc:
                    out.append(Fact(kind, dict(tags), doc, ts))
        return out

    def annotations(self, since_ns: int = 0, until_ns: int | None = None) -> list[Annotation]:
        out = []
        for s in self.query(f"SELECT {ident('text')} FROM {ANNOTATION_MEASUREMENT}"
                            f"{_where(since_ns, until_ns or _END)} GROUP BY *"):
            tags = {k: v for k, v in (s.get("tags") or {}).items() if v != ""}
            kind, name = tags.pop("kind", ""), tags.pop("name", "")
            out += [Annotation(kind, name, dict(tags), text or "", ts) for ts, text in s.get("values") or []]
        out.sort(key=lambda a: a.ts)
        return out

    def findings(self, open_only: bool = True) -> list[Finding]:
        """Each finding's newest state as its agent recorded it; open ones only by default."""
        newest: dict[str, Finding] = {}
        for s in self.query(f"SELECT * FROM {FINDING_MEASUREMENT} GROUP BY * ORDER BY time DESC LIMIT 1"):
            subject = {k: v for k, v in (s.get("tags") or {}).items() if v != ""}
            rule, severity = subject.pop("rule", ""), subject.pop("severity", "info")
            row = dict(zip(s["columns"], s["values"][0], strict=True))
            ts = row["time"]
            resolved = row.get("state") == "resolved"
            f = Finding(rule, severity, subject, row.get("summary") or "", _doc(row.get("evidence"), {}),
                        row.get("why") or "", row.get("fix") or "", _doc(row.get("refs"), []),
                        int(row.get("first_seen_ns") or ts), ts, ts if resolved else None)
            if f.key not in newest or newest[f.key].last_seen < ts:  # a severity change is a new series
                newest[f.key] = f
        found = [f for f in newest.values() if not open_only or f.resolved_at is None]
        return sorted(found, key=lambda f: f.first_seen)


def _doc(text: Any, default: Any) -> Any:
    try:
        return json.loads(text) if text else default
    except ValueError:
        return default


def _reason(e: BaseException) -> str:
    reason = getattr(e, "reason", None)
    return str(reason or e).split(": ", 1)[-1] if str(reason or e) else type(e).__name__
