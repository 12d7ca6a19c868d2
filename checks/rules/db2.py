"""DB2 rules (the white papers' DB2 practices) on db2_* samples and facts, and the drift check against WP-7109's
appendix baselines."""

from __future__ import annotations

from db2vtop.agent.core.model import Fact
from db2vtop.agent.core.source import Row
from db2vtop.agent.core.text import plural
from db2vtop.checks.catalog import Practice, baselines, cite
from db2vtop.checks.rule import FactIndex, Judgement, LiveRule, PerFactRule, StaticRule, Thresholds, as_float, is_number
from db2vtop.checks.rules.common import ThresholdRule


class MonitoringOn(StaticRule):
    id, layer = "db2-monitoring-on", "db2"
    needs = {"db2_database": "db2"}
    fix = ("UPDATE DB CFG FOR <db> USING MON_REQ_METRICS BASE MON_ACT_METRICS BASE MON_OBJ_METRICS BASE "
           "(WP-7109's OLTP runs set NONE to save overhead; with NONE db2vtop's DB2 figures read zero).")

    def judge_facts(self, facts: FactIndex, t: Thresholds) -> list[Judgement]:
        out = []
        for f in facts.of("db2_database"):
            levels = f.data.get("monitoring") or {}
            off = sorted(k for k, v in levels.items() if str(v).upper() == "NONE")
            out.append(Judgement({"layer": "db2", **f.tags}, "warning" if off else None,
                               f"monitoring off: {', '.join(f'{k}=NONE' for k in off)}; MON_GET_* counters of that "
                               "class read 0", {"monitoring": levels}))
        return out


def _mount_of(path: str, mounts: list[str]) -> str | None:
    best = None
    for m in mounts:
        if (path == m or path.startswith(m.rstrip("/") + "/")) and (best is None or len(m) > len(best)):
            best = m
    return best


class LogsSeparate(StaticRule):
    """Transaction logs and table space containers on different file systems (so different devices)."""

    id, layer = "db2-logs-separate", "db2"
    needs = {"db2_database": "db2", "db2_container": "db2", "guest_mount": "guest"}
    fix = ("Move the active log path (UPDATE DB CFG USING NEWLOGPATH) to its own file system on its own "
           "LUN / VMDK / datastore / FlexVol, apart from the table space containers.")

    def judge_facts(self, facts: FactIndex, t: Thresholds) -> list[Judgement]:
        out = []
        for db in facts.of("db2_database"):
            log_path = db.data.get("new_log_path") or db.data.get("log_path")
            guest = next((s.guest for s in facts.stacks if s.db2 == db.tags.get("db2") and s.guest), None)
            mounts = {m.tags["mountpoint"]: m.data.get("source") for m in facts.of("guest_mount")
                      if guest is not None and m.tags.get("guest") == guest}
            if not log_path or not mounts:
                continue  # without the guest's mounts the file systems cannot be told apart
            log_mount = _mount_of(str(log_path), list(mounts))
            shared = sorted({c.data.get("path", c.tags.get("container", "")) for c in facts.of("db2_container")
                             if c.tags.get("db2") == db.tags.get("db2")
                             and _mount_of(str(c.data.get("path", "")), list(mounts)) == log_mount})
            out.append(Judgement({"layer": "db2", **db.tags}, "warning" if shared else None,
                               f"log path {log_path} shares {log_mount} ({mounts.get(log_mount)}) with "
                               f"{plural(len(shared), 'container')}, e.g. {shared[0] if shared else ''}",
                               {"log_path": log_path, "file_system": log_mount, "containers": shared[:5]}))
        return out


def _param(f: Fact, name: str) -> str:
    return str((f.data.get("params") or {}).get(name, ""))


class IoCleaners(PerFactRule):
    id, layer, fact_kind = "db2-iocleaners-nonzero", "db2", "db2_dbcfg"
    needs = {"db2_dbcfg": "db2"}
    fix = "UPDATE DB CFG USING NUM_IOCLEANERS AUTOMATIC (WP-7109 DSS profile) or a fixed count such as 20 (OLTP)."

    def problem(self, f: Fact, t: Thresholds) -> str | bool | None:
        value = _param(f, "num_iocleaners")
        if not value:
            return False
        return "NUM_IOCLEANERS = 0: agents write dirty pages themselves" if value == "0" else None


