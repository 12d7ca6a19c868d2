"""The `:` command parser as a module (tui/commands.py), without an app."""

import pytest

from db2vtop.tui import commands
from db2vtop.tui.commands import COMMANDS, parse


@pytest.mark.parametrize("text, verb, arg", [
    ("fleet", "fleet", ""), ("  Fleet ", "fleet", ""), ("st prod01", "stack", "prod01"),
    ("stack  prod 01 ", "stack", "prod 01"), ("findings", "findings", ""), ("findings swap", "findings", "swap"),
    ("local", "local", ""), ("local db2prod01", "local", "db2prod01"), ("zoom 1h", "zoom", "1h"),
    ("goto -10m", "goto", "-10m"), ("goto 2024-05-01 14:05", "goto", "2024-05-01 14:05"),
    ("mark", "mark", ""), ("mark run 2 start", "mark", "run 2 start"), ("run oltp 2", "run", "oltp 2"),
    ("q", "quit", ""), ("exit", "quit", ""),
])
def test_verbs_aliases_and_arguments(text, verb, arg):
    command, got = parse(text)
    assert (command.verb, got) == (verb, arg)


@pytest.mark.parametrize("text, message", [
    ("frobnicate", "unknown command 'frobnicate'"), ("", "unknown command ''"),
    ("stack", "stack needs NAME: stack NAME"), ("zoom", "zoom needs DURATION: zoom 1h"),
    ("goto", "goto needs TIME: goto 14:05"), ("fleet now", "fleet takes no argument"),
    ("quit please", "quit takes no argument"), ("run", "run needs NAME: run NAME"),
])
def test_clear_errors(text, message):
    with pytest.raises(ValueError, match=message.replace("|", r"\|")):
        parse(text)


def test_every_command_has_help_and_is_in_the_help_line_and_completions():
    line = commands.help_line()
    completions = commands.suggestions([])
    for c in COMMANDS:
        assert c.help and c.verb in line
        assert c.verb in completions or c.verb + " " in completions
    assert len({name for c in COMMANDS for name in (c.verb, *c.aliases)}) == len(commands.BY_VERB)


def test_keys_are_bound_once_and_explained():
    keys = [k for b in commands.bindings() for k in b.key.split(",")]
    assert len(keys) == len(set(keys))
    assert all(text for _, text in commands.key_help())
    assert "command (tab completes): fleet, stack NAME" in dict(commands.key_help())[":"]
    assert "quit" in dict(commands.key_help())["q ctrl+c"]
