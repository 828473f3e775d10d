"""A store whose disk fills during a run (issue 49): one line that names the store and the fix,
exit 2, no traceback (MLflow logs the database error with its own before raising it), and the run
recorded truthfully: FAILED with that line, or never left RUNNING by an opening that failed.
A file size limit (RLIMIT_FSIZE: EFBIG, which SQLite reports as ENOSPC would be) stands for the full disk."""

from __future__ import annotations

import resource
import signal
import subprocess
import sys

import pytest

from conftest import cli_env

pytestmark = pytest.mark.slow  # real processes: the limit is a process's
JOB = ["dataset=synthetic", "model=mlp", "nodes=2", "launcher=threads"]


def _train(home, room: int, *overrides: str) -> subprocess.CompletedProcess:
    """``dlcomm train`` with ``room`` bytes of growth left to the store's file."""
    limit = (home / "results" / "mlflow.db").stat().st_size + room

    def full() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return subprocess.run(
        [sys.executable, "-m", "dlcomm.cli", "train", *JOB, *overrides],
        cwd=home,
        env=cli_env(home),
        capture_output=True,
        text=True,
        timeout=180,
        preexec_fn=full,
    )


def _statuses(home) -> list[tuple[str, str]]:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{home}/results/mlflow.db")
    runs = client.search_runs([client.get_experiment_by_name("dlcomm").experiment_id], order_by=["start_time ASC"])
    return [(run.info.status, run.data.tags.get("error", "")) for run in runs]


def test_a_store_that_fills_during_a_run_or_its_opening_is_one_line_and_a_failed_run(tmp_path, cli_here) -> None:
    assert cli_here(tmp_path, "train", *JOB, "train.max_steps=2").returncode == 0  # the store, made with room
    for room, steps in ((30_000, 400), (2_000, 5)):  # fills while training (metrics); while opening (params)
        result = _train(tmp_path, room, f"train.max_steps={steps}")
        lines = [line for line in result.stderr.splitlines() if line.startswith("dlcomm: error: ")]
        assert result.returncode == 2, result.stderr[-3000:]
        assert "Traceback" not in result.stderr, result.stderr[-3000:]
        assert len(lines) == 1 and "could not be written (disk I/O error)" in lines[0], result.stderr[-3000:]
        assert f"df -h {tmp_path / 'results'}" in lines[0]
        statuses = _statuses(tmp_path)
        assert "RUNNING" not in [status for status, _ in statuses]  # an opening that failed: FAILED, or deleted
    status, error = _statuses(tmp_path)[1]  # the run the full disk stopped while training
    assert status == "FAILED" and "could not be written (disk I/O error)" in error
