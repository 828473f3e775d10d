"""Sweeps: ``-m a=1,2 b=x,y`` expands to the product of its choices, one run per element.

Expansion is Hydra's own (its override grammar and its basic sweeper's product), so a sweep
means here what it means in any Hydra application. Every element is composed and checked
before anything is recorded or submitted: one bad element refuses the whole sweep.
"""

from __future__ import annotations

import shlex

from dlcomm.errors import UserError


def expand(overrides: list[str]) -> list[list[str]]:
    """The sweep's elements, each a list of plain overrides, in Hydra's order (the last
    swept key varies fastest)."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    try:
        parsed = OverridesParser.create().parse_overrides(list(overrides))
        (elements,) = BasicSweeper.split_arguments(parsed, max_batch_size=None)
    except HydraException as error:
        first_line = str(error).strip().splitlines()[0]
        raise UserError(
            f"the sweep overrides are invalid ({first_line}); write choices as key=a,b,c "
            "(ranges: key=range(1,4); globs are not supported)"
        ) from None
    return elements


def export_lines(overrides: list[str]) -> list[str]:
    """One shell-quoted line per element, for ``slurm/array.sbatch`` (line i+1 is array task i)."""
    return [" ".join(shlex.quote(item) for item in element) for element in expand(overrides)]


def swept_keys(overrides: list[str]) -> list[str]:
    """The keys the sweep varies (those with more than one value)."""
    elements = expand(overrides)
    keys: dict[str, set[str]] = {}
    for element in elements:
        for item in element:
            key, _, value = item.partition("=")
            keys.setdefault(key, set()).add(value)
    return [key for key, values in keys.items() if len(values) > 1]
