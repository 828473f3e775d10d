"""A resumed run never lies (issue 50): a SLURM job started again resumes its run only while that
run is open and only with the recorded configuration; an ended run is never trained again; a
requeue SLURM refuses ends the run in one line with a truthful status."""

from __future__ import annotations

import os
import stat

import pytest

from dlcomm.errors import UserError

J = ["dataset=synthetic", "model=mlp", "nodes=2", "train.max_steps=5", "train.batch_size=16", "seed=0"]


@pytest.fixture
def opened(tmp_path):
    """``open(overrides)``: a RUNNING run of the composed spec in a store under tmp_path: (spec, run id)."""
    from dlcomm.compose import compose
    from dlcomm.spec import RunSpec
    from dlcomm.tracking.mlflow_run import open_run

    uri = f"sqlite:///{tmp_path}/results/mlflow.db"
    (tmp_path / "results").mkdir()

    def spec_of(overrides: list[str]) -> RunSpec:
        return RunSpec.from_config(compose(overrides), uri)

    def open_(overrides: list[str]):
        spec = spec_of(overrides)
        return spec, open_run(spec)

    open_.spec_of = spec_of
    return open_


def _marker(tmp_path, run_id: str):
    marker = tmp_path / "slurm-jobs" / "77"
    marker.parent.mkdir(parents=True)
    marker.write_text(run_id + "\n")
    return marker


def test_an_open_run_of_the_same_configuration_is_resumed(tmp_path, opened) -> None:
    from dlcomm.launch.srun import job_run

    spec, run_id = opened(J)
    assert job_run(spec, tmp_path / "no-marker", "77") == ""
    assert (
        job_run(opened.spec_of([*J, "launcher=srun", "tracking.run_name=x"]), _marker(tmp_path, run_id), "77") == run_id
    )


def test_a_resume_with_other_settings_is_refused_naming_the_keys(tmp_path, opened) -> None:
    """Before: exit 0, FINISHED under the first run's id with seed=0 and batch 16 recorded."""
    from dlcomm.launch.srun import job_run

    _, run_id = opened(J)
    changed = opened.spec_of([*J[:-2], "train.batch_size=32", "seed=7"])
    with pytest.raises(UserError) as refused:
        job_run(changed, _marker(tmp_path, run_id), "77")
    message = str(refused.value)
    assert "\n" not in message and f"SLURM job 77 resumes run {run_id[:12]}" in message
    assert "seed=0 -> 7" in message and "train.batch_size=16 -> 32" in message and "submit a new job" in message


@pytest.mark.parametrize(
    "then,now,shown",
    [
        ([], ["launcher.backend=gloo"], "launcher.backend=auto -> gloo"),
        (["launcher.backend=nccl"], [], "launcher.backend=nccl -> auto"),
        (["launcher.cpus_per_task=2"], ["launcher.cpus_per_task=8"], "launcher.cpus_per_task=2 -> 8"),
    ],
)
def test_a_resume_that_changed_a_launcher_knob_that_computes_is_refused(tmp_path, opened, then, now, shown) -> None:
    """Before: launcher was left out of config_hash, so a requeued srun start with another backend
    (gloo's and NCCL's reductions differ in their last digits) resumed the run and recorded its numbers."""
    from dlcomm.launch.srun import job_run

    srun = [*J, "launcher=srun"]
    _, run_id = opened([*srun, *then])
    with pytest.raises(UserError) as refused:
        job_run(opened.spec_of([*srun, *now]), _marker(tmp_path, run_id), "77")
    message = str(refused.value)
    assert "\n" not in message and f"({shown})" in message and "submit a new job" in message


def test_a_resume_that_changed_where_the_job_runs_is_resumed(tmp_path, opened) -> None:
    """Partition, account, qos, time limit and the requeue knobs say where and how long the job runs."""
    from dlcomm.launch.srun import job_run

    srun = [*J, "launcher=srun"]
    _, run_id = opened(srun)
    moved = [
        "launcher.partition=big",
        "launcher.account=lab",
        "launcher.qos=high",
        "launcher.time_min=600",
        "launcher.max_requeue=9",
        "launcher.comm_timeout_s=60",
    ]
    assert job_run(opened.spec_of([*srun, *moved]), _marker(tmp_path, run_id), "77") == run_id


@pytest.mark.parametrize(
    "launcher,changed",
    [
        ("threads", "launcher.semantics=nccl"),
        ("threads", "launcher.compute=serial"),
        ("local", "launcher.backend=gloo"),
        ("slurm", "launcher.gpus_per_node=1"),
        ("slurm", "launcher.cpus_per_task=4"),
    ],
)
def test_the_launcher_knobs_that_change_the_numbers_are_in_the_configuration_hash(opened, launcher, changed) -> None:
    base = opened.spec_of([*J, f"launcher={launcher}"])
    assert opened.spec_of([*J, f"launcher={launcher}", changed]).config_hash != base.config_hash
    assert opened.spec_of([*J, f"launcher={launcher}", "launcher.teardown_grace_s=9"]).config_hash == base.config_hash


@pytest.mark.parametrize("status", ["FINISHED", "FAILED", "KILLED"])
def test_an_ended_run_is_never_trained_again(tmp_path, opened, status) -> None:
    """Before: the same SLURM_JOB_ID started after its run FINISHED trained into it again (74 -> 148 rows)."""
    from dlcomm.launch.srun import job_run
    from dlcomm.tracking.mlflow_run import close_run

    spec, run_id = opened(J)
    close_run(spec.tracking_uri, run_id, status)
    assert job_run(spec, _marker(tmp_path, run_id), "77") == ""


def _scontrol(folder, code: int, said: str):
    folder.mkdir()
    script = folder / "scontrol"
    script.write_text(f"#!/bin/sh\necho '{said}' >&2\nexit {code}\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return str(folder)


@pytest.mark.parametrize("scontrol", ["refuses", "missing"])
def test_a_requeue_slurm_refuses_ends_the_run_killed_in_one_line(tmp_path, opened, monkeypatch, scontrol) -> None:
    """Before: subprocess.CalledProcessError (or FileNotFoundError), the run left RUNNING."""
    from mlflow.tracking import MlflowClient

    from dlcomm.launch.slurm import RankTask
    from dlcomm.train.checkpoint import Preempted

    spec, run_id = opened([*J, "launcher=slurm"])
    path = (
        _scontrol(tmp_path / "bin", 1, "scontrol: error: Requeue not allowed")
        if scontrol == "refuses"
        else str(tmp_path)
    )
    monkeypatch.setenv("PATH", path)
    monkeypatch.delenv("SLURM_RESTART_COUNT", raising=False)
    RankTask(spec.with_run(run_id, tmp_path / "run"))._requeue(Preempted(3), "77")
    run = MlflowClient(tracking_uri=spec.tracking_uri).get_run(run_id)
    assert run.info.status == "KILLED"
    error = run.data.tags["error"]
    assert "\n" not in error and "but SLURM did not requeue job 77 (scontrol requeue: " in error
    assert ("Requeue not allowed" if scontrol == "refuses" else "No such file") in error
    assert run.data.tags["requeues"] == "0"  # counted before the requeue (SLURM stops the task at once), undone
    assert os.environ["PATH"] == path
