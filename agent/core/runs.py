"""Benchmark runs: the span between a begin and an end marker.

A run is stored as two annotations of event `marker`, named `NAME begin` and `NAME end`
(tags `run` = NAME and `edge` = `begin`/`end`, plus whatever the writer adds: `db2vtop run`
records the command and its exit status on the end marker). They are ordinary markers, so
the TUI draws them and the sinks send them; `db2vtop mark NAME --begin` / `--end` writes the
same pair by hand. A run can also be bounded by any two markers: `FIRST..SECOND`.

`find_run` resolves a run spec against the store's annotations: the latest run of that name
(the latest begin marker, up to the first end marker after it; without one the run is still
open and ends now), `NAME~N` the Nth before it (git's `HEAD~N`: `bench~1` is the previous `bench`).
`baseline_for` says what a report compares with: a baseline spec equal to the run's own name
means that name's run before it, as `db2vtop run` compares with the previous run by default.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from db2vtop.agent.core.model import Annotation

BEGIN, END = "begin", "end"
SEPARATOR = ".."
BACK = "~"


class RunNotFoundError(ValueError):
    """No run of that name, or no such pair of markers, in the store."""


def edge_marker(name: str, edge: str, text: str = "", tags: dict[str, str] | None = None,
                ts: int | None = None) -> Annotation:
    """The begin or end marker of run `name`."""
    if edge not in (BEGIN, END):
        raise ValueError(f"edge must be {BEGIN!r} or {END!r}, not {edge!r}")
    all_tags = {**(tags or {}), "run": name, "edge": edge}
    if ts is None:
        return Annotation("marker", f"{name} {edge}", all_tags, text)
    return Annotation("marker", f"{name} {edge}", all_tags, text, ts)


@dataclass(frozen=True)
class Run:
    name: str
    begin_ns: int
    end_ns: int | None  # None: the run has not ended (yet)
    begin: Annotation
    end: Annotation | None = None
    #: how it is named to the user: NAME (the latest of that name), NAME~N or FIRST..SECOND
    label: str = ""

    @property
    def called(self) -> str:
        return self.label or self.name

    @property
    def open(self) -> bool:
        return self.end_ns is None

    def until(self, now_ns: int) -> int:
        return self.end_ns if self.end_ns is not None else now_ns

    def duration_s(self, now_ns: int) -> float:
        return (self.until(now_ns) - self.begin_ns) / 1e9

    @property
    def exit_status(self) -> int | None:
        """The command's exit status, when `db2vtop run` recorded one (for this run, not for another
        whose end marker bounds a FIRST..SECOND span)."""
        own = self.end is not None and self.end.tags.get("run") == self.name
        text = (self.end.tags.get("exit_status") if own and self.end else None) or ""
        return int(text) if text.lstrip("-").isdigit() else None

    @property
    def command(self) -> str | None:
        return self.begin.tags.get("command") if self.begin.tags.get("run") == self.name else None


def _edge(a: Annotation, name: str, edge: str) -> bool:
    if a.event != "marker":
        return False
    if a.tags.get("run") is not None and a.tags.get("edge") is not None:
        return a.tags["run"] == name and a.tags["edge"] == edge
    return a.name == f"{name} {edge}"  # typed by hand (`:mark NAME begin` in the TUI)


def find_run(annotations: list[Annotation], spec: str) -> Run:
    """The latest run `spec` names: a run name, or `FIRST..SECOND` (two marker names). Annotations
    oldest first, as the store returns them. RunNotFoundError says what the store has instead."""
    if SEPARATOR in spec:
        first, _, second = spec.partition(SEPARATOR)
        first, second = first.strip(), second.strip()
        markers = [a for a in annotations if a.event == "marker"]
        for i in range(len(markers) - 1, -1, -1):
            if markers[i].name == first:
                end = next((b for b in markers[i + 1:] if b.name == second), None)
                if end is not None:
                    return Run(spec, markers[i].ts, end.ts, markers[i], end)
        names = {a.name for a in markers}
        missing = [n for n in (first, second) if n not in names]
        why = f"no marker named {', '.join(map(repr, missing))}" if missing else \
            f"no marker {second!r} after a marker {first!r}"
        raise RunNotFoundError(f"{why}; markers: {_listing(sorted(names))}")
    name, back = spec, 0
    head, tilde, tail = spec.rpartition(BACK)
    if tilde and head and tail.isdigit():
        name, back = head, int(tail)
    for i in range(len(annotations) - 1, -1, -1):
        a = annotations[i]
        if _edge(a, name, BEGIN):
            if back:
                back -= 1
                continue
            end = next((b for b in annotations[i + 1:] if _edge(b, name, END)), None)
            return Run(name, a.ts, end.ts if end else None, a, end, spec)
    known = sorted({r.name for r in runs(annotations)})
    if name != spec and name in known:
        count = sum(r.name == name for r in runs(annotations))
        raise RunNotFoundError(f"run {name!r} has {count} run{'s' if count != 1 else ''} recorded: {spec!r} goes "
                               f"back further (db2vtop report --list shows them)")
    raise RunNotFoundError(f"no run named {spec!r}; runs: {_listing(known)}")


def baseline_for(annotations: list[Annotation], run: Run, spec: str | None, previous: bool) -> Run | None:
    """The run a report compares `run` with: `spec` (the run's own name: its run before `run`), else with
    `previous` the run of the same name before it. Never `run` itself: comparing a run with itself says
    +0 % everywhere, which reads as "nothing changed"."""
    if spec is None:
        return previous_run(annotations, run) if previous else None
    if spec == run.name:
        base = previous_run(annotations, run)
        if base is None:
            raise RunNotFoundError(f"run {run.name!r} has no earlier run to compare with (db2vtop report --list)")
        return base
    base = find_run(annotations, spec)
    if base.begin_ns == run.begin_ns and base.end_ns == run.end_ns:
        before = previous_run(annotations, run)
        raise RunNotFoundError(f"{spec!r} is the run being reported itself; name another" + (
            f", or {before.called} for the one before it" if before else f" (no {run.name} was run before it)"))
    return base


def previous_run(annotations: list[Annotation], run: Run) -> Run | None:
    """The run of the same name before `run` (the natural baseline of a repeated benchmark)."""
    earlier = [a for a in annotations if a.ts < run.begin_ns]
    try:
        found = find_run(earlier, run.name)
    except RunNotFoundError:
        return None
    if found.begin_ns >= run.begin_ns:
        return None
    back = sum(1 for a in annotations if a.ts > found.begin_ns and _edge(a, run.name, BEGIN))
    return replace(found, label=f"{run.name}{BACK}{back}")  # named as `report --list` names it


def runs(annotations: list[Annotation]) -> list[Run]:
    """Every run recorded by begin/end markers, oldest first (an unmatched begin: an open run)."""
    out: list[Run] = []
    open_: dict[str, Annotation] = {}
    for a in annotations:
        if a.event != "marker":
            continue
        name, edge = a.tags.get("run"), a.tags.get("edge")
        if name is None or edge is None:
            head, _, tail = a.name.rpartition(" ")
            if tail not in (BEGIN, END) or not head:
                continue
            name, edge = head, tail
        if edge == BEGIN:
            if name in open_:  # begun again without an end: the earlier one stays open
                out.append(Run(name, open_[name].ts, None, open_[name]))
            open_[name] = a
        elif edge == END and name in open_:
            begin = open_.pop(name)
            out.append(Run(name, begin.ts, a.ts, begin, a))
    out += [Run(n, b.ts, None, b) for n, b in open_.items()]
    return sorted(out, key=lambda r: r.begin_ns)


def _listing(names: list[str]) -> str:
    if not names:
        return "none"
    return ", ".join(names[:20]) + (f" and {len(names) - 20} more" if len(names) > 20 else "")
