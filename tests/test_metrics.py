"""The metrics pipeline: typed timing rows, their aggregation, algorithms' statistics over ranks,
and a checkpoint that keeps both (a preempted and resumed run records what a straight one does)."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from dlcomm.metrics import names
from dlcomm.metrics.aggregate import epoch_metrics, iteration_series, run_metrics, simulated_elapsed
from dlcomm.metrics.rows import TIMING_COLUMNS, IterationRow
from dlcomm.metrics.stats import Count, Mean, StatLog, epoch_values, final_values, merged, step_series

import rank_programs

# timings.csv as users and the report read it: these columns, in this order.
DOCUMENTED_COLUMNS = (
    "rank",
    "node",
    "epoch",
    "step",
    "time_s",
    "compute_s",
    "comm_exposed_s",
    "comm_busy_s",
    "data_s",
    "bytes_sent",
    "messages",
    "loss",
    "sim_time_s",
    "sim_compute_s",
    "sim_comm_exposed_s",
    "sim_comm_busy_s",
    "comm_modelled_s",
    "overruns",
    "peer_wait_s",
    "batched_share_s",
)


def _row(rank: int, step: int, time_s: float, exposed: float, sim: float = math.nan, loss: float = 1.0) -> IterationRow:
    return IterationRow(
        rank=rank,
        node=rank,
        epoch=0,
        step=step,
        time_s=time_s,
        compute_s=time_s - exposed,
        comm_exposed_s=exposed,
        comm_busy_s=exposed,
        data_s=0.0,
        bytes_sent=100 * (rank + 1),
        messages=2,
        loss=loss,
        sim_time_s=sim,
        sim_compute_s=sim / 2,
        sim_comm_exposed_s=sim / 2,
        sim_comm_busy_s=sim / 2,
        comm_modelled_s=sim / 4,
        overruns=rank,
    )


def test_the_timing_columns_are_the_row_fields_in_the_documented_order() -> None:
    assert TIMING_COLUMNS == DOCUMENTED_COLUMNS
    assert IterationRow.restore(tuple(range(18))) == IterationRow(*range(18))  # a checkpoint of before rows were typed


def test_epoch_and_run_metrics_of_rows_match_hand_computation() -> None:
    rows = [
        _row(0, 0, 0.2, 0.1, sim=1.0, loss=2.0),
        _row(1, 0, 0.4, 0.1, sim=3.0, loss=4.0),
        _row(0, 1, 0.3, 0.1, sim=2.0),
    ]
    metrics = epoch_metrics(rows, batch_size=10, train_wall_s=2.0)
    assert metrics[names.EPOCH_TIME_PER_ITER] == pytest.approx(0.3)
    assert metrics[names.EPOCH_COMM_SHARE] == pytest.approx(0.1 / 0.3)
    assert metrics[names.EPOCH_TRAIN_LOSS] == pytest.approx(7 / 3)
    assert metrics[names.EPOCH_SAMPLES_PER_S] == pytest.approx(15.0)
    assert metrics[names.EPOCH_SIM_TIME_PER_ITER] == pytest.approx(2.0)
    assert simulated_elapsed(rows) == 3.0  # rank 0: 1 + 2, rank 1: 3
    final = run_metrics(rows, 10, 2.0, modelled=True)
    assert final[names.FINAL_SIM_TIME] == 3.0 and final[names.FINAL_OVERRUNS] == 1.0
    assert names.FINAL_SIM_TIME not in run_metrics(rows, 10, 2.0, modelled=False)
    series = iteration_series(rows, modelled=False)
    assert series[names.ITER_TIME] == pytest.approx({0: 0.3, 1: 0.3})
    assert series[names.ITER_BYTES] == {0: 150.0, 1: 100.0}
    assert names.ITER_SIM_TIME not in series and iteration_series(rows, modelled=True)[names.ITER_SIM_TIME] == {
        0: 2.0,
        1: 2.0,
    }
    # the timing warm-up (train.timing_warmup=1) is its own series: iter/* start after it
    warm = iteration_series(rows, modelled=True, warmup=1)
    assert warm[names.ITER_TIME] == pytest.approx({1: 0.3}) and warm["warmup/time_s"] == pytest.approx({0: 0.3})
    assert warm[names.ITER_SIM_TIME] == {1: 2.0} and warm["warmup/sim_time_s"] == {0: 2.0}
    assert warm[names.ITER_BYTES] == {0: 150.0, 1: 100.0} and "warmup/bytes_sent" not in warm  # not a time


def test_statistics_are_means_of_observations_or_counts_per_worker() -> None:
    """Worker 0 observed 0.5 at step 0 and 0.7, 0.9 at step 1; worker 1 observed 0.1 at step 1.
    epoch = (0.5 + 0.7 + 0.9 + 0.1) / 4; series at step 1 = (0.7 + 0.9 + 0.1) / 3; counts 3 and 1 -> 2 per worker."""
    zero, one = StatLog(), StatLog()
    zero.add(0, {"x": Mean([0.5]), "c": Count(1)})
    zero.add(1, {"x": Mean([0.7, 0.9]), "c": Count(2)})
    one.add(1, {"x": Mean([0.1]), "c": Count(1)})
    one.add(2, {"x": Mean([])})  # nothing observed: no point at step 2
    assert epoch_values([zero, one]) == pytest.approx({"epoch/x": 2.2 / 4, "epoch/c": 2.0})
    assert step_series([zero, one]) == {"iter/x": pytest.approx({0: 0.5, 1: 1.7 / 3})}
    run = merged([zero, one])
    run.merge(one)  # a second epoch: worker 1 again
    assert final_values(run, workers=2) == pytest.approx({"final/x": 2.3 / 5, "final/c": 2.5})


# ---- a preempted, resumed run ---------------------------------------------------------------

STEPS, STOP_AT = 12, 5  # 3 epochs of 4 steps; stopped mid-epoch 2


def _statistics_algorithm(base):
    """``base`` with a statistic of each kind: Mean of ``rank + step / 10`` and Count 1 per iteration."""

    class WithStatistics(base):
        def after_step(self, step: int) -> None:
            super().after_step(step)
            self.last_step = step

        def take_metrics(self):
            return {"probe": Mean([self.cluster.rank + self.last_step / 10]), "ticks": Count(1)}

    return WithStatistics


def _loop_run(cluster, channel, spec, folder: str | None, stop_at: int | None) -> dict:
    """The loop's state and summary (or the step it stopped at) of one run with statistics."""
    from dlcomm.algorithms.registry import ALGORITHMS

    algorithm = _statistics_algorithm(ALGORITHMS.get(spec.cfg().algo.name))
    loop, _, _, summary, stopped = rank_programs.train_until_warned(cluster, channel, spec, folder, stop_at, algorithm)
    if stopped is not None:
        return {"stopped": stopped}
    return {"summary": summary, "rows": loop.state.rows, "run_stats": loop.state.run_stats}


