"""`make docs-check` (tests/docs_check.py) finds what the docs miss, in the real docs against the real code."""

from tests import docs_check


def test_a_renamed_key_or_a_dropped_flag_is_reported():
    problems: list[str] = []
    config = docs_check.CONFIG_DOC.read_text()
    assert "| | `keepalive` |" in config
    docs_check.check_config(problems, config.replace("| | `keepalive` |", "| | `keep_alive` |"))
    assert problems == ["docs/configuration.md: [[ssh]] keepalive is not documented",
                        "docs/configuration.md: [[ssh]] keep_alive is documented but not a key"]
    problems.clear()
    readme = docs_check.README.read_text()
    docs_check.check_cli(problems, readme.replace(" [--annotate]", ""))
    assert problems == ["README.md: `db2vtop replay` option --annotate is not in its row"]


def test_a_range_that_is_not_the_codes_is_reported():
    problems: list[str] = []
    config = docs_check.CONFIG_DOC.read_text()
    row = '| | `interval`, `timeout` | `"20s"` | 20s–1d, 1s–1h |'
    assert row in config
    docs_check.check_config(problems, config.replace(row, row.replace("20s–1d", "1s–1d")))
    assert problems == ["docs/configuration.md: [[vcenter]] interval, timeout: range '1s–1d, 1s–1h' is not the "
                        "code's '20s–1d, 1s–1h'"]


def test_a_stale_field_table_is_reported_and_rewritten(tmp_path, monkeypatch):
    real = docs_check.measurement_docs()
    readme = docs_check.ROOT / "collectors" / "guest" / "README.md"
    copy = tmp_path / "README.md"
    copy.write_text(readme.read_text().replace("| `steal_pct` |", "| `stolen_pct` |"))
    monkeypatch.setattr(docs_check, "ROOT", tmp_path)
    monkeypatch.setattr(docs_check, "measurement_docs", lambda: {copy: real[readme]})
    problems: list[str] = []
    docs_check.check_measurements(problems)
    assert problems == ["README.md: the measurement tables differ from the declarations; "
                        "run `python -m tests.docs_check --write`"]
    docs_check.check_measurements(problems := [], write=True)
    assert problems == [] and "| `steal_pct` |" in copy.read_text()


def test_a_stale_catalog_count_is_reported_and_rewritten(tmp_path, monkeypatch):
    doc = tmp_path / "checks.md"
    real = docs_check.CHECKS_DOC.read_text()
    assert "practices and" in real
    doc.write_text(real.replace(" practices and", "0 practices and"))  # 129 -> 1290
    monkeypatch.setattr(docs_check, "ROOT", tmp_path)
    monkeypatch.setattr(docs_check, "CHECKS_DOC", doc)
    docs_check.check_catalog_counts(problems := [])
    assert problems == ["checks.md: the catalog count tables differ from checks/catalog.json; "
                        "run `python -m tests.docs_check --write`"]
    docs_check.check_catalog_counts(problems := [], write=True)
    assert problems == [] and doc.read_text() == real


def test_the_how_to_section_is_what_the_code_needs():
    text = docs_check.ARCH_DOC.read_text()
    docs_check.check_howto(problems := [], text)
    assert problems == []
    assert {k: len(v[1]) for k, v in docs_check.howto_parts(text).items()} == {"source": 2, "rule": 2, "screen": 3}


def test_a_drifted_how_to_section_is_reported():
    text = docs_check.ARCH_DOC.read_text()

    def problems_with(old: str, new: str) -> list[str]:
        assert old in text
        docs_check.check_howto(problems := [], text.replace(old, new, 1))
        return problems

    assert problems_with("### A rule: 2 files", "### A rule: 3 files") == [
        "docs/architecture.md: a rule says 3 files but lists 2"]
    assert problems_with("- `checks/catalog.json`:", "- `checks/practices.json`:") == [
        "docs/architecture.md: a rule touches ['checks/catalog.json', 'checks/rules/<layer>.py'] in the code, "
        "the section lists ['checks/practices.json', 'checks/rules/<layer>.py']"]
    assert problems_with("`disk-queue-saturation`", "disk-queue-saturation") == [
        "checks/thresholds.py: writes rule id 'disk-queue-saturation' (docs/architecture.md's how-to does not say so)"]
    assert problems_with("exception is `agent/assemble.py`", "exception is agent/assemble.py") == [
        "agent/assemble.py: names the source package ssh (only the registry should)"]
    screen = problems_with("- `tui/loaders/<screen>.py`: its `load_<screen>` and the view it returns.\n", "")
    assert screen[0] == "docs/architecture.md: a screen says 3 files but lists 2" and len(screen) == 2
