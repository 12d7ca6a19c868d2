"""`db2vtop rules`: the whole catalog, with what is observable under the current config."""

from __future__ import annotations

import json
import re
from typing import Any, TextIO

from db2vtop.agent.core.config import CoreConfig
from db2vtop.checks.catalog import practices
from db2vtop.checks.engine import Engine
from db2vtop.checks.rule import Rule


def _configured(cfg: CoreConfig, section: str) -> bool:
    """Whether the config has the source a rule needs: some [[section]], or a [section] not turned off."""
    value = getattr(cfg, section)
    return bool(value) if isinstance(value, list) else getattr(value, "enabled", True)


def _unobservable_reason(judged: str, observe_via: str) -> str:
    if "manual" in judged:
        return "manual attestation: BIOS/BMC or vendor settings no API read by db2vtop exposes"
    if judged.startswith("E"):
        return "needs events (vMotion, power-on, path changes), which no collector records yet"
    first = observe_via.split(";")[0].strip()
    return f"no collector provides its data yet ({first})"


_JUDGED_WORDS = {"L": "live", "S": "static", "D": "derived", "E": "event"}


def _judged_words(code: str) -> str:
    """practices.md's kind column ("S/L", "S (info)") in the words implemented rules use."""
    return re.sub(r"\b[LSDE]\b", lambda m: _JUDGED_WORDS[m.group(0)], code)


def rule_rows(cfg: CoreConfig, engine: Engine) -> list[dict[str, Any]]:
    implemented: dict[str, list[Rule]] = {}
    for r in engine.rules:
        implemented.setdefault(r.id, []).append(r)
    rows = []
    extra = {r.id: r.practice for r in engine.rules if r.id not in practices()}  # the drift check, the verdict
    for p in [*practices().values(), *extra.values()]:
        impl = implemented.get(p.id, [])
        sections = sorted({s for r in impl for s in r.needs.values()})
        missing = [s for s in sections if not _configured(cfg, s)]
        if not impl:
            status, observable = "not observable yet: " + _unobservable_reason(p.judged, p.observe_via), False
        elif missing and len(missing) == len(sections):
            status, observable = "not configured: needs " + " or ".join(f"[{s}]" if s == "guest" else f"[[{s}]]"
                                                                          for s in missing), False
        else:
            status, observable = "observable", True
        thresholds: dict[str, Any] = {}
        for r in impl:
            thresholds.update(engine.thresholds(r, {}))
        rows.append({
            "id": p.id, "section_title": p.section_title,
            "layer": impl[0].layer if impl else p.layer,
            "kind": " + ".join(sorted({r.judged for r in impl})) if impl else _judged_words(p.judged),
            "practice": p.practice, "figure": p.figure, "observe_via": p.observe_via,
            "thresholds": thresholds, "published_only": p.published_only, "references": list(p.references),
            "implemented": bool(impl), "observable": observable, "status": status,
            "needs": sorted({m for r in impl for m in r.needs}),
        })
    return rows


def write_rules(rows: list[dict[str, Any]], fmt: str, out: TextIO) -> None:
    if fmt == "json":
        json.dump(rows, out, indent=1, ensure_ascii=False)
        out.write("\n")
        return
    practice_rows = [r for r in rows if r["id"] in practices()]  # not the drift check, not the verdict
    observable = sum(r["observable"] for r in practice_rows)
    implemented = sum(r["implemented"] for r in practice_rows)
    out.write(f"{len(practice_rows)} practices from the white papers; {implemented} have a rule, "
              f"{observable} are observable with this configuration; plus the DB2 configuration drift "
              "check and the cross-layer verdict's parameters.\n")
    topic = None
    for r in rows:
        if r["section_title"] != topic:
            topic = r["section_title"]
            out.write(f"\n{topic}\n")
        mark = "●" if r["observable"] else ("○" if r["implemented"] else "·")
        values = ", ".join(f"{k}={v}" for k, v in r["thresholds"].items()
                           if k not in ("samples", "window", "clear_samples"))
        out.write(f"  {mark} {r['id']:<34} {r['layer']:<9} {r['kind']:<14} {r['status']}\n")
        if values:
            out.write(f"      thresholds: {values}\n")
        out.write(f"      {r['practice']}\n      ref: {'; '.join(r['references'])}\n")
