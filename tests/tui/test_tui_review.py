"""The second newcomer review's TUI findings, each as the user met it: the real `db2vtop` in a pty, its screen
read through a terminal emulator (tests/infra/pty_term.py), at 80x24 unless the finding is about another size.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from pathlib import Path

import pytest

from db2vtop.agent.core.model import Fact, Sample
from db2vtop.agent.core.store import Store, store_writer
from tests.infra.pty_term import Terminal, contrast
from tests.infra.tui_fixture import T0, build_store, write_config
from tests.tui.test_tui_terminal import ROOT, db2vtop, env_for

S = 10**9


def vcenter_config(path: Path) -> Path:
    """A config naming a vCenter (the Fleet is the first screen); nothing is collected from it here."""
    path.write_text('[[vcenter]]\nname = "vc1"\nurl = "https://127.0.0.1:9/sdk"\nuser = "monitor"\n'
                    'password_env = "VC1_PASSWORD"\nverify_tls = false\n')
    return path


def test_the_fleet_starts_on_its_top_row_when_later_rows_sort_above_the_first_ones(tmp_path):
    """N8: the first frame held one row (a guest); the VMs that came next sorted above it and pushed it off the
    screen. The cursor stays on the top row until the user moves it, so Enter opens what is on top."""
    store = tmp_path / "m.db"
    now = time.time_ns()
    with Store(store, writer=True) as agent:  # the agent writing the store: watch attaches to it
        agent.write([Sample("guest_cpu", {"guest": "zz-guest", "cpu": "total"}, {"busy_pct": 5.0}, now)])
        term = Terminal([*db2vtop(), "watch", "-c", str(vcenter_config(tmp_path / "vc.toml")), "--store", str(store)],
                        80, 24, truecolor=False, env=env_for(tmp_path / "home"), cwd=ROOT)
        try:
            term.wait(lambda s: " Fleet " in s and "zz-guest" in s, 30, "the Fleet's first row")
            agent.write([Sample("vsphere_vm", {"vcenter": "vc1", "vm": f"vm{i:02d}", "host": "esx01"},
                                {"cpu_usage_pct": 10.0, "cpu_ready_pct": 0.5}, now + S) for i in range(1, 31)])
            term.wait(lambda s: "vm01" in s and "zz-guest" not in s, 30, "the VMs above the guest")
            term.send("\r")
            screen = term.wait(lambda s: "Fleet › vm vm01" in s and "in the window" in s, 20, "vm01's Stack screen")
            assert "Local ›" not in screen
            assert "(1 sample in the window)" in screen, screen  # counted right ("1 samples")
        finally:
            term.close()


def test_watch_says_when_the_agent_it_is_attached_to_stops(tmp_path):
    """N17: `watch` on a store an agent writes names that agent, and says so when it has stopped (it went on
    saying "attached to the agent writing this store" with every collector STALE)."""
    store = tmp_path / "m.db"
    env = env_for(tmp_path / "home")
    agent = subprocess.Popen([*db2vtop(), "agent", "--store", str(store), "--duration", "8s"], cwd=ROOT,
                             env={**os.environ, **env}, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    term = None
    try:
        deadline = time.monotonic() + 30
        while store_writer(store) is None:  # the agent has the store
            assert agent.poll() is None and time.monotonic() < deadline, agent.stderr.read() if agent.stderr else ""
            time.sleep(0.1)
        term = Terminal([*db2vtop(), "watch", "--store", str(store)], 80, 24, truecolor=False, env=env, cwd=ROOT)
        term.wait(lambda s: f"attached to agent {agent.pid}" in s, 30, "the agent's pid in the title")
        assert agent.wait(30) == 0
        screen = term.wait(lambda s: "stopped at" in s, 20, "the agent's stop said")
        flat = " ".join(line.strip() for line in screen.splitlines())
        assert f"agent (pid {agent.pid}) stopped at" in flat, screen
        assert f"attached to agent {agent.pid}" not in screen
    finally:
        if term is not None:
            term.close()
        if agent.poll() is None:
            agent.kill()
        agent.wait()


def test_local_paused_before_the_guests_first_sample_shows_no_number_of_another_moment(tmp_path):
    """N5: paused at a moment before the guest's first sample, Local showed the numbers it had shown last (the
    live ones) as if they were then. Every figure belongs to the cursor's moment or is "—"."""
    store = tmp_path / "m.db"
    with Store(store, writer=True) as w:  # vCenter from 12:00, the guest only from 12:10
        w.write([Sample("vsphere_host", {"vcenter": "vc1", "host": f"esx0{h}"}, {"cpu_usage_pct": 30.0},
                        T0 + k * 20 * S) for h in (1, 2) for k in range(45)]
                + [Sample("guest_cpu", {"guest": "db2prod01", "cpu": cpu}, {
                    "busy_pct": 57.6, "user_pct": 39.4, "system_pct": 17.3, "iowait_pct": 3.5, "steal_pct": 0.0,
                    "idle_pct": 42.4, "load1": 1.51, "load5": 1.89, "load15": 1.34, "procs_running": 3,
                    "procs_blocked": 0}, T0 + 600 * S + k * 5 * S) for cpu in ("total", "0", "1") for k in range(60)]
                + [Sample("guest_mem", {"guest": "db2prod01"}, {
                    "total_bytes": 64 * 2**30, "used_bytes": 52 * 2**30, "used_pct": 81.3,
                    "available_bytes": 12 * 2**30}, T0 + 600 * S + k * 5 * S) for k in range(60)])
    term = Terminal([*db2vtop(), "replay", "--store", str(store)], 80, 24, truecolor=False,
                    env=env_for(tmp_path / "home"), cwd=ROOT)
    try:
        term.wait_for(" Fleet ", 30)
        term.send("\x1b[F")  # end: the recording's last moment
        term.wait_for("12:14:55")
        term.send("4")
        term.wait(lambda s: "busy 57.6%" in s and "81.3%" in s, 20, "Local at the end")
        term.send("\x1b[H")  # home: the recording's first moment, before the guest's first sample
        screen = term.wait(lambda s: "12:05:00" in s and "no sample at 12:05:00" in s, 20, "Local at 12:05")
        for shown_before in ("57.6", "39.4", "1.51", "81.3", "52.0GiB"):
            assert shown_before not in screen, screen
        assert "busy —%" in screen and "load — — —" in screen, screen
    finally:
        term.close()


