"""`db2vtop triage` and `db2vtop rules` through the real command line."""

from __future__ import annotations

import json
import time
from datetime import datetime
from pathlib import Path

from db2vtop.agent.core.model import Sample
from db2vtop.agent.core.store import Store
from tests.conftest import run_cli


def write_guest_history(path, swap_in: float) -> None:
    now = time.time_ns()
    with Store(path, writer=True) as w:
        w.write([Sample("guest_mem", {"guest": "db2prod01"},
                        {"swap_in_bytes_per_s": swap_in, "swap_out_bytes_per_s": 0.0, "swap_used_bytes": 2 << 30},
                        now - (30 - i) * 20 * 10**9) for i in range(30)])


def no_guest(tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text("[guest]\nenabled = false\n")
    return cfg


def test_triage_reports_a_critical_finding_as_json_and_exits_2(store_path, tmp_path):
    write_guest_history(store_path, 8 << 20)
    r = run_cli("triage", "-c", str(no_guest(tmp_path)), "--store", str(store_path), "--format", "json",
                "--lookback", "30m")
    assert r.returncode == 2, r.stderr
    doc = json.loads(r.stdout)
    assert set(doc) >= {"generated_at", "lookback_s", "findings", "verdicts"} and doc["lookback_s"] == 1800
    (f,) = doc["findings"]
    assert set(f) >= {"rule", "severity", "subject", "summary", "evidence", "why", "fix", "references"}
    assert (f["rule"], f["severity"], f["subject"]) == ("guest-swap-zero", "critical",
                                                       {"layer": "guest", "guest": "db2prod01"})
    assert f["evidence"]["samples"] >= 3 and f["references"][0].startswith("NetApp WP-7109")
    text = run_cli("triage", "-c", str(no_guest(tmp_path)), "--store", str(store_path))
    assert text.returncode == 2 and "[CRITICAL] guest-swap-zero" in text.stdout and "fix:" in text.stdout
    md = run_cli("triage", "-c", str(no_guest(tmp_path)), "--store", str(store_path), "--format", "markdown")
    assert md.stdout.startswith("# db2vtop triage") and "**CRITICAL** `guest-swap-zero`" in md.stdout


def test_triage_of_a_healthy_history_exits_0(store_path, tmp_path):
    write_guest_history(store_path, 0.0)
    r = run_cli("triage", "-c", str(no_guest(tmp_path)), "--store", str(store_path))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "No deviation" in r.stdout


def test_triage_with_nothing_to_judge_or_a_bad_config_exits_3(tmp_path):
    r = run_cli("triage", "-c", str(no_guest(tmp_path)), "--store", str(tmp_path / "none.db"))
    assert r.returncode == 3 and "could not run" in r.stderr
    bad = tmp_path / "bad.toml"
    bad.write_text("[checks.cpu-ready]\nwarn_pct = 5\n[guest]\ninterval = 'x'\n")
    r = run_cli("triage", "-c", str(bad))
    assert r.returncode == 3 and "guest.interval" in r.stderr
    unknown = tmp_path / "unknown.toml"
    unknown.write_text("[checks.guest-swap-zero]\ncrit = 1\n")
    r = run_cli("triage", "-c", str(unknown))
    assert r.returncode == 3 and "checks.guest-swap-zero.crit" in r.stderr


def test_triage_collects_this_machine_now(store_path):
    with Store(store_path, writer=True):  # an agent's store with nothing in it yet
        pass
    r = run_cli("triage", "--store", str(store_path), "--format", "json")
    assert r.returncode in (0, 1, 2), r.stderr
    doc = json.loads(r.stdout)
    assert doc["sources"]["guest"].startswith("ok")


def test_rules_lists_the_whole_catalog_with_observability(tmp_path):
    r = run_cli("rules", "--format", "json")
    assert r.returncode == 0
    rows = json.loads(r.stdout)
    assert len(rows) == 131 and len({x["id"] for x in rows}) == 131  # the catalog, the drift check, the verdict
    drift = next(x for x in rows if x["id"] == "db2-cfg-drift")
    assert "section" not in drift and drift["thresholds"]["enabled"] is False  # no internal numbering shown
    swap = next(x for x in rows if x["id"] == "guest-swap-zero")
    assert swap["observable"] and swap["status"] == "observable" and swap["thresholds"]["crit_bytes_per_s"] == 1048576
    kinds = {x["id"]: x["kind"] for x in rows}  # what the rule does, never the fact kind it reads
    assert kinds["na-snap-reserve-0"] == "static" and kinds["cpu-ready"] == "live"
    assert set(" + ".join(kinds.values()).replace("/", " + ").replace(" (", " + (").split(" + ")) <= {
        "live", "static", "derived", "event", "(info)", "(manual)"}, kinds
    bios = next(x for x in rows if x["id"] == "bios-prefetchers-default")
    assert not bios["observable"] and "manual" in bios["status"]
    r = run_cli("rules", "-c", str(no_guest(tmp_path)), "--format", "json")
    swap = next(x for x in json.loads(r.stdout) if x["id"] == "guest-swap-zero")
    assert not swap["observable"] and swap["status"] == "not configured: needs [guest]"
    cfg = tmp_path / "o.toml"
    cfg.write_text("[checks.guest-io-latency]\nwarn_ms = 5\n")
    rows = json.loads(run_cli("rules", "-c", str(cfg), "--format", "json").stdout)
    assert next(x for x in rows if x["id"] == "guest-io-latency")["thresholds"]["warn_ms"] == 5
    text = run_cli("rules")
    assert text.returncode == 0 and text.stdout.startswith("129 practices")
    assert "\nHost CPU, hyper-threading, BIOS / Intel platform\n" in text.stdout  # a part by its title


def test_triage_gives_the_stack_verdict(store_path, tmp_path):
    from tests.checks.test_verdict import HEALTHY, WHERE

    now = time.time_ns()
    with Store(store_path, writer=True) as w:
        w.write([Sample(m, t, {**HEALTHY[k], **({"log_write_ms": 12.0} if k == "log" else
                                                {"kernel_latency_ms": 9.0, "queue_latency_ms": 8.0}
                                                if k == "host_lun" else {})}, now - (30 - i) * 20 * 10**9)
                 for i in range(30) for k, (m, t) in WHERE.items()])
    cfg = tmp_path / "stack.toml"  # the DB2 source is down (a closed port): triage judges the store's history
    cfg.write_text('[guest]\nenabled = false\n[[ssh]]\nname = "db2host"\nhost = "127.0.0.1"\nport = 1\n'
                   'user = "db2inst1"\n[[db2]]\nname = "prod"\nssh = "db2host"\ndatabase = "PROD"\n'
                   '[[stack]]\nname = "prod"\ndb2 = "prod"\nvm = "db2prod01"\n')
    r = run_cli("triage", "-c", str(cfg), "--store", str(store_path), "--format", "json", "--lookback", "15m")
    doc = json.loads(r.stdout)
    assert doc["sources"]["db2:prod"].startswith("error: ssh db2inst1@127.0.0.1:1: cannot connect")
    (v,) = doc["verdicts"]
    assert v["stack"] == "prod" and v["layer"] == "host" and "queueing in the hypervisor" in v["summary"]
    text = run_cli("triage", "-c", str(cfg), "--store", str(store_path))
    assert "Verdict for stack prod (blame: host" in text.stdout


def test_triage_of_a_garbage_store_is_unknown_and_says_so_first(tmp_path):
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(bytes(range(256)) * 16)  # not SQLite: the header check fails on open
    r = run_cli("triage", "-c", str(no_guest(tmp_path)), "--store", str(garbage))
    assert r.returncode == 3, r.stdout + r.stderr
    assert "No deviation" not in r.stdout
    # the live guest source still runs, yet the store's history is unjudged: UNKNOWN, named before the findings
    live = run_cli("triage", "--store", str(garbage), "--format", "text")
    assert live.returncode in (2, 3), live.stdout + live.stderr
    if live.returncode == 3:
        head = live.stdout.split("Sources")[0]
        assert "UNKNOWN: source store could not be read" in head and "No deviation" not in live.stdout
    doc = json.loads(run_cli("triage", "--store", str(garbage), "--format", "json").stdout)
    assert "store" in doc["failed_sources"] and doc["sources"]["guest"].startswith("ok")


def test_triage_of_an_unopenable_store_is_unknown(tmp_path):
    store = tmp_path / "store.db"
    store.mkdir()  # a directory where the store file should be: SQLite cannot open it, even as root
    r = run_cli("triage", "--store", str(store))
    assert r.returncode == 3, r.stdout + r.stderr
    assert r.stdout.splitlines()[4].startswith("UNKNOWN: source store") and "No deviation" not in r.stdout


def test_every_rule_reference_names_a_document_a_person_can_find(tmp_path):
    import re

    rules = json.loads(run_cli("rules", "-c", str(no_guest(tmp_path)), "--format", "json").stdout)
    assert rules
    for r in rules:
        assert r["references"], r["id"]
        for ref in r["references"]:
            assert not re.search(r"\d{3}_[0-9a-f]{16}\.txt", ref) and "no seed figure" not in ref, (r["id"], ref)


def test_triage_of_a_store_that_does_not_exist_is_unknown_first(tmp_path):
    """A store named with --store that is not there: its history is what was asked for. UNKNOWN, said on the
    first line, never "No deviation" (issue 28); the same on this machine's default config."""
    for args in (("-c", str(no_guest(tmp_path))), ()):
        r = run_cli("triage", *args, "--store", str(tmp_path / "nonexistent" / "m.db"))
        assert r.returncode == 3, (args, r.stdout, r.stderr)
        first = r.stdout.splitlines()[0]
        assert first.startswith("db2vtop triage: UNKNOWN: ") and "No deviation" not in r.stdout, first
    doc = json.loads(run_cli("triage", "-c", str(no_guest(tmp_path)), "--store", str(tmp_path / "nope.db"),
                             "--format", "json").stdout)
    assert doc["status"] == "UNKNOWN" and doc["unknown"] and doc["sources"]["store"].startswith("error: no store")


def test_triage_of_a_store_with_only_the_agents_own_metrics_is_unknown(store_path, tmp_path):
    now = time.time_ns()
    with Store(store_path, writer=True) as w:
        w.write([Sample("db2vtop_collector", {"collector": "guest"}, {"duration_ms": 3.0, "samples": 0, "errors": 0,
                                                                      "skipped": 0, "status": "ok"},
                        now - k * 10 * 10**9) for k in range(30)])
    r = run_cli("triage", "-c", str(no_guest(tmp_path)), "--store", str(store_path))
    assert r.returncode == 3, r.stdout + r.stderr
    assert r.stdout.startswith("db2vtop triage: UNKNOWN: nothing to judge in the last 1h: no guest, VM, host, DB2 "
                               "or storage data"), r.stdout
    assert "No deviation" not in r.stdout


def test_an_ended_condition_is_resolved_and_a_silent_one_stale(store_path, tmp_path):
    """Within the lookback: a guest that swapped until five minutes ago and is fine since has a resolved finding,
    resolved at its fifth clean sample (exit 0); one that swapped and then stopped reporting half an hour ago has
    a stale one, not a current one."""
    now = time.time_ns()
    minute = 60 * 10**9
    with Store(store_path, writer=True) as w:
        w.write([Sample("guest_mem", {"guest": "ended"}, {"swap_in_bytes_per_s": float(8 << 20 if k > 15 else 0)},
                        now - k * minute // 3) for k in range(1, 90)])
        w.write([Sample("guest_mem", {"guest": "silent"}, {"swap_in_bytes_per_s": float(8 << 20)},
                        now - 30 * minute - k * minute // 3) for k in range(10)])
    r = run_cli("triage", "-c", str(no_guest(tmp_path)), "--store", str(store_path), "--format", "json")
    doc = json.loads(r.stdout)
    by_guest = {f["subject"]["guest"]: f for f in doc["findings"] if f["rule"] == "guest-swap-zero"}
    ended, silent = by_guest["ended"], by_guest["silent"]
    assert ended["resolved_at"] is not None and ended["stale_since"] is None
    assert abs(datetime.fromisoformat(ended["resolved_at"]).timestamp() - (now - 11 * minute // 3) / 1e9) < 1
    assert silent["resolved_at"] is None and silent["stale_since"] is not None
    assert abs(datetime.fromisoformat(silent["stale_since"]).timestamp() - (now - 30 * minute) / 1e9) < 2
    assert r.returncode == 0, doc  # neither is a current condition
    text = run_cli("triage", "-c", str(no_guest(tmp_path)), "--store", str(store_path)).stdout
    assert "Stale: open when their entity stopped reporting" in text and "stale since" in text


def test_no_text_a_user_sees_names_the_projects_inputs(tmp_path):
    """No "seed", "S2", "not in seeds", a seed's file name or practices.md's section numbers (§1.1): not in the
    catalog's fields, the rules' output (text and json, each rule's why and fix), nor any string of the checks or
    the TUI a screen could show; catalog.json cites a white paper by its document id, not its file name."""
    import ast
    import re

    from db2vtop.checks.catalog import baselines, practices
    from db2vtop.checks.rules import all_rules

    internal = re.compile(r"seed|\bS[0-4]\b|\d{3}_[0-9a-f]{16}\.txt|§1\.\d", re.IGNORECASE)
    assert not internal.search((Path(__file__).resolve().parents[2] / "checks" / "catalog.json").read_text())
    for p in practices().values():
        for name in ("section_title", "practice", "figure", "observe_via"):
            assert not internal.search(getattr(p, name)), (p.id, name, getattr(p, name))
        assert all(not internal.search(ref) for ref in p.references), (p.id, p.references)
    assert all(not internal.search(b.meaning) for b in baselines())
    for fmt in ("text", "json"):
        out = run_cli("rules", "-c", str(no_guest(tmp_path)), "--format", fmt).stdout
        assert out and not internal.search(out), internal.search(out)
    for rule in all_rules():
        assert not internal.search(rule.fix) and not internal.search(rule.why()), rule.id
    root = Path(__file__).resolve().parents[2]
    for path in [*root.glob("checks/**/*.py"), *root.glob("tui/**/*.py")]:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                assert not re.search(r"seed", node.value, re.IGNORECASE), (path.name, node.value[:80])


def test_an_older_recordings_references_are_shown_by_title():
    """A store written before the catalog named its documents holds file names and "not in seeds":
    what is shown is the rule's references now, or the stored ones by title for a rule it no longer has."""
    from db2vtop.checks.catalog import references_of

    shown = references_of("cpu-limit-none", ["not in seeds"])
    assert shown and "seed" not in " ".join(shown).lower() and "VMware" in shown[0]
    assert references_of("a-retired-rule", ["000_e991ec30bbd9209f.txt §5.4"]) == [
        "NetApp WP-7109, Best Practices for Virtualizing IBM DB2 with Technologies from VMware, Intel, and NetApp "
        "(2010), §5.4"]


def test_triage_lists_the_recording_agents_threads_in_trouble(store_path, tmp_path):
    """The history may have holes the agent knew of: its threads' health (db2vtop_thread) says so."""
    write_guest_history(store_path, 0.0)
    now = time.time_ns()
    with Store(store_path, writer=True) as w:
        w.write([Sample("db2vtop_thread", {"agent": "db2prod01", "thread": t},
                        {"state": state, "set_aside": n, "retries": r, "last_error": why}, now - k * 10**9)
                 for k, (t, state, n, r, why) in enumerate([
                     ("store-writer", "ok", 0, 0, ""),
                     ("influx-spool", "retrying", 0, 4, "cannot write the spool: No space left on device"),
                     ("collector:markers", "ok", 3, 0, "set aside marker file x.json: not a regular file")])])
    r = run_cli("triage", "-c", str(no_guest(tmp_path)), "--store", str(store_path), "--format", "json")
    doc = json.loads(r.stdout)
    assert [(t["thread"], t["state"], t["set_aside"]) for t in doc["agent_threads"]] == [
        ("collector:markers", "ok", 3), ("influx-spool", "retrying", 0)], r.stderr
    text = run_cli("triage", "-c", str(no_guest(tmp_path)), "--store", str(store_path)).stdout
    assert "Agent threads in trouble" in text and "influx-spool: retrying" in text and "No space left" in text


def test_the_first_line_names_a_failing_collector_before_the_missing_store():
    """`triage -c vc.toml` before any agent ran, with a wrong password: the first line said the store could not be
    read and left the vCenter's refusal, the fix-it, to "(and 1 more)"."""
    from db2vtop.checks.triage import TriageResult, headline
    r = TriageResult(0, 3600.0, [], sources={"store": "error: no store at /tmp/none.db",
                                             "vsphere:vc1": "error: vcenter vc1: login refused for user 'monitor'"})
    line = headline(r)
    assert line.startswith("UNKNOWN: source vsphere:vc1 could not be read (vcenter vc1: login refused for user "
                           "'monitor') (and 1 more)"), line
