"""The `db2vtop` command line.

It parses arguments and dispatches: what a command does lives in the module it calls (the agent's
lifecycle in agent/service.py). Exit statuses: agent/exits.py.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import socket
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from db2vtop.agent import __version__
from db2vtop.agent.config import Config, load_config, resolve_config, template
from db2vtop.agent.core.config import ConfigError, plaintext_warnings, sections_of
from db2vtop.agent.core.files import append_private, make_private_dir, open_private
from db2vtop.agent.core.paths import default_config_path, state_dir
from db2vtop.agent.core.secrets import SecretError
from db2vtop.agent.core.store import Store, StoreError, StoreLockedError
from db2vtop.agent.core.text import printable
from db2vtop.agent.core.units import format_duration, parse_duration
from db2vtop.agent.exits import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_TRIAGE_UNKNOWN,
    EXIT_USAGE,
    interrupt_promptly,
)
from db2vtop.agent.logs import LOG_FORMATS, setup_logging
from db2vtop.agent.service import AgentService
from db2vtop.agent.sinks.spool import SpoolError

if TYPE_CHECKING:
    from db2vtop.agent.core.influx_source import InfluxSource
    from db2vtop.agent.pipeline import Pipeline

class CommandError(Exception):
    def __init__(self, message: str, status: int = EXIT_FAILED):
        super().__init__(message)
        self.status = status


def _duration(text: str) -> float:
    try:
        return parse_duration(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f'{text!r} is not a duration such as "90s", "5m" or "1h"') from None


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="db2vtop",
        description="Live monitor and headless agent for IBM DB2 in VMware vSphere VMs on shared storage. "
                    "With no command, runs `watch`.",
        epilog="Run `db2vtop COMMAND --help` for the options of a command.")
    p.add_argument("--version", action="version", version=f"db2vtop {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")

    def common(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("-c", "--config", type=Path, metavar="FILE",
                        help=f"config file (default: {default_config_path()} if it exists, else local guest only)")
        sp.add_argument("--store", type=Path, metavar="PATH", help="embedded store file (default: [store] path)")

    def source(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("--source", choices=["store", "influxdb"], metavar="{store,influxdb}",
                        help="read the embedded store file, or every agent's data from the config's [influxdb] "
                             "(default: [view] source, else store)")

    w = sub.add_parser("watch", help="live terminal UI, collecting in-process (the default command)",
                       description="Live terminal UI. Collects in-process into the store; if an agent is already "
                                   "writing the store, attaches to it and shows its data instead. Opens on the "
                                   "Fleet with more than one stack or host, on the stack with one, else on Local. "
                                   "Press ? in the UI for every key.")
    common(w)
    source(w)
    w.add_argument("--read-only", action="store_true", help="no benchmark markers from the UI")

    a = sub.add_parser("agent", help="headless collection into the store",
                       description="Collect on schedule into the embedded store (and InfluxDB when [influxdb] is "
                                   "configured; with [[alert]] sections, alerts from the live verdicts and findings "
                                   "to Alertmanager or webhooks) until SIGTERM/SIGINT, which stop gracefully: "
                                   "in-flight cycles end, "
                                   "the store is flushed and the InfluxDB spool is delivered for up to "
                                   "[influxdb] flush_timeout. SIGHUP reloads the config file without losing "
                                   "spooled data.")
    common(a)
    a.add_argument("--once", action="store_true", help="one cycle of every collector, then exit "
                   "(status 1 if any collector failed; Ctrl-C ends it at once, status 130)")
    a.add_argument("--duration", type=_duration, metavar="SECONDS", help="stop after this long (e.g. 60, 10m)")
    a.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    a.add_argument("--log-format", default="text", choices=LOG_FORMATS,
                   help="text (default) or json: one object per line with ts, level, logger, msg")

    q = sub.add_parser("query", help="print stored samples of one measurement",
                       description="Print the samples of one measurement as a JSON array of "
                                   '{"ts": ns, "measurement", "tags": {...}, "fields": {...}} or as CSV.')
    common(q)
    source(q)
    q.add_argument("--measurement", "-m", required=True, metavar="M", help="e.g. guest_disk")
    q.add_argument("--since", type=_duration, default=3600.0, metavar="DURATION",
                   help="how far back from now (default 1h)")
    q.add_argument("--format", choices=["json", "csv"], default="json")

    rp = sub.add_parser("replay", help="the TUI over a recorded store, scrubbable",
                        description="Open a recorded store at its start with the watch controls: space plays/pauses, "
                                    "←/→ scrub, +/- zoom, home/end jump to the start/end, `:goto 14:05`. Read-only "
                                    "unless --annotate. Stacks come from the config's [[stack]] sections; without "
                                    "-c, one stack per DB2 database in the store, joined to the guest and VM of the "
                                    "same name.")
    rp.add_argument("--store", type=Path, metavar="PATH", help="the recording (required unless --source influxdb)")
    source(rp)
    rp.add_argument("-c", "--config", type=Path, metavar="FILE",
                    help="config whose [[stack]] sections and [checks] levels to use")
    rp.add_argument("--annotate", action="store_true",
                    help="allow benchmark markers (M, :mark) to be added to the recording")

    mk = sub.add_parser("mark", help="add a benchmark marker to the store and sinks",
                        description="Add a marker (e.g. \"run 2 start\") at the current time to a store that exists. "
                                    "If an agent or watch is writing the store, it is queued for that process, which "
                                    "records it and sends it to its sinks.")
    mk.add_argument("name", metavar="NAME")
    mk.add_argument("--text", default="", help="a longer description")
    edge = mk.add_mutually_exclusive_group()
    edge.add_argument("--begin", action="store_true",
                      help="the begin of run NAME (marker `NAME begin`), for `db2vtop report NAME`")
    edge.add_argument("--end", action="store_true", help="the end of run NAME (marker `NAME end`)")
    common(mk)

    rn = sub.add_parser("run", help="run a benchmark command between begin and end markers, then summarise it",
                        usage="db2vtop run NAME [-c FILE] [--store PATH] [--baseline RUN] -- COMMAND [ARGS...]",
                        description="Mark the begin of run NAME, run COMMAND with this terminal's stdin, stdout "
                                    "and stderr, mark the end (with its exit status) and print the run's summary on "
                                    "stderr: the key figures of every stack and layer against the baseline (by "
                                    "default the previous run of the same name). The exit status is the command's. "
                                    "Markers go through the marker inbox when an agent or watch writes the store; "
                                    "without one, nothing is collected during the run.")
    rn.add_argument("name", metavar="NAME")
    common(rn)
    rn.add_argument("--baseline", metavar="RUN", help="compare with this run (default: the previous run of NAME)")

    rr = sub.add_parser("report", help="a run's figures per stack and layer, against a baseline run",
                        description="For every stack and layer, the run's figures (p50, p95, max, mean, with units), "
                                    "the findings opened during the run and the verdict over it; with --baseline, "
                                    "each figure beside the baseline's with the change in percent, and the layers "
                                    "that moved most. RUN is a run's name (its latest run), NAME~N (the Nth run of "
                                    "that name before the latest: bench~1 is the previous bench) or two marker "
                                    "names, FIRST..SECOND.")
    rr.add_argument("run", metavar="RUN", nargs="?")
    common(rr)
    rr.add_argument("--baseline", metavar="RUN",
                    help="the run to compare with: a name (RUN's own name: the run of that name before it), "
                         "NAME~N, or FIRST..SECOND")
    rr.add_argument("--list", action="store_true", help="list the runs in the store (newest first) and exit")
    rr.add_argument("--format", choices=["text", "markdown", "html", "json"], default="text")
    rr.add_argument("-o", "--output", type=Path, metavar="FILE", help="write to FILE instead of stdout")
    rr.add_argument("--stack", action="append", default=[], metavar="NAME",
                    help="report only this stack (repeatable)")

    t = sub.add_parser("triage", help="one-shot diagnosis: findings and the verdict, exit 0/1/2/3",
                       description="Judge recent history (the store, vCenter's realtime hour) and one fresh look at "
                                   "every configured source against the documented practices; each stack's verdict "
                                   "names the layer to blame now and since when, every cause, the co-tenants taking "
                                   "what it contends for (its culprits) and the earlier episodes of the lookback. Exit "
                                   "status, from current findings only (a resolved or stale one "
                                   "does not count): 0 OK, 1 warning, 2 critical, 3 could not run (config, connection, "
                                   "a --store that does not exist, nothing judgeable in the lookback).")
    common(t)
    source(t)
    t.add_argument("--lookback", type=_duration, default=3600.0, metavar="DURATION",
                   help="how far back to judge (default 1h; vCenter keeps at most 1h of 20 s samples, "
                        "its events for days)")
    t.add_argument("--format", choices=["text", "markdown", "json"], default="text")
    t.add_argument("--vm", action="append", default=[], metavar="NAME",
                   help="judge only this VM's stack (repeatable); the exit status is this VM's alone")
    t.add_argument("--stack", action="append", default=[], metavar="NAME", help="judge only this stack (repeatable)")

    sk = sub.add_parser("stacks", help="every stack, configured or inferred, with what each layer was matched by",
                        description="Every [[stack]] section and one inferred stack per vCenter VM no section "
                                    "names (`vcenter/vm` where VM names repeat across vCenters): its guest ([[ssh]] "
                                    "host = the VM's guest host name or IP), DB2 (the [[db2]] on that target) and "
                                    "arrays (the LUN NAA ids behind its disks); then one per DB2 database and per "
                                    "guest no stack holds. From the store's facts and samples, or, when the store "
                                    "has no facts, from the configured sources read now; what could not be matched, "
                                    "and why.")
    common(sk)
    sk.add_argument("--format", choices=["text", "json"], default="text")

    r = sub.add_parser("rules", help="the rule catalog with thresholds, references and observability",
                       description="Every practice of the white papers: its rule, thresholds (with your "
                                   "overrides), references, and whether it is observable with this configuration.")
    r.add_argument("-c", "--config", type=Path, metavar="FILE", help="config whose overrides and sections to apply")
    r.add_argument("--format", choices=["text", "json"], default="text")

    al = sub.add_parser("alert", help="alert receivers: send each a test alert",
                        description="The [[alert]] receivers of a config (docs/alerts.md).")
    alsub = al.add_subparsers(dest="alert_command", metavar="ACTION", required=True)
    alt = alsub.add_parser("test", help="send one test alert to each [[alert]] receiver and say what each answered",
                           description="Send one test alert (alertname DB2vtopTest, severity warning; Alertmanager "
                                       "ends it after 5 minutes) to each [[alert]] receiver, now, past its spool, and "
                                       "print what each answered. Exit status 0 when every receiver took it, else 1.")
    alt.add_argument("-c", "--config", type=Path, metavar="FILE",
                     help=f"config file (default: {default_config_path()} if it exists)")

    c = sub.add_parser("config", help="validate or create a config file")
    csub = c.add_subparsers(dest="config_command", metavar="ACTION", required=True)
    cc = csub.add_parser("check", help="validate a config file (exit 2 on the first error)",
                         description="Validate a config file, including that its secret references can be read.")
    cc.add_argument("-c", "--config", type=Path, metavar="FILE", required=True)
    ci = csub.add_parser("init", help="print a commented config template",
                         description="Print a commented template covering every section, or write it to a file.")
    ci.add_argument("-o", "--output", type=Path, metavar="FILE",
                    help="write to FILE (mode 600, its missing directories made 700) instead of stdout")
    ci.add_argument("--force", action="store_true", help="overwrite FILE if it exists")
    return p


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or (argv[0].startswith("-") and argv[0] not in ("-h", "--help", "--version")):
        argv.insert(0, "watch")
    command: list[str] = []
    if argv[0] == "run" and "--" in argv:  # everything after `--` is the benchmark's own command line
        cut = argv.index("--")
        argv, command = argv[:cut], argv[cut + 1:]
    args = build_parser().parse_args(argv)
    args.command_argv = command
    if args.command in ONE_SHOT or (args.command == "agent" and args.once):
        with interrupt_promptly():
            return _dispatch(args)
    return _dispatch(args)


#: commands that end by themselves: Ctrl-C ends them at once (the TUI and `run` pass it on as their own, the
#: agent stops gracefully); `agent --once` too
ONE_SHOT = frozenset({"triage", "stacks", "config", "query", "report", "rules", "mark"})


def _dispatch(args: argparse.Namespace) -> int:
    try:
        if args.command == "watch":
            return cmd_watch(args)
        if args.command == "agent":
            return cmd_agent(args)
        if args.command == "query":
            return cmd_query(args)
        if args.command == "triage":
            return cmd_triage(args)
        if args.command == "replay":
            return cmd_replay(args)
        if args.command == "mark":
            return cmd_mark(args)
        if args.command == "run":
            return cmd_run(args)
        if args.command == "report":
            return cmd_report(args)
        if args.command == "rules":
            return cmd_rules(args)
        if args.command == "stacks":
            return cmd_stacks(args)
        if args.command == "alert":
            return cmd_alert_test(args)
        if args.config_command == "check":
            return cmd_config_check(args)
        return cmd_config_init(args)
    except ConfigError as e:
        print(f"db2vtop: config error: {printable(str(e))}", file=sys.stderr)
        return EXIT_TRIAGE_UNKNOWN if args.command == "triage" else EXIT_USAGE
    except StoreLockedError as e:
        print(f"db2vtop: {printable(str(e))}", file=sys.stderr)
        return EXIT_USAGE
    except (CommandError, StoreError, SpoolError) as e:  # one line, whatever a remote side put in it
        print(f"db2vtop: {printable(str(e))}", file=sys.stderr)
        return getattr(e, "status", EXIT_FAILED)
    except KeyboardInterrupt:  # the handler said so (interrupt_promptly); the TUI's is a key of its own
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # output piped into head(1) and closed: not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK


def _source(args: argparse.Namespace, cfg: Config | None) -> str:
    return args.source or (cfg.view.source if cfg else "store")


def _influx_opener(cfg: Config) -> Callable[[], InfluxSource]:
    if cfg.influxdb is None:
        where = f" in {cfg.source}" if cfg.source else " (no config file was found)"
        raise CommandError(f"--source influxdb needs an [influxdb] section{where}", EXIT_USAGE)
    from db2vtop.agent.core.influx_source import InfluxSource  # only with --source influxdb

    influx = cfg.influxdb
    return lambda: InfluxSource(influx)


def _open_reader(args: argparse.Namespace, cfg: Config) -> Store | InfluxSource:
    """The store file, or InfluxDB with `--source influxdb`: the same reading methods."""
    return _influx_opener(cfg)() if _source(args, cfg) == "influxdb" else Store(_store_path(args, cfg))


def _store_path(args: argparse.Namespace, cfg: Config) -> Path:
    return Path(os.path.expanduser(str(args.store))) if args.store else cfg.store.path


def cmd_agent(args: argparse.Namespace) -> int:
    store = Path(os.path.expanduser(str(args.store))) if args.store else None
    return AgentService(args.config, store, once=args.once, duration=args.duration, log_level=args.log_level,
                        log_format=args.log_format).run()


def cmd_watch(args: argparse.Namespace) -> int:
    from db2vtop.agent.pipeline import Pipeline
    from db2vtop.tui.app import Db2vtopApp

    cfg = resolve_config(args.config)
    log_file = state_dir() / "watch.log"
    make_private_dir(log_file.parent)
    setup_logging("info", stream=append_private(log_file))  # 0600, never through a link
    path = _store_path(args, cfg)
    fleet = _source(args, cfg) == "influxdb"
    pipeline: Pipeline | None = None
    if fleet:  # a read-only console over every agent's data: nothing collected here
        open_fleet = _influx_opener(cfg)
        with open_fleet() as fleet_source:
            fleet_source.measurements()  # an unreachable InfluxDB is said here, not in an empty screen
    else:  # if an agent is collecting into this store, show its data (and leave InfluxDB to it)
        with contextlib.suppress(StoreLockedError):
            pipeline = Pipeline(cfg, path)
    try:
        Db2vtopApp(path, pipeline.runtime if pipeline else None, stacks=cfg.stack, read_only=args.read_only or fleet,
                   prefer_fleet=fleet or len(cfg.stack) > 1 or bool(cfg.vcenter) or len(cfg.esxtop) > 1,
                   overrides=cfg.checks, config=cfg, source=open_fleet if fleet else None,
                   store_label=cfg.influxdb.url if fleet and cfg.influxdb else None).run()
    finally:
        if pipeline is not None:
            pipeline.close()
    if pipeline is not None and pipeline.supervisor.failed:  # the TUI showed it; the exit status says it too
        print("db2vtop: a part of the collection failed: " + "; ".join(pipeline.supervisor.failures), file=sys.stderr)
        return EXIT_FAILED
    return EXIT_OK


def cmd_replay(args: argparse.Namespace) -> int:
    from db2vtop.tui.app import Db2vtopApp
    from db2vtop.tui.timecursor import TimeCursor

    # the default config file only where InfluxDB is to be read: a recording needs none
    cfg = load_config(args.config) if args.config else resolve_config(None) if args.source == "influxdb" else None
    fleet = _source(args, cfg) == "influxdb"
    if not fleet and args.store is None:
        raise CommandError("replay needs --store PATH (or --source influxdb)", EXIT_USAGE)
    path = Path(os.path.expanduser(str(args.store))) if args.store else Path(os.devnull)
    opener = _influx_opener(cfg) if fleet and cfg else (lambda: Store(path))
    with opener() as store:
        span = store.time_range()
    if span is None:
        raise CommandError(f"{store.path} holds no samples to replay")
    Db2vtopApp(path, None, cursor=TimeCursor.replay(*span), stacks=cfg.stack if cfg else [],
               read_only=fleet or not args.annotate, overrides=cfg.checks if cfg else None, config=cfg,
               source=opener if fleet else None, store_label=str(store.path) if fleet else None).run()
    return EXIT_OK


def cmd_mark(args: argparse.Namespace) -> int:
    from db2vtop.agent.core.markers import deliver_marker
    from db2vtop.agent.core.model import Annotation

    cfg = resolve_config(args.config)
    if args.begin or args.end:
        from db2vtop.agent.core.runs import BEGIN, END, edge_marker

        marker = edge_marker(args.name, BEGIN if args.begin else END, args.text, {"by": "cli"})
    else:
        marker = Annotation("marker", args.name, {"by": "cli"}, args.text)
    path = _store_path(args, cfg)
    if not path.exists():  # a mistyped --store would make a store (and directories) nobody records into
        raise CommandError(f"no store at {path}; a marker goes into the store an agent or watch records "
                           "(start one first, or name its store with --store)")
    print(deliver_marker(path, marker))
    return EXIT_OK


def cmd_run(args: argparse.Namespace) -> int:
    from db2vtop.agent.benchmark import make_report, run_command
    from db2vtop.agent.core.runs import RunNotFoundError
    from db2vtop.checks.report_render import summary

    if not args.command_argv:
        print("usage: db2vtop run NAME [-c FILE] [--store PATH] [--baseline RUN] -- COMMAND [ARGS...]\n"
              "db2vtop run: error: no command after --", file=sys.stderr)
        return EXIT_USAGE
    cfg = resolve_config(args.config)
    path = _store_path(args, cfg)
    outcome = run_command(path, args.name, args.command_argv)
    if outcome.recorded:
        try:
            report = make_report(cfg, path, args.name, args.baseline, previous=True)
            sys.stderr.write(printable(summary(report), lines=True))
        except (RunNotFoundError, StoreError) as e:
            print(f"db2vtop: run {args.name}: no summary: {e}", file=sys.stderr)
    return outcome.status


def _run_list(path: Path) -> str:
    """`report --list`: every run, newest first, with the name each can be reported by (NAME, NAME~1...)."""
    from db2vtop.agent.core.runs import runs

    with Store(path) as store:
        found = runs(store.annotations())
    if not found:
        return f"no runs in {path} (db2vtop run NAME -- COMMAND records one)\n"
    seen: dict[str, int] = {}
    lines = []
    for r in reversed(found):
        back = seen.get(r.name, 0)
        seen[r.name] = back + 1
        spec = r.name if back == 0 else f"{r.name}~{back}"
        begin = datetime.fromtimestamp(r.begin_ns / 1e9, UTC).strftime("%Y-%m-%d %H:%M:%S")
        span = "still running" if r.open else f"{r.duration_s(r.begin_ns):,.0f} s"
        status = f", exit status {r.exit_status}" if r.exit_status is not None else ""
        what = f"  {r.command}" if r.command else ""
        lines.append(f"{spec:<20} {begin} UTC  {span}{status}{what}")
    return "\n".join(lines) + "\n"


def cmd_report(args: argparse.Namespace) -> int:
    from db2vtop.agent.benchmark import make_report
    from db2vtop.agent.core.runs import RunNotFoundError
    from db2vtop.checks import report_render

    cfg = resolve_config(args.config)
    path = _store_path(args, cfg)
    if not path.exists():
        raise CommandError(f"no store at {path}")
    if args.list:
        sys.stdout.write(_run_list(path))
        return EXIT_OK
    if args.run is None:
        raise CommandError("report needs RUN (db2vtop report --list shows the runs)", EXIT_USAGE)
    try:
        report = make_report(cfg, path, args.run, args.baseline, stacks=args.stack)
    except RunNotFoundError as e:
        raise CommandError(f"{path}: {e}") from None
    if args.format == "json":
        text = report_render.to_json(report) + "\n"
    elif args.format == "html":
        text = report_render.to_html(report)
    else:  # names in it come from the sources: nothing in them acts on the terminal
        text = printable(report_render.to_text(report, markdown=args.format == "markdown"), lines=True)
    if args.output is None:
        sys.stdout.write(text)
        return EXIT_OK
    try:  # the user's own file: the umask's mode, but never written through a link
        fd = os.open(args.output, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
    except OSError as e:
        raise CommandError(f"cannot write {args.output}: {e.strerror}") from None
    print(f"wrote {args.output}", file=sys.stderr)
    return EXIT_OK


def cmd_query(args: argparse.Namespace) -> int:
    from db2vtop.agent.query import write_csv, write_json

    cfg = resolve_config(args.config)
    with _open_reader(args, cfg) as store:
        known = store.measurements()
        if args.measurement not in known:
            raise CommandError(f"no measurement {args.measurement!r} in {store.path}; it has: "
                               + (", ".join(known) or "nothing yet"))
        since = time.time_ns() - int(args.since * 1e9)
        rows = store.rows(args.measurement, since)
        (write_json if args.format == "json" else write_csv)(rows, sys.stdout)
    return EXIT_OK


def _progress() -> Callable[[str], None]:
    """What a command reading sources is doing, on a terminal's stderr ("… collecting now from vsphere:vc1")."""
    if sys.stderr.isatty():
        return lambda m: print(f"… {m}", file=sys.stderr, flush=True)
    return lambda _m: None


