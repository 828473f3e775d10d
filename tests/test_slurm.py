"""launcher=slurm against the real one-machine SLURM of scripts/slurm_local.sh (CI starts it)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import FAST, cli_env, mlflow_run, run_cli

ROOT = Path(__file__).resolve().parents[1]


def _slurm_up() -> bool:
    if shutil.which("sinfo") is None:
        return False
    return subprocess.run([str(ROOT / "scripts" / "slurm_local.sh"), "status"], capture_output=True).returncode == 0


needs_slurm = pytest.mark.skipif(not _slurm_up(), reason="no SLURM here: run scripts/slurm_local.sh up")


def test_no_sbatch_is_a_one_line_error(home, tmp_path) -> None:
    empty = tmp_path / "bin"
    empty.mkdir()
    env = cli_env(home)
    env["PATH"] = str(empty)
    done = subprocess.run(
        [sys.executable, "-m", "dlcomm.cli", "train", "launcher=slurm"], cwd=home, env=env, capture_output=True,
        text=True, timeout=120,
    )
    assert done.returncode == 2, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "no sbatch on PATH" in lines[0] and "scripts/slurm_local.sh up" in lines[0]
    assert not (home / "results" / "mlflow.db").exists()


@needs_slurm
def test_a_run_is_one_job_that_returns_at_once(home) -> None:
    started = time.monotonic()
    result = run_cli(home, "train", *FAST, "launcher=slurm", "nodes=1", "workers_per_node=2", "train.max_steps=20")
    returned_after = time.monotonic() - started
    assert result.returncode == 0, result.stderr
    job_id = re.search(r"submitted SLURM job (\d+)", result.stdout).group(1)
    assert "logs: " in result.stdout
    assert mlflow_run(result).info.status == "RUNNING"  # the command did not wait for the job
    deadline = time.monotonic() + 240
    while mlflow_run(result).info.status == "RUNNING" and time.monotonic() < deadline:
        time.sleep(2)
    run = mlflow_run(result)
    assert run.info.status == "FINISHED", (job_id, returned_after)
    assert run.data.metrics["final/steps"] == 20
    assert run.data.tags["launcher"] == "slurm" and run.data.tags["world_size"] == "2"


@needs_slurm
def test_more_nodes_than_the_partition_has_is_refused(home) -> None:
    """The local cluster has one node: nodes=2 would pend forever, so it is an error up front."""
    result = run_cli(home, "train", "launcher=slurm", "nodes=2", timeout=120)
    assert result.returncode == 2, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "nodes=2 is invalid with launcher=slurm: the default partition has 1 node(s)" in lines[0]
    assert not (home / "results" / "mlflow.db").exists()
    unknown = run_cli(home, "train", "launcher=slurm", "launcher.partition=nope", timeout=120)
    assert unknown.returncode == 2
    assert unknown.stderr.strip() == (
        "dlcomm: error: launcher.partition=nope is invalid: this cluster's partitions are local; "
        "pass one of them, or leave it empty for the default"
    )
    assert not (home / "results" / "mlflow.db").exists()
