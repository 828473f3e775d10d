"""Topologies are pure: the draws, their invariants and the mixing matrices, without processes."""

from __future__ import annotations

import numpy as np
import pytest

from dlcomm.topology.graphs import (
    directed_exponential_peer,
    exponential_hops,
    fair_random_permutation,
    groups,
    random_destinations,
)
from dlcomm.topology.mixing import imbalance, lambda_2, mixing_curve, mixing_matrix


def test_fair_draw_is_a_derangement_for_every_size_and_many_draws() -> None:
    for n in range(2, 65):
        for step in range(10_000):
            dest = fair_random_permutation(n, seed=7, step=step)
            assert sorted(dest) == list(range(n)), (n, step, dest)
            assert all(d != i for i, d in enumerate(dest)), (n, step, dest)


def test_fair_draw_depends_only_on_seed_step_and_segment() -> None:
    """What every rank computes alone is the same list (it is a function of the shared seed)."""
    draws = [fair_random_permutation(16, seed=3, step=5, segment=2) for _ in range(4)]
    assert all(draw == draws[0] for draw in draws)
    assert fair_random_permutation(16, 3, 5, 1) != draws[0] or fair_random_permutation(16, 3, 6, 2) != draws[0]


def test_fair_draw_reaches_every_other_rank() -> None:
    """Algorithm 2 draws in rank order, so it is not uniform over derangements (the last ranks
    have fewer choices), but every rank sends to every other rank with some probability."""
    n, trials = 8, 5_000
    counts = np.zeros((n, n))
    for step in range(trials):
        for i, d in enumerate(fair_random_permutation(n, 0, step)):
            counts[i, d] += 1
    off_diagonal = counts[~np.eye(n, dtype=bool)] / trials
    assert np.all(np.diag(counts) == 0) and np.all(off_diagonal > 0.05), off_diagonal.round(3)
    assert np.allclose(counts[0, 1:] / trials, 1 / (n - 1), atol=0.02)  # the first rank draws uniformly


def test_unfair_draw_never_sends_to_itself_and_is_not_a_permutation() -> None:
    draws = [random_destinations(8, 0, step) for step in range(200)]
    assert all(d != i for dest in draws for i, d in enumerate(dest))
    assert any(len(set(dest)) < 8 for dest in draws)


def test_sgp_hop_list_for_16_ranks_matches_the_reference_graph() -> None:
    assert exponential_hops(16) == [1, 15, 2, 14, 4, 12, 8]
    assert [directed_exponential_peer(0, step, 16) for step in range(8)] == [1, 15, 2, 14, 4, 12, 8, 1]
    assert [directed_exponential_peer(3, step, 8, cycle="power2") for step in range(4)] == [4, 5, 7, 4]


@pytest.mark.parametrize("name", ["ring", "sgp", "sgp_power2", "crossover"])
def test_mixing_matrices_are_doubly_stochastic(name) -> None:
    for n in (2, 3, 8, 16):
        for step in range(5):
            w = mixing_matrix(name, n, seed=1, step=step)
            assert np.all(w >= 0)
            assert np.allclose(w.sum(axis=1), 1) and np.allclose(w.sum(axis=0), 1), (name, n, step)


def test_unfair_mixing_is_row_stochastic_only() -> None:
    matrices = [mixing_matrix("crossover_unfair", 16, 0, step) for step in range(20)]
    assert all(np.allclose(w.sum(axis=1), 1) for w in matrices)
    assert any(not np.allclose(w.sum(axis=0), 1) for w in matrices)


def test_power2_cycle_averages_exactly_in_log2_n_steps() -> None:
    product = np.eye(16)
    for step in range(4):
        product = mixing_matrix("sgp_power2", 16, 0, step) @ product
    assert np.allclose(product, 1 / 16) and lambda_2(product) < 1e-12 and imbalance(product) < 1e-30


def test_fig6_fair_random_mixes_faster_early_and_unfair_stays_imbalanced() -> None:
    fair = np.mean([[l2 for l2, _ in mixing_curve("crossover", 16, 20, seed)] for seed in range(10)], axis=0)
    sgp = [l2 for l2, _ in mixing_curve("sgp", 16, 20)]
    assert all(fair[k] < sgp[k] for k in range(1, 6)), (fair[:7].round(3), np.round(sgp[:7], 3))
    assert sgp[6] < 1e-9  # the whole hop list: exact averaging
    unfair = [imbalance_k for _, imbalance_k in mixing_curve("crossover_unfair", 16, 60, seed=0)]
    fair_imbalance = [imbalance_k for _, imbalance_k in mixing_curve("crossover", 16, 60, seed=0)]
    assert fair_imbalance[-1] < 1e-12 and unfair[-1] > 1e-6


def test_groups_partition_the_ranks() -> None:
    assert groups(8, 2) == [[0, 1, 2, 3], [4, 5, 6, 7]]
    with pytest.raises(ValueError, match="3 groups cannot split 8 ranks"):
        groups(8, 3)


def test_topology_command_prints_and_writes_the_table_and_plot(home) -> None:
    import pandas as pd

    from conftest import run_cli

    result = run_cli(home, "topology", "compare=crossover,sgp", "nodes=16", "steps=8", "trials=5", timeout=120)
    assert result.returncode == 0, result.stderr
    csv = home / "results" / "topology" / "crossover_vs_crossover_unfair_vs_sgp_n16_k8.csv"
    assert csv.is_file() and csv.with_suffix(".png").stat().st_size > 10_000
    table = pd.read_csv(csv)
    assert list(table["step"]) == list(range(1, 9))
    assert (table["lambda2_crossover"][1:6] < table["lambda2_sgp"][1:6]).all()
    assert "lambda2_crossover" in result.stdout
    bad = run_cli(home, "topology", "topology=mesh", timeout=120)
    assert bad.returncode == 2 and bad.stderr.strip().startswith("dlcomm: error: topology=mesh is invalid: use one of ring")


def test_shuffled_groups_partition_the_ranks_and_change_every_step() -> None:
    from dlcomm.topology.graphs import shuffled_groups

    seen = set()
    for step in range(200):
        partition = shuffled_groups(16, 4, seed=3, step=step)
        assert sorted(r for group in partition for r in group) == list(range(16))
        assert all(len(group) == 4 for group in partition)
        assert partition == shuffled_groups(16, 4, seed=3, step=step)
        seen.add(tuple(map(tuple, partition)))
    assert len(seen) > 150