def test_the_tui_opens_every_stack_db2vtop_stacks_lists(tmp_path):
    """F20: `db2vtop stacks` listed a stack per vCenter VM while `:stack NAME` said "stacks: none" and `2` "no
    stack": the TUI knows every stack the one resolver infers."""
    store = tmp_path / "m.db"
    vms = [(f"web{i:02d}", f"esx0{i % 2 + 1}") for i in range(1, 5)]
    with Store(store, writer=True) as w:
        w.write([Sample("vsphere_vm", {"vcenter": "vc1", "vm": vm, "host": host}, {"cpu_ready_pct": 1.0},
                        T0 + k * 20 * S) for vm, host in vms for k in range(15)]
                + [Sample("vsphere_host", {"vcenter": "vc1", "host": host}, {"cpu_ready_pct": 1.0}, T0 + k * 20 * S)
                   for host in ("esx01", "esx02") for k in range(15)],
                facts=[Fact("vsphere_vm", {"vcenter": "vc1", "vm": vm}, {"host": host, "disks": [], "nics": [],
                                                                          "ip_addresses": [], "guest_hostname": vm}, T0)
                       for vm, host in vms])
    env = env_for(tmp_path / "home")
    listed = subprocess.run([*db2vtop(), "stacks", "--store", str(store)], cwd=ROOT, env={**os.environ, **env},
                            capture_output=True, text=True, timeout=60)
    names = [line.split(" (")[0] for line in listed.stdout.splitlines() if " (inferred)" in line]
    assert names == ["web01", "web02", "web03", "web04"], listed.stdout + listed.stderr
    term = Terminal([*db2vtop(), "replay", "--store", str(store)], 80, 24, truecolor=False, env=env, cwd=ROOT)
    try:
        term.wait(lambda s: " Fleet " in s and "web04" in s, 30, "the Fleet")
        term.send("2")  # the first stack
        term.wait_for("Fleet › stack web01", 20)
        term.send(":")
        term.wait_for("stack NAME  vm NAME")
        term.send("stack web03\r")
        term.wait(lambda s: "Fleet › stack web03" in s and "VM web03 on esx02" in s, 20, "web03's Stack screen")
    finally:
        term.close()


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    d = tmp_path_factory.mktemp("fleet")
    return build_store(d / "fleet.db"), write_config(d / "stacks.toml")