def cmd_triage(args: argparse.Namespace) -> int:
    import json

    from db2vtop.agent.gather import NoSuchTargetError, run_triage
    from db2vtop.checks.triage import could_not_run, to_json, to_text

    logging.basicConfig(level=logging.ERROR, stream=sys.stderr)
    cfg = resolve_config(args.config)
    try:
        result = run_triage(cfg, _store_path(args, cfg), args.lookback, _progress(), vms=args.vm, stacks=args.stack,
                            source=_source(args, cfg), store_named=bool(args.store))
    except NoSuchTargetError as e:
        print(f"db2vtop: {e}", file=sys.stderr)
        return EXIT_TRIAGE_UNKNOWN
    fleet = result.sources.get("influxdb", "ok")
    # what was asked to be read could not be: the history is missing, whatever else looked now
    reason = could_not_run(result) or (fleet.removeprefix("error: ") if fleet.startswith("error") else None)
    if reason:
        print(f"db2vtop: triage could not run: {reason}", file=sys.stderr)
        result.blind = reason
    if args.format == "json":
        print(json.dumps(to_json(result), indent=2, ensure_ascii=False))
    else:
        sys.stdout.write(printable(to_text(result, markdown=args.format == "markdown"), lines=True))
    return EXIT_TRIAGE_UNKNOWN if reason else result.exit_status


