"""Another process holding the SQLite store locked while a run starts (issue 49): dlcomm waits
(DLCOMM_STORE_WAIT_S, 300 s by default, plus SQLite's own wait per call) and goes on once the lock
is gone; locked past that, one line and exit 2, not an 86-line traceback.

The holder is a process (SQLite's lock between processes is the point). The run that makes the store
and the run that waits go through ``cli.main`` in this process (``cli_here``: what they show is
dlcomm's wait, not an interpreter's; two interpreter starts, ~15 s here, saved); the refused run is a
process, whose whole stderr shows that no traceback reaches the user."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from conftest import FAST, cli_env, store_client

HOLD = "import sqlite3, sys, time\nc = sqlite3.connect(sys.argv[1], isolation_level=None)\nc.execute('BEGIN EXCLUSIVE')\nprint('held', flush=True)\ntime.sleep(float(sys.argv[2]))\nc.execute('COMMIT')"
TRAIN = ["train", *FAST, "train.max_steps=2", "launcher=threads"]
HELD_S = 6  # longer than the run takes in this process once the store exists (~1-2 s here)


def _hold(database, seconds: float) -> subprocess.Popen:
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(database), str(seconds)], stdout=subprocess.PIPE, text=True
    )
    assert holder.stdout.readline().strip() == "held"
    return holder


@pytest.mark.slow
def test_a_run_waits_for_a_store_held_a_while_and_refuses_one_held_past_the_bound_in_one_line(
    home, cli_here, monkeypatch
) -> None:
    database = home / "results" / "mlflow.db"
    monkeypatch.setenv("DLCOMM_STORE_WAIT_S", "300")
    assert cli_here(home, *TRAIN).returncode == 0  # the store exists, with one run
    holder = _hold(database, HELD_S)
    began = time.monotonic()
    waited = cli_here(home, *TRAIN)
    holder.wait(timeout=60)
    assert waited.returncode == 0, waited.stderr[-2000:]
    assert time.monotonic() - began >= HELD_S  # it waited for the lock, then trained
    holder = _hold(database, 120)
    try:
        env = {**cli_env(home), "DLCOMM_STORE_WAIT_S": "1"}
        # the store probe's SQLite wait is tracking.connect_timeout_s (5 s by default), after which it takes
        # the lock for a store in use and goes on: 1 s here, the bound's own wait is what is tested
        command = [sys.executable, "-m", "dlcomm.cli", *TRAIN, "tracking.connect_timeout_s=1"]
        refused = subprocess.run(command, cwd=home, env=env, capture_output=True, text=True, timeout=300)
    finally:
        holder.kill()
        holder.wait()
    assert refused.returncode == 2, refused.stderr[-2000:]
    lines = [line for line in refused.stderr.splitlines() if not line.startswith("dlcomm: checking")]
    assert lines[-1].startswith("dlcomm: error: the MLflow store stayed locked for 1 s: another process holds"), lines
    assert "Traceback" not in refused.stderr
    runs = store_client(home).search_runs([store_client(home).get_experiment_by_name("dlcomm").experiment_id])
    assert [run.info.status for run in runs] == ["FINISHED", "FINISHED"]  # nothing half-recorded
