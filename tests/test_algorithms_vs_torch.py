"""AllReduce-SGD and Local-SGD against torch's own implementations, with real processes."""

from __future__ import annotations

import pytest

from dlcomm.launch.harness import run_ranks

import rank_programs


@pytest.mark.slow  # DDP in real gloo processes, 12-13 s a case here
@pytest.mark.parametrize("overlap,bucket_mb", [(False, 25.0), (True, 25.0), (True, 0.0), (False, 0.05)])
def test_allreduce_agrees_with_ddp(overlap: bool, bucket_mb: float) -> None:
    differences = run_ranks(rank_programs.allreduce_vs_ddp, 4, overlap, bucket_mb, 20)
    assert max(differences) <= 1e-5, differences


@pytest.mark.parametrize("overlap", [False, True])
def test_allreduce_with_micro_batches_agrees_with_ddp_no_sync(overlap: bool) -> None:
    differences = run_ranks(rank_programs.allreduce_vs_ddp, 2, overlap, 0.05, 6, 3)
    assert max(differences) <= 1e-5, differences


def test_local_sgd_agrees_with_periodic_model_averager() -> None:
    period, steps = 3, 20
    results = run_ranks(rank_programs.local_sgd_vs_averager, 4, period, steps)
    assert max(diff for diff, _ in results) <= 1e-5, [diff for diff, _ in results]
    # The invariant itself: replicas are equal right after an averaging step and differ between.
    trajectories = [trajectory for _, trajectory in results]
    for step in range(steps):
        spread = max(float(abs(trajectories[r][step] - trajectories[0][step]).max()) for r in range(4))
        if (step + 1) % period == 0:
            assert spread <= 1e-6, (step, spread)
        else:
            assert spread > 1e-4, (step, spread)
