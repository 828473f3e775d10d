"""Lost runs (RUNNING in MLflow, their SLURM job or driver gone): found without SLURM (a fake
queue), shown by ``dlcomm report``, closed as FAILED by ``dlcomm runs reap``, and its one-line
errors."""

from __future__ import annotations

import os
import socket
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from dlcomm.errors import UserError
from dlcomm.launch.squeue import NO_SQUEUE, live_job_ids, parse
from dlcomm.runs.lost import OpenRun, census
from dlcomm.runs.reap import reap

from conftest import run_cli

HOST = "here"
DEAD_PID = 4_000_000  # above any pid_max: never a live process


def _alive(pid: int) -> bool:
    return pid != DEAD_PID


def _store(folder: Path):
    """An empty SQLite store with experiment ``x``: (uri, client, experiment id)."""
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{folder / 'mlflow.db'}"
    client = MlflowClient(tracking_uri=uri)
    return uri, client, client.create_experiment("x", artifact_location=(folder / "artifacts").as_uri())


def _open(client, experiment: str, **tags: str) -> str:
    return client.create_run(experiment, tags=tags).info.run_id


def _finished(client, experiment: str, seed: int) -> str:
    """A FINISHED run with what the report reads."""
    from mlflow.entities import Metric, Param

    run_id = _open(client, experiment, launcher="slurm", slurm_job_id="50", world_size="2")
    params = {"algo.name": "allreduce", "seed": str(seed), "nodes": "2", "model.name": "small_cnn"}
    metrics = {
        "final/test_acc_mean": 0.8,
        "final/best_test_acc_mean": 0.81,
        "final/time_per_iter_s": 0.1,
        "final/comm_share": 0.5,
        "final/steps": 10.0,
    }
    client.log_batch(
        run_id,
        params=[Param(k, v) for k, v in params.items()],
        metrics=[Metric(k, v, 0, 0) for k, v in metrics.items()],
    )
    client.set_terminated(run_id, "FINISHED")
    return run_id


def _status(client, run_id: str) -> str:
    return client.get_run(run_id).info.status


# --- which runs are lost: the census, without SLURM -------------------------------------------


def test_census_tells_lost_from_alive_and_says_what_it_cannot_tell() -> None:
    runs = {
        "queued": OpenRun("queued", "x", "slurm", job_id="100"),
        "element": OpenRun("element", "x", "slurm", job_id="200_1"),
        "cancelled": OpenRun("cancelled", "x", "slurm", job_id="200_0"),
        "srun": OpenRun("srun", "x", "srun", job_id="300", host="node7"),
        "no_job": OpenRun("no_job", "x", "slurm"),
        "parent": OpenRun("parent", "x", "slurm", is_sweep=True),
        "local_dead": OpenRun("local_dead", "x", "local", host=HOST, pid=DEAD_PID),
        "local_alive": OpenRun("local_alive", "x", "local", host=HOST, pid=1234),
        "elsewhere": OpenRun("elsewhere", "x", "local", host="laptop", pid=DEAD_PID),
        "old_local": OpenRun("old_local", "x", "local", host=HOST),
    }
    found = census(list(runs.values()), {"100", "200_1", "201"}, HOST, _alive)
    lost = {v.run.run_id: v.reason for v in found.lost}
    assert set(lost) == {"cancelled", "srun", "local_dead"}
    assert "SLURM job 200_0 is no longer in squeue" in lost["cancelled"] and "SLURM job 300" in lost["srun"]
    assert f"driver process {DEAD_PID} on {HOST} is gone" in lost["local_dead"]
    unchecked = {v.run.run_id: v.reason for v in found.unchecked}
    assert set(unchecked) == {"no_job", "elsewhere", "old_local"}
    assert "no SLURM job id" in unchecked["no_job"] and "host laptop" in unchecked["elsewhere"]
    assert {run.run_id for run in found.alive} == {"queued", "element", "parent", "local_alive"}
    # the queue unreadable: no SLURM run is called lost, each says why; local runs are still judged
    blind = census(list(runs.values()), None, HOST, _alive, no_queue="no squeue on PATH")
    assert {v.run.run_id for v in blind.lost} == {"local_dead"}
    assert {v.run.run_id: v.reason for v in blind.unchecked}["cancelled"] == "no squeue on PATH"


