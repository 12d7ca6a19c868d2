"""contrib/grafana/db2vtop-alert-rules.json: Grafana alert rules equivalent to the agent's own, made from the code.

For sites that alert from InfluxDB rather than from the agent: one rule per figure the verdict acts on (its
triggers, checks/verdict.py TRIGGERS, at the verdict's levels with no override), held for 1 minute (the
verdict's two 20 s buckets of an episode) and grouped by the entity it names — the shared ones (host, LUN,
datastore, array) as the agent groups its episodes —; one for the critical findings the agents record; one for
an alert receiver of an agent that is failing. `python -m tests.docs_check --write` writes it; `docs_check`
fails while the file is not what the code makes; tests/agent/sinks/test_agent_influx.py runs every query against real
InfluxDB 1.8 and 2.7.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RULES_FILE = ROOT / "contrib" / "grafana" / "db2vtop-alert-rules.json"
#: the tags each figure's entity is grouped by
GROUP_BY = {"vm": ("vcenter", "vm", "host"), "lun": ("vcenter", "host", "lun"), "host": ("vcenter", "host"),
            "db2": ("db2",), "guest": ("guest",), "volume": ("storage", "naa")}


def _rule(uid: str, title: str, query: str, op: str, level: float, summary: str, labels: dict[str, str],
          for_: str = "1m") -> dict[str, Any]:
    return {
        "uid": uid, "title": title, "condition": "C", "for": for_, "noDataState": "OK", "execErrState": "Error",
        "labels": labels, "annotations": {"summary": summary, "runbook_url": "db2vtop docs/alerts.md"},
        "data": [
            {"refId": "A", "datasourceUid": "${datasource}", "relativeTimeRange": {"from": 600, "to": 0},
             "model": {"refId": "A", "rawQuery": True, "resultFormat": "time_series", "query": query}},
            {"refId": "B", "datasourceUid": "__expr__",
             "model": {"refId": "B", "type": "reduce", "expression": "A", "reducer": "last"}},
            {"refId": "C", "datasourceUid": "__expr__",
             "model": {"refId": "C", "type": "threshold", "expression": "B",
                       "conditions": [{"evaluator": {"type": op, "params": [level]}}]}}]}


def rules() -> dict[str, Any]:
    from db2vtop.agent.core.config import StackConfig
    from db2vtop.checks.figures import ROLES
    from db2vtop.checks.thresholds import verdict_levels
    from db2vtop.checks.verdict import TRIGGERS

    levels = verdict_levels(StackConfig(name="-"))
    out = []
    for role, level in TRIGGERS:
        for fig in ROLES[role]:
            value = levels[level] if level else 0.0
            tags = ", ".join(f'"{t}"' for t in GROUP_BY[fig.entity])
            query = (f'SELECT mean("{fig.field}") FROM "{fig.measurement}" WHERE $timeFilter '
                     f"GROUP BY time(20s), {tags} fill(none)")
            shared = fig.entity in ("lun", "host", "volume")
            out.append(_rule(f"db2vtop-{role.replace('_', '-')}-{fig.measurement.replace('_', '-')}"[:40],
                             f"db2vtop {fig.label}", query, "gt" if level is None else "gte", value,
                             f"{fig.label} {'above zero' if level is None else f'at {value:g} or more'} for a minute "
                             f"(the verdict's level for {role}); `db2vtop triage` names the layer to blame",
                             {"severity": "critical", "layer": fig.layer, "shared": str(shared).lower(),
                              "source": "db2vtop"}))
    out.append(_rule("db2vtop-critical-finding", "db2vtop critical finding",
                     'SELECT count("summary") FROM "db2vtop_finding" WHERE "severity" = \'critical\' AND '
                     '"state" = \'open\' AND $timeFilter GROUP BY time(1m), "rule", "vcenter", "vm", "host" fill(none)',
                     "gt", 0.0, "a critical finding opened: {{ $labels.rule }}; `db2vtop triage --vm {{ $labels.vm }}`",
                     {"severity": "critical", "source": "db2vtop"}, for_="0s"))
    out.append(_rule("db2vtop-alert-receiver-failing", "db2vtop alert receiver failing",
                     'SELECT last("pending") FROM "db2vtop_alert" WHERE "state" = \'failing\' AND $timeFilter '
                     'GROUP BY time(1m), "agent", "receiver" fill(none)',
                     "gte", 0.0, "an agent cannot deliver its alerts to {{ $labels.receiver }}: they wait in its spool",
                     {"severity": "warning", "source": "db2vtop"}, for_="5m"))
    return {"apiVersion": 1, "groups": [{"orgId": 1, "name": "db2vtop", "folder": "db2vtop", "interval": "20s",
                                         "rules": out}]}


def text() -> str:
    return json.dumps(rules(), indent=2, ensure_ascii=False) + "\n"


def check(problems: list[str], write: bool = False) -> None:
    fresh = text()
    if RULES_FILE.exists() and RULES_FILE.read_text() == fresh:
        return
    if write:
        RULES_FILE.write_text(fresh)
    else:
        problems.append(f"{RULES_FILE.relative_to(ROOT)}: not what the code makes; run `python -m tests.docs_check "
                        "--write`")
