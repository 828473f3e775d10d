"""DiLoCo (``algo=diloco``, Douillard et al. 2023, arXiv 2311.08105, Algorithm 1) against its rule.

1. With ``outer_lr=1`` and ``outer_momentum=0`` it is Local-SGD of the same period, step by step.
2. A transcription of the paper's update (outer SGD with Nesterov momentum on the replicas' mean
   ``theta - x_i``, in float64 NumPy, its own replicas trained with plain torch on the same
   batches) gives dlcomm's parameters after 3 periods; the same transcription with the sign of
   ``delta`` flipped, or without Nesterov, does not (the comparison can fail).
3. The same under NCCL's rules (``launcher.semantics=nccl``) at 2, 3, 4 workers and 2 nodes x 2.
4. A run preempted mid-period (and mid-epoch) and resumed from its checkpoint ends with the
   uninterrupted run's parameters: the global copy and the outer momentum are in the checkpoint.

Every rank is a thread of this process on the in-process fabric (``launcher=threads``).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from dlcomm.algorithms.diloco import DiLoCo, DiLoCoConfig
from dlcomm.algorithms.local_sgd import LocalSGD, LocalSGDConfig
from dlcomm.train.loop import cross_entropy_loss, hooked_step
from outer_fixtures import (
    PAPER,
    agree,
    assert_resumed_equal,
    flat,
    hooked_steps,
    inner_optimizer,
    rank_batch,
    replicas_step,
    run_ranks,
    tiny_mlp,
)

import rank_programs

# ---- 1. outer lr 1, no momentum: Local-SGD --------------------------------------------------


def _diloco_and_local_sgd(cluster, channel, period: int, steps: int, dtype: torch.dtype) -> float:
    """Both on the same batches, side by side; the largest |DiLoCo - Local-SGD| after any step."""
    ours, theirs = tiny_mlp(dtype=dtype), tiny_mlp(dtype=dtype)
    ours_opt, theirs_opt = inner_optimizer(ours, "sgd"), inner_optimizer(theirs, "sgd")
    diloco = DiLoCo(DiLoCoConfig(period=period, outer_lr=1.0, outer_momentum=0.0), cluster, channel)
    local_sgd = LocalSGD(LocalSGDConfig(period=period), cluster, channel)
    diloco.setup(ours, ours_opt)
    local_sgd.setup(theirs, theirs_opt)
    worst = 0.0
    for step in range(steps):
        inputs, labels = rank_batch(cluster.rank, step)
        hooked_step(diloco, ours, ours_opt, cross_entropy_loss, inputs.to(dtype), labels, step)
        hooked_step(local_sgd, theirs, theirs_opt, cross_entropy_loss, inputs.to(dtype), labels, step)
        worst = max(worst, float(np.abs(flat(ours) - flat(theirs)).max()))
    return worst


# float64: the rule alone, to 1e-7 (the residue is ~1e-16). float32, as runs train: theta - mean(theta - x_i)
# and Local-SGD's mean(x_i) round differently (a sum of differences against a sum of parameters), and
# 20 steps keep that to an ulp or two of parameters of magnitude ~1 (1.2e-7 measured at 4 workers).
TOLERANCE = {torch.float64: 1e-7, torch.float32: 2.5e-7}


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["float64", "float32"])
@pytest.mark.parametrize("world", [2, 4])
@pytest.mark.parametrize("period", [1, 3])
def test_outer_lr_one_without_momentum_is_local_sgd(world: int, period: int, dtype: torch.dtype) -> None:
    worst = run_ranks(_diloco_and_local_sgd, world, period, 20, dtype)
    assert max(worst) <= TOLERANCE[dtype], worst


# ---- 2. and 3. the paper's update, transcribed -----------------------------------------------


def _diloco_run(cluster, channel, knobs: dict, inner: str, period: int, steps: int) -> np.ndarray:
    model = tiny_mlp()
    optimizer = inner_optimizer(model, inner)
    hooked_steps(DiLoCo(DiLoCoConfig(period=period, **knobs), cluster, channel), model, optimizer, cluster.rank, steps)
    return flat(model)


def _paper(
    world: int, knobs: dict, inner: str, period: int, steps: int, sign: float = 1.0, nesterov: bool | None = None
) -> list[np.ndarray]:
    """Algorithm 1 of the paper: ``world`` replicas (plain torch, each its own inner optimizer),
    and after every ``period`` inner steps, in float64:
    ``delta = mean_i(theta - x_i)``, ``v = mu v + delta``, ``theta -= lr (delta + mu v)``
    (Nesterov, torch.optim.SGD's form) or ``theta -= lr v``; every replica restarts from theta.
    ``sign=-1`` takes ``x_i - theta`` instead (the wrong rule); ``nesterov`` overrides the knob."""
    lr, mu = knobs["outer_lr"], knobs["outer_momentum"]
    nesterov = knobs["nesterov"] if nesterov is None else nesterov
    models = [tiny_mlp() for _ in range(world)]
    optimizers = [inner_optimizer(model, inner) for model in models]
    theta = flat(models[0]).astype(np.float64)
    velocity = np.zeros_like(theta)
    for step in range(steps):
        replicas_step(models, optimizers, step)
        if (step + 1) % period:
            continue
        delta = sign * np.mean([theta - flat(model).astype(np.float64) for model in models], axis=0)
        velocity = mu * velocity + delta
        theta = theta - lr * (delta + mu * velocity if nesterov else velocity)
        for model in models:
            torch.nn.utils.vector_to_parameters(torch.from_numpy(theta).float(), model.parameters())
    return [flat(model) for model in models]


CASES = [
    pytest.param(PAPER, "adamw", id="paper-adamw"),
    pytest.param({**PAPER, "nesterov": False}, "sgd", id="heavy-ball-sgd"),
    pytest.param({"outer_lr": 0.5, "outer_momentum": 0.5, "nesterov": True}, "sgd", id="lr0.5-mu0.5-sgd"),
]
PERIOD = 4
STEPS = 3 * PERIOD  # 3 outer steps


@pytest.mark.parametrize(("knobs", "inner"), CASES)
@pytest.mark.parametrize("world", [2, 4])
def test_the_papers_update_transcribed_gives_dlcommss_parameters(world: int, knobs: dict, inner: str) -> None:
    ours = run_ranks(_diloco_run, world, knobs, inner, PERIOD, STEPS)
    for result in ours[1:]:  # every worker applies the same outer step: the replicas are equal
        assert np.array_equal(result, ours[0])
    reference = _paper(world, knobs, inner, PERIOD, STEPS)
    assert agree(ours, reference) <= 1e-6
    # the comparison can fail: the local-minus-global sign, and the outer step without Nesterov
    assert agree(ours, _paper(world, knobs, inner, PERIOD, STEPS, sign=-1.0)) > 1e-3
    if knobs["outer_momentum"] > 0:
        other = _paper(world, knobs, inner, PERIOD, STEPS, nesterov=not knobs["nesterov"])
        assert agree(ours, other) > 1e-3


@pytest.mark.parametrize(("nodes", "per_node"), [(2, 1), (3, 1), (4, 1), (2, 2)], ids=["2", "3", "4", "2x2"])
def test_the_papers_update_under_nccls_rules(nodes: int, per_node: int) -> None:
    world = nodes * per_node
    ours = run_ranks(_diloco_run, world, PAPER, "adamw", PERIOD, STEPS, nodes=nodes, semantics="nccl")
    for result in ours[1:]:
        assert np.array_equal(result, ours[0])
    assert agree(ours, _paper(world, PAPER, "adamw", PERIOD, STEPS)) <= 1e-6


# ---- 4. resumed mid-period -------------------------------------------------------------------

RESUME_STOP_AT = 5  # stopped after 6 of 12 steps: 1 step into the second period of 5, 2 into epoch 2 of 4 steps


def test_a_run_resumed_mid_period_ends_with_the_uninterrupted_runs_parameters(tmp_path) -> None:
    spec = rank_programs.run_spec(
        [
            "algo=diloco",
            "algo.period=5",
            "optim=adamw",
            *rank_programs.SMALL_JOB,
            "seed=5",
        ]
    )
    results = assert_resumed_equal(spec, str(tmp_path / "checkpoints"), RESUME_STOP_AT, DiLoCo, ("theta",))
    # 12 steps, outer steps after 5 and 10: the replicas end 2 inner steps apart from one theta
    assert np.array_equal(results[0]["straight"]["theta"], results[1]["straight"]["theta"])
    assert not np.array_equal(results[0]["straight"]["params"], results[1]["straight"]["params"])
