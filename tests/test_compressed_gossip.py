"""Gossip with a compressor: CHOCO-Gossip (Koloskova, Stich, Jaggi, ICML 2019, Alg. 2) over D-PSGD's
ring, and with a public copy per directed pair over Crossover-SGD's changing peers, SGP's
push-sum and SESGD's shuffled groups, each against a transcription of the rule on every worker at once, the mean kept."""

from __future__ import annotations

from functools import partial

import numpy as np
import pytest
import torch

from dlcomm.errors import UserError
from dlcomm.launch import harness
from dlcomm.topology.graphs import exponential_hop, fair_random_sources, shuffled_groups

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


def _pairwise_choco(segments: list[list[torch.Tensor]], rounds: int, gamma: float, seed: int, compress):
    """Crossover's round with compression, per segment k and round t: src = the fair draw,
    dest its inverse; c[(s, r)] the public copy of x_s held by s and r (from 0);
    q_i = Q(x_i - c[(i, dest(i))]), c[(i, dest(i))] += q_i, then every worker at once
    x_i += gamma / 2 (c[(src(i), i)] - c[(i, dest(i))])."""
    n = len(segments)
    xs = [[x.clone() for x in worker] for worker in segments]
    copies: dict[tuple[int, int, int], torch.Tensor] = {}
    for t in range(rounds):
        for k in range(len(xs[0])):
            src = fair_random_sources(n, seed, t, k)
            dest = {s: i for i, s in enumerate(src)}
            for i in range(n):
                key = (k, i, dest[i])
                copy = copies.setdefault(key, torch.zeros_like(xs[i][k]))
                copies[key] = copy + compress(xs[i][k] - copy)
            for i in range(n):
                xs[i][k] = xs[i][k] + gamma / 2 * (copies[(k, src[i], i)] - copies[(k, i, dest[i])])
    return xs


@pytest.mark.parametrize(("world", "gamma"), [(4, 1.0), (5, 0.5)])
def test_crossover_with_topk_is_choco_gossip_with_a_copy_per_pair(world: int, gamma: float) -> None:
    results = run_ranks(rank_programs.crossover_choco_rounds, world, {"name": "topk", "ratio": 0.3}, 6, gamma)
    before = [[torch.from_numpy(segment) for segment in r["before"]] for r in results]
    reference = _pairwise_choco(before, 6, gamma, 5, lambda d: _topk(d, 0.3))
    for result, expected in zip(results, reference):
        for ours, theirs in zip(result["after"], expected):
            assert np.allclose(ours, theirs.numpy(), atol=1e-6)
    for k in range(2):  # a permutation every round and copies that agree: the sum is kept
        mean = lambda key: np.mean([r[key][k] for r in results], axis=0)  # noqa: E731
        assert np.allclose(mean("before"), mean("after"), atol=1e-6)


def test_crossover_with_a_lossless_compressor_is_crossovers_own_round() -> None:
    """Q = identity, gamma = 1: each pair's copy is the sender's segment, so every round is
    x_i <- (x_i + x_src(i)) / 2 segment by segment, Crossover-SGD's step."""
    results = run_ranks(rank_programs.crossover_choco_rounds, 4, {"name": "topk", "ratio": 1.0}, 3, 1.0)
    xs = [[torch.from_numpy(segment) for segment in r["before"]] for r in results]
    for t in range(3):
        for k in range(2):
            src = fair_random_sources(4, 5, t, k)
            xs = [[(x[j] + xs[src[i]][j]) / 2 if j == k else x[j] for j in range(2)] for i, x in enumerate(xs)]
    for result, expected in zip(results, xs):
        for ours, theirs in zip(result["after"], expected):
            assert np.allclose(ours, theirs.numpy(), atol=1e-6)
    lossy = run_ranks(rank_programs.crossover_choco_rounds, 4, {"name": "topk", "ratio": 0.2}, 3, 1.0)
    assert not np.allclose(lossy[0]["after"][0], xs[0][0].numpy(), atol=1e-3)  # the comparison can fail


def test_crossover_refuses_a_compressor_with_the_unfair_draw() -> None:
    from dlcomm.compose import compose

    with pytest.raises(UserError, match="algo.fair=False is invalid: compress=topk needs the fair draw"):
        compose(["algo=crossover", "algo.fair=false", "compress=topk"])
    compose(["algo=crossover", "algo.fair=false"])  # uncompressed, the ablation stands


def _compressed_push_sum(xs: list[torch.Tensor], rounds: int, compress):
    """SGP's push-sum with a copy per directed pair, every worker at once: r = i + hop, s = i - hop,
    c[(i, r)] += Q(x_i / 2 - c[(i, r)]), x_i <- x_i - c[(i, r)] + c[(s, i)], w_i <- w_i / 2 + w_s / 2."""
    n = len(xs)
    xs, ws = [x.clone() for x in xs], [1.0] * n
    copies: dict[tuple[int, int], torch.Tensor] = {}
    for t in range(rounds):
        hop = exponential_hop(t, n, "sgp")
        for i in range(n):
            key = (i, (i + hop) % n)
            copy = copies.setdefault(key, torch.zeros_like(xs[i]))
            copies[key] = copy + compress(xs[i] / 2 - copy)
        xs = [xs[i] - copies[(i, (i + hop) % n)] + copies[((i - hop) % n, i)] for i in range(n)]
        ws = [ws[i] / 2 + ws[(i - hop) % n] / 2 for i in range(n)]
    return xs, ws


