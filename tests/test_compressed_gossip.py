"""D-PSGD with a compressor: CHOCO-Gossip (Koloskova, Stich, Jaggi, ICML 2019, Alg. 2) over the
ring, against a transcription of the algorithm on every worker at once, the mean kept."""

from __future__ import annotations

from functools import partial

import numpy as np
import pytest
import torch

from dlcomm.launch import harness

import rank_programs

run_ranks = partial(harness.run_ranks, in_process="serial")


def _topk(x: torch.Tensor, ratio: float) -> torch.Tensor:
    k = max(1, int(x.numel() * ratio))
    _, idx = torch.topk(x.abs(), k, sorted=False)
    return torch.zeros_like(x).scatter_(0, idx, x[idx])


def _choco(xs: list[torch.Tensor], rounds: int, gamma: float, compress) -> list[torch.Tensor]:
    """CHOCO-Gossip on the ring with w_ij = 1/3: public copies x^ from 0; each round every worker
    compresses q_i = Q(x_i - x^_i), every copy of x^_i (its own, its neighbours') adds q_i, and
    x_i += gamma sum_j w_ij (x^_j - x^_i)."""
    n = len(xs)
    xs = [x.clone() for x in xs]
    public = [torch.zeros_like(x) for x in xs]
    for _ in range(rounds):
        qs = [compress(x - h) for x, h in zip(xs, public)]
        public = [h + q for h, q in zip(public, qs)]
        xs = [x + gamma * ((public[(i - 1) % n] + public[(i + 1) % n] - 2 * public[i]) / 3) for i, x in enumerate(xs)]
    return xs


@pytest.mark.parametrize(("world", "gamma"), [(4, 1.0), (5, 0.5)])
def test_dpsgd_with_topk_is_choco_gossip(world: int, gamma: float) -> None:
    results = run_ranks(rank_programs.choco_rounds, world, {"name": "topk", "ratio": 0.2}, 6, gamma)
    reference = _choco([torch.from_numpy(r["before"]) for r in results], 6, gamma, lambda d: _topk(d, 0.2))
    for result, expected in zip(results, reference):
        assert np.allclose(result["after"], expected.numpy(), atol=1e-6)
    before = np.mean([r["before"] for r in results], axis=0)
    after = np.mean([r["after"] for r in results], axis=0)
    assert np.allclose(before, after, atol=1e-6)  # W symmetric: the mean is kept
    spread = lambda key: max(float(np.abs(r[key] - np.mean([q[key] for q in results], axis=0)).max()) for r in results)  # noqa: E731
    assert spread("after") < spread("before")  # and the workers move towards it


def test_choco_with_a_lossless_compressor_is_dpsgd_s_gossip() -> None:
    """Q = identity (top-k of every entry), gamma = 1: x^ = x after the first round, so every
    round is x_i <- (x_{i-1} + x_i + x_{i+1}) / 3, D-PSGD's own step."""
    results = run_ranks(rank_programs.choco_rounds, 4, {"name": "topk", "ratio": 1.0}, 3, 1.0)
    xs = [torch.from_numpy(r["before"]) for r in results]
    for _ in range(3):
        xs = [(xs[(i - 1) % 4] + xs[i] + xs[(i + 1) % 4]) / 3 for i in range(4)]
    for result, expected in zip(results, xs):
        assert np.allclose(result["after"], expected.numpy(), atol=1e-6)
