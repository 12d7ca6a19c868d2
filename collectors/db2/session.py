"""What one round trip to DB2 brought back, whichever transport carried it.

Rows are our own delimited strings (see queries.py); messages are DB2's `SQLnnnnN` /
`DBnnnnnX` texts, possibly wrapped over several lines. Both transports produce a Session;
the collector reads only that.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from db2vtop.collectors.db2.queries import Db2Error

MESSAGE_START = re.compile(r"^(SQL\d{4,5}[NWCI]|DB2?\d{4,5}[IWEN])\s")
_SQLSTATE = re.compile(r"SQLSTATE=(\w{5})")


@dataclass(frozen=True)
class Message:
    code: str        # "SQL0204N", "DB21034E"
    text: str        # the whole message, whitespace normalised

    @property
    def number(self) -> str:
        """The code without its severity letter: "SQL0204" for "SQL0204N"."""
        return self.code[:-1]

    @property
    def is_error(self) -> bool:
        return self.code[-1] in "NCE"

    @property
    def sqlstate(self) -> str:
        m = _SQLSTATE.search(self.text)
        return m.group(1) if m else ""


@dataclass
class Outcome:
    """One statement's result: its rows (fields, None for NULL) and any messages."""

    rows: list[list[str | None]] = field(default_factory=list)
    messages: list[Message] = field(default_factory=list)

    @property
    def error(self) -> Message | None:
        """The SQL error if any (rather than the CLP's DB21034E wrapper around it)."""
        errors = [m for m in self.messages if m.is_error]
        sql = [m for m in errors if m.code.startswith("SQL")]
        return (sql or errors or [None])[0]


@dataclass
class Session:
    connect: Outcome = field(default_factory=Outcome)
    banner: dict[str, str] = field(default_factory=dict)
    results: dict[str, Outcome] = field(default_factory=dict)
    rc: int = 0
    bytes_in: int = 0
    bytes_out: int = 0


def parse_messages(lines: list[str]) -> tuple[list[Message], list[str]]:
    """DB2 messages in `lines` (joined across wrapped lines) and the lines that are not messages."""
    messages: list[Message] = []
    other: list[str] = []
    current: list[str] | None = None
    for line in lines:
        m = MESSAGE_START.match(line)
        if m:
            if current:
                messages.append(_message(current))
            current = [line]
        elif not line.strip():
            if current:
                messages.append(_message(current))
            current = None
        elif current is not None:
            current.append(line)
        else:
            other.append(line)
    if current:
        messages.append(_message(current))
    return messages, other


def _message(lines: list[str]) -> Message:
    text = " ".join(" ".join(lines).split())
    return Message(text.split(None, 1)[0], text)


_SPARE = tuple(map(chr, range(0xE000, 0xE010)))


def split_row(body: str, where: str) -> list[str | None]:
    """`v1|v2|...|vn|` into fields: empty (or the CLP's `-`) is NULL, escapes undone (`\\n` a newline,
    `\\x` the character x). Only str.replace and split: time and memory linear in the row's size,
    however many backslashes it holds."""
    if not body.endswith("|"):
        raise Db2Error(f"{where}: a row was cut short (no closing '|'): {body[-60:]!r}")
    if "\\" not in body:
        return [None if v in ("", "-") else v for v in body[:-1].split("|")]
    # stand-ins for an escaped backslash and an escaped `|`: two private-use characters the row does not hold
    spare = [c for c in _SPARE if c not in body][:2]
    if len(spare) < 2:
        raise Db2Error(f"{where}: a row holds private-use characters db2vtop cannot parse around: {body[:60]!r}")
    backslash, pipe = spare
    # pairs first, left to right, as escapes are read; then each backslash left escapes what follows it
    text = body.replace("\\\\", backslash).replace("\\|", pipe)
    if not text.endswith("|"):
        raise Db2Error(f"{where}: malformed escapes in a row: {body[:60]!r}")
    return [None if v in ("", "-") else _unescape(v, backslash, pipe) for v in text[:-1].split("|")]


def _unescape(v: str, backslash: str, pipe: str) -> str:
    if "\\" in v:
        v = v.replace("\\n", "\n").replace("\\", "")
    return v.replace(backslash, "\\").replace(pipe, "|")
