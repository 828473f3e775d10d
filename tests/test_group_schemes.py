"""node_based, sesgd, local_sesgd and allreduce_hier with real processes."""

from __future__ import annotations

from functools import partial

import numpy as np

from dlcomm.launch import harness

import rank_programs

# The rank programs run as threads on the in-process fabric (launcher=threads): they test the
# algorithms, not processes (those are tests/test_inprocess.py's and test_threads_launcher.py's).
run_ranks = partial(harness.run_ranks, in_process="serial")


def test_node_based_consensus_points_and_exchange_count() -> None:
    per_epoch, k_prime, epochs = 7, 3, 2
    results = run_ranks(rank_programs.node_based_steps, 4, k_prime, per_epoch, epochs, nodes=2)
    # every epoch: after in-epoch iterations 3, 6 and 7 (the last): 1 + floor(7/3) = 3 exchanges
    assert all(r["exchanges"] == [1 + per_epoch // k_prime] * epochs for r in results)
    consensus = results[0]["consensus"]
    assert [i % per_epoch + 1 for i, c in enumerate(consensus) if c] == [3, 6, 7, 3, 6, 7]
    for step, is_consensus in enumerate(consensus):
        states = [r["states"][step] for r in results]
        assert np.array_equal(states[0], states[1]) and np.array_equal(states[2], states[3])  # within a node
        if is_consensus:
            assert max(np.abs(s - states[0]).max() for s in states) < 1e-6, step  # all replicas, buffers too
        else:
            assert np.abs(states[0] - states[2]).max() > 1e-6, step  # the nodes drift apart between


def test_node_based_once_per_epoch_when_k_prime_is_the_epoch() -> None:
    results = run_ranks(rank_programs.node_based_steps, 4, 5, 5, 2, nodes=2)
    assert results[0]["exchanges"] == [1, 1]  # K' = K: the footnote's "at least once"


def test_node_based_averages_after_the_last_step_of_a_run_cut_within_an_epoch() -> None:
    """train.max_steps=4 in an epoch of 7, once per epoch: the cut epoch's final iteration is the run's
    last, so the run ends with one model (before, no exchange at all and 0% communication)."""
    results = run_ranks(rank_programs.node_based_steps, 4, -1, 7, 1, 4, nodes=2)
    assert results[0]["consensus"] == [False, False, False, True] and results[0]["exchanges"] == [1]
    last = [r["states"][-1] for r in results]
    assert max(np.abs(s - last[0]).max() for s in last) < 1e-6


def test_sesgd_groups_partition_agree_and_average() -> None:
    world, steps = 8, 5
    results = run_ranks(rank_programs.sesgd_steps, world, "sesgd", {"groups": 2}, steps)
    for step in range(steps):
        groups = [tuple(r["groups"][step]) for r in results]
        for rank, group in enumerate(groups):
            assert rank in group and all(groups[member] == group for member in group)  # the same on every member
        partition = set(groups)
        assert sorted(r for g in partition for r in g) == list(range(world)) and all(len(g) == 4 for g in partition)
        for group in partition:
            states = [results[member]["states"][step] for member in group]
            assert max(np.abs(s - states[0]).max() for s in states) < 1e-6
        others = [g for g in partition if 0 not in g][0]
        assert np.abs(results[0]["states"][step] - results[others[0]]["states"][step]).max() > 1e-6
    assert len({tuple(r["groups"][s]) for r in results[:1] for s in range(steps)}) > 1  # regrouped


def test_local_sesgd_with_period_one_is_sesgd() -> None:
    sesgd = run_ranks(rank_programs.sesgd_steps, 4, "sesgd", {"groups": 2}, 4)
    local = run_ranks(rank_programs.sesgd_steps, 4, "local_sesgd", {"groups": 2, "period": 1}, 4)
    for a, b in zip(sesgd, local):
        assert all(np.array_equal(x, y) for x, y in zip(a["states"], b["states"]))


def test_allreduce_hier_equals_allreduce() -> None:
    differences = run_ranks(rank_programs.hier_vs_flat_allreduce, 6, 5, nodes=3)
    assert max(differences) <= 1e-5, differences


def test_bad_group_knobs_are_one_line_errors(home, cli_here) -> None:
    for args, expected in [
        (["algo=sesgd", "nodes=6"], "algo.groups=4 is invalid: the groups must split the 6 workers evenly"),
        (["algo=node_based", "algo.k_prime=0"], "algo.k_prime=0 is invalid"),
    ]:
        result = cli_here(home, "train", *args)
        assert result.returncode == 2, result.stderr
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and expected in lines[0], lines
    too_long = cli_here(
        home,
        "train",
        "algo=node_based",
        "algo.k_prime=100000",
        "dataset=synthetic",
        "dataset.train_size=1024",
        "dataset.test_size=256",
        "nodes=2",
    )
    assert too_long.returncode == 2
    assert "algo.k_prime=100000 is invalid: an epoch has 8 iterations" in too_long.stderr