class CleanersLagging(ThresholdRule):
    """Dirty-page steals: an agent had to write a page itself because no clean victim was there."""

    id, layer, measurement, subject_tags = "db2-iocleaners-nonzero", "db2", "db2_bufferpool", (
        "db2", "database", "member", "bufferpool")
    needs = {"db2_bufferpool": "db2"}
    field, label, unit = "dirty_steal_cleans_per_s", "dirty-page steal cleans", "/s"
    warn_key, crit_key = "warn_steals_per_s", "crit_steals_per_s"
    defaults = {"warn_steals_per_s": 0.01, "crit_steals_per_s": 10.0}
    fix = IoCleaners.fix


class LogSpace(ThresholdRule):
    id, layer, measurement, subject_tags = "db2-log-space", "db2", "db2_log", ("db2", "database", "member")
    needs = {"db2_log": "db2"}
    field, label, unit = "log_used_pct", "log space used", "%"
    warn_key, crit_key = "warn_pct", "crit_pct"
    defaults = {"warn_pct": 80.0, "crit_pct": 95.0}
    fix = ("Find the oldest uncommitted transaction (MON_GET_TRANSACTION_LOG APPLID_HOLDING_OLDEST_XACT); "
           "raise LOGPRIMARY/LOGFILSIZ, or allow LOGSECOND; with LOGSECOND 0 a full log stops all work.")


class LogBufferFull(LogSpace):
    field, label, unit, aspect = "log_buffer_full_per_s", "log buffer full events", "/s", "log buffer"
    warn_key, crit_key = "warn_buffer_full_per_s", "crit_buffer_full_per_s"
    defaults = {"warn_buffer_full_per_s": 0.01, "crit_buffer_full_per_s": 5.0}
    fix = "Raise LOGBUFSZ (WP-7109: 2048 pages for DSS, 8192 for OLTP) so commits do not wait for a full buffer."


class LogWriteLatency(LogSpace):
    """The practice watches LOG_WRITE_TIME: every commit waits for its log write. The levels are a tool
    default (db2top's and the TUI's), not a white paper's figure."""

    field, label, unit, aspect = "log_write_ms", "log write time", " ms", "log writes"
    warn_key, crit_key = "warn_write_ms", "crit_write_ms"
    defaults = {"warn_write_ms": 10.0, "crit_write_ms": 20.0}
    fix = ("Follow the I/O chain below the log with the verdict (guest await, VMDK, KAVG/DAVG, array); keep the log "
           "on its own LUN (rule db2-logs-separate).")


class BufferPoolWarm(ThresholdRule):
    """The data hit ratio as db2mon and IBM's 10.1+ formulas give it: the pages the agents found in the pool,
    so a scan whose prefetchers keep ahead is not taken for a cold pool (9.7: 1 - physical/logical)."""

    id, layer, measurement, subject_tags = "db2-bp-warm", "db2", "db2_bufferpool", (
        "db2", "database", "member", "bufferpool")
    needs = {"db2_bufferpool": "db2"}
    field, label, unit = "data_hit_pct", "data hit ratio", "%"
    higher_is_worse = False
    warn_key, crit_key = "warn_pct", "crit_pct"
    gate = ("data_logical_reads_per_s", "min_logical_reads_per_s")
    defaults = {"warn_pct": 95.0, "crit_pct": 80.0, "min_logical_reads_per_s": 100.0}
    fix = ("Warm the buffer pool before scoring a run (VMware's solidDB/DB2 study ramps to a 100 % hit ratio), "
           "or size it up; a cold pool turns the run into a storage test.")


class SelfTuningMemory(PerFactRule):
    id, layer, fact_kind, severity = "db2-automatic-stmm", "db2", "db2_dbcfg", "info"
    needs = {"db2_dbcfg": "db2"}
    fix = "UPDATE DB CFG USING SELF_TUNING_MEM ON, and DATABASE_MEMORY / buffer pool sizes AUTOMATIC."

    def problem(self, f: Fact, t: Thresholds) -> str | bool | None:
        value = _param(f, "self_tuning_mem").upper()
        if not value:
            return False
        return "SELF_TUNING_MEM = OFF: a cloned or resized VM will not re-tune its memory" if value == "OFF" else None


