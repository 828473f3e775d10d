"""What a task of a SLURM job says and how it ends (issue 57), run as SLURM runs it but without
SLURM (tests/slurm_tasks.py): one line, untagged, for what the user can fix, and a requeue said
only once SLURM took it; the record agrees with both."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import slurm_tasks

from conftest import FAST, store_client


def _task_run(home: Path, overrides: list[str]):
    """A RUNNING run of ``overrides`` (launcher=slurm) in a store under ``home``, as the driver
    opens it before it submits the job: its spec, with the run's id and folder."""
    from dlcomm.compose import compose
    from dlcomm.paths import runs_dir
    from dlcomm.spec import RunSpec
    from dlcomm.tracking.mlflow_run import open_run

    (home / "results").mkdir(exist_ok=True)
    uri = f"sqlite:///{home}/results/mlflow.db"
    spec = RunSpec.from_config(compose([*FAST, "launcher=slurm", "nodes=1", *overrides]), uri)
    run_id = open_run(spec)
    run_dir = runs_dir(uri) / run_id
    run_dir.mkdir(parents=True)
    return spec.with_run(run_id, run_dir)


def _job_id(home: Path) -> str:
    """A job id of this test's own (the rendezvous port derives from it; other tests may run beside)."""
    return str(5000 + hash(str(home)) % 7000)


def _scontrol(folder: Path, body: str) -> str:
    folder.mkdir(exist_ok=True)
    script = folder / "scontrol"
    script.write_text(f"#!/bin/sh\n{body}\n")
    script.chmod(0o755)
    return str(folder)


def _damaged_marker(checkpoints: Path) -> str:
    checkpoints.mkdir(parents=True)
    (checkpoints / "latest").write_text("abc\n")
    return f"checkpoint marker {checkpoints / 'latest'} holds 'abc'"


def _foreign_model(checkpoints: Path) -> str:
    import torch

    (checkpoints / "step3").mkdir(parents=True)
    torch.save({"model": torch.nn.Linear(2, 2).state_dict()}, checkpoints / "step3" / "rank0.pt")
    (checkpoints / "latest").write_text("3\n")
    return f"checkpoint {checkpoints / 'step3' / 'rank0.pt'} is of another model or configuration"


@pytest.mark.slow
@pytest.mark.parametrize("damage", [_damaged_marker, _foreign_model], ids=["marker-abc", "another-model"])
def test_a_task_that_resumes_from_an_unusable_checkpoint_says_one_line(home, damage) -> None:
    """Before: the right line, tagged `UserError:`, then a 19-23-line traceback (the task's own and
    submitit's) in the task's .err log. (Every refusal of a checkpoint's contents is worded by the
    train loop: tests/test_checkpoint_damage.py; here the task that prints it.)"""
    spec = _task_run(home, [])
    expected = damage(Path(spec.run_dir) / "checkpoints")
    done = slurm_tasks.run_task(slurm_tasks.RankTask(spec), home / "slurm", _job_id(home), str(home / "no-bin"))
    assert done.returncode == 2, done.stderr
    said = [line for line in done.stderr.splitlines() if line.startswith("dlcomm")]
    assert len(said) == 1 and said[0].startswith("dlcomm: error: rank 0 stopped: ") and expected in said[0], said
    assert "Traceback" not in done.stderr + done.stdout and "UserError" not in done.stderr + done.stdout
    run = store_client(home).get_run(spec.run_id)
    assert run.info.status == "FAILED" and run.data.tags["error"].startswith("rank 0 stopped: ")
    assert expected in run.data.tags["error"] and "UserError" not in run.data.tags["error"]


@pytest.mark.slow
@pytest.mark.parametrize(
    "scontrol,reason",
    [
        ("missing", "No such file"),
        ("echo 'scontrol: error: Requeue not allowed' >&2; exit 1", "Requeue not allowed"),
    ],
)
def test_a_requeue_slurm_did_not_do_is_never_said_done(home, scontrol, reason) -> None:
    """Before: "requeueing SLURM job 5010 (1 of at most 3)" and exit 0, while the run was KILLED
    with "SLURM did not requeue"."""
    spec = _task_run(home, [])
    job = _job_id(home)
    path = str(home / "no-bin") if scontrol == "missing" else _scontrol(home / "bin", scontrol)
    done = slurm_tasks.run_task(slurm_tasks.PreemptedTask(spec), home / "slurm", job, path)
    assert done.returncode == 1, done.stderr
    assert "requeueing" not in done.stdout and "requeued job" not in done.stdout, done.stdout
    said = [line for line in done.stderr.splitlines() if line.startswith("dlcomm")]
    assert len(said) == 1 and f"but SLURM did not requeue job {job} (scontrol requeue: " in said[0], said
    assert reason in said[0] and said[0].endswith(f"mlflow run {spec.run_id} marked KILLED")
    assert "Traceback" not in done.stderr
    run = store_client(home).get_run(spec.run_id)
    assert run.info.status == "KILLED" and run.data.tags["requeues"] == "0"
    assert run.data.tags["error"] in said[0]


@pytest.mark.slow
@pytest.mark.parametrize(
    "scontrol",
    # SLURM's SIGTERM, which stops the job it requeues, may come first: scontrol then has not returned when it
    # arrives (sleep by its full path: the task's PATH is the fake's folder alone, and dash has no builtin
    # sleep; `sleep 5` failed at once with 127, and the task's failed-requeue path raced its SIGTERM watcher)
    ["exit 0", f"kill -TERM $PPID; {shutil.which('sleep')} 5"],
    ids=["answered", "stopped-first"],
)
def test_a_requeue_slurm_took_is_said_once_and_the_task_ends_cleanly(home, scontrol) -> None:
    spec = _task_run(home, [])
    job = _job_id(home)
    done = slurm_tasks.run_task(slurm_tasks.PreemptedTask(spec), home / "slurm", job, _scontrol(home / "bin", scontrol))
    assert done.returncode == 0, done.stderr
    said = [line for line in done.stdout.splitlines() if line.startswith("dlcomm")]
    assert said == [
        f"dlcomm: stopped after step 3 on the scheduler's warning signal; checkpoint saved; SLURM requeued job {job} (1 of at most 3)"
    ]
    assert "dlcomm: error" not in done.stderr
    run = store_client(home).get_run(spec.run_id)
    assert run.info.status == "RUNNING" and run.data.tags["requeues"] == "1"  # the requeued job goes on with it
