"""The first hour as a user (issue 21): output where the user works, timings without the start-up
iteration, a line at once, runs the MLflow UI can tell apart."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pandas as pd
import pytest

import dlcomm
from dlcomm.metrics import names
from dlcomm.metrics.aggregate import epoch_metrics
from dlcomm.metrics.rows import IterationRow

from conftest import FAST

CHECKOUT = Path(dlcomm.__file__).resolve().parents[2]


def _row(step: int, rank: int, time_s: float) -> IterationRow:
    nan = float("nan")
    return IterationRow(
        rank=rank,
        node=0,
        epoch=0,
        step=step,
        time_s=time_s,
        compute_s=time_s / 2,
        comm_exposed_s=time_s / 2,
        comm_busy_s=0.0,
        data_s=0.0,
        bytes_sent=0,
        messages=0,
        loss=1.0 + step,
        sim_time_s=nan,
        sim_compute_s=nan,
        sim_comm_exposed_s=nan,
        sim_comm_busy_s=nan,
        comm_modelled_s=nan,
        overruns=0,
    )


def test_the_warm_up_iterations_are_left_out_of_the_timing_means_only() -> None:
    rows = [_row(0, rank, 3.0) for rank in range(2)] + [_row(step, rank, 0.1) for step in (1, 2) for rank in range(2)]
    metrics = epoch_metrics(rows, batch_size=10, train_wall_s=3.2, warmup=1)
    assert metrics[names.EPOCH_TIME_PER_ITER] == 0.1 and metrics[names.EPOCH_COMM_SHARE] == 0.5
    assert abs(metrics[names.EPOCH_SAMPLES_PER_S] - 4 * 10 / 0.2) < 1e-9  # 3.2 s less the 3 s warm-up step
    assert metrics[names.EPOCH_TRAIN_LOSS] == 2.0  # the loss counts every iteration: (1 + 2 + 3) / 3
    assert epoch_metrics(rows, 10, 3.2, warmup=0)[names.EPOCH_TIME_PER_ITER] == pytest.approx((6.0 + 0.4) / 6)
    only_warmup = epoch_metrics(rows[:2], 10, 3.0, warmup=1)
    assert only_warmup[names.EPOCH_TIME_PER_ITER] == 3.0  # nothing else to count: all of it


def _snapshot() -> set[tuple[str, float]]:
    """Every file under the checkout's results/ and the checkout's top level, with its mtime."""
    found = {(entry.name, entry.stat().st_mtime) for entry in CHECKOUT.iterdir()}
    results = CHECKOUT / "results"
    if results.is_dir():
        found |= {(str(path), path.stat().st_mtime) for path in results.rglob("*")}
    return found


@pytest.mark.slow  # real runs and a report, 20 s here
def test_outside_the_checkout_runs_and_reports_land_where_the_user_works(tmp_path) -> None:
    before = _snapshot()
    env = {key: value for key, value in os.environ.items() if key != "DLCOMM_HOME"}
    env["PYTHONWARNINGS"] = "ignore"

    def dlcomm_here(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "dlcomm.cli", *args],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=180,
        )

    trained = dlcomm_here("train", *FAST, "launcher=threads", "train.max_steps=3", "train.epochs=1")
    assert trained.returncode == 0, trained.stderr
    run_id = re.findall(r"mlflow run ([0-9a-f]{32})", trained.stdout)[-1]
    assert (tmp_path / "results" / "mlflow.db").is_file()
    assert (tmp_path / "results" / "runs" / run_id / "timings.csv").is_file()
    reported = dlcomm_here("report", "experiment=dlcomm")
    assert reported.returncode == 0, reported.stderr
    assert (tmp_path / "results" / "dlcomm" / "table.md").is_file()
    assert _snapshot() == before


def test_a_line_at_once_then_every_2_s_and_the_done_line_agrees_with_iterations_2_to_20(home) -> None:
    start = time.monotonic()
    process = subprocess.Popen(
        [sys.executable, "-m", "dlcomm.cli", "train", *FAST, "train.max_steps=20", "train.epochs=1"],
        cwd=home,
        env={**os.environ, "DLCOMM_HOME": str(home), "PYTHONWARNINGS": "ignore"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    err_lines: list[str] = []
    drain = threading.Thread(target=lambda: err_lines.extend(process.stderr), daemon=True)
    drain.start()
    stamped = [(time.monotonic() - start, line) for line in process.stdout]  # the status lines, then the job's
    process.wait(timeout=180)
    drain.join(timeout=10)
    err = "".join(err_lines)
    assert process.returncode == 0, err
    first_after, first = stamped[0]
    assert first.startswith("dlcomm: checking the run (") and first_after < 2.0, (first, first_after)
    assert "INFO" not in err, err  # no library chatter on the terminal
    lines = [line for _, line in stamped]
    status = [at for at, line in stamped if line.startswith("dlcomm: ")]  # up to the bar (rank 0's, on stderr)
    gaps = [later - earlier for earlier, later in zip(status, status[1:])]
    assert max(gaps) <= 2.0, list(zip(status, lines))
    # (which of rank 0's stages the line shows depends on timing: tests/test_progress.py tests the following)
    assert any(
        re.fullmatch(
            r"dlcomm: starting 4 workers as processes of this machine, MLflow run "
            r"'allreduce 4x1 dataset=synthetic .*\.\.\. seed=0' \([0-9a-f]{32}\)\n",
            line,
        )
        for line in lines
    ), lines
    out = "".join(lines)
    done = next(line for line in lines if line.startswith("done: "))
    done_ms = float(re.search(r"wall ([\d.]+) ms/iter", done).group(1))
    run_id = re.findall(r"mlflow run ([0-9a-f]{32})", out)[-1]
    timings = pd.read_csv(home / "results" / "runs" / run_id / "timings.csv")
    later = 1000 * timings[timings["step"] >= 1].groupby("step")["time_s"].mean().mean()
    assert abs(done_ms - later) <= 0.1 * later, (done_ms, later)

    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{home / 'results' / 'mlflow.db'}")
    metrics = client.get_run(run_id).data.metrics
    assert {f"{names.PEAK_RSS_MIB}/rank{rank}" for rank in range(4)} <= set(metrics)
    assert metrics[names.PEAK_RSS_MIB] == max(metrics[f"{names.PEAK_RSS_MIB}/rank{rank}"] for rank in range(4))
    assert [point.step for point in client.get_metric_history(run_id, names.PEAK_RSS_MIB)] == [0]  # never rank-as-step


def test_a_sweep_s_runs_are_named_by_what_it_varies(home, cli_here) -> None:
    result = cli_here(  # through cli.main in this process: the names are the sweep's, not the process's
        home,
        "train",
        "-m",
        *FAST,
        "launcher=threads",
        "network=off",  # on a machine of fewer than 4 cores the sweep would compare on eth_10g otherwise
        "train.max_steps=2",
        "train.epochs=1",
        "seed=1,2",
        "optim.lr=0.1,0.05",
    )
    assert result.returncode == 0, result.stderr
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=result.tracking_uri)
    experiment = client.get_experiment_by_name("dlcomm")
    names_ = sorted(
        run.info.run_name
        for run in client.search_runs([experiment.experiment_id])
        if run.data.tags.get("sweep") != "true"
    )
    assert names_ == [
        "allreduce 4x1 optim.lr=0.05 seed=1",
        "allreduce 4x1 optim.lr=0.05 seed=2",
        "allreduce 4x1 optim.lr=0.1 seed=1",
        "allreduce 4x1 optim.lr=0.1 seed=2",
    ]


def test_throughput_is_on_rank_0s_clock_when_a_peer_started_first(home, monkeypatch) -> None:
    """Rank 0 opens its reporter before training, so its peers wait in the first collective: their
    warm-up rows hold that wait, which is not in rank 0's epoch wall time. Subtracting it gave
    epoch/samples_per_s = 0 (issue 34 class 6); rank 0's own warm-up time is subtracted instead."""
    from dlcomm import cli
    from dlcomm.tracking.reporter import Rank0Reporter

    started = Rank0Reporter.start

    def late_start(self, *args, **kwargs):
        time.sleep(1.5)  # the late MLflow artifact upload of a first run, made longer than the epoch
        return started(self, *args, **kwargs)

    monkeypatch.setattr(Rank0Reporter, "start", late_start)
    monkeypatch.setenv("DLCOMM_HOME", str(home))
    monkeypatch.chdir(home)
    assert cli.main(["train", *FAST, "launcher=threads", "nodes=2", "train.epochs=1"]) == 0
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{home / 'results' / 'mlflow.db'}")
    run = client.search_runs([client.get_experiment_by_name("dlcomm").experiment_id])[0]
    timings = pd.read_csv(home / "results" / "runs" / run.info.run_id / "timings.csv")
    assert timings[(timings["step"] == 0) & (timings["rank"] == 1)]["time_s"].iloc[0] > 1.0  # the peer waited
    later = timings[timings["step"] >= 1]
    per_iteration = later.groupby("step")["time_s"].max().sum() + later.groupby("step")["data_s"].max().sum()
    expected = len(later) * 64 / per_iteration  # every rank's batch of 64 per step, over the steps' wall time
    measured = run.data.metrics[names.EPOCH_SAMPLES_PER_S]
    assert expected / 3 < measured < expected * 3, (measured, expected)
