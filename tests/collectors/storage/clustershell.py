"""A stand-in for the ONTAP clustershell, run by a real sshd as the login "shell".

On a cluster the SSH command line is parsed by the clustershell, not by sh: commands
are separated by `;`, values may be double-quoted, `|` separates list items. This
script parses the line the same way and answers from a JSON state file the test
writes, printing what ONTAP 9 documents:

* `set` (-privilege/positional level, -confirmations, -rows, -showseparator, -units,
  -showallfields): docs.netapp.com/us-en/ontap-cli/set.html, rows.html.
* `statistics show -raw -object O -counter a|b` (advanced privilege only): per instance
  an Object/Instance/Start-time/End-time/Scope header and a Counter/Value table with
  32-character columns, long values wrapped, arrays as `-` then `label value` lines,
  raw latencies in `us` (statistics-show.html; the layout NetApp Harvest's StatPerf
  collector parses from real clusters). The table follows the session, as the settings
  NetApp's own collector changes imply: a counter the catalogue marks `no-display`
  (Harvest docs/ontap-metrics.md: cpu_elapsed_time "Type: delta,no-display", and the
  disk busy base) is left out unless `statistics settings modify -counter-display all`
  ran, and byte counters print scaled ("468.75MB") unless `set -units raw`.
* `statistics settings modify` (advanced; its `-counter-display` is not in the published
  reference, so it is taken for a diagnostic-level parameter, which ONTAP hides, and
  reports as an invalid argument, below that level; Harvest sets it at diagnostic).
* `<object> show -fields a,b` with a separator: field names, long names, one row per
  record, each ending with the separator, then "N entries were displayed."
* Errors print `Error: ...` and the session still exits 0 (so callers must read them).
"""

from __future__ import annotations

import json
import os
import sys
import time

#: counters the catalogue marks no-display, per object
NO_DISPLAY = {"system:node": {"cpu_elapsed_time"}, "disk:constituent": {"base_for_disk_busy"}}
#: counters in bytes (catalogue unit b_per_sec): scaled to a unit when the session's units are not raw
BYTES = {"read_data", "write_data"}

KEYS = {"volume show": ("vserver", "volume"), "lun show": ("vserver", "path"),
        "storage aggregate show": ("aggregate",), "network port show": ("node", "port"),
        "lun igroup show": ("vserver", "igroup"),
        "vserver iscsi session parameter show": ("vserver", "tpgroup", "tsih")}


def split_commands(line: str) -> list[list[str]]:
    """`;`-separated commands, each as words; double quotes group and are removed."""
    commands, words, word, quoted, had = [], [], "", False, False
    for ch in line:
        if ch == '"':
            quoted, had = not quoted, True
        elif ch == ";" and not quoted:
            if had or word:
                words.append(word)
            commands.append(words)
            words, word, had = [], "", False
        elif ch.isspace() and not quoted:
            if had or word:
                words.append(word)
            word, had = "", False
        else:
            word += ch
    if had or word:
        words.append(word)
    commands.append(words)
    return [c for c in commands if c]


def options(words: list[str]) -> tuple[dict[str, str], list[str]]:
    opts, positional, i = {}, [], 0
    while i < len(words):
        if words[i].startswith("-") and i + 1 < len(words) and not words[i + 1].startswith("-"):
            opts[words[i][1:]] = words[i + 1]
            i += 2
        elif words[i].startswith("-"):
            opts[words[i][1:]] = ""
            i += 1
        else:
            positional.append(words[i])
            i += 1
    return opts, positional


def scaled(value: str) -> str:
    """A byte count as `-units auto` prints it: in the largest unit it reaches, two decimals."""
    n = int(value)
    for power, unit in ((5, "PB"), (4, "TB"), (3, "GB"), (2, "MB"), (1, "KB")):
        if n >= 1024**power:
            return f"{n / 1024**power:.2f}{unit}"
    return f"{n}B"