@pytest.mark.parametrize("world", [4, 5])
def test_sgp_with_topk_is_push_sum_with_a_copy_per_pair_and_keeps_both_sums(world: int) -> None:
    results = run_ranks(rank_programs.sgp_choco_rounds, world, {"name": "topk", "ratio": 0.3}, 7)
    xs, ws = _compressed_push_sum([torch.from_numpy(r["before"]) for r in results], 7, lambda d: _topk(d, 0.3))
    for result, x, w in zip(results, xs, ws):
        assert result["weight"] == pytest.approx(w, abs=1e-7)
        assert np.allclose(result["after"], x.numpy(), atol=1e-5)
    total = lambda key: np.sum([r[key] for r in results], axis=0)  # noqa: E731
    assert np.allclose(total("before"), total("after"), atol=1e-5)  # push-sum's numerator sum
    assert sum(r["weight"] for r in results) == pytest.approx(world)  # and its weight sum


@pytest.mark.parametrize("overlap", [False, True], ids=["sync", "overlap"])
def test_sgp_with_a_lossless_compressor_is_sgp(overlap: bool) -> None:
    """Q = identity: each pair's copy is the pushed half, so the sender keeps x/2 and the receiver
    adds the sender's x/2, SGP's own step, one iteration late too."""
    plain = run_ranks(rank_programs.sgp_choco_rounds, 4, {"name": "none"}, 5, overlap)
    lossless = run_ranks(rank_programs.sgp_choco_rounds, 4, {"name": "topk", "ratio": 1.0}, 5, overlap)
    for ours, theirs in zip(lossless, plain):
        assert ours["weight"] == theirs["weight"]
        assert np.allclose(ours["after"], theirs["after"], atol=1e-6)
    lossy = run_ranks(rank_programs.sgp_choco_rounds, 4, {"name": "topk", "ratio": 0.2}, 5, overlap)
    assert not np.allclose(lossy[0]["after"], plain[0]["after"], atol=1e-3)  # the comparison can fail


def _group_choco(buckets: list[list[torch.Tensor]], rounds: int, gamma: float, groups: int, seed: int, compress):
    """SESGD's averaging with a copy per directed pair, every worker at once: for each group G of
    the round's shuffle and each bucket k, c[(k, i, j)] += Q(x_i - c[(k, i, j)]) for every i != j
    in G, then x_i += gamma / |G| sum_{j != i} (c[(k, j, i)] - c[(k, i, j)])."""
    n = len(buckets)
    xs = [[x.clone() for x in worker] for worker in buckets]
    copies: dict[tuple[int, int, int], torch.Tensor] = {}
    for t in range(rounds):
        for group in shuffled_groups(n, groups, seed, t):
            for k in range(len(xs[0])):
                for i in group:
                    for j in group:
                        if i != j:
                            copy = copies.setdefault((k, i, j), torch.zeros_like(xs[i][k]))
                            copies[(k, i, j)] = copy + compress(xs[i][k] - copy)
                change = {i: sum(copies[(k, j, i)] - copies[(k, i, j)] for j in group if j != i) for i in group}
                for i in group:
                    xs[i][k] = xs[i][k] + gamma / len(group) * change[i]
    return xs


@pytest.mark.parametrize(("world", "groups", "gamma"), [(4, 2, 1.0), (6, 2, 0.5)])
def test_sesgd_with_topk_is_group_choco_with_a_copy_per_pair(world: int, groups: int, gamma: float) -> None:
    results = run_ranks(rank_programs.sesgd_choco_rounds, world, {"name": "topk", "ratio": 0.3}, 5, gamma, groups)
    before = [[torch.from_numpy(bucket) for bucket in r["before"]] for r in results]
    reference = _group_choco(before, 5, gamma, groups, 5, lambda d: _topk(d, 0.3))
    for result, expected in zip(results, reference):
        for ours, theirs in zip(result["after"], expected):
            assert np.allclose(ours, theirs.numpy(), atol=1e-6)
    for k in range(4):  # antisymmetric updates between copies that agree: every group's sum is kept
        mean = lambda key: np.mean([r[key][k] for r in results], axis=0)  # noqa: E731
        assert np.allclose(mean("before"), mean("after"), atol=1e-6)


def test_sesgd_with_a_lossless_compressor_is_sesgds_group_mean() -> None:
    """Q = identity, gamma = 1: x_i + (1/|G|) sum_j (x_j - x_i) = the group's mean, SESGD's step."""
    results = run_ranks(rank_programs.sesgd_choco_rounds, 4, {"name": "topk", "ratio": 1.0}, 3, 1.0, 2)
    xs = [[torch.from_numpy(bucket) for bucket in r["before"]] for r in results]
    for t in range(3):
        for group in shuffled_groups(4, 2, 5, t):
            means = [sum(xs[i][k] for i in group) / len(group) for k in range(4)]
            for i in group:
                xs[i] = list(means)
    for result, expected in zip(results, xs):
        for ours, theirs in zip(result["after"], expected):
            assert np.allclose(ours, theirs.numpy(), atol=1e-6)
    lossy = run_ranks(rank_programs.sesgd_choco_rounds, 4, {"name": "topk", "ratio": 0.2}, 3, 1.0, 2)
    assert not np.allclose(lossy[0]["after"][0], xs[0][0].numpy(), atol=1e-3)  # the comparison can fail
