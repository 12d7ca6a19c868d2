"""Text from remote sources made safe to print: control characters become visible escapes; and counted
nouns said right ("1 sample", "2 samples").

A remote host's stderr, a DB2 message, a VM name or a marker's name can carry terminal
escape sequences (retitle the window, clear the screen, hide text, OSC 52 to the clipboard)
or line breaks that forge log lines. Everything db2vtop prints or logs from such a source
goes through `printable`, so it shows as `\\x1b]0;...` instead of acting on the terminal; the
TUI's last step before the terminal (tui/safe.py) drops the same characters where its layout is
already fixed.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable

# C0 and C1 controls, DEL, and the bidirectional overrides that reorder what a terminal shows
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\u2028\u2029]")
_KEEP_LINES = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\u2028\u2029]")


def _escape(m: re.Match[str]) -> str:
    c = ord(m.group())
    return f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"


def printable(text: str, limit: int | None = None, *, lines: bool = False) -> str:
    """`text` with every control character escaped (`\\x1b`); with `lines`, newlines and tabs kept.
    `limit` cuts the result to that many characters (with an ellipsis)."""
    if not isinstance(text, str):
        text = str(text)
    if limit is not None and len(text) > limit:
        text = text[:limit] + "…"
    return (_KEEP_LINES if lines else _CONTROL).sub(_escape, text)


def without_controls(text: str) -> str:
    """`text` without the characters `printable` escapes: for text already laid out in terminal cells,
    where they take no cell and an escape would take four."""
    return _CONTROL.sub("", text)


def has_controls(text: str) -> bool:
    return _CONTROL.search(text) is not None


def plural(n: int, word: str, many: str | None = None) -> str:
    """"1 sample", "2 samples"; `many` where adding an s is wrong ("1 copy", "2 copies")."""
    return f"{n} {word if n == 1 else many or word + 's'}"


def did_you_mean(word: str, known: Iterable[str]) -> str:
    """" (did you mean verify_tls?)" for a mistyped name close to known ones (the closest first), else ""."""
    names = [str(k) for k in known]
    close = difflib.get_close_matches(word, names, n=3, cutoff=0.75) or \
        difflib.get_close_matches(word.lower(), [n.lower() for n in names], n=3, cutoff=0.75)
    return f" (did you mean {' or '.join(close)}?)" if close else ""
