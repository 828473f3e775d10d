"""Every experiment config composes into a valid run (what `dlcomm train experiment=<name>` starts)."""

from __future__ import annotations

from pathlib import Path

import pytest

from dlcomm.config.compose import compose
from dlcomm.config.validate import validate_run

EXPERIMENTS = sorted(p.stem for p in (Path(__file__).parents[1] / "src" / "dlcomm" / "configs" / "experiment").glob("*.yaml"))


@pytest.mark.parametrize("name", EXPERIMENTS)
def test_experiment_composes_and_validates(name) -> None:
    cfg = compose([f"experiment={name}"])
    validate_run(cfg)
    assert cfg.tracking.experiment == name


def test_the_command_line_overrides_an_experiment() -> None:
    cfg = compose(["experiment=crossover_fmnist", "algo=sgp", "nodes=8"])
    assert cfg.algo.name == "sgp" and cfg.nodes == 8 and cfg.train.epochs == 6
