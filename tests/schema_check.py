"""Every sample the code emits during the test session matches the declared measurements
(agent/core/schema.py, each collector's schema.py). The collectors' own tests run them against
their real peers and vendor-document fixtures; this plugin watches what they produce, so a field
added or renamed without its declaration fails `make test`, and so does a declaration that lies
about a field's type. Samples built by test code itself are not judged."""

from __future__ import annotations

import sys
from collections import defaultdict

import pytest

from db2vtop.agent.core import model

_seen: dict[str, dict[str, set]] = defaultdict(lambda: {"tags": set(), "fields": set(), "text": set(), "where": set()})


def _record(measurement: str, tags: dict, fields: dict, where: str) -> None:
    seen = _seen[measurement]
    seen["tags"].update(tags)
    seen["fields"].update(fields)
    seen["text"].update(k for k, v in fields.items() if isinstance(v, str))
    seen["where"].add(where)


def pytest_configure(config: pytest.Config) -> None:
    init = model.Sample.__init__

    def watched(self, measurement, tags, fields, *args, **kwargs):
        init(self, measurement, tags, fields, *args, **kwargs)
        caller = sys._getframe(1).f_code.co_filename
        if "/tests/" not in caller:
            _record(measurement, tags, fields, caller)

    model.Sample.__init__ = watched


def problems() -> list[str]:
    from db2vtop.agent.assemble import measurement_catalog

    declared = {m.name: m for ms in measurement_catalog().values() for m in ms}
    out = []
    for name, seen in sorted(_seen.items()):
        m = declared.get(name)
        if m is None:
            out.append(f"{name}: emitted by {', '.join(sorted(seen['where']))} but not declared")
            continue
        if extra := sorted(seen["fields"] - m.field_names()):
            out.append(f"{name}: fields not declared: {', '.join(extra)}")
        if extra := sorted(seen["tags"] - set(m.tags)):
            out.append(f"{name}: tags not declared: {', '.join(extra)}")
        text = {f.name for f in m.fields if f.kind == "string"}
        if wrong := sorted(seen["text"] - text):
            out.append(f"{name}: declared as numbers but emitted as strings: {', '.join(wrong)}")
    return out


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    found = problems()
    if found:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_sep("=", "samples that do not match the declared measurements", red=True)
            for line in found:
                reporter.write_line(line)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