def test_a_driver_s_pid_given_to_a_later_process_is_not_taken_for_the_driver() -> None:
    from dlcomm.launch.base import Launcher
    from dlcomm.launch.procstart import process_start

    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        started = process_start(process.pid)
        assert started is not None and started != process_start(os.getpid())
        same = OpenRun("same", "x", "local", host=HOST, pid=process.pid, started=started)
        reused = OpenRun("reused", "x", "local", host=HOST, pid=process.pid, started=started.split("/")[0] + "/1")
        unrecorded = OpenRun("older dlcomm", "x", "local", host=HOST, pid=process.pid)  # no driver_start tag
        found = census([same, reused, unrecorded], None, HOST)
    finally:
        process.kill()
        process.wait()
    assert [run.run_id for run in found.alive] == ["same", "older dlcomm"]
    assert [(v.run.run_id, v.reason) for v in found.lost] == [
        ("reused", f"its driver process {process.pid} on {HOST} is gone (the pid is now another process's)")
    ]

    class Driven(Launcher):
        ended_by = "driver"

    assert Driven.driver_tags() == {"driver_pid": str(os.getpid()), "driver_start": process_start(os.getpid())}


def test_the_queue_is_read_once_and_its_failures_are_one_line() -> None:
    assert parse("1234_0 1240\n1234_1 1241\n77 77\n") == {"1234_0", "1240", "1234_1", "1241", "77"}

    def answers(stdout: str = "", code: int = 0, stderr: str = ""):
        return lambda command, **kw: subprocess.CompletedProcess(command, code, stdout, stderr)

    assert live_job_ids(answers("5_0 6\n9 9\n")) == {"5_0", "6", "9"}
    with pytest.raises(UserError, match=r"squeue failed \(slurm_load_jobs error: Unable to contact"):
        live_job_ids(answers(code=1, stderr="slurm_load_jobs error: Unable to contact slurm controller\n"))

    def missing(command, **kw):
        raise FileNotFoundError(command[0])

    with pytest.raises(UserError) as error:
        live_job_ids(missing)
    assert str(error.value) == NO_SQUEUE and "\n" not in NO_SQUEUE


# --- dlcomm runs reap, in process --------------------------------------------------------------


def test_reap_closes_lost_runs_as_failed_with_the_reason_and_ends_their_parent(tmp_path) -> None:
    uri, client, experiment = _store(tmp_path)
    parent = _open(client, experiment, sweep="true", launcher="slurm")
    client.log_param(parent, "sweep.size", "2")
    done = _open(client, experiment, launcher="slurm", slurm_job_id="7_1", **{"mlflow.parentRunId": parent})
    client.set_terminated(done, "FINISHED")
    cancelled = _open(client, experiment, launcher="slurm", slurm_job_id="7_0", **{"mlflow.parentRunId": parent})
    running = _open(client, experiment, launcher="slurm", slurm_job_id="8")
    local_dead = _open(client, experiment, launcher="local", hostname=HOST, driver_pid=str(DEAD_PID))
    local_alive = _open(client, experiment, launcher="local", hostname=HOST, driver_pid="1234")
    settings = [f"tracking.uri={uri}"]

    preview = list(reap(settings, dry_run=True, queue=lambda: {"8", "9_3"}, alive=_alive, host=HOST))
    assert sum(line.startswith("would close") for line in preview) == 3  # two runs and the summary
    assert _status(client, cancelled) == _status(client, local_dead) == "RUNNING"

    lines = list(reap(settings, queue=lambda: {"8", "9_3"}, alive=_alive, host=HOST))
    assert lines[-1] == f"closed 2 lost run(s) as FAILED, of 5 RUNNING run(s) in {uri}"
    assert any(line.startswith(f"closed {cancelled} (experiment x) as FAILED: SLURM job 7_0") for line in lines)
    for run_id in (cancelled, local_dead):
        run = client.get_run(run_id)
        assert run.info.status == "FAILED" and run.info.end_time is not None
        error = run.data.tags["error"]
        assert error.startswith("lost while RUNNING: ") and error.endswith("; closed by dlcomm runs reap")
    assert "SLURM job 7_0 is no longer in squeue" in client.get_run(cancelled).data.tags["error"]
    assert f"driver process {DEAD_PID}" in client.get_run(local_dead).data.tags["error"]
    assert _status(client, parent) == "FAILED"  # its last child ended: one of them failed
    assert _status(client, running) == _status(client, local_alive) == "RUNNING"
    assert _status(client, done) == "FINISHED"

    again = list(reap(settings, queue=lambda: {"8"}, alive=_alive, host=HOST))
    assert again == [f"no lost run among 2 RUNNING run(s) in {uri}"]


def test_reap_guesses_nothing_when_the_queue_cannot_be_read(tmp_path) -> None:
    uri, client, experiment = _store(tmp_path)
    slurm = _open(client, experiment, launcher="slurm", slurm_job_id="7")
    local_dead = _open(client, experiment, launcher="local", hostname=HOST, driver_pid=str(DEAD_PID))

    def no_queue() -> set[str]:
        raise UserError(NO_SQUEUE)

    with pytest.raises(UserError, match="no squeue on PATH"):
        list(reap([f"tracking.uri={uri}"], queue=no_queue, alive=_alive, host=HOST))
    assert _status(client, slurm) == _status(client, local_dead) == "RUNNING"  # nothing closed
    with pytest.raises(UserError, match="is not a reap setting"):
        list(reap(["colour=blue"]))
    with pytest.raises(UserError, match="has no experiment 'nonesuch'"):
        list(reap([f"tracking.uri={uri}", "experiment=nonesuch"], queue=no_queue))


