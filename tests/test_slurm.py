"""launcher=slurm against the real one-machine SLURM of scripts/slurm_local.sh (CI starts it)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import FAST, children, cli_env, mlflow_run, parent_id, run_cli, store_client, wait_until_ended

pytestmark = pytest.mark.slurm

ROOT = Path(__file__).resolve().parents[1]


def _slurm_up() -> bool:
    if shutil.which("sinfo") is None:
        return False
    return subprocess.run([str(ROOT / "scripts" / "slurm_local.sh"), "status"], capture_output=True).returncode == 0


needs_slurm = pytest.mark.skipif(not _slurm_up(), reason="no SLURM here: run scripts/slurm_local.sh up")


def test_no_sbatch_is_a_one_line_error(home, tmp_path, cli_here, monkeypatch) -> None:
    empty = tmp_path / "bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    done = cli_here(home, "train", "launcher=slurm")  # the check, through cli.main in this process
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
    assert f"/runs/{result.run_id}?workflowType=machine_learning" in result.stdout  # where to see it (MLflow UI)
    deadline = time.monotonic() + 240
    while mlflow_run(result).info.status == "RUNNING" and time.monotonic() < deadline:
        time.sleep(0.5)
    run = mlflow_run(result)
    assert run.info.status == "FINISHED", (job_id, returned_after)
    assert run.data.metrics["final/steps"] == 20
    assert run.data.tags["launcher"] == "slurm" and run.data.tags["world_size"] == "2"


@needs_slurm
def test_more_nodes_than_the_partition_has_is_refused(home, cli_here) -> None:
    """The local cluster has one node: nodes=2 would pend forever, so it is an error up front (the
    check asks sinfo; through cli.main in this process)."""
    result = cli_here(home, "train", "launcher=slurm", "nodes=2")
    assert result.returncode == 2, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "nodes=2 is invalid with launcher=slurm: the default partition has 1 node(s)" in lines[0]
    assert not (home / "results" / "mlflow.db").exists()
    unknown = cli_here(home, "train", "launcher=slurm", "launcher.partition=nope")
    assert unknown.returncode == 2
    assert unknown.stderr.strip() == (
        "dlcomm: error: launcher.partition=nope is invalid: this cluster's partitions are local; "
        "pass one of them, or leave it empty for the default"
    )
    assert not (home / "results" / "mlflow.db").exists()


# ---- sweeps as job arrays ------------------------------------------------------------------


@needs_slurm
def test_a_sweep_is_one_job_array_of_child_runs_under_one_parent(home) -> None:
    result = run_cli(
        home,
        "train",
        "-m",
        "seed=1,2",
        "algo=allreduce,local_sgd",
        *FAST,
        "launcher=slurm",
        "nodes=1",
        "workers_per_node=1",  # one process an element: the array is the point (ranks of one job: the requeue test)
        "train.max_steps=20",
        "train.threads_per_rank=1",
    )
    assert result.returncode == 0, result.stderr
    arrays = re.findall(r"submitted SLURM job array (\d+) \((\d+) elements", result.stdout)
    assert arrays and len(arrays) == 1 and arrays[0][1] == "4", result.stdout
    parent = parent_id(result)
    assert store_client(home).get_run(parent).info.status == "RUNNING"  # returned before the jobs finished
    assert all(run.info.status == "RUNNING" for run in children(home, parent))

    runs = wait_until_ended(home, parent, 4, 400)
    assert sorted(run.info.status for run in runs) == ["FINISHED"] * 4
    assert {run.data.tags["slurm_job_id"] for run in runs} == {f"{arrays[0][0]}_{i}" for i in range(4)}
    assert {(run.data.params["seed"], run.data.tags["algo"]) for run in runs} == {
        ("1", "allreduce"),
        ("1", "local_sgd"),
        ("2", "allreduce"),
        ("2", "local_sgd"),
    }
    assert all(run.data.metrics["final/steps"] == 20 for run in runs)
    parent_run = store_client(home).get_run(parent)
    assert parent_run.info.status == "FINISHED"
    assert parent_run.data.params["sweep.overrides"].startswith("seed=1,2 algo=allreduce,local_sgd")
    assert parent_run.data.params["sweep.size"] == "4"
    assert parent_run.data.tags["slurm_array_job_ids"] == arrays[0][0]
    # the child that ended the sweep then writes its comparison onto the parent (dlcomm report sweep=...)
    deadline = time.monotonic() + 120
    while "comparison/table.md" not in {item.path for item in store_client(home).list_artifacts(parent, "comparison")}:
        assert time.monotonic() < deadline, "no comparison on the sweep's parent run"
        time.sleep(1)
    assert all("summary/ms_per_iter" in store_client(home).get_run(run.info.run_id).data.metrics for run in runs)


@needs_slurm
def test_eight_elements_writing_one_sqlite_store_at_once_lose_nothing(home) -> None:
    epochs = 3
    result = run_cli(
        home,
        "train",
        "-m",
        "seed=range(1,9)",
        "dataset=synthetic",
        "dataset.train_size=512",
        "dataset.test_size=256",
        "train.eval_batch_size=256",
        "train.batch_size=32",
        f"train.epochs={epochs}",
        "train.eval_every=1",
        "launcher=slurm",
        "nodes=1",
        "workers_per_node=1",
        "launcher.array_parallelism=8",
    )
    assert result.returncode == 0, result.stderr
    parent = parent_id(result)
    runs = wait_until_ended(home, parent, 8, 500)
    assert [run.info.status for run in runs] == ["FINISHED"] * 8
    client = store_client(home)
    for run in runs:
        for name in ("epoch/test_acc_mean", "epoch/train_loss", "epoch/time_per_iter_s"):
            steps = sorted(point.step for point in client.get_metric_history(run.info.run_id, name))
            assert steps == list(range(1, epochs + 1)), (run.data.params["seed"], name, steps)
        assert len(client.get_metric_history(run.info.run_id, "iter/train_loss")) == epochs * 16
    assert client.get_run(parent).info.status == "FINISHED"


@needs_slurm
def test_a_failing_element_is_failed_with_its_error_and_spares_the_others(home, tmp_path) -> None:
    """Both dataset roots exist when the array is submitted (held); one is removed before it runs."""
    source = Path("/usr/share/datasets/fashion-mnist")
    if not source.is_dir():
        pytest.skip("Fashion-MNIST is not installed")
    roots = [tmp_path / "data_ok", tmp_path / "data_gone"]
    for root in roots:
        root.mkdir()
        for item in source.iterdir():
            (root / item.name).symlink_to(item)
    result = run_cli(
        home,
        "train",
        "-m",
        f"dataset.root={roots[0]},{roots[1]}",
        "dataset=fashion_mnist",
        "train.max_steps=10",
        "train.epochs=1",
        "launcher=slurm",
        "nodes=1",
        "workers_per_node=2",
        "+launcher.sbatch_args.hold=true",
    )
    assert result.returncode == 0, result.stderr
    array = re.search(r"submitted SLURM job array (\d+)", result.stdout).group(1)
    shutil.rmtree(roots[1])  # gone from the "compute node" before the element starts
    subprocess.run(["scontrol", "release", array], check=True)
    runs = {run.data.params["dataset.root"]: run for run in wait_until_ended(home, parent_id(result), 2, 400)}
    assert runs[str(roots[0])].info.status == "FINISHED"
    assert runs[str(roots[0])].data.metrics["final/steps"] == 10
    failed = runs[str(roots[1])]
    assert failed.info.status == "FAILED"
    assert "data_gone" in failed.data.tags["error"], failed.data.tags["error"]
    logs = home / "results" / "sweeps" / parent_id(result) / "slurm"
    job = failed.data.tags["slurm_job_id"]
    # the rank that raised first logs the error and cancels the job, so its peer may end before
    # writing one: the error is in the element's log of some task, whichever raised
    assert any("data_gone" in log.read_text() for log in logs.glob(f"{job}_*_log.err")), sorted(logs.iterdir())
    assert store_client(home).get_run(parent_id(result)).info.status == "FAILED"


@needs_slurm
def test_a_run_stopped_by_the_warning_signal_is_requeued_and_ends_as_if_never_stopped(home) -> None:
    """Two identical runs in one array; SLURM sends element 0 its time-limit warning signal
    (USR2) mid-training: it checkpoints, requeues, resumes into the same MLflow run, and
    ends with exactly the numbers of element 1."""
    result = run_cli(
        home,
        "train",
        "-m",
        "tracking.run_name=stopped,straight",
        "dataset=synthetic",
        "dataset.train_size=4096",
        "dataset.test_size=512",
        "train.eval_batch_size=256",
        "train.epochs=3",
        "train.batch_size=32",
        "train.threads_per_rank=1",
        "train.eval_every=1",
        "launcher=slurm",
        "nodes=1",
        "workers_per_node=2",
        "launcher.check_every=5",
    )
    assert result.returncode == 0, result.stderr
    array, parent = re.search(r"submitted SLURM job array (\d+)", result.stdout).group(1), parent_id(result)
    stopped = next(run for run in children(home, parent) if run.info.run_name == "stopped")
    deadline = time.monotonic() + 300
    while not store_client(home).get_metric_history(stopped.info.run_id, "epoch/train_loss"):  # after epoch 1
        assert time.monotonic() < deadline
        time.sleep(1)
    subprocess.run(["scancel", "--signal=USR2", f"{array}_0"], check=True)
    runs = {run.info.run_name: run for run in wait_until_ended(home, parent, 2, 500)}
    assert runs["stopped"].info.status == runs["straight"].info.status == "FINISHED"
    assert runs["stopped"].data.tags["requeues"] == "1" and "requeues" not in runs["straight"].data.tags
    client = store_client(home)
    for name in ("final/test_acc_mean", "final/train_loss", "final/steps", "final/test_acc_avg_model"):
        assert runs["stopped"].data.metrics[name] == runs["straight"].data.metrics[name], name
    for name in ("epoch/test_acc_mean", "epoch/train_loss", "iter/train_loss"):
        series = [
            sorted((p.step, p.value) for p in client.get_metric_history(runs[k].info.run_id, name))
            for k in ("stopped", "straight")
        ]
        assert series[0] == series[1], name
    assert not (home / "results" / "runs" / runs["stopped"].info.run_id / "checkpoints").exists()


@needs_slurm
def test_plain_sbatch_array_runs_the_lines_of_an_exported_sweep(home) -> None:
    exported = run_cli(home, "sweep", "export", "-m", "seed=1,2")
    assert exported.returncode == 0 and exported.stdout.splitlines() == ["seed=1", "seed=2"]
    (home / "sweep.txt").write_text(exported.stdout)
    env = cli_env(home)
    env["DLCOMM"] = str(Path(sys.executable).with_name("dlcomm"))
    submitted = subprocess.run(
        [
            "sbatch",
            "--parsable",
            "--array=0-1",
            "--ntasks-per-node=2",
            str(ROOT / "slurm" / "array.sbatch"),
            "sweep.txt",
            *FAST,
            "train.max_steps=10",
        ],
        cwd=home,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    array = submitted.stdout.strip()
    deadline = time.monotonic() + 300
    while subprocess.run(["squeue", "-h", "-j", array], capture_output=True, text=True).stdout.strip():
        assert time.monotonic() < deadline
        time.sleep(1)
    runs = store_client(home).search_runs([store_client(home).get_experiment_by_name("dlcomm").experiment_id])
    assert sorted((run.data.params["seed"], run.info.status) for run in runs) == [("1", "FINISHED"), ("2", "FINISHED")]
    assert all(run.data.tags["launcher"] == "srun" and run.data.tags["world_size"] == "2" for run in runs)
    assert all(run.data.metrics["final/steps"] == 10 for run in runs)
