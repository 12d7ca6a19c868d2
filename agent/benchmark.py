"""`db2vtop run NAME -- COMMAND`: a benchmark command between its run's begin and end markers.

The command inherits stdin, stdout and stderr, and its exit status is passed through (a
command killed by signal N gives 128 + N, as a shell reports it; one that cannot be started
127 or 126). The markers go into the store directly when nobody writes it, else into the
marker inbox of the agent or `watch` that does (agent/core/markers.py); the end marker carries
the exit status. SIGINT reaches the command from the terminal, which is where it belongs: this
process waits for the command to end and still marks the end. SIGTERM and SIGHUP are passed on.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from db2vtop.agent.core.clock import CLOCK
from db2vtop.agent.core.config import CoreConfig, StackConfig
from db2vtop.agent.core.markers import record_marker, wait_recorded
from db2vtop.agent.core.runs import BEGIN, END, RunNotFoundError, baseline_for, edge_marker, find_run
from db2vtop.agent.core.source import CachedSource, tag_values
from db2vtop.agent.core.store import Store, StoreError
from db2vtop.checks.report import Report, build_report
from db2vtop.checks.topology import DB2_MEASUREMENTS, Inferred, infer_stacks

#: how long to wait for the process writing the store to record the end marker
RECORD_TIMEOUT_S = 15.0


@dataclass
class RunOutcome:
    status: int  # the command's exit status as a shell would report it
    begin_ns: int
    end_ns: int
    recorded: bool  # the end marker is in the store (the report can find the run)
    collected: bool  # another process (agent, watch) was writing the store: samples were collected


def run_command(store_path: Path, name: str, argv: list[str], text: str = "",
                err: TextIO = sys.stderr) -> RunOutcome:
    """Mark the begin, run the command, mark the end. A begin that cannot be marked (a store that
    cannot be written, an inbox refused) raises StoreError before the command starts: a run nobody
    can find afterwards is not a run."""
    command = shlex.join(argv)
    begin = edge_marker(name, BEGIN, text or command, {"by": "run", "command": command})
    try:
        holder = record_marker(store_path, begin)
    except Exception as e:
        why = f"run {name}: cannot mark the begin, so the command is not started: {e}"
        raise (type(e)(why) if isinstance(e, StoreError) else StoreError(why)) from None
    if holder is None:
        print(f"db2vtop: run {name}: no agent or watch is recording {store_path}; the run is marked "
              "but nothing is collected (start `db2vtop agent` first)", file=err)
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:
        try:
            child = subprocess.Popen(argv)  # the user's own command, as given
        except (FileNotFoundError, PermissionError) as e:  # the end marker says so, as a shell would
            missing = isinstance(e, FileNotFoundError)
            print(f"db2vtop: run {name}: {'command not found' if missing else 'permission denied'}: {argv[0]}",
                  file=err)
            rc = 127 if missing else 126
        else:
            signal.signal(signal.SIGINT, signal.SIG_IGN)  # the terminal sends it to the command too
            for sig in (signal.SIGTERM, signal.SIGHUP):
                signal.signal(sig, lambda signum, _frame: child.send_signal(signum))
            rc = child.wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    end_ns = CLOCK.now_ns()
    status = 128 - rc if rc < 0 else rc
    end = edge_marker(name, END, f"exit status {status}", {"by": "run", "command": command,
                                                           "exit_status": str(status)}, end_ns)
    recorded = False
    try:
        queued = record_marker(store_path, end)
        recorded = True if queued is None else wait_recorded(store_path, end, RECORD_TIMEOUT_S)
        if not recorded:
            print(f"db2vtop: run {name}: the end marker is still queued after {RECORD_TIMEOUT_S:g}s "
                  f"({queued}); it is recorded when that process reads its inbox", file=err)
    except Exception as e:
        print(f"db2vtop: run {name}: could not mark the end: {e}", file=err)
    if recorded and holder is not None:
        settle(store_path, end_ns, SETTLE_TIMEOUT_S, lambda text: print(f"db2vtop: run {name}: {text}", file=err))
    return RunOutcome(status, begin.ts, end_ns, recorded, holder is not None)


#: how long to wait for the first sample after the end of the series that were reporting
SETTLE_TIMEOUT_S = 10.0
#: a series whose newest sample is older than this before the end has stopped reporting
STOPPED_NS = 60 * 10**9


def settle(store_path: Path, end_ns: int, timeout: float, say: Callable[[str], None] | None = None) -> bool:
    """Wait until every series that reported near the end of the run has a sample after it (the one
    that covers the run's last moments), at most `timeout` seconds; whether they all have. `say` is
    told what is waited for, once, so the wait is not a silent hang."""
    deadline = time.monotonic() + timeout
    told = False
    while True:
        pending = 0
        try:
            with Store(store_path) as store:
                for m in store.measurements():
                    if m.startswith("db2vtop_"):  # the agent's own: every cycle, nothing to wait for
                        continue
                    pending += sum(1 for _sid, newest in store.newest(m, end_ns - STOPPED_NS, 2**63 - 1)
                                   if newest < end_ns)
        except Exception:
            return False
        if not pending:
            return True
        if time.monotonic() >= deadline:
            if say is not None:
                say(f"{pending} series still had no sample after the end; the report covers what arrived")
            return False
        if say is not None and not told:
            told = True
            say(f"waiting up to {timeout:g} s for the samples that cover the run's end ({pending} series, "
                "e.g. vCenter's next 20 s sample)…")
        time.sleep(0.25)



def make_report(cfg: CoreConfig, store_path: Path, spec: str, baseline: str | None = None, previous: bool = False,
                stacks: Sequence[str] = (), now_ns: int | None = None, workers: int | None = None) -> Report:
    """The report of run `spec` against `baseline` (or, with `previous`, the run of the same name
    before it, when there is one), over the stacks of the config and the store (or those named)."""
    with Store(store_path) as store:
        annotations = store.annotations()
        run = find_run(annotations, spec)
        base = baseline_for(annotations, run, baseline, previous)
        inferred = infer_stacks(cfg, CachedSource(store))
        chosen = report_stacks(inferred, tag_values(store, DB2_MEASUREMENTS, "db2"))
        if stacks:
            every = {s.name: s for s in [*chosen, *(i.stack for i in inferred)]}
            missing = [n for n in stacks if n not in every]
            if missing:
                raise RunNotFoundError(f"no stack named {', '.join(missing)} (db2vtop stacks lists them; without "
                                       f"--stack the report covers: {', '.join(s.name for s in chosen) or 'none'})")
            chosen = [every[n] for n in dict.fromkeys(stacks)]
        if workers is None:  # a large fleet is read by up to 4 processes
            workers = max(1, min(4, len(os.sched_getaffinity(0))))
        report = build_report(store, chosen, run, base, cfg.checks, now_ns, workers)
        if not stacks:  # said, not left out silently: a VM's stack without DB2 is reported when named
            covered = {s.name for s in chosen}
            report.left_out = [i.stack.name for i in inferred if i.stack.name not in covered]
        return report


def report_stacks(inferred: list[Inferred], recorded_db2: list[str]) -> list[StackConfig]:
    """The stacks a report covers (checks/topology.py infer_stacks): the configured ones, the vCenter VMs' that
    have a DB2, the DB2 databases' that have samples, and the lone guests'."""
    return [i.stack for i in inferred if i.configured or i.rule == "guest" or (i.rule == "vcenter" and i.stack.db2)
            or (i.rule == "db2" and i.stack.db2 in recorded_db2)]