def replay(tmp_path: Path, fleet, cols: int = 80, rows: int = 24) -> Terminal:
    store, config = fleet
    term = Terminal([*db2vtop(), "replay", "--store", str(store), "-c", str(config)], cols, rows, truecolor=False,
                    env=env_for(tmp_path / "home"), cwd=ROOT)
    term.wait(lambda s: " Fleet " in s and "prod01" in s, 30, "the Fleet with data")
    return term


def command(term: Terminal, text: str) -> None:
    term.send(":")
    term.wait_for("stack NAME  vm NAME")
    term.send(text)


def test_fleet_keys_and_commands_at_80x24(tmp_path, fleet):
    """The sorted column keeps its arrow at six cells; :zoom takes the window asked for (2h became 1h) and says
    what it takes; an error on the key bar is readable (it was light grey on light red, 2:1); Tab again takes the
    next match (it completed the first only); the help and the palette name the zoom steps alike (1d, not 24h)."""
    term = replay(tmp_path, fleet)
    try:
        term.send("L")
        term.wait_for("I/O m▼")
        command(term, "zoom 2h\r")
        term.wait_for("window 2h")
        command(term, "zoom 9d\r")
        term.wait_for("zoom is a window from 1m to 1d")
        bar = [c for c in term.cells() if c.y == 23 and c.char.strip()]
        worst = min(contrast(c.fg, c.bg) for c in bar)
        assert worst >= 4.5, f"the error on the key bar at {worst:.1f}:1: {term.lines()[23]!r}"
        command(term, "vm app000")
        term.wait_for(":vm app000")
        term.send("\t")
        term.wait(lambda s: ":vm app0003" in s and "app0004  app0005" in s, 10, "the first match, and the others")
        term.send("\t")
        term.wait_for(":vm app0004", 10)
        term.send("\x1b")
        term.wait(lambda s: "tab: the next" not in s, 10, "the command line closed")
        term.send("?")
        screen = term.wait_for("db2vtop keys")
        assert "1m 5m 15m 1h 4h 1d" in screen and "24h" not in screen, screen
    finally:
        term.close()


def test_the_stack_screen_at_80x24_names_its_own_sources_and_its_vnics(tmp_path, fleet):
    """The Stack screen's status line names the stack's sources (it named the agent's `self` instead: the stack
    named its collectors vc1, prod01 while the agent names them vsphere:vc1, db2:prod01); the network panel names a
    vNIC by its label, not its device key, and gives rates with their unit (221.5K/s, 0/s); its time axis has
    times at 80 columns in a 5-minute window (it had only its legend: its step was chosen for HH:MM:SS labels)."""
    term = replay(tmp_path, fleet)
    try:
        command(term, "zoom 5m\r")  # before the Stack screen opens: its first chart is of 5 minutes
        term.wait_for("window 5m")
        command(term, "goto 12:10:10\r")  # its only 5-minute tick (12:10) too near its end for a label
        term.wait_for("12:10:10 · paused")
        term.send("2")
        screen = term.wait(lambda s: "Fleet › stack prod01" in s and "● db2:prod01 ok" in s, 20, "the Stack screen")
        assert "● self" not in screen, screen
        axis = next(line for line in screen.splitlines() if "▼ marker" in line)  # the time axis, under the legend
        assert re.search(r"└\d\d:\d\d", axis), screen  # it had the legend only, no time
        term.send("n")
        screen = term.wait(lambda s: "n network" in s and "Network adapter 1" in s, 20, "the network panel")
        assert "3.9MiB/s" in screen and "4000" not in screen, screen
    finally:
        term.close()


