"""Every implemented rule, one module per layer."""

from checks.rule import Rule
from checks.rules import guest


def all_rules() -> list[Rule]:
    return [*guest.RULES]
