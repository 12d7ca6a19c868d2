"""Every sample and fact the code makes during the test session matches its declaration
(agent/core/schema.py: each collector's schema.toml or schema.py). The collectors' own tests run
them against their real peers and vendor-document fixtures; this plugin watches what they produce,
so a field, fact kind or fact key added or renamed without its declaration fails `make test`, and
so does a declaration that lies about a field's or a key's type. Samples and facts built by test
code itself are not judged, nor removals (a fact whose data says only that its entity is gone)."""

from __future__ import annotations

import sys
from collections import defaultdict

import pytest

from db2vtop.agent.core import model

_seen: dict[str, dict[str, set]] = defaultdict(lambda: {"tags": set(), "fields": set(), "text": set(), "where": set()})
#: problem -> where the facts that have it were made
_fact_problems: dict[str, set[str]] = defaultdict(set)
_fact_check: list = []  # the declarations, loaded at the first fact (importing them at configure time is too early)


def _record(measurement: str, tags: dict, fields: dict, where: str) -> None:
    seen = _seen[measurement]
    seen["tags"].update(tags)
    seen["fields"].update(fields)
    seen["text"].update(k for k, v in fields.items() if isinstance(v, str))
    seen["where"].add(where)


def _caller() -> str:
    return sys._getframe(2).f_code.co_filename


def pytest_configure(config: pytest.Config) -> None:
    sample_init, fact_init = model.Sample.__init__, model.Fact.__init__

    def watched_sample(self, measurement, tags, fields, *args, **kwargs):
        sample_init(self, measurement, tags, fields, *args, **kwargs)
        caller = _caller()
        if "/tests/" not in caller:
            _record(measurement, tags, fields, caller)

    def watched_fact(self, kind, tags, data, *args, **kwargs):
        fact_init(self, kind, tags, data, *args, **kwargs)
        caller = _caller()
        if "/tests/" not in caller and "/agent/core/" not in caller and data != model.REMOVED:  # core: read back
            if not _fact_check:
                from db2vtop.agent.assemble import fact_check

                _fact_check.append(fact_check())
            for problem in _fact_check[0].problems(kind, tags, data):
                _fact_problems[problem].add(caller)

    model.Sample.__init__ = watched_sample
    model.Fact.__init__ = watched_fact


def problems() -> list[str]:
    from db2vtop.agent.assemble import measurement_catalog

    declared = {m.name: m for ms in measurement_catalog().values() for m in ms}
    out = []
    for name, seen in sorted(_seen.items()):
        m = declared.get(name)
        if m is None:
            out.append(f"{name}: emitted by {', '.join(sorted(seen['where']))} but not declared")
            continue
        if extra := sorted(seen["fields"] - {f.name for f in m.fields}):
            out.append(f"{name}: fields not declared: {', '.join(extra)}")
        if extra := sorted(seen["tags"] - set(m.tags)):
            out.append(f"{name}: tags not declared: {', '.join(extra)}")
        text = {f.name for f in m.fields if f.type == "string"}
        if wrong := sorted(seen["text"] - text):
            out.append(f"{name}: declared as numbers but emitted as strings: {', '.join(wrong)}")
    out += [f"{p} (made by {', '.join(sorted(where))})" for p, where in sorted(_fact_problems.items())]
    return out


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    found = problems()
    if found:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_sep("=", "samples and facts that do not match their declarations", red=True)
            for line in found:
                reporter.write_line(line)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