def cmd_stacks(args: argparse.Namespace) -> int:
    import json

    from db2vtop.agent.core.source import CachedSource, MemorySource
    from db2vtop.agent.gather import look_now
    from db2vtop.checks.topology import infer_stacks

    cfg = resolve_config(args.config)
    path = _store_path(args, cfg)
    stacks, where, recorded = [], "the store", False
    if path.exists():
        with Store(path) as store:
            view = CachedSource(store)
            recorded = bool(view.facts())
            stacks = infer_stacks(cfg, view)
    if not recorded:  # no facts recorded (yet): ask the sources, as triage does
        looked = look_now(cfg, progress=_progress(), facts_only=True)
        stacks, where = infer_stacks(cfg, MemorySource(facts=looked.facts)), "the sources, read now"
        for name, status in looked.sources.items():
            if not status.startswith("ok"):
                print(printable(f"db2vtop: {name}: {status}"), file=sys.stderr)
    if args.format == "json":
        print(json.dumps([i.to_json() for i in stacks], indent=2, ensure_ascii=False))
        return EXIT_OK
    for i in stacks:  # VM and host names come from vCenter: printed escaped
        s = i.stack
        vcenter = f", vCenter {s.vcenter}" if s.vcenter else ""
        print(printable(f"{s.name} ({'configured' if i.configured else 'inferred'}): vm {s.vm or '—'}, guest "
                        f"{s.guest or '—'}, db2 {s.db2 or '—'}, storage {', '.join(s.storage) or '—'}{vcenter}"))
        for layer, why in i.matched.items():
            print(printable(f"    {layer}: {why}"))
        for layer, why in i.unmatched.items():
            print(printable(f"    {layer}: not matched: {why}"))
    if not stacks:
        print("no stacks: no [[stack]] section, and no vCenter VM, DB2 or guest in the store or the sources")
    else:
        print(f"(inferred from {where})")
    return EXIT_OK


