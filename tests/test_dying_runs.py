"""Runs that die: a diverging run ends FAILED with its reason in one line; a run whose driver is
SIGKILLed mid-epoch keeps the per-iteration metrics streamed so far, and the next command that
opens the store closes it FAILED."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from dlcomm.metrics import names

from conftest import FAST, cli_env, mlflow_run, run_cli

DIVERGED = r"loss became NaN at step \d+ \(rank \d+\); lower optim.lr or enable warm-up \(optim.warmup_epochs=1\)"


@pytest.mark.parametrize("launcher", ["threads", "local"])
def test_a_diverging_run_fails_with_one_line_and_its_reason_tag(home, launcher) -> None:
    import re

    result = run_cli(home, "train", *FAST, f"launcher={launcher}", "optim.lr=1e10", "train.max_steps=30", timeout=180)
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("dlcomm: error: ")]
    assert len(errors) == 1 and re.fullmatch(
        rf"dlcomm: error: {DIVERGED}; mlflow run [0-9a-f]{{32}} marked FAILED", errors[0]
    ), result.stderr
    run = mlflow_run(result)
    assert run.info.status == "FAILED"
    assert re.fullmatch(DIVERGED, run.data.tags["error"])
    step = int(re.search(r"at step (\d+)", errors[0]).group(1))
    from mlflow.tracking import MlflowClient

    streamed = MlflowClient(tracking_uri=result.tracking_uri).get_metric_history(run.info.run_id, names.LIVE_LOSS)
    assert sorted(point.step for point in streamed) == list(range(step))  # the finite steps before it reached MLflow


def _running_run(uri: str, deadline: float):
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    while time.monotonic() < deadline:
        for experiment in client.search_experiments():
            for run in client.search_runs([experiment.experiment_id], "attributes.status = 'RUNNING'"):
                return client, run
        time.sleep(0.5)
    raise AssertionError("no RUNNING run appeared")


def test_a_driver_killed_mid_epoch_leaves_its_streamed_metrics_and_the_next_command_closes_the_run(
    home, cli_here
) -> None:
    # one long epoch: 40,000 samples / 4 workers / batch 32 = 312 iterations
    args = [*FAST, "dataset.train_size=40000", "train.batch_size=32", "train.epochs=1", "tracking.stream_every_s=1"]
    driver = subprocess.Popen(
        [sys.executable, "-m", "dlcomm.cli", "train", *args],
        cwd=home,
        env=cli_env(home),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    uri = f"sqlite:///{home / 'results' / 'mlflow.db'}"
    try:
        deadline = time.monotonic() + 120
        runs = home / "results" / "runs"  # a run's folder appears once the driver has created the store and the run
        while not (runs.is_dir() and any(runs.iterdir())) and time.monotonic() < deadline:
            time.sleep(0.5)
        client, run = _running_run(uri, deadline)
        while time.monotonic() < deadline and len(client.get_metric_history(run.info.run_id, names.LIVE_LOSS)) < 40:
            time.sleep(0.5)
        ranks = psutil.Process(driver.pid).children(recursive=True)  # the ranks, and a fork server if any
        assert ranks, "the driver has no rank processes to wait for"
        os.kill(driver.pid, signal.SIGKILL)
        driver.wait(timeout=10)
    finally:
        if driver.poll() is None:
            driver.kill()
    # the ranks notice their driver is gone (within a second) and exit: waited for, not a fixed 3 s
    _, alive = psutil.wait_procs(ranks, timeout=30)
    assert not alive, alive
    kept = client.get_metric_history(run.info.run_id, names.LIVE_LOSS)
    steps = sorted(p.step for p in kept)
    # every step from the first, or, where a batch covered more than 100 steps (a machine faster than
    # this one), every k-th of it (dlcomm.tracking.stream.thinned): never a step twice
    assert 40 <= len(kept) < 312 and steps[0] == 0 and len(set(steps)) == len(steps) and steps[-1] < 312
    assert client.get_run(run.info.run_id).info.status == "RUNNING"  # nothing could close it

    report = cli_here(home, "report", "--all")  # the next command, through cli.main in this process
    assert (
        f"dlcomm: closed lost run {run.info.run_id} (experiment dlcomm) as FAILED: its driver process {driver.pid}"
        in report.stdout
    ), report.stdout + report.stderr
    closed = client.get_run(run.info.run_id)
    assert closed.info.status == "FAILED"
    assert closed.data.tags["error"].endswith("is gone; closed by dlcomm report")
