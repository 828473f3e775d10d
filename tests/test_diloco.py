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

from functools import partial

import numpy as np
import pytest
import torch

from dlcomm.algorithms.diloco import DiLoCo, DiLoCoConfig
from dlcomm.algorithms.local_sgd import LocalSGD, LocalSGDConfig
from dlcomm.launch import harness
from dlcomm.train.loop import cross_entropy_loss, hooked_step

import rank_programs

run_ranks = partial(harness.run_ranks, in_process="serial", timeout=120)

PAPER = {"outer_lr": 0.7, "outer_momentum": 0.9, "nesterov": True}


def _mlp() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 12), torch.nn.Tanh(), torch.nn.Linear(12, 4))


def _batch(rank: int, step: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(10_007 * step + rank)
    return torch.randn(8, 16, generator=generator), torch.randint(0, 4, (8,), generator=generator)


def _inner(model: torch.nn.Module, inner: str) -> torch.optim.Optimizer:
    if inner == "adamw":  # the paper's inner optimizer
        return torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1, betas=(0.9, 0.95))
    return torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)


def _flat(model: torch.nn.Module) -> np.ndarray:
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()]).numpy().copy()


# ---- 1. outer lr 1, no momentum: Local-SGD --------------------------------------------------


def _diloco_and_local_sgd(cluster, channel, period: int, steps: int, dtype: torch.dtype) -> float:
    """Both on the same batches, side by side; the largest |DiLoCo - Local-SGD| after any step."""
    ours, theirs = _mlp().to(dtype), _mlp().to(dtype)
    ours_opt, theirs_opt = _inner(ours, "sgd"), _inner(theirs, "sgd")
    diloco = DiLoCo(DiLoCoConfig(period=period, outer_lr=1.0, outer_momentum=0.0), cluster, channel)
    local_sgd = LocalSGD(LocalSGDConfig(period=period), cluster, channel)
    diloco.setup(ours, ours_opt)
    local_sgd.setup(theirs, theirs_opt)
    worst = 0.0
    for step in range(steps):
        inputs, labels = _batch(cluster.rank, step)
        hooked_step(diloco, ours, ours_opt, cross_entropy_loss, inputs.to(dtype), labels, step)
        hooked_step(local_sgd, theirs, theirs_opt, cross_entropy_loss, inputs.to(dtype), labels, step)
        worst = max(worst, float(np.abs(_flat(ours) - _flat(theirs)).max()))
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
    model = _mlp()
    optimizer = _inner(model, inner)
    algorithm = DiLoCo(DiLoCoConfig(period=period, **knobs), cluster, channel)
    algorithm.setup(model, optimizer)
    for step in range(steps):
        inputs, labels = _batch(cluster.rank, step)
        hooked_step(algorithm, model, optimizer, cross_entropy_loss, inputs, labels, step)
    return _flat(model)


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
    models = [_mlp() for _ in range(world)]
    optimizers = [_inner(model, inner) for model in models]
    theta = _flat(models[0]).astype(np.float64)
    velocity = np.zeros_like(theta)
    for step in range(steps):
        for rank, (model, optimizer) in enumerate(zip(models, optimizers)):
            inputs, labels = _batch(rank, step)
            optimizer.zero_grad(set_to_none=True)
            cross_entropy_loss(model, inputs, labels).backward()
            optimizer.step()
        if (step + 1) % period:
            continue
        delta = sign * np.mean([theta - _flat(model).astype(np.float64) for model in models], axis=0)
        velocity = mu * velocity + delta
        theta = theta - lr * (delta + mu * velocity if nesterov else velocity)
        for model in models:
            torch.nn.utils.vector_to_parameters(torch.from_numpy(theta).float(), model.parameters())
    return [_flat(model) for model in models]


CASES = [
    pytest.param(PAPER, "adamw", id="paper-adamw"),
    pytest.param({**PAPER, "nesterov": False}, "sgd", id="heavy-ball-sgd"),
    pytest.param({"outer_lr": 0.5, "outer_momentum": 0.5, "nesterov": True}, "sgd", id="lr0.5-mu0.5-sgd"),
]
PERIOD = 4
STEPS = 3 * PERIOD  # 3 outer steps


def _agree(ours: list[np.ndarray], reference: list[np.ndarray]) -> float:
    return max(float(np.abs(mine - theirs).max()) for mine, theirs in zip(ours, reference, strict=True))


@pytest.mark.parametrize(("knobs", "inner"), CASES)
@pytest.mark.parametrize("world", [2, 4])
def test_the_papers_update_transcribed_gives_dlcommss_parameters(world: int, knobs: dict, inner: str) -> None:
    ours = run_ranks(_diloco_run, world, knobs, inner, PERIOD, STEPS)
    for result in ours[1:]:  # every worker applies the same outer step: the replicas are equal
        assert np.array_equal(result, ours[0])
    reference = _paper(world, knobs, inner, PERIOD, STEPS)
    assert _agree(ours, reference) <= 1e-6
    # the comparison can fail: the local-minus-global sign, and the outer step without Nesterov
    assert _agree(ours, _paper(world, knobs, inner, PERIOD, STEPS, sign=-1.0)) > 1e-3
    if knobs["outer_momentum"] > 0:
        other = _paper(world, knobs, inner, PERIOD, STEPS, nesterov=not knobs["nesterov"])
        assert _agree(ours, other) > 1e-3


@pytest.mark.parametrize(("nodes", "per_node"), [(2, 1), (3, 1), (4, 1), (2, 2)], ids=["2", "3", "4", "2x2"])
def test_the_papers_update_under_nccls_rules(nodes: int, per_node: int) -> None:
    world = nodes * per_node
    ours = run_ranks(_diloco_run, world, PAPER, "adamw", PERIOD, STEPS, nodes=nodes, semantics="nccl")
    for result in ours[1:]:
        assert np.array_equal(result, ours[0])
    assert _agree(ours, _paper(world, PAPER, "adamw", PERIOD, STEPS)) <= 1e-6


# ---- 4. resumed mid-period -------------------------------------------------------------------

RESUME_STOP_AT = 5  # stopped after 6 of 12 steps: 1 step into the second period of 5, 2 into epoch 2 of 4 steps


def _loop(cluster, channel, spec, folder: str | None, stop_at: int | None) -> dict:
    """This rank's final parameters and theta, or the step the warning stopped it after."""
    _, algorithm, model, _, stopped = rank_programs.train_until_warned(cluster, channel, spec, folder, stop_at, DiLoCo)
    if stopped is not None:
        return {"stopped": stopped}
    return {"params": _flat(model), "theta": torch.cat(algorithm.theta).numpy().copy()}


def _three_runs(cluster, channel, spec, folder: str) -> dict:
    return rank_programs.straight_stopped_resumed(_loop, cluster, channel, spec, folder, RESUME_STOP_AT)


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
    results = run_ranks(_three_runs, 2, spec, str(tmp_path / "checkpoints"), nodes=2)
    for rank in results:
        assert rank["stopped"] == {"stopped": RESUME_STOP_AT + 1}
        assert np.array_equal(rank["resumed"]["params"], rank["straight"]["params"])
        assert np.array_equal(rank["resumed"]["theta"], rank["straight"]["theta"])
    # 12 steps, outer steps after 5 and 10: the replicas end 2 inner steps apart from one theta
    assert np.array_equal(results[0]["straight"]["theta"], results[1]["straight"]["theta"])
    assert not np.array_equal(results[0]["straight"]["params"], results[1]["straight"]["params"])