def test_local_at_80x24_keeps_each_figure_whole_and_filters_every_table(tmp_path, fleet):
    """N2, F1, N3: at 80 columns a figure is never split over two lines (`major` / `faults 0.8/s`), a header never
    cut mid-word (`%ut`), rates carry their unit; `/` filters the disks and the interfaces alike (it filtered the
    disks only), and a table it empties says so."""
    term = replay(tmp_path, fleet)
    try:
        term.send("4")
        screen = term.wait(lambda s: "Local › guest db2prod01" in s and "ens192" in s and "busy 58.5%" in s, 20,
                           "Local")
        lines = screen.splitlines()
        for phrase in (r"iowait \S+", r"load \S+ \S+ \S+", r"major faults \S+/s", r"swap used \S+", r"in \S+/s"):
            assert any(re.search(phrase, line) for line in lines), (phrase, screen)
        header = next(line for line in lines if "device" in line and "type" in line)
        assert header.rstrip(" │").endswith(("%util", "%util trend")), header
        assert "3.8MiB/s" in screen and "10.5MiB/s" in screen, screen
        term.send("/")
        term.wait_for("filter: regex")
        for ch in "ens":
            term.send(ch)
        screen = term.wait(lambda s: "no row matches /ens" in s, 20, "the disks filtered out")
        assert "ens192" in screen and "sdb" not in screen, screen
        term.send("\x1b")  # clears it
        term.wait(lambda s: "sdb" in s and "no row matches" not in s, 20, "the filter cleared")
    finally:
        term.close()


def test_the_help_dialog_scrolls_with_a_bar_that_shows_at_80x24(tmp_path, fleet):
    """The help's scroll thumb was a stray block inside the text: its track was the dialog's own colour. The bar is
    against the dialog's edge, its track drawn in a colour of its own from top to bottom."""
    term = replay(tmp_path, fleet)
    try:
        term.send("?")
        term.wait_for("db2vtop keys")
        cells = {(c.x, c.y): c for c in term.cells()}
        edge = next(x for x in range(79, 0, -1) if cells[(x, 10)].char == "█")  # the dialog's right border
        dialog_bg = cells[(2, 2)].bg  # inside its left edge, above the text
        inside = [y for y in range(24) if cells[(edge, y)].char == "█" and cells[(edge - 4, y)].char not in "▀▄"]
        column = [cells[(edge - 1, y)] for y in inside]  # against the border, top to bottom
        bar = [c for c in column if c.bg != dialog_bg]  # the track and the thumb: all of it but the padding lines
        assert len(bar) >= len(column) - 2 and [c.y for c in bar] == list(range(bar[0].y, bar[-1].y + 1)), \
            [(c.y, c.char, c.fg, c.bg) for c in column]
        assert all(c.char in " ▀▄█▁▔▂▃▅▆▇" for c in bar), term.text()  # the bar's glyphs, no text
    finally:
        term.close()


def test_the_fleets_finding_column_takes_the_room_of_a_wide_terminal(tmp_path, fleet):
    """At 160 columns the finding's text was cut at 36 cells with 40 free columns beside it."""
    term = replay(tmp_path, fleet, 160, 45)
    try:
        screen = term.wait_for("CRIT CPU ready 12.9% per vCPU · cpu-ready", 20)
        assert "cpu-re…" not in screen
    finally:
        term.close()


