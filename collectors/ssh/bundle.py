"""Many files and commands of a remote host in one SSH round trip.

A collector cycle should cost one channel, not one per file: `Bundle` writes a small
POSIX sh script (sent on stdin to `sh -s`) that prints every requested file, glob match,
symlink target and command output as a record, and `parse` splits the output back into
{path: text} and {command: (exit status, output)}. Records are framed by a random nonce
chosen per run, so no file content can forge or swallow a record boundary:

    \\n<nonce> F <path>\\n<file bytes>       a file (or a glob match)
    \\n<nonce> X <path>\\n                   reading it failed part way: drop it
    \\n<nonce> P <path>\\n                   a glob match that exists (a name, e.g. a slave device)
    \\n<nonce> C <name>\\n<stdout bytes>     a command's output...
    \\n<nonce> R <name> <status>\\n          ...and its exit status

Each record's own leading newline belongs to the frame, so file texts come back byte for
byte, including files that lack a final newline. Unmatched globs print nothing.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field

from db2vtop.agent.core.clock import CLOCK
from db2vtop.agent.core.model import Fact, Record
from db2vtop.collectors.base import BaseCollector, CollectorError
from db2vtop.collectors.ssh.target import SSHTarget, command

_PRELUDE = r"""N=%s
_h() { printf '\n%%s %%s %%s\n' "$N" "$1" "$2"; }
_f() {
  for p in "$@"; do
    [ -f "$p" ] || continue
    _h F "$p"; cat -- "$p" 2>/dev/null || _h X "$p"
  done
}
_l() {
  for p in "$@"; do
    [ -L "$p" ] || continue
    t=$(readlink -- "$p") || continue
    _h F "$p"; printf '%%s' "${t##*/}"
  done
}
_p() { for p in "$@"; do if [ -e "$p" ] || [ -L "$p" ]; then _h P "$p"; fi; done; }
_c() { n=$1; shift; _h C "$n"; "$@" </dev/null; _h R "$n $?"; }
"""
_PARALLEL = r"""T=$(mktemp -d 2>/dev/null) || { T=/tmp/db2vtop.$$; mkdir -m 700 "$T"; } || exit 70
trap 'rm -rf "$T"' EXIT
_b() { n=$1; shift; ( "$@" </dev/null >"$T/$n"; echo $? >"$T/$n.rc" ) & }
_w() {
  wait
  for n in "$@"; do
    _h C "$n"; cat "$T/$n" 2>/dev/null; _h R "$n $(cat "$T/$n.rc" 2>/dev/null || echo 255)"
  done
}
"""


class BundleError(CollectorError):
    """The remote side did not answer with the framed records the script prints."""


@dataclass(frozen=True, slots=True)
class Output:
    rc: int
    text: str


@dataclass(slots=True)
class Fetched:
    files: dict[str, str] = field(default_factory=dict)
    paths: set[str] = field(default_factory=set)
    commands: dict[str, Output] = field(default_factory=dict)


class Bundle:
    """What one round trip fetches; `script()` is sent to `sh -s`, `parse()` reads the answer."""

    def __init__(self) -> None:
        self._lines: list[str] = []
        self._parallel: list[str] = []

    def files(self, *patterns: str) -> Bundle:
        """Files by path or glob (shell globbing on the remote side)."""
        return self._add("_f", patterns)

    def links(self, *patterns: str) -> Bundle:
        """Symlinks by path or glob; the text is the last component of the target (a driver name)."""
        return self._add("_l", patterns)

    def paths(self, *patterns: str) -> Bundle:
        """Which paths exist (for names only, e.g. /sys/block/dm-0/slaves/*)."""
        return self._add("_p", patterns)

    def command(self, name: str, *argv: str) -> Bundle:
        """A command's stdout and exit status (stderr goes to the channel's stderr)."""
        self._lines.append(f"_c {command(name, *argv)}")
        return self

    def parallel(self, name: str, *argv: str) -> Bundle:
        """Like command(), but all parallel commands run at once (sampling tools that sleep)."""
        if not name.replace("_", "").isalnum():
            raise ValueError(f"parallel command name {name!r}: letters, digits and '_' only")
        self._parallel.append(name)
        self._lines.insert(len(self._parallel) - 1, f"_b {command(name, *argv)}")
        return self

    def raw(self, sh: str) -> Bundle:
        """Fixed shell text for loops over remote names; it may call _f, _l, _p and _c."""
        self._lines.append(sh)
        return self

    def _add(self, fn: str, patterns: tuple[str, ...]) -> Bundle:
        for p in patterns:  # quote everything but the glob characters, which the shell must see
            self._lines.append(f"{fn} {_glob_quote(p)}")
        return self

    def script(self, nonce: str) -> bytes:
        """The sh text: parallel commands start first and are reaped after everything else."""
        lines = list(self._lines)
        if self._parallel:
            lines.insert(0, _PARALLEL)
            lines.append(command("_w", *self._parallel))
        return (_PRELUDE % nonce + "\n".join(lines) + "\n").encode()

    @staticmethod
    def nonce() -> str:
        return "db2vtop-" + secrets.token_hex(12)


def _glob_quote(pattern: str) -> str:
    """Single-quote each run of non-glob characters so only '*', '?' and '[...]' stay active."""
    out, run = [], []
    for ch in pattern:
        if ch in "*?[]":
            if run:
                out.append(command("".join(run)))
                run = []
            out.append(ch)
        else:
            run.append(ch)
    if run:
        out.append(command("".join(run)))
    return "".join(out)


def parse(output: bytes | str, nonce: str) -> Fetched:
    """The records of one run; raises BundleError when no frame is found at all."""
    text = output.decode("utf-8", errors="replace") if isinstance(output, bytes) else output
    chunks = text.split(f"\n{nonce} ")
    if len(chunks) == 1:
        raise BundleError(f"the remote shell printed no records ({_preview(text)})")
    got = Fetched()
    pending: dict[str, str] = {}
    for chunk in chunks[1:]:
        header, _, body = chunk.partition("\n")
        what, _, name = header.partition(" ")
        if what == "F":
            got.files[name] = body
        elif what == "X":
            got.files.pop(name, None)
        elif what == "P":
            got.paths.add(name)
        elif what == "C":
            pending[name] = body
        elif what == "R":
            cmd, _, status = name.rpartition(" ")
            if cmd in pending and status.lstrip("-").isdigit():
                got.commands[cmd] = Output(int(status), pending.pop(cmd))
        else:
            raise BundleError(f"unexpected record {header[:60]!r} in the remote output")
    return got


def _preview(text: str) -> str:
    text = text.strip()
    return repr(text[:120]) if text else "empty output"


class BundleCollector(BaseCollector):
    """A collector whose every cycle is one Bundle fetched over one SSH target.

    On a facts cycle describe() fetches `bundle(facts=True)` (facts and the cycle's data
    together) and the collect() that follows reuses it, so that cycle is one round trip
    too. A new connection marks the facts stale: it may be a rebooted or rebuilt host.
    """
    complete_facts = True

    def __init__(self, name: str, interval: float, timeout: float | None, target: SSHTarget, what: str):
        super().__init__(name, interval, timeout)
        self.target, self.what = target, what
        self.round_trips = 0
        self._ready: Fetched | None = None
        self._connects = 0

    def bundle(self, facts: bool) -> Bundle:
        raise NotImplementedError

    def samples(self, got: Fetched, ts: int) -> list[Record]:
        raise NotImplementedError

    def facts(self, got: Fetched, ts: int) -> list[Fact]:
        raise NotImplementedError

    def fetch(self, bundle: Bundle) -> Fetched:
        """Blocking: one round trip."""
        nonce = Bundle.nonce()
        r = self.target.run(["sh", "-s"], stdin=bundle.script(nonce), timeout=self.timeout)
        self.round_trips += 1
        if self.target.connects != self._connects:
            self._connects = self.target.connects
            self.facts_stale = True
        if r.rc != 0:
            err = r.stderr.decode("utf-8", errors="replace").strip()[:200]
            raise BundleError(f"{self.what}: the remote sh exited {r.rc}: {err or 'no message'}")
        try:
            return parse(r.stdout, nonce)
        except BundleError as e:
            raise BundleError(f"{self.what}: {e}") from None

    def _describe(self) -> list[Fact]:
        self._ready = self.fetch(self.bundle(facts=True))
        return self.facts(self._ready, CLOCK.now_ns())

    def _collect(self) -> list[Record]:
        got, self._ready = self._ready, None
        return self.samples(got or self.fetch(self.bundle(facts=False)), CLOCK.now_ns())

    async def describe(self) -> list[Fact]:
        return await self.run_blocking(self._describe)

    async def collect(self) -> list[Record]:
        return await self.run_blocking(self._collect)

    async def close(self) -> None:
        await super().close()
        self.target.close()
