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
  collector parses from real clusters).
* `<object> show -fields a,b` with a separator: field names, long names, one row per
  record, each ending with the separator, then "N entries were displayed."
* Errors print `Error: ...` and the session still exits 0 (so callers must read them).
"""

from __future__ import annotations

import json
import os
import sys
import time

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


def render_raw(obj: str, inst: dict, counters: list[str]) -> list[str]:
    out = ["", f"Object: {obj}", f"Instance: {inst['instance']}", "Start-time: 11/22/2026 10:00:00",
           "End-time: 11/22/2026 10:00:00", f"Scope: {inst.get('scope', '')}",
           "    Counter                                                     Value",
           "    -------------------------------- --------------------------------"]
    values = inst["counters"]
    for name in sorted(counters):
        if name not in values:
            continue
        value = values[name]
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
    session = {"privilege": "admin", "sep": None}
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
        elif words[0] == "rows":
            continue
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
            for inst in state["stats"][obj]:
                lines.extend(render_raw(obj, inst, counters))
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