def test_the_findings_detail_fills_its_pane_at_80x24(tmp_path, fleet):
    """The Findings screen's detail stopped after its first lines (a rule meant for the Stack screen's panel table,
    which shares its id, held it to 45 % of its pane): its evidence, why and fix were cut off above empty rows."""
    term = replay(tmp_path, fleet)
    try:
        term.send("3")
        screen = term.wait(lambda s: "─ Detail ─" in s and "CPU ready 12.9% per vCPU" in s, 20, "the Findings screen")
        lines = screen.splitlines()
        top = next(i for i, line in enumerate(lines) if "─ Detail ─" in line)
        pane = "\n".join(lines[top:])
        for word in ("evidence", "why", "fix"):
            assert f"│ {word} " in pane, pane
        # the rest scrolls: its bar against the pane's border, its track drawn (a thumb alone was a stray ▅▅ in
        # the text)
        cells = {(c.x, c.y): c for c in term.cells()}
        inside = range(top + 1, next(i for i in range(top + 1, 24) if lines[i].startswith("╰")))
        bar = [cells[(78, y)] for y in inside]
        assert all(c.bg != cells[(1, c.y)].bg or c.char.strip() for c in bar), [(c.y, c.char, c.fg, c.bg) for c in bar]
        assert not [cells[(x, y)] for x in (76, 77) for y in inside if cells[(x, y)].char in "▁▂▃▄▅▆▇█"], pane
    finally:
        term.close()


def test_the_findings_table_names_each_subject_first_at_80x24(tmp_path, fleet):
    """F13: the subject column listed the subject's tags in their stored order (`vcenter=vc1…`, `aspect=devi…`),
    cut at 80 columns before the VM or host it is about, and the summary beside it is shown without that name:
    nothing on the row said which VM. It names the subject as the summary does (`app0004`, `esx01.lab naa.…`)."""
    term = replay(tmp_path, fleet)
    try:
        term.send("3")
        screen = term.wait(lambda s: "─ Detail ─" in s and "CPU ready 12.9% per vCPU" in s, 20, "the Findings screen")
        rows = [line for line in screen.splitlines() if line.startswith(("CRIT ", "WARN "))]
        ready = next(line for line in rows if "cpu-ready" in line)
        assert " app0004 " in ready, screen
        assert not any("vcenter=" in line for line in rows), screen
    finally:
        term.close()


def test_goto_outside_the_recording_says_where_it_landed_at_80x24(tmp_path, fleet):
    """F22: `:goto 23:59` at 20:06 landed on the newest moment, paused, without a word (and a time before the
    recording on its start): the key bar says the time asked for is outside and where the cursor is."""
    term = replay(tmp_path, fleet)
    try:
        command(term, "goto 12:10\r")  # inside: no word
        screen = term.wait_for("12:10:00 · paused", 10)
        assert "sample: at" not in screen, screen
        command(term, "goto 23:59\r")
        screen = term.wait_for("23:59 is after the newest sample: at 12:14:40", 10)
        assert "12:14:40 · paused" in screen, screen
        command(term, "goto 11:00\r")
        term.wait_for("11:00 is before the first sample: at 12:", 10)
    finally:
        term.close()


def test_a_replay_says_when_it_reaches_the_end_at_80x24(tmp_path, fleet):
    """A replay played to its end stopped there, paused, without a word: the key bar says it, and how to play it
    again."""
    term = replay(tmp_path, fleet)
    try:
        command(term, "goto 12:14:00\r")
        term.wait_for("12:14:00 · paused", 10)
        term.send(">")
        term.wait_for("replay at 10×", 10)
        term.send(" ")
        screen = term.wait_for("end of the recording at 12:14:40: space plays it again from the start", 20)
        assert "12:14:40 · paused" in screen, screen
    finally:
        term.close()


