"""Waiting for peers told apart from communication (dlcomm.comm.waits, docs/metrics.md "Waiting is not
communication"): the rule on stamped intervals, the in-process fabric's stamps through the Channel, and
an 8-rank serial run whose reported communication is the transfer's only."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest

from dlcomm.comm.waits import peer_wait, transfer_within
from dlcomm.launch.harness import run_ranks

import rank_programs


def _work(started: float, finished: float) -> SimpleNamespace:
    return SimpleNamespace(started=started, finished=finished)


def test_a_wait_splits_into_the_transfer_and_the_rest() -> None:
    # blocked from 1 to 10; the data moved from 7 to 9 (two works, overlapping): 2 s transfer, 7 s waiting
    works = [_work(7.0, 8.5), _work(7.5, 9.0)]
    assert transfer_within(works, 1.0, 10.0) == pytest.approx(2.0)
    assert peer_wait(works, 1.0, 10.0) == pytest.approx(7.0)
    # a transfer that began before the wait counts only from the wait on
    assert transfer_within([_work(0.0, 3.0)], 1.0, 10.0) == pytest.approx(2.0)
    # torch.distributed's works carry no stamps: the split is unknown, not zero
    assert math.isnan(peer_wait([object()], 1.0, 10.0))
    assert math.isnan(transfer_within([_work(math.nan, math.nan)], 1.0, 2.0))


def test_serial_ranks_wait_for_each_others_turns_and_the_transfer_is_counted_apart() -> None:
    compute_s = 0.03
    out = run_ranks(rank_programs.turns_and_transfer, 4, compute_s, in_process="serial")
    for step in range(3):
        iteration = [out[rank][step] for rank in range(4)]
        for it in iteration:
            transfer = it["blocked"] - it["peer_wait"] + it["carried"]
            assert transfer < 0.02, iteration  # 4 MiB summed in memory: milliseconds
        # the last to arrive moves the data for all in its own call and waits for nobody ...
        carriers = [it for it in iteration if it["carried"] > 0]
        assert len(carriers) == 1 and carriers[0]["peer_wait"] < compute_s / 3, iteration
        # ... the first waited while the three others took their turns: at least 0 + 30 + 60 ms of sleeps
        assert max(it["peer_wait"] for it in iteration) >= 0.8 * 3 * compute_s, iteration


def test_a_wait_counts_in_the_iteration_that_makes_it() -> None:
    """SGP's overlap and gossip_pull wait in the next iteration for what the last one issued: the
    blocked time belongs to the iteration that stood still (it used to land on the issuing one's
    record, already counted, and vanish)."""
    late_s = 0.25
    out = run_ranks(rank_programs.wait_in_a_later_iteration, 2, late_s, in_process="parallel")
    first, second = out[0]
    assert first["blocked"] == 0.0
    assert second["blocked"] >= 0.15 and second["peer_wait"] >= 0.15  # rank 1 had not posted yet


def test_eight_serial_ranks_report_the_transfer_as_communication_and_the_turns_apart(home, cli_here) -> None:
    """The issue's case: 8 ranks taking turns on this machine's cores, no network model. The
    communication share is the in-memory transfer's (a few percent); waiting for the other seven
    ranks' turns is most of the iteration and is reported apart, in the rows, the metrics and the
    done line, which names the clock."""
    import pandas as pd
    from mlflow.tracking import MlflowClient

    from conftest import FAST

    result = cli_here(
        home, "train", *FAST, "launcher=threads", "launcher.compute=serial", "nodes=8", "network=off",
        "train.max_steps=12", "train.batch_size=32",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    done = next(line for line in result.stdout.splitlines() if line.startswith("done:"))
    assert "waiting for peers" in done and "8 ranks took turns on" in done and "no cluster's" in done
    client = MlflowClient(tracking_uri=f"sqlite:///{home / 'results' / 'mlflow.db'}")
    [run] = client.search_runs([client.get_experiment_by_name("dlcomm").experiment_id])
    metrics = run.data.metrics
    assert metrics["final/comm_share"] < 0.15, metrics  # the transfer alone
    assert metrics["final/peer_wait_share"] > 0.5, metrics  # seven other ranks' turns
    assert run.data.tags["shared_hardware"].startswith("8 ranks took turns on")
    timings = pd.read_csv(next(home.glob("results/runs/*/timings.csv")))
    split = timings["compute_s"] + timings["peer_wait_s"] + timings["comm_exposed_s"]
    assert (split - timings["time_s"]).abs().max() < 1e-9
