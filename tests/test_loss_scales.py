"""fp16 loss scaling across ranks: ranks that add their scaled gradients together keep one loss
scale (dlcomm.algorithms.base.Algorithm.found_inf_group), whatever rank finds an inf.

GradScaler("cpu") runs the same scale logic as on CUDA, so the rule is tested here; the ranks
are threads on the in-process fabric (launcher=threads)."""

from __future__ import annotations

from functools import partial

import pytest
import torch

from dlcomm.algorithms.registry import ALGORITHMS
from dlcomm.launch import harness
from dlcomm.train.precision import Precision

import rank_programs

run_ranks = partial(harness.run_ranks, in_process="serial", timeout=120)

FULL, HALF = 65536.0, 32768.0  # GradScaler's initial scale, and after one skipped step
KNOBS = {"sesgd": {"groups": 2}, "local_sesgd": {"groups": 2}, "gossip_pull": {"scheduler": "autonomous"}}

# Rank 1 (the non-leader of node 0, 2 nodes x 2 workers) finds an inf at step 1: the ranks whose
# loss scale halves. Gradients reduced and used by every member agree by themselves (allreduce,
# allreduce_hier, node_based within the node); crossover_hier's node shares the flag because only
# its leader sees the sum; gradients that stay local leave the other ranks alone.
HALVED = {
    "allreduce": {0, 1, 2, 3},
    "allreduce_hier": {0, 1, 2, 3},
    "node_based": {0, 1},
    "crossover_hier": {0, 1},
    "local_sgd": {1},
    "diloco": {1},
    "muloco": {1},
    "streaming_diloco": {1},
    "sparseloco": {1},
    "dpsgd": {1},
    "sgp": {1},
    "crossover": {1},
    "sesgd": {1},
    "local_sesgd": {1},
    "gossip_pull": {1},
}


def _scales(name: str, world: int, nodes: int, inject: tuple[int, int], steps: int = 3) -> list[dict]:
    return run_ranks(rank_programs.fp16_loss_scales, world, name, KNOBS.get(name, {}), steps, inject, nodes=nodes)


def test_every_algorithm_is_in_the_table() -> None:
    """A new algorithm must say which ranks share its loss scale (its found_inf_group)."""
    trainable = {  # dlcomm's own (a plugin's, such as examples/plugin's choco, is checked by its own tests)
        name
        for name, cls in ALGORITHMS.all().items()
        if cls.__module__.startswith("dlcomm.")
        and not cls.roles(cls.Config(**KNOBS.get(name, {})))
        and not cls.takes_own_step
    }
    # ps and ps_layerdrop: fp16 loss scaling is refused before launch (their server applies gradients);
    # demo too (it steps with the gradients before the scaler could unscale them)
    assert trainable == set(HALVED)


@pytest.mark.parametrize("name", sorted(HALVED))
def test_an_inf_on_one_rank_halves_the_scales_of_the_ranks_that_share_its_gradients(name: str) -> None:
    results = _scales(name, 4, 2, (1, 1))
    assert all(r["scales"][0] == FULL for r in results)  # nothing skipped before the inf
    halved = {rank for rank, r in enumerate(results) if r["scales"][-1] == HALF}
    assert halved == HALVED[name]
    assert all(r["scales"][-1] in (FULL, HALF) for r in results)
    # the flag travels only where the reduction does not give every member the sum
    expected = ["intra"] * 3 if name == "crossover_hier" else []
    assert all(r["flag_groups"] == expected for r in results)


@pytest.mark.parametrize(
    "world, inject, node",
    [
        (4, (1, 1), [0, 1]),  # the non-leader of node 0 (2 x 2): its inf reaches the leader's sum
        (4, (2, 1), [2, 3]),  # the leader of node 1 (2 x 2): its non-leader must skip too
        (6, (4, 1), [3, 4, 5]),  # a non-leader of node 1 (2 x 3): the other non-leader must skip too
    ],
)
def test_crossover_hier_keeps_one_loss_scale_per_node(world: int, inject: tuple[int, int], node: list[int]) -> None:
    """Before the node shared its found-inf flag, the ranks of a node that did not see the inf
    kept the full scale, and their next gradients reached the leader's sum scaled differently."""
    results = _scales("crossover_hier", world, 2, inject)
    per_node = world // 2
    for first in range(0, world, per_node):
        members = range(first, first + per_node)
        assert len({tuple(results[rank]["scales"]) for rank in members}) == 1, [results[r]["scales"] for r in members]
    assert all(results[rank]["scales"] == [FULL, HALF, HALF] for rank in node)
    assert all(r["scales"] == [FULL] * 3 for rank, r in enumerate(results) if rank not in node)


def test_a_shared_flag_skips_a_finite_step_and_halves_the_scale() -> None:
    """Precision.step: the flag after the sharing decides, not this rank's own gradients."""
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    precision = Precision(True, torch.device("cpu"), "fp16")
    seen = []

    def peer_found_inf(flag: torch.Tensor) -> None:
        seen.append(float(flag))
        flag.add_(1.0)  # as a sum over the group where another rank found an inf

    before = [p.detach().clone() for p in model.parameters()]
    with precision.autocast():
        loss = model(torch.randn(3, 4)).float().mean() * 1e-3  # far from fp16 overflow at scale 2**16
    precision.backward(loss)
    precision.step(optimizer, peer_found_inf)
    assert seen == [0.0]  # this rank's own gradients were finite
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))  # the step was skipped
    assert precision.scaler.get_scale() == HALF

    with precision.autocast():
        loss = model(torch.randn(3, 4)).float().mean() * 1e-3  # far from fp16 overflow at scale 2**16
    precision.backward(loss)
    precision.step(optimizer, lambda flag: seen.append(float(flag)))  # nobody found one
    assert seen == [0.0, 0.0]
    assert not all(torch.equal(a, b) for a, b in zip(before, model.parameters()))  # stepped
    assert precision.scaler.get_scale() == HALF