def test_the_fleet_at_60x15_still_says_what_is_wrong(tmp_path, fleet):
    """New-4: at 60 columns the finding column was past the edge, whole: a critical VM showed only as a red rdy%.
    The finding is the Fleet's key column (k9s and htop keep theirs): the number columns nearest it give way
    until its severity shows."""
    term = replay(tmp_path, fleet, 60, 15)
    try:
        screen = term.wait(lambda s: "app0003" in s or "prod01" in s, 20, "the Fleet's rows")
        header = next(line for line in screen.splitlines() if line.startswith("kind"))
        assert "worst" in header and "rdy%" in header, screen
        assert re.search(r"^\S+\s+\S+ .*\b(CRIT|WARN) ", screen, re.M), screen  # a finding's severity on a row
    finally:
        term.close()


def test_local_at_60x15_splits_no_figure_and_cuts_no_disk_header(tmp_path, fleet):
    """New-5: at 60 columns the Memory pane wrapped its `used … of … (81.3%)` figure (the percentage alone on the
    next line) and the Disks header was cut to `w_awai`. The figure becomes two whole phrases; a disk column that
    does not fit whole is left out."""
    term = replay(tmp_path, fleet, 60, 15)
    try:
        term.send("4")
        screen = term.wait(lambda s: "Local › guest db2prod01" in s and "device" in s and "used" in s, 20, "Local")
        lines = screen.splitlines()
        assert any(re.search(r"used \S+ \(\d+\.\d%\)", line) for line in lines), screen
        assert not any(re.search(r"│ \(\d+\.\d%\)", line) for line in lines), screen
        header = next(line for line in lines if "device" in line and "type" in line)
        names = {"device", "type", "r/s", "w/s", "read", "write", "r_await", "w_await", "aqu-sz", "%util"}
        assert set(header.strip(" │").split()) <= names, header
    finally:
        term.close()


def test_the_findings_detail_wraps_its_text_under_its_own_start(tmp_path, fleet):
    """New-6: a `why`/`fix`/`reference` text longer than the pane wrapped back to column 0, under its label. Each
    goes on under its own start (a hanging indent, as the help's)."""
    term = replay(tmp_path, fleet, 80, 40)
    try:
        term.send("3")
        screen = term.wait(lambda s: "│ reference " in s and "first seen" in s, 20, "the Findings detail")
        lines = screen.splitlines()
        at = next(i for i, line in enumerate(lines) if line.startswith("│ reference "))
        end = next(i for i, line in enumerate(lines) if "│ first seen" in line)
        assert end - at >= 2, screen  # the reference is longer than one line here
        assert all(line.startswith("│" + " " * 11) and line[12] != " " for line in lines[at + 1:end]), screen
    finally:
        term.close()


def test_the_stack_gives_every_latency_in_ms_with_two_decimals(tmp_path, fleet):
    """F18: the LUN panel mixed decimals (`GAVG 1.0 KAVG 0.00 DAVG 38.0 QAVG 0.00`), and so did the layers'
    summaries (`GAVG 1.0 ms`, `KAVG 0.00 ms`). One format per unit, as esxtop's disk panels: ms with 2 decimals."""
    term = replay(tmp_path, fleet, 120, 40)
    try:
        term.send("2")
        term.wait(lambda s: "Fleet › stack prod01" in s and "KAVG" in s, 20, "the Stack screen")
        term.send("u")
        screen = term.wait(lambda s: re.search(r"^naa\.\S+ ", s, re.M) is not None, 20, "the LUN panel")
        figures = re.findall(r"(\d+\.\d+) ms\b", screen)
        assert len(figures) >= 6 and all(re.fullmatch(r"\d+\.\d\d", f) for f in figures), figures
        header = next(line for line in screen.splitlines() if line.startswith("LUN "))
        row = next(line for line in screen.splitlines() if line.startswith("naa."))
        cells = dict(zip(header.split()[2:8], row.split()[2:8], strict=True))  # GAVG … ACTV, past LUN, datastore
        assert all(re.fullmatch(r"\d+\.\d\d", cells[k]) for k in ("GAVG", "KAVG", "DAVG", "QAVG")), cells
    finally:
        term.close()
