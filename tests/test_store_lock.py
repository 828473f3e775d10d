"""Another process holding the SQLite store locked while a run starts (issue 49): dlcomm waits
(DLCOMM_STORE_WAIT_S, 300 s by default, plus SQLite's own wait per call) and goes on once the lock
is gone; locked past that, one line and exit 2, not an 86-line traceback."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from conftest import FAST, cli_env, store_client

HOLD = "import sqlite3, sys, time\nc = sqlite3.connect(sys.argv[1], isolation_level=None)\nc.execute('BEGIN EXCLUSIVE')\nprint('held', flush=True)\ntime.sleep(float(sys.argv[2]))\nc.execute('COMMIT')"


def _hold(database, seconds: float) -> subprocess.Popen:
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(database), str(seconds)], stdout=subprocess.PIPE, text=True
    )
    assert holder.stdout.readline().strip() == "held"
    return holder


def _train(home, wait_s: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "dlcomm.cli", "train", *FAST, "train.max_steps=2", "launcher=threads"]
    env = {**cli_env(home), "DLCOMM_STORE_WAIT_S": wait_s}
    return subprocess.run(command, cwd=home, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_a_run_waits_for_a_store_held_a_while_and_refuses_one_held_past_the_bound_in_one_line(home) -> None:
    database = home / "results" / "mlflow.db"
    assert _train(home, "300").returncode == 0  # the store exists, with one run
    holder = _hold(database, 6)
    began = time.monotonic()
    waited = _train(home, "300")
    holder.wait(timeout=60)
    assert waited.returncode == 0, waited.stderr[-2000:]
    assert time.monotonic() - began >= 6  # it waited for the lock, then trained
    holder = _hold(database, 120)
    try:
        refused = _train(home, "1")
    finally:
        holder.kill()
        holder.wait()
    assert refused.returncode == 2, refused.stderr[-2000:]
    lines = [line for line in refused.stderr.splitlines() if not line.startswith("dlcomm: checking")]
    assert lines[-1].startswith("dlcomm: error: the MLflow store stayed locked for 1 s: another process holds"), lines
    assert "Traceback" not in refused.stderr
    runs = store_client(home).search_runs([store_client(home).get_experiment_by_name("dlcomm").experiment_id])
    assert [run.info.status for run in runs] == ["FINISHED", "FINISHED"]  # nothing half-recorded
