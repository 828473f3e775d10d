"""Sweeps: ``-m a=1,2 b=x,y`` expands to the product of its choices, one run per element.

Expansion is Hydra's (its override grammar and its basic sweeper's product), so a sweep
means here what it means in any Hydra application. Every element is composed and checked
before anything is recorded or submitted: one bad element refuses the whole sweep.
"""

from __future__ import annotations

import itertools
import shlex
from typing import Sequence

from dlcomm.config.schema import NetworkConfig, RunConfig
from dlcomm.errors import UserError

# The network a sweep whose ranks share this machine compares on, unless it names one
# (docs/metrics.md, "Which clock a comparison is on"): 10 Gb/s Ethernet, a common cluster's link.
COMPARISON_NETWORK = "eth_10g"


def expand(overrides: list[str]) -> list[list[str]]:
    """The sweep's elements, each a list of plain overrides, in Hydra's order (the last
    swept key varies fastest).

    Hydra's basic sweeper's product, written with Hydra's public override API (its
    ``BasicSweeper.split_arguments`` is internal): one list of values per key, in the order the
    keys first appear (a key given again replaces its values in place), choices and ranges
    enumerated by ``Override.sweep_string_iterator``, then the Cartesian product."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException, OverrideParseException

    from dlcomm.compose import unparsable

    try:
        values: dict[str, list[str]] = {}
        for override in OverridesParser.create().parse_overrides(list(overrides)):
            key = override.get_key_element()
            if not override.is_sweep_override():
                values[key] = [f"{key}={override.get_value_element_as_str()}"]
            elif override.is_discrete_sweep():
                values[key] = [f"{key}={value}" for value in override.sweep_string_iterator()]
            else:
                kind = override.value_type.name.lower().replace("_", " ") if override.value_type else "sweep"
                raise HydraException(f"{override.input_line}: {kind}s cannot be enumerated")
    except OverrideParseException as error:
        raise UserError(unparsable(error) + ' (in a sweep, quote each choice: key="a","b")') from None
    except HydraException as error:
        first_line = str(error).strip().splitlines()[0]
        raise UserError(
            f"the sweep overrides are invalid ({first_line}); write choices as key=a,b,c "
            "(ranges: key=range(1,4); globs are not supported)"
        ) from None
    return [list(element) for element in itertools.product(*values.values())]


def screening_order(elements: list[list[str]]) -> tuple[list[int], int]:
    """Indices of ``elements`` in the order to check them: the first element, then each swept
    key's distinct values set into the first element, round robin over the keys, then the rest;
    and how many lead the order (the leads: those that bring the values). Every value of every
    key is met within the first few checks, so a bad value is refused at once however many
    elements the product has (``-m nodes=2,0 seed=range(0,200)``: the 2nd)."""
    if not elements:
        return [], 0
    values: dict[str, dict[str, None]] = {}
    for element in elements:
        for item in element:
            values.setdefault(item.partition("=")[0], {})[item] = None
    swept = [list(items) for items in values.values() if len(items) > 1]
    index = {tuple(element): position for position, element in enumerate(elements)}
    first, order, chosen = elements[0], [0], {0}
    for turn in range(max((len(items) for items in swept), default=0)):
        for items in swept:
            if turn < len(items):
                key = items[turn].partition("=")[0]
                position = index.get(tuple(items[turn] if item.partition("=")[0] == key else item for item in first))
                if position is not None and position not in chosen:
                    order.append(position)
                    chosen.add(position)
    return order + [position for position in range(len(elements)) if position not in chosen], len(order)


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


def with_network(cfg: RunConfig, network: NetworkConfig) -> RunConfig:
    """``cfg`` with the comparison's ``network`` section (:func:`comparison_clock`, composed once for
    the sweep): what composing the element with ``network=<name>`` gives, as a network preset reads
    no other key and no other file sets ``network.*`` (tests/test_sweep_checks.py holds the two
    equal), after the one rule across keys that reads the network
    (:func:`dlcomm.config.validate.validate_network`) passed on it."""
    import copy
    from dataclasses import replace

    from dlcomm.config.validate import validate_network

    validate_network(network, cfg.nodes * cfg.workers_per_node)
    return replace(cfg, network=copy.deepcopy(network))


def comparison_clock(overrides: Sequence[str], configs: Sequence[RunConfig]) -> tuple[str, str]:
    """``(override, why)``: what a sweep on this machine adds so that its comparison answers the
    question researchers ask of it, how the schemes compare on a cluster. When the ranks of some
    element (``configs``: the elements composed) share this machine's cores or GPU, the wall
    clock's time splits into turns, not a cluster's compute and communication, so the sweep also
    keeps the simulated clock of :data:`COMPARISON_NETWORK` (compute profiled from one replica
    alone, the network modelled), which its table's speedup then uses; the wall clock's figures
    stay beside it. Nothing is added (``("", "")``) when an override names the network (``network=off``
    compares on the wall clock) or an experiment (a paper's setting fixes its own clocks, and
    ``make reproduce-*`` records what its committed results hold), or an element models one."""
    from dlcomm.launch.driver import shared_hardware

    chosen = {item.lstrip("+~").partition("=")[0].split(".")[0] for item in overrides}
    if chosen & {"network", "experiment"}:
        return "", ""
    if any(cfg.network.name != "off" for cfg in configs):
        return "", ""
    shared = next((words for words in map(shared_hardware, configs) if words), "")
    if not shared:
        return "", ""
    return f"network={COMPARISON_NETWORK}", shared
