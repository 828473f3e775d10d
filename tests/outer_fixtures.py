"""What the outer-loop tests (DiLoCo, its overlap, Streaming DiLoCo, SparseLoCo, DeMo, MuLoCo) share:
their ``run_ranks``, the paper's outer knobs, a tiny MLP, each rank's batch of a step, the flat
parameter vector, the inner optimizers, the reference replicas' inner step, and the check that a
run preempted mid-run and resumed from its checkpoint ends as the uninterrupted run
(:func:`rank_programs.resumed_three_ways` on the ranks)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from functools import partial

import numpy as np
import torch

from dlcomm.launch import harness
from dlcomm.train.loop import cross_entropy_loss, hooked_step

Batch = tuple[torch.Tensor, torch.Tensor]

#: Every rank a thread of this process, one at a time, on the in-process fabric (``launcher=threads``).
run_ranks = partial(harness.run_ranks, in_process="serial", timeout=120)

#: DiLoCo's outer step as the paper sets it (Douillard et al. 2023): Nesterov, lr 0.7, momentum 0.9.
PAPER = {"outer_lr": 0.7, "outer_momentum": 0.9, "nesterov": True}


def tiny_mlp(
    *widths: int, activation: type[torch.nn.Module] = torch.nn.Tanh, dtype: torch.dtype = torch.float32
) -> torch.nn.Module:
    """Linear layers of ``widths`` (default 16 -> 12 -> 4) with ``activation`` between, seeded 0."""
    widths = widths or (16, 12, 4)
    torch.manual_seed(0)
    layers: list[torch.nn.Module] = []
    for fan_in, fan_out in zip(widths[:-1], widths[1:]):
        layers += [torch.nn.Linear(fan_in, fan_out), activation()]
    return torch.nn.Sequential(*layers[:-1]).to(dtype)


def rank_batch(rank: int, step: int, dtype: torch.dtype = torch.float32, blind: bool = False) -> Batch:
    """8 samples of 16 features and 4 classes, drawn from ``(rank, step)``; ``blind``: this rank's
    four features ``4 rank .. 4 rank + 3`` are zero (whole chunks of the first layer get no gradient)."""
    generator = torch.Generator().manual_seed(10_007 * step + rank)
    inputs = torch.randn(8, 16, generator=generator, dtype=dtype)
    if blind:
        inputs[:, 4 * rank : 4 * rank + 4] = 0.0
    return inputs, torch.randint(0, 4, (8,), generator=generator)


def blind_batch(rank: int, step: int) -> Batch:
    """:func:`rank_batch` in float64 with this rank's four features at zero."""
    return rank_batch(rank, step, torch.float64, blind=True)


def flat(model: torch.nn.Module) -> np.ndarray:
    """The model's parameters, in order, as one NumPy vector (a copy)."""
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()]).numpy().copy()


def flat_tensors(tensors: Iterable[torch.Tensor]) -> np.ndarray:
    """Tensors of any shapes, flattened and concatenated in order, as one NumPy vector (a copy)."""
    return torch.cat([t.reshape(-1) for t in tensors]).numpy().copy()


def inner_optimizer(model: torch.nn.Module, inner: str = "adamw") -> torch.optim.Optimizer:
    """The inner optimizer: ``adamw`` (DiLoCo paper's) or ``sgd`` (momentum 0.9)."""
    if inner == "adamw":
        return torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1, betas=(0.9, 0.95))
    return torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)


def replicas_step(
    models: list[torch.nn.Module],
    optimizers: list[torch.optim.Optimizer],
    step: int,
    batch: Callable[[int, int], Batch] = rank_batch,
    loss: Callable[[torch.nn.Module, torch.Tensor, torch.Tensor], torch.Tensor] = cross_entropy_loss,
) -> None:
    """A reference's inner step with plain torch: every replica (rank = its index) on its own batch."""
    for rank, (model, optimizer) in enumerate(zip(models, optimizers)):
        inputs, labels = batch(rank, step)
        optimizer.zero_grad(set_to_none=True)
        loss(model, inputs, labels).backward()
        optimizer.step()


def hooked_steps(algorithm, model: torch.nn.Module, optimizer: torch.optim.Optimizer, rank: int, steps: int) -> None:
    """``algorithm`` set up on ``model`` and ``optimizer``, then ``steps`` steps on this rank's batches."""
    algorithm.setup(model, optimizer)
    for step in range(steps):
        inputs, labels = rank_batch(rank, step)
        hooked_step(algorithm, model, optimizer, cross_entropy_loss, inputs, labels, step)


def agree(ours: list[np.ndarray], reference: list[np.ndarray]) -> float:
    """The largest |ours - reference| over every rank's parameters."""
    return max(float(np.abs(mine - theirs).max()) for mine, theirs in zip(ours, reference, strict=True))


def gap(ours: list[dict], reference: list[np.ndarray]) -> float:
    """:func:`agree` of the ``"params"`` of ranks' results."""
    return agree([mine["params"] for mine in ours], reference)


def assert_resumed_equal(
    spec, folder: str, stop_at: int, algorithm_class, state: tuple, *, in_flight=False, nonzero=False, more=None
) -> list[dict]:
    """:func:`rank_programs.resumed_three_ways` of ``spec`` on 2 workers (2 nodes), checkpoints in
    ``folder``: every rank stopped after step ``stop_at`` (an exchange in flight then, where
    ``in_flight``) and resumed to the uninterrupted run's parameters and ``state`` attributes, bit for
    bit (``nonzero``: and those attributes are not all zero). The ranks' results, for more checks."""
    import rank_programs  # it imports this module

    args = (folder, stop_at, algorithm_class, state, in_flight, more)
    results = run_ranks(rank_programs.resumed_three_ways, 2, spec, *args, nodes=2)
    for rank in results:
        assert rank["stopped"] == {"stopped": stop_at + 1, **({"in_flight": True} if in_flight else {})}
        assert np.array_equal(rank["resumed"]["params"], rank["straight"]["params"])
        for name in state:
            assert np.array_equal(rank["resumed"][name], rank["straight"][name]), name
            assert not nonzero or np.abs(rank["straight"][name]).max() > 0, name
    return results
