"""Configuration facts from the facts queries: DB/DBM cfg, registry, level, tablespaces,
containers, buffer pools, and the monitoring levels (NONE means MON_GET_* counters read 0).

Data holds only what is configured (no timestamps or counters), so the store versions a
fact only when the configuration really changes.
"""

from __future__ import annotations

from collections import defaultdict

from db2vtop.agent.core.model import Fact
from db2vtop.collectors.db2.metrics import MonRow

MONITORING = ("mon_req_metrics", "mon_act_metrics", "mon_obj_metrics")


def _cfg(rows: list[MonRow]) -> dict:
    """DBCFG/DBMCFG rows as `db2 get db cfg` shows them: AUTOMATIC(value); deferred values apart."""
    params, pending = {}, {}
    for r in rows:
        name, value, flags = str(r["NAME"]), r.get("VALUE") or "", str(r.get("VALUE_FLAGS") or "")
        params[name] = f"AUTOMATIC({value})" if "AUTOMATIC" in flags.upper() and value else (
            "AUTOMATIC" if "AUTOMATIC" in flags.upper() else value)
        deferred = r.get("DEFERRED_VALUE")
        if deferred is not None and deferred != value:
            pending[name] = deferred
    return {"params": params, "pending": pending} if pending else {"params": params}


def _by_member(rows: list[MonRow]) -> dict[str, list[MonRow]]:
    out: dict[str, list[MonRow]] = defaultdict(list)
    for r in rows:
        out[str(r.get("MEMBER"))].append(r)
    return dict(sorted(out.items()))


def _plain(value: object) -> str:
    text = str(value or "")
    return text[len("AUTOMATIC("):-1] if text.startswith("AUTOMATIC(") else text


def build_facts(tags: dict[str, str], rows: dict[str, list[MonRow]], banner: dict[str, str], status: dict,
                ts: int) -> list[Fact]:
    facts: list[Fact] = []
    dbcfg = {m: _cfg(rs) for m, rs in _by_member(rows.get("dbcfg", [])).items()}
    for member, data in dbcfg.items():
        facts.append(Fact("db2_dbcfg", {**tags, "member": member}, data, ts))
    if rows.get("dbmcfg"):
        facts.append(Fact("db2_dbmcfg", {"db2": tags["db2"]}, _cfg(rows["dbmcfg"]), ts))
    for member, rs in _by_member(rows.get("reg", [])).items():
        facts.append(Fact("db2_registry", {"db2": tags["db2"], "member": member},
                          {str(r["REG_VAR_NAME"]): r.get("REG_VAR_VALUE") for r in rs}, ts))

    first = next(iter(dbcfg.values()), {"params": {}})["params"]
    monitoring = {k: _plain(first.get(k)) for k in MONITORING if k in first}
    off = [f"{k}={v}" for k, v in monitoring.items() if v.upper() == "NONE"]
    inst = (rows.get("inst") or [{}])[0]
    members = sorted({str(r["MEMBER"]) for r in rows.get("db", [])} | set(dbcfg))
    data = {
        "transport": status["transport"],
        "server": banner.get("Database server"),
        "auth_id": banner.get("SQL authorization ID"),
        "instance": inst.get("INST_NAME"),
        "level": inst.get("SERVICE_LEVEL"),
        "build": inst.get("BLD_LEVEL"),
        "fixpack": inst.get("PTF"),
        "partitions": inst.get("NUM_DBPARTITIONS"),
        "members": members,
        "log_path": first.get("logpath"),
        "new_log_path": first.get("newlogpath") or None,
        "mirror_log_path": first.get("mirrorlogpath") or None,
        "monitoring": monitoring,
        "monitoring_status": ("off: " + ", ".join(off) + " (MON_GET_* counters of that class read 0)") if off
        else ("ok" if monitoring else "unknown"),
        "sources": status["sources"],
        "fallbacks": status["fallbacks"],
        "unavailable": status["unavailable"],
    }
    facts.append(Fact("db2_database", dict(tags), {k: v for k, v in data.items() if v not in (None, {}, [])}, ts))
    facts += _tablespaces(tags, rows, ts)
    for r in rows.get("bpcat", []):
        npages = r.get("NPAGES")
        facts.append(Fact("db2_bufferpool", {**tags, "bufferpool": str(r["BPNAME"])}, {
            "id": r.get("BUFFERPOOLID"), "pages": npages, "automatic": npages == -2,
            "page_size_bytes": r.get("PAGESIZE"), "block_pages": r.get("NUMBLOCKPAGES"),
            "block_size": r.get("BLOCKSIZE")}, ts))
    return facts


def _tablespaces(tags: dict[str, str], rows: dict[str, list[MonRow]], ts: int) -> list[Fact]:
    catalog = {str(r["TBSPACE"]): r for r in rows.get("tbspcat", [])}
    containers: dict[tuple[str, str], dict] = {}
    for r in rows.get("ctcfg", []):
        key = (str(r["TBSP_NAME"]), str(r["CONTAINER_NAME"]))
        c = containers.setdefault(key, {"id": r.get("CONTAINER_ID"), "type": r.get("CONTAINER_TYPE"),
                                        "stripe_set": r.get("STRIPE_SET"), "fs_id": r.get("FS_ID"), "members": []})
        c["members"].append(str(r.get("MEMBER")))
    per_tbsp: dict[str, int] = defaultdict(int)
    for tbsp, _ in containers:
        per_tbsp[tbsp] += 1
    spaces: dict[str, dict] = {}
    for r in rows.get("tbspcfg", []):
        name = str(r["TBSP_NAME"])
        if name in spaces:
            spaces[name]["members"].append(str(r.get("MEMBER")))
            continue
        cat = catalog.get(name, {})
        spaces[name] = {
            "id": r.get("TBSP_ID"), "type": r.get("TBSP_TYPE"), "content": r.get("TBSP_CONTENT_TYPE"),
            "page_size_bytes": r.get("TBSP_PAGE_SIZE"), "extent_pages": r.get("TBSP_EXTENT_SIZE"),
            "prefetch_pages": r.get("TBSP_PREFETCH_SIZE"),
            "prefetch_automatic": cat.get("PREFETCHSIZE") == -1 if cat else None,
            "auto_storage": _flag(r.get("TBSP_USING_AUTO_STORAGE")),
            "auto_resize": _flag(r.get("TBSP_AUTO_RESIZE_ENABLED")), "fs_caching": r.get("FS_CACHING"),
            "overhead_ms": cat.get("OVERHEAD"), "transfer_rate_ms": cat.get("TRANSFERRATE"),
            "bufferpool_id": cat.get("BUFFERPOOLID"), "containers": per_tbsp.get(name, 0),
            "members": [str(r.get("MEMBER"))]}
    facts = [Fact("db2_tablespace", {**tags, "tablespace": name}, {k: v for k, v in d.items() if v is not None}, ts)
             for name, d in spaces.items()]
    facts += [Fact("db2_container", {**tags, "tablespace": tbsp, "container": path},
                   {"path": path, **{k: v for k, v in d.items() if v is not None}}, ts)
              for (tbsp, path), d in containers.items()]
    return facts


def _flag(v: object) -> bool | None:
    return None if v is None else bool(v)