# --- dlcomm report shows them ------------------------------------------------------------------


def test_report_closes_lost_runs_and_leaves_them_out_of_the_table(tmp_path, monkeypatch) -> None:
    import pandas as pd

    from dlcomm.launch import squeue
    from dlcomm.report.build import run_report

    uri, client, experiment = _store(tmp_path)
    finished = [_finished(client, experiment, seed) for seed in (1, 2)]
    lost = _open(client, experiment, launcher="slurm", slurm_job_id="60_2")
    queued = _open(client, experiment, launcher="slurm", slurm_job_id="61")
    monkeypatch.setattr(squeue, "live_job_ids", lambda: {"61", "50"})
    lines = list(run_report(["experiment=x", f"tracking.uri={uri}", f"out={tmp_path / 'out'}"], False))
    # opening the store closes the lost run (issue 20), and the table leaves it out
    assert lines[0] == f"dlcomm: closed lost run {lost} (experiment x) as FAILED: SLURM job 60_2 is no longer in squeue"
    assert lines[1].startswith("x: wrote ") and len(lines) == 2
    assert _status(client, lost) == "FAILED" and _status(client, queued) == "RUNNING"
    assert client.get_run(lost).data.tags["error"] == (
        "lost while RUNNING: SLURM job 60_2 is no longer in squeue; closed by dlcomm report"
    )
    table = pd.read_csv(tmp_path / "out" / "x" / "table.csv")
    assert set(table.loc[0, "runs"].split()) == set(finished) and table.loc[0, "seeds"] == 2
    assert lost not in (tmp_path / "out" / "x" / "table.md").read_text() and queued not in table.loc[0, "runs"]

    def unreadable() -> set[str]:
        raise UserError(NO_SQUEUE)

    monkeypatch.setattr(squeue, "live_job_ids", unreadable)
    lines = list(run_report(["experiment=x", f"tracking.uri={uri}", f"out={tmp_path / 'out'}"], False))
    assert lines[0].startswith(
        "x: 1 RUNNING run(s), not in the table, could not be checked for loss (no squeue on PATH"
    )
    assert lines[1].startswith("x: wrote ")


# --- dlcomm runs reap, as a user runs it ---------------------------------------------------------


def _fake_squeue(folder: Path, listing: str) -> Path:
    """A folder holding an ``squeue`` that prints ``listing``."""
    folder.mkdir()
    script = folder / "squeue"
    script.write_text(f"#!/bin/sh\nprintf '{listing}'\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return folder


def test_runs_reap_on_the_command_line(home, tmp_path, monkeypatch) -> None:
    missing = run_cli(home, "runs", "reap")
    assert missing.returncode == 2 and missing.stderr.count("\n") == 1 and "no MLflow store at" in missing.stderr
    bad = run_cli(home, "runs", "reap", "colour=blue")
    assert (
        bad.returncode == 2
        and bad.stderr
        == "dlcomm: error: 'colour=blue' is not a reap setting: pass experiment=<name> and/or tracking.uri=<uri>\n"
    )

    (home / "results").mkdir()
    uri, client, experiment = _store(home / "results")  # the default store of DLCOMM_HOME=home
    driver = subprocess.Popen([sys.executable, "-c", "pass"])
    driver.wait()  # a driver that is gone
    local = _open(client, experiment, launcher="local", hostname=socket.gethostname(), driver_pid=str(driver.pid))
    cancelled = _open(client, experiment, launcher="slurm", slurm_job_id="12_3")
    queued = _open(client, experiment, launcher="slurm", slurm_job_id="12_4")

    path = os.environ["PATH"]
    (tmp_path / "empty").mkdir()
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))  # no squeue
    blind = run_cli(home, "runs", "reap")
    assert blind.returncode == 2 and "Traceback" not in blind.stderr, blind.stderr
    assert blind.stderr == f"dlcomm: error: {NO_SQUEUE}; nothing was closed\n" and blind.stdout == ""
    assert _status(client, local) == _status(client, cancelled) == "RUNNING"

    fake = _fake_squeue(tmp_path / "bin", "12_4 13\\n99 99\\n")  # printf makes each backslash-n a new line
    monkeypatch.setenv("PATH", f"{fake}{os.pathsep}{path}")
    done = run_cli(home, "runs", "reap")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == f"closed 2 lost run(s) as FAILED, of 3 RUNNING run(s) in {uri}"
    assert _status(client, local) == _status(client, cancelled) == "FAILED"
    assert _status(client, queued) == "RUNNING"