def cmd_rules(args: argparse.Namespace) -> int:
    from db2vtop.checks.listing import rule_rows, write_rules
    from db2vtop.checks.runner import build_engine

    cfg = resolve_config(args.config)
    write_rules(rule_rows(cfg, build_engine(cfg)), args.format, sys.stdout)
    return EXIT_OK


def cmd_config_check(args: argparse.Namespace) -> int:
    from db2vtop.checks.runner import build_engine

    cfg = load_config(args.config)
    build_engine(cfg)  # [checks.RULE] thresholds: known keys, typed, in range, warn/crit in order
    refs = [(where, getattr(item, kind)(), getattr(item, "user", None) or "")
            for _, where, item in sections_of(cfg) for kind in ("password", "token", "secret") if hasattr(item, kind)]
    for where, ref, user in refs:
        if ref is None:
            continue
        try:
            ref.resolve(user)
        except SecretError as e:
            raise ConfigError(str(args.config), where, f"secret not readable: {e}") from None
    for warning in plaintext_warnings(cfg):
        print(f"db2vtop: warning: {warning}", file=sys.stderr)
    counts = ", ".join(f"{len(getattr(cfg, s))} {s}" for s in ("vcenter", "ssh", "db2", "storage", "esxtop", "stack"))
    print(f"{args.config}: OK ({counts}; influxdb {'on' if cfg.influxdb else 'off'}; "
          f"alert {', '.join(f'{a.name} ({a.kind})' for a in cfg.alert) or 'off'}; "
          f"guest {'every ' + format_duration(cfg.guest.interval) if cfg.guest.enabled else 'off'}; "
          f"store {cfg.store.path}, retention {format_duration(cfg.store.retention)})")
    return EXIT_OK


