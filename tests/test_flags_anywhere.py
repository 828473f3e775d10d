"""A subcommand's options are accepted before or after its settings, for every subcommand that has
both (issue 49): ``dlcomm runs reap --dry-run tracking.uri=...`` as ``dlcomm runs --dry-run reap ...``."""

from __future__ import annotations

import argparse

import pytest

from dlcomm import cli


def _subcommands() -> dict[str, argparse.ArgumentParser]:
    parser = cli._parser()
    [action] = [action for action in parser._actions if isinstance(action, argparse._SubParsersAction)]
    return dict(action.choices)


def _cases() -> list[tuple[str, list[str], list[str]]]:
    """(subcommand, its option with a value if it takes one, settings) for every option of every
    subcommand that takes a list of settings."""
    cases = []
    for name, sub in _subcommands().items():
        positional = [action for action in sub._actions if not action.option_strings]
        listed = [action for action in positional if action.nargs == "*"]
        if not listed:
            continue
        fixed = [action.choices[0] if action.choices else "x" for action in positional if action.nargs is None]
        for action in sub._actions:
            if not action.option_strings or isinstance(action, argparse._HelpAction):
                continue
            flag = action.option_strings[-1]
            option = [flag] if action.nargs == 0 else [flag, str(action.choices[0]) if action.choices else "v"]
            cases.append((name, [*fixed, *option], [*fixed, "a=1", "b=2"]))
    return cases


CASES = _cases()


def test_every_subcommand_with_settings_is_covered() -> None:
    assert {name for name, *_ in CASES} >= {"train", "report", "runs", "config", "profile"}


@pytest.mark.parametrize(
    "name,option,settings", CASES, ids=[f"{n} {next(t for t in o if t.startswith('-'))}" for n, o, _ in CASES]
)
def test_an_option_after_the_settings_means_what_it_means_before_them(name, option, settings) -> None:
    fixed = [token for token in settings if "=" not in token]
    given = [token for token in settings if "=" in token]
    flags = option[len(fixed) :]
    before = cli.parse([name, *fixed, *flags, *given])
    after = cli.parse([name, *fixed, *given, *flags])
    between = cli.parse([name, *fixed, given[0], *flags, *given[1:]])
    assert vars(before) == vars(after) == vars(between)
    listed = before.overrides if hasattr(before, "overrides") else before.settings
    assert listed == given


def test_an_unknown_option_is_still_one_line_exit_2(capsys) -> None:
    with pytest.raises(SystemExit) as stopped:
        cli.parse(["runs", "reap", "tracking.uri=x", "--frob"])
    assert stopped.value.code == 2
    assert capsys.readouterr().err.startswith("dlcomm: error: unrecognized arguments: --frob")
