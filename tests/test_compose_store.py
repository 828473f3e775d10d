"""Composing stores only what the composition names (issue 59): ``dlcomm config`` imports the
chosen choices' modules, not every algorithm's and launcher's, and builds the structured configs
of those alone; what Hydra then composes is what it composes with every choice stored.

The store's contents are read from the text (:func:`dlcomm.catalog.named_choices`: the overrides
and the YAML files they reach); where that misses a node, Hydra's composition fails and
:func:`dlcomm.compose._hydra_compose` composes again with every choice stored, correct but as slow
as before. The second test holds every shipped choice to the fast way."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from hydra.core.config_store import ConfigStore
from omegaconf import OmegaConf

from dlcomm import compose
from dlcomm.catalog import choices, groups, registry

_PROBE = """
import json, sys
from dlcomm.cli import main
from dlcomm.catalog import registry
from dlcomm.plugins import declares
code = main(sys.argv[1:])
loaded = {}
for group in ("algo", "launcher", "compress", "task", "model", "dataset"):
    own = registry(group)
    if not declares(group):  # a group a plugin adds to loads every choice, by design (a broken plugin is refused)
        loaded[group] = [name for name in own.choice_modules() if f"{own.home}.{name}" in sys.modules]
print(json.dumps({"code": code, "loaded": loaded, "numpy": "numpy" in sys.modules}))
"""


@pytest.mark.parametrize(
    "args, chosen",
    [
        (["config"], {"algo": ["allreduce"], "launcher": ["local"]}),
        (["config", "algo=local_sgd", "launcher=threads"], {"algo": ["local_sgd"], "launcher": ["threads"]}),
        (["config", "optim.lr=-1"], {"algo": ["allreduce"], "launcher": ["local"]}),  # a refusal after composing
    ],
    ids=" ".join,
)
def test_composing_imports_the_chosen_choices_modules_alone(args: list[str], chosen: dict[str, list[str]]) -> None:
    done = subprocess.run([sys.executable, "-c", _PROBE, *args], capture_output=True, text=True, timeout=120)
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["code"] == (2 if "optim.lr=-1" in args else 0), done.stderr
    for group, modules in chosen.items():
        if group in seen["loaded"]:  # CI installs examples/plugin (algo=choco): then every algorithm loads
            assert seen["loaded"][group] == modules, (group, seen["loaded"])
    assert "launcher" in seen["loaded"] and "model" in seen["loaded"], "no group left to check"
    for group, modules in seen["loaded"].items():  # no group found by importing every choice's module
        assert len(modules) < len(registry(group).choice_modules()), (group, modules)
    if "algo" in seen["loaded"]:
        assert not seen["numpy"], "numpy (dlcomm.topology, the gossip algorithms) loaded for a composition without them"


def _every_node() -> int:
    """How many nodes dlcomm stores with every choice stored."""
    _empty_store()
    compose.register_schemas()
    return len(compose._STORED)


def _empty_store() -> None:
    """The ConfigStore as a fresh process finds it: Hydra's own nodes, none of dlcomm's."""
    repo = ConfigStore.instance().repo
    for group, name in compose._STORED:
        folder = repo if group is None else repo[group]
        del folder[f"{name}.yaml"]
        if group is not None and not folder:
            del repo[group]
    compose._STORED.clear()
    compose._EVERY = False


def test_every_shipped_choice_composes_from_what_it_names() -> None:
    """Each choice of each group, and the defaults, composed from an empty store: never again with
    every choice stored (the slow way)."""
    try:
        every = _every_node()
        for overrides in [[]] + [[f"{group}={choice}"] for group in groups() for choice in choices(group)]:
            _empty_store()
            compose._hydra_compose(overrides)
            assert not compose._EVERY, f"{overrides}: composed again with every choice stored (a node the text missed)"
            assert len(compose._STORED) < every / 2, f"{overrides}: {len(compose._STORED)} of {every} nodes stored"
    finally:
        _empty_store()


INTRICATE = [  # presets naming their schema, another group's choice, an experiment choosing five groups
    [],
    ["algo=diloco"],
    ["task=gan"],
    ["model=vit_s", "dataset=cifar10"],
    ["experiment=crossover_largebatch", "model=mlp"],
    ["launcher=slurm", "algo=local_sgd", "compress=topk"],
]


@pytest.mark.parametrize("overrides", INTRICATE, ids=" ".join)
def test_what_is_composed_from_the_named_choices_is_what_every_choice_gives(overrides: list[str]) -> None:
    try:
        every = _every_node()
        _empty_store()
        named = OmegaConf.to_yaml(compose._hydra_compose(overrides))
        assert len(compose._STORED) < every / 2 and not compose._EVERY, f"{len(compose._STORED)} of {every} stored"
        compose.register_schemas()
        assert OmegaConf.to_yaml(compose._hydra_compose(overrides)) == named
    finally:
        _empty_store()
