"""Every experiment config composes into a valid run (what `dlcomm train experiment=<name>` starts)."""

from __future__ import annotations

from pathlib import Path

import pytest

from dlcomm.compose import compose
from dlcomm.config.validate import validate_run

EXPERIMENTS = sorted(
    p.stem for p in (Path(__file__).parents[1] / "src" / "dlcomm" / "configs" / "experiment").glob("*.yaml")
)


@pytest.mark.parametrize("name", EXPERIMENTS)
def test_experiment_composes_and_validates(name) -> None:
    cfg = compose([f"experiment={name}"])
    validate_run(cfg)
    assert cfg.tracking.experiment == name


def test_the_command_line_overrides_an_experiment() -> None:
    cfg = compose(["experiment=crossover_fmnist", "algo=sgp", "nodes=8"])
    assert cfg.algo.name == "sgp" and cfg.nodes == 8 and cfg.train.epochs == 6


@pytest.mark.parametrize("name", EXPERIMENTS)
def test_the_sweeps_documented_in_an_experiment_compose(name) -> None:
    """Every `dlcomm train -m ...` line in the file's header composes for each of its elements."""
    import shlex

    from dlcomm.sweep import expand

    text = (Path(__file__).parents[1] / "src" / "dlcomm" / "configs" / "experiment" / f"{name}.yaml").read_text()
    commands = [line.split("dlcomm train", 1)[1] for line in text.splitlines() if "dlcomm train -m" in line]
    assert commands, f"{name}.yaml documents no sweep"
    for command in commands:
        words = [w for w in shlex.split(command) if w != "-m"]
        for element in expand(words):
            validate_run(compose(element))