class ContainerBalance(LiveRule):
    """Read time per page of a table space's busiest containers compared with each other."""

    id, layer, measurement = "db2-container-balance", "db2", "db2_container"
    subject_tags = ("db2", "database", "member", "tablespace")
    needs = {"db2_container": "db2"}
    defaults = {"max_ratio": 3.0, "min_pages_per_s": 50.0}
    fix = ("Give every container of the table space the same storage (same LUN type, same number of disks "
           "behind it, same path through the hypervisor); the Symmetrix DMX white paper found container count "
           "matters less than disks.")

    def __init__(self) -> None:
        self._latest: dict[tuple, dict[str, tuple[float, float]]] = {}

    def judge(self, row: Row, t: Thresholds, facts: FactIndex) -> Judgement | None:
        ms, pages = row.fields.get("read_ms_per_page"), as_float(row.fields.get("pages_read_per_s"))
        if not is_number(ms):
            return None
        subject = self.subject(row)
        by_container = self._latest.setdefault(tuple(sorted(subject.items())), {})
        by_container[row.tags.get("container", "?")] = (float(ms), pages)
        busy = {c: v for c, v in by_container.items() if v[1] >= as_float(t["min_pages_per_s"])}
        if len(busy) < 2:
            return None
        slow = max(busy, key=lambda c: busy[c][0])
        fast = min(busy, key=lambda c: busy[c][0])
        ratio = busy[slow][0] / busy[fast][0] if busy[fast][0] > 0 else 1.0
        return Judgement(subject, "warning" if ratio >= as_float(t["max_ratio"]) else None,
                       f"{slow} reads at {busy[slow][0]:.1f} ms/page, {ratio:.1f}x {fast} ({busy[fast][0]:.1f})",
                       {"slowest": slow, "slowest_ms_per_page": busy[slow][0], "fastest": fast,
                        "fastest_ms_per_page": busy[fast][0], "ratio": round(ratio, 2), "containers": len(busy)})


PROFILE_TABLE = {"dss": "§8.1 Table 1 (DSS)", "oltp": "§8.2 Table 2 (OLTP)",
                 "overalloc": "§8.3 Table 3 (vCPU overallocation, per VM)"}
_FACT_OF_SCOPE = {"db": "db2_dbcfg", "dbm": "db2_dbmcfg", "registry": "db2_registry"}


def _normalise(value: object) -> str:
    text = str(value if value is not None else "").strip().upper()
    return text[len("AUTOMATIC("):-1] if text.startswith("AUTOMATIC(") else text


class ConfigDrift(StaticRule):
    """Every DB/DBM parameter and registry variable against one appendix profile of WP-7109.

    Off by default: the appendix values are a benchmark baseline, not recommendations
    (practices.md §5). Turn it on with [checks.db2-cfg-drift] enabled = true, profile = "oltp".
    """

    id, layer = "db2-cfg-drift", "db2"
    needs = {"db2_dbcfg": "db2", "db2_dbmcfg": "db2", "db2_registry": "db2"}
    defaults = {"enabled": False, "profile": "oltp"}
    fix = "Set the parameter to the profile's value if the workload matches the profile; otherwise ignore."

    @property
    def practice(self) -> Practice:
        return Practice(self.id, "DB2 configuration baseline from WP-7109's appendixes", "db2",
                        "Keep the benchmark-validated value for the workload profile; show drift",
                        "the appendix value of the chosen profile", "SYSIBMADM.DBCFG, DBMCFG, registry", "S",
                        tuple(cite(f"WP-7109 {table}") for table in PROFILE_TABLE.values()), False)

    def judge_facts(self, facts: FactIndex, t: Thresholds) -> list[Judgement]:
        profile = str(t.get("profile", "oltp"))
        if profile not in PROFILE_TABLE:
            return []
        out = []
        for b in baselines():
            expected = getattr(b, profile)
            if expected in ("–", "-"):
                continue
            for f in facts.of(_FACT_OF_SCOPE[b.scope]):
                values = f.data.get("params", f.data) if b.scope != "registry" else f.data
                actual = next((v for k, v in values.items() if str(k).upper() == b.parameter.upper()), None)
                drift = (actual is None and b.scope == "registry") or (
                    actual is not None and _normalise(actual) != _normalise(expected))
                out.append(Judgement({"layer": "db2", **f.tags, "parameter": b.parameter}, "info" if drift else None,
                                   f"{b.parameter} = {actual if actual is not None else 'unset'}, {profile} profile "
                                   f"({PROFILE_TABLE[profile]}) has {expected}",
                                   {"actual": str(actual), "expected": expected, "profile": profile,
                                    "baseline": b.id, "meaning": b.meaning}))
        return out


RULES = [MonitoringOn(), LogsSeparate(), IoCleaners(), CleanersLagging(), LogSpace(), LogBufferFull(),
         LogWriteLatency(), BufferPoolWarm(), SelfTuningMemory(), ContainerBalance(), ConfigDrift()]
