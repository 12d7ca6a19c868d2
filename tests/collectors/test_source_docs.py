"""A source documents its config section in its own package (config.md): docs/configuration.md's sources table is
generated from them, so adding a source touches no doc outside its package."""

from __future__ import annotations

from types import SimpleNamespace

from db2vtop.collectors import registry
from tests import docs_check


def test_the_sources_table_is_each_sources_config_md_in_registry_order(tmp_path, monkeypatch):
    docs = {"collectors/one": "<!-- one's rows -->\n| `[one]` | `a` | | | first |\n",
            "collectors/family": "| `[[family]]` | `b` | | | the family's, once |\n| | `c` | | | |\n"}
    for folder, text in docs.items():
        (tmp_path / folder).mkdir(parents=True)
        (tmp_path / folder / "config.md").write_text(text)
    (tmp_path / "collectors/family/vendor").mkdir()
    (tmp_path / "collectors/undocumented").mkdir()
    inputs = [SimpleNamespace(package=f"db2vtop.collectors.{p}")
              for p in ("family.vendor", "one", "family", "undocumented")]
    monkeypatch.setattr(docs_check, "ROOT", tmp_path)
    monkeypatch.setattr(registry, "INPUTS", inputs)
    assert docs_check.source_rows().splitlines()[2:] == [
        "| `[[family]]` | `b` | | | the family's, once |", "| | `c` | | | |", "| `[one]` | `a` | | | first |"]


def test_every_registered_source_has_its_rows_in_the_configuration_doc():
    table = docs_check.documented_keys(docs_check.source_rows())
    assert set(table) == {f"[[{i.name}]]" if i.many else f"[{i.name}]" for i in registry.INPUTS}
    assert docs_check.SOURCES_BEGIN + "\n" + docs_check.source_rows() in docs_check.CONFIG_DOC.read_text()