def _runs(cluster, channel, spec, folder: str) -> dict:
    return rank_programs.straight_stopped_resumed(_loop_run, cluster, channel, spec, folder, STOP_AT)


def test_a_resumed_run_keeps_the_rows_and_statistics_of_a_straight_one(tmp_path) -> None:
    from dlcomm.launch.harness import run_ranks

    spec = rank_programs.run_spec(
        [
            "algo=allreduce",
            *rank_programs.SMALL_JOB,
            "seed=5",
        ]
    )
    rank0 = run_ranks(_runs, 2, spec, str(tmp_path / "checkpoints"), nodes=2, timeout=120)[0]
    assert rank0["stopped"] == {"stopped": STOP_AT + 1}  # the warning seen after step STOP_AT stops the next check
    straight, resumed = rank0["straight"], rank0["resumed"]
    measured = (
        "time_s",
        "compute_s",
        "comm_exposed_s",
        "peer_wait_s",
        "comm_busy_s",
        "data_s",
        "sim_time_s",
        "sim_compute_s",
        "sim_comm_exposed_s",
        "sim_comm_busy_s",
        "comm_modelled_s",
        "batched_share_s",
    )  # clocks (and nan without a network model, or without batched compute)
    untimed = dict.fromkeys(measured, 0.0)
    assert [replace(row, **untimed) for row in resumed["rows"]] == [replace(row, **untimed) for row in straight["rows"]]
    assert len(straight["rows"]) == 2 * STEPS
    assert resumed["run_stats"] == straight["run_stats"]
    expected = {
        "final/probe": 0.5 + 0.55,
        "final/ticks": float(STEPS),
    }  # mean of r + t/10 over r in 0..1, t in 0..11; steps per worker
    for summary in (straight["summary"], resumed["summary"]):
        assert {key: summary[key] for key in expected} == pytest.approx(expected)
        assert isinstance(straight["rows"][0], IterationRow)
    assert resumed["summary"][names.FINAL_TRAIN_LOSS] == straight["summary"][names.FINAL_TRAIN_LOSS]


