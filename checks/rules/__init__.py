"""Every implemented rule, one module per layer."""

from db2vtop.checks.rule import Rule
from db2vtop.checks.rules import db2, guest, stack, storage, vsphere


def all_rules() -> list[Rule]:
    return [*guest.RULES, *vsphere.RULES, *db2.RULES, *storage.RULES, *stack.RULES]
