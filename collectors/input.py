"""A source as its package declares it and the registry (collectors/registry.py) lists it.

Like a Telegraf input, a collector package is self-contained: its `config.py` holds its section's
dataclass and that section's own validation, its `__init__.py` exports an `Input` naming the
section and a `build()` that turns the configured sections into collectors, and the package folder
holds its declarations (`schema.toml`: measurements and facts), its part of `db2vtop config init`
(`template.toml`), its rows of docs/configuration.md (`config.md`) and its README. `build()` imports the heavy
modules (paramiko, a collector's own) only when a section is configured: the agent's RSS budget.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from db2vtop.agent.core.config import Section

if TYPE_CHECKING:  # the registry is imported by every command: nothing heavier than the sections at import
    from db2vtop.agent.core.schema import Schema
    from db2vtop.collectors.base import BaseCollector


class Wiring(Protocol):
    """What a build() gets besides its sections: the whole config, and the shared [[ssh]] targets."""

    cfg: Any

    def ssh(self, name: str | None) -> Any:
        """The SSHTarget of an [[ssh]] name (one per target, shared by every collector of that host)."""


#: one section -> its collector (None: nothing to collect, e.g. [guest] enabled = false)
Make = Callable[[Any, Wiring], "BaseCollector | None"]
#: every section of the Input -> its collectors (for an Input whose collectors are not one per section)
Build = Callable[[Sequence[Any], Wiring], "list[BaseCollector]"]


@dataclass(frozen=True, eq=False)  # compared by identity: the registry's; every command builds it at start
class Input:
    """`name` is the config section (`[[name]]` tables, or one `[name]` when not `many`), loaded into
    `config`; `package` is the folder of its schema.toml, template.toml and README.md. `make` turns
    one section into its collector, or `build` all of them at once. `also` names the packages of a
    family whose shared declarations it writes too (the [[storage]] vendors' `storage_volume`)."""

    name: str
    config: type
    package: str
    make: Make | None = None
    build: Build | None = None
    many: bool = True
    also: tuple[str, ...] = ()
    schema: Callable[[], Schema] | None = None  # instead of schema.toml: vSphere's derive from its counter table

    @property
    def section(self) -> Section:
        return Section(self.name, self.config, self.many)

    def sections(self, cfg: Any) -> list[Any]:
        """This Input's sections of a loaded config (of the sections of its name, those of its class)."""
        value = getattr(cfg, self.name)
        return [s for s in (value if isinstance(value, list) else [value]) if isinstance(s, self.config)]

    def collectors(self, cfg: Any, wiring: Wiring) -> list[BaseCollector]:
        sections = self.sections(cfg)
        if self.build is not None:
            return self.build(sections, wiring)
        made = [self.make(s, wiring) for s in sections] if self.make is not None else []
        return [c for c in made if c is not None]

    def declarations(self) -> dict[str, Schema]:
        """package -> what it declares, for this Input's own package and the family's it writes into."""
        from db2vtop.agent.core.schema import load

        own = self.schema() if self.schema is not None else load(self.package)
        return {self.package: own, **{p: load(p) for p in self.also}}

    def template(self) -> str:
        """Its commented part of `db2vtop config init`."""
        from db2vtop.agent.core.schema import package_text

        return package_text(self.package, "template.toml")
