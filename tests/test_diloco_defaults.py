"""The DiLoCo family's inner optimizer defaults to the paper's AdamW (issue 57, item 7): with SGD's
defaults (lr 0.05, momentum 0.9) the outer Nesterov step (0.7, 0.9) amplified the inner drift, and
``algo=diloco`` on one worker diverged without a word. A choice of optimizer, the user's or an
experiment's, still wins."""

from __future__ import annotations

import math

import pytest

from conftest import store_client


@pytest.mark.parametrize("algo", ["diloco", "streaming_diloco"])
def test_the_diloco_family_steps_adamw_unless_an_optimizer_is_chosen(algo) -> None:
    from dlcomm.compose import compose

    assert (compose([f"algo={algo}"]).optim.name, compose([f"algo={algo}"]).optim.lr) == ("adamw", 1e-3)
    assert compose([f"algo={algo}", "optim=sgd"]).optim.name == "sgd"  # the command line's choice
    assert compose([f"algo={algo}", "experiment=layerdrop_1g"]).optim.name == "sgd"  # an experiment's
    assert compose([f"algo={algo}", "experiment=crossover_paper"]).optim.name == "lars"
    assert compose(["algo=local_sgd"]).optim.name == compose([]).optim.name == "sgd"  # the others keep SGD


@pytest.mark.slow  # a 110-step training of the default model on fashion_mnist, ~10 s
def test_diloco_on_one_worker_with_its_defaults_trains(home, cli_here) -> None:
    """With SGD inner (the old default) this run's loss became NaN at step 105 (period 5)."""
    result = cli_here(
        home, "train", "algo=diloco", "algo.period=5", "nodes=1", "launcher=threads", "train.max_steps=110"
    )
    assert result.returncode == 0, result.stderr
    [run] = store_client(home).search_runs(["1"])
    losses = [m.value for m in store_client(home).get_metric_history(run.info.run_id, "iter/train_loss")]
    assert len(losses) == 110 and all(math.isfinite(value) for value in losses)
    assert max(losses) < 5 and sum(losses[-10:]) / 10 < 1.5, losses