def cmd_alert_test(args: argparse.Namespace) -> int:
    from db2vtop.agent.sinks.receivers import DeliveryError, Receiver, test_change

    cfg = resolve_config(args.config)
    if not cfg.alert:
        where = f" in {cfg.source}" if cfg.source else " (no config file was found)"
        raise CommandError(f"no [[alert]] section{where}", EXIT_USAGE)
    for warning in plaintext_warnings(cfg):
        print(f"db2vtop: warning: {warning}", file=sys.stderr)
    failed = 0
    for a in cfg.alert:
        try:
            answer = str(Receiver(a, socket.gethostname()).send([test_change(time.time_ns())]))
        except DeliveryError as e:
            failed += 1
            answer = f"{e.state}: {e}"
        print(printable(f"{a.name} ({a.kind} {a.url}): {answer}"))
    return EXIT_FAILED if failed else EXIT_OK


def cmd_config_init(args: argparse.Namespace) -> int:
    text = template()
    if args.output is None:
        sys.stdout.write(text)
        return EXIT_OK
    flags = os.O_WRONLY | os.O_CREAT | (os.O_TRUNC if args.force else os.O_EXCL)
    output = Path(os.path.expanduser(str(args.output)))
    try:  # 0600 (an existing file of ours too) and never through a link, in a 0700 directory made if missing
        make_private_dir(output.parent)
        fd = open_private(output, flags)
    except FileExistsError:
        raise CommandError(f"{args.output} exists; use --force to overwrite it", EXIT_USAGE) from None
    except OSError as e:
        raise CommandError(f"cannot write {args.output}: {e.strerror}") from None
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
    print(f"wrote {args.output}; check it with: db2vtop config check -c {args.output}", file=sys.stderr)
    return EXIT_OK