def render_raw(obj: str, inst: dict, counters: list[str], display_all: bool = True,
               raw_units: bool = True) -> list[str]:
    """One instance's table; the defaults are the session NetApp's collector sets up."""
    out = ["", f"Object: {obj}", f"Instance: {inst['instance']}", "Start-time: 11/22/2026 10:00:00",
           "End-time: 11/22/2026 10:00:00", f"Scope: {inst.get('scope', '')}",
           "    Counter                                                     Value",
           "    -------------------------------- --------------------------------"]
    values = inst["counters"]
    hidden = set() if display_all else NO_DISPLAY.get(obj, set())
    for name in sorted(counters):
        if name not in values or name in hidden:
            continue
        value = values[name]
        if name in BYTES and not raw_units:
            value = scaled(value)
        if isinstance(value, dict):
            out.append(f"    {name:<32} {'-':>32}")
            out.extend(f"    {label:>32} {v:>32}" for label, v in value.items())
            continue
        chunks = [value[i:i + 31] for i in range(0, len(value), 31)] or [""]
        out.append(f"    {name:<32} {chunks[0]:>32}")
        out.extend(f"    {'':<32} {c:>32}" for c in chunks[1:])
    return out


def main() -> int:
    with open(sys.argv[1]) as f:
        state = json.load(f)
    time.sleep(state.get("sleep", 0))  # a cluster that does not answer in time
    session = {"privilege": "admin", "sep": None, "units": "auto", "counter_display": "default"}
    lines: list[str] = [state["banner"]] if state.get("banner") else []
    for words in split_commands(os.environ.get("SSH_ORIGINAL_COMMAND", "")):
        text = " ".join(words)
        failure = next((msg for prefix, msg in state.get("errors", {}).items() if text.startswith(prefix)), None)
        if failure:
            lines.append(failure)
            continue
        if words[0] == "set":
            opts, positional = options(words[1:])
            level = opts.get("privilege") or (positional[0] if positional else None)
            if level:
                session["privilege"] = {"adv": "advanced", "d": "diagnostic"}.get(level, level)
                if session["privilege"] != "admin" and opts.get("confirmations") != "off":
                    lines.append("Warning: These advanced commands are potentially dangerous; use them only when "
                                 "directed to do so by NetApp personnel.\nDo you want to continue? {y|n}: ")
                    return 1  # no answer on stdin: the session ends
            if "showseparator" in opts:
                session["sep"] = opts["showseparator"]
            if "units" in opts:
                session["units"] = opts["units"]
        elif words[0] == "rows":
            continue
        elif words[:3] == ["statistics", "settings", "modify"]:
            if session["privilege"] == "admin":
                lines.append('Error: "statistics" is not a recognized command')
                continue
            opts, _ = options(words[3:])
            if "counter-display" in opts:
                if session["privilege"] != "diagnostic":
                    lines.append('Error: invalid argument "-counter-display"')
                    continue
                session["counter_display"] = opts["counter-display"]
        elif words[:3] == ["statistics", "show", "-raw"] or words[:2] == ["statistics", "show"]:
            if session["privilege"] == "admin":
                lines.append('Error: "statistics show" is not a recognized command')
                continue
            opts, _ = options(words[2:])
            obj = opts.get("object", "")
            if obj not in state["stats"]:
                lines.append(f'Error: command failed: Object "{obj}" was not found.')
                continue
            counters = opts.get("counter", "").split("|")
            instances = [i for i in state["stats"][obj] if opts.get("instance") in (None, i["instance"])]
            for inst in instances:
                lines.extend(render_raw(obj, inst, counters, display_all=session["counter_display"] == "all",
                                        raw_units=session["units"] == "raw"))
        else:
            command = next((c for c in KEYS if text.startswith(c + " ")), None)
            if command is None:
                lines.append(f'Error: "{words[0]}" is not a recognized command')
                continue
            opts, _ = options(text[len(command):].split())
            table = state["tables"].get(command, [])
            if "vserver" in opts:
                table = [r for r in table if r.get("vserver") == opts["vserver"]]
            fields = list(KEYS[command]) + [f for f in opts.get("fields", "").split(",") if f not in KEYS[command]]
            unknown = [f for f in fields if table and f not in table[0]]
            if unknown:
                lines.append(f'Error: Invalid field "{unknown[0]}"')
                continue
            if not table:
                lines.append("There are no entries matching your query.")
                continue
            sep = session["sep"] or " "
            lines.append(sep.join(fields) + sep)
            lines.append(sep.join(f.replace("-", " ").title() for f in fields) + sep)
            lines.extend(sep.join(str(r[f]) for f in fields) + sep for r in table)
            lines.append(f"{len(table)} entries were displayed.")
    sys.stdout.write("\n".join(lines) + "\n")
    return int(state.get("exit", 0))


if __name__ == "__main__":
    sys.exit(main())