def test_final_figures_in_the_report_s_units_beside_the_raw_ones() -> None:
    from dlcomm.metrics.aggregate import readable

    final = {
        names.FINAL_TIME_PER_ITER: 0.0625,
        names.FINAL_COMM_SHARE: 0.25,
        names.FINAL_TEST_ACC: 0.8888,
        names.FINAL_SIM_TIME_PER_ITER: 0.2,
        names.FINAL_SIM_COMM_SHARE: 0.5,
    }
    shown = readable(final, samples_per_iteration=4 * 64)
    assert shown == {
        names.FINAL_MS_PER_ITER: 62.5,
        names.FINAL_COMPUTE_MS: 46.875,
        names.FINAL_COMM_EXPOSED_MS: 15.625,
        names.FINAL_SAMPLES_PER_S: 4096.0,
        names.FINAL_TEST_ACC_PCT: 88.88,
        names.FINAL_SIM_MS_PER_ITER: 200.0,
        names.FINAL_SIM_COMM_EXPOSED_MS: 100.0,
    }
    # no network model, no evaluation: only what the run has
    assert set(readable({names.FINAL_TIME_PER_ITER: 0.1, names.FINAL_COMM_SHARE: 0.0}, 64)) == {
        names.FINAL_MS_PER_ITER,
        names.FINAL_COMPUTE_MS,
        names.FINAL_COMM_EXPOSED_MS,
        names.FINAL_SAMPLES_PER_S,
    }


def test_each_timing_column_holds_its_own_quantity(home, cli_here) -> None:
    """The loop builds each row positionally (in TIMING_COLUMNS order, for its per-step cost): every
    column must still hold what its name says. Two ranks, a modelled link slow enough that the
    overlapped all-reduce outlasts the waits on it, so exposed and busy times differ."""
    import pandas as pd

    from conftest import FAST

    result = cli_here(
        home, "train", *FAST, "launcher=threads", "nodes=2", "model=mlp", "algo=allreduce", "algo.overlap=true",
        "algo.bucket_mb=0.1", "network=eth_1g", "network.inter.bandwidth_gbps=0.05", "train.max_steps=6",
        "train.batch_size=16",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    rows = pd.read_csv(next(home.glob("results/runs/*/timings.csv")))
    assert sorted(rows["rank"].unique()) == [0, 1] and (rows["node"] == rows["rank"]).all()
    assert (rows["epoch"] == 0).all() and sorted(rows["step"]) == sorted(list(range(6)) * 2)
    wall = rows["compute_s"] + rows["peer_wait_s"].fillna(0) + rows["comm_exposed_s"]
    assert (wall - rows["time_s"]).abs().max() < 1e-9
    simulated = rows["sim_compute_s"] + rows["sim_comm_exposed_s"]
    assert (simulated - rows["sim_time_s"]).abs().max() < 1e-9
    assert (rows["sim_comm_busy_s"] > rows["sim_comm_exposed_s"]).all()  # the buckets' sums overlap the backward
    assert (rows["comm_busy_s"] >= rows["comm_exposed_s"] - 1e-6).all()
    assert (rows["comm_modelled_s"] >= rows["sim_comm_busy_s"] - 1e-9).all()  # every bucket's duration, summed
    assert (rows["messages"] > 1).all() and (rows["bytes_sent"] > 0).all() and (rows["overruns"] == 0).all()
    assert (rows["loss"] > 0.5).all() and (rows["data_s"] >= 0).all() and rows["batched_share_s"].isna().all()


def test_each_epoch_logs_the_learning_rate_the_schedule_reached(home, cli_here) -> None:
    """``epoch/lr``: the rate after the epoch's last step. Cosine over 3 epochs of 4 steps with one
    epoch of warm-up (W = 4): f(4) = 1 (warm-up over, cosine at progress 0), f(8) = 0.5 (progress
    4/8), f(12) = 0 (progress 1, min_lr 0); a loop that logged the configured rate would say 0.08
    three times, one that logged the rate before the epoch's steps 0.02 (f(0) = 1/4) first."""
    from conftest import FAST, store_client

    result = cli_here(
        home, "train", *FAST, "dataset.train_size=512", "launcher=threads", "nodes=2", "model=mlp",
        "train.epochs=3", "optim.lr=0.08", "optim.schedule=cosine", "optim.warmup_epochs=1", "optim.min_lr=0",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    client = store_client(home)
    [run] = client.search_runs([client.get_experiment_by_name("dlcomm").experiment_id])
    history = {point.step: point.value for point in client.get_metric_history(run.info.run_id, names.EPOCH_LR)}
    assert history.keys() == {1, 2, 3}
    assert history[1] == pytest.approx(0.08) and history[2] == pytest.approx(0.04) and history[3] == pytest.approx(0.0)
