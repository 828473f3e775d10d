"""Whole runs through ``dlcomm train``: the math end to end, determinism, failures, MLflow."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pandas as pd
import pytest
import torch

from conftest import FAST, cli_env, mlflow_run, run_cli


def _final_params(result) -> torch.Tensor:
    state = torch.load(result.run_dir / "model_rank0.pt", weights_only=True)
    return torch.cat([tensor.reshape(-1) for tensor in state.values()])


@pytest.mark.parametrize("overlap", ["false", "true"])
def test_four_workers_of_16_equal_one_worker_of_64(home, overlap, cli_here) -> None:
    """(a) AllReduce-SGD with 4 x 16 takes the steps of one worker with 64 on the same data order.

    Five steps: the two sum their gradients in different orders, and on some CPUs (seen on an AMD
    EPYC, 2026-11-26) a rounding-level difference (1.5e-8 after 5 steps) flips a max-pool's argmax
    or a ReLU later and grows to 1.2e-4 by step 20: that is chaos, not a different step."""
    common = [
        *FAST,
        "train.max_steps=5",
        "train.save_model=true",
        "model=small_cnn",
        f"algo.overlap={overlap}",
        "launcher=threads",
    ]
    four = cli_here(home, "train", *common, "nodes=4", "train.batch_size=16")
    one = cli_here(home, "train", *common, "nodes=1", "train.batch_size=64")
    assert four.returncode == 0 and one.returncode == 0, four.stderr + one.stderr
    difference = float((_final_params(four) - _final_params(one)).abs().max())
    assert difference <= 1e-5, difference
    # and the run really moved: the parameters are not the initial ones
    assert float((_final_params(four)).abs().sum()) > 0


def test_same_seed_gives_same_numbers(home, cli_here) -> None:
    """(d) Two runs of the same config and seed record identical losses and accuracies."""
    args = [
        "train",
        *FAST,
        "train.max_steps=30",
        "algo=local_sgd",
        "nodes=2",
        "workers_per_node=2",
        "launcher=threads",
        "seed=7",
    ]
    first, second = cli_here(home, *args), cli_here(home, *args)
    assert first.returncode == 0 and second.returncode == 0, first.stderr + second.stderr
    a, b = mlflow_run(first).data.metrics, mlflow_run(second).data.metrics
    for key in ("final/test_acc_mean", "final/test_acc_avg_model", "final/train_loss", "epoch/consensus_distance"):
        assert a[key] == b[key], key
    losses = [pd.read_csv(result.run_dir / "timings.csv")["loss"].tolist() for result in (first, second)]
    assert losses[0] == losses[1]
    third = cli_here(home, *args[:-1], "seed=8")
    assert mlflow_run(third).data.metrics["final/train_loss"] != a["final/train_loss"]


def test_run_is_recorded_in_mlflow(home) -> None:
    result = run_cli(home, "train", *FAST, "train.epochs=2", "nodes=2", "workers_per_node=2")
    assert result.returncode == 0, result.stderr
    run = mlflow_run(result)
    assert run.info.status == "FINISHED"
    tags = run.data.tags
    assert (tags["algo"], tags["model"], tags["dataset"], tags["world_size"]) == (
        "allreduce",
        "small_cnn",
        "synthetic",
        "4",
    )
    for tag in ("git_commit", "config_hash", "hostname"):
        assert tags[tag]
    from dlcomm.tracking.mlflow_run import cpu_model

    assert tags["cpu"] == cpu_model() != ""  # low digits differ between CPUs (results/README.md)
    from importlib.metadata import version

    assert tags["dlcomm_version"] == version("dlcomm")  # what a pip-installed dlcomm has instead of a commit
    (dataset,) = [item.dataset for item in run.inputs.dataset_inputs]  # the UI's Datasets column
    assert (dataset.name, dataset.source_type) == ("synthetic", "code") and len(dataset.digest) == 16
    assert run.info.run_name.startswith("allreduce 2x2 ") and run.info.run_name.endswith(" seed=0")  # 2 nodes of 2
    assert (tags["network"], tags["network_mode"]) == ("off", "off")
    assert run.data.params["train.batch_size"] == "64" and run.data.params["workers_per_node"] == "2"
    metrics = run.data.metrics
    assert 0.0 <= metrics["final/test_acc_mean"] <= 1.0
    assert metrics["final/test_acc_mean"] == metrics["final/test_acc_avg_model"]  # replicas identical
    assert metrics["epoch/consensus_distance"] == 0.0
    timings = pd.read_csv(result.run_dir / "timings.csv")
    steps = 2 * (2048 // 4 // 64)
    assert len(timings) == 4 * steps and sorted(timings["rank"].unique()) == [0, 1, 2, 3]
    split = timings["compute_s"] + timings["peer_wait_s"].fillna(0) + timings["comm_exposed_s"]
    assert (split - timings["time_s"]).abs().max() < 1e-9
    assert (timings["bytes_sent"] > 0).all()
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=result.tracking_uri)
    artifacts = {entry.path for entry in client.list_artifacts(result.run_id)}
    assert {"config.yaml", "timings.csv"} <= artifacts
    history = client.get_metric_history(result.run_id, "iter/time_s")
    assert [point.step for point in history] == list(range(1, steps))  # the timing warm-up (step 0) apart:
    assert [point.step for point in client.get_metric_history(result.run_id, "warmup/time_s")] == [0]
    assert "done: test accuracy" in result.stdout
    assert not any(key.startswith(("iter/sim_", "final/sim_")) for key in metrics)  # network=off models nothing
    # the MLflow UI: the experiment opens on its runs, the run's page shows its result, its address is printed
    experiment = client.get_experiment(run.info.experiment_id)
    assert experiment.tags["mlflow.experimentKind"] == "custom_model_development"
    description = tags["mlflow.note.content"]
    # its result first (the UI folds a description after two lines), then its name and command line
    first, second = description.splitlines()[:2]
    assert first.startswith("**Result**: test accuracy ") and " ms/iter" in first, description
    assert second.startswith(f"**{run.info.run_name}**: `dlcomm train ") and "- test accuracy " in description
    page = f"http://127.0.0.1:5000/#/experiments/{run.info.experiment_id}/runs/{run.info.run_id}?workflowType=machine_learning"
    assert f"MLflow UI: {page}\n" in result.stdout
    assert f"ui --backend-store-uri {result.tracking_uri} --port 5000" in result.stdout


def test_simulated_network_run(home, cli_here) -> None:
    """network=eth_1g, simulate, 8 workers: simulated figures in the summary line and in MLflow,
    the modelled communication equal to the ring formula, and the clock's invariants on every row."""
    steps = 6
    result = cli_here(
        home,
        "train",
        *FAST,
        "network=eth_1g",
        "network.mode=simulate",
        "nodes=8",
        f"train.max_steps={steps}",
        "train.target_acc=0.01",
        "launcher=threads",
    )
    assert result.returncode == 0, result.stderr
    summary = next(line for line in result.stdout.splitlines() if line.startswith("done:"))
    assert "| wall " in summary and "| simulated eth_1g: " in summary and "reached 1.00% after" in summary
    run = mlflow_run(result)
    assert (run.data.tags["network"], run.data.tags["network_mode"]) == ("eth_1g", "simulate")
    metrics = run.data.metrics
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=result.tracking_uri)
    for name in ("iter/sim_time_s", "iter/sim_comm_exposed_s", "iter/sim_compute_s"):
        assert len(client.get_metric_history(result.run_id, name)) == steps - 1, (
            name
        )  # the warm-up step apart (warmup/*)
    assert len(client.get_metric_history(result.run_id, "iter/comm_modelled_s")) == steps  # the model: no warm-up
    # the small CNN's gradients in one 25 MiB bucket: one ring allreduce of S bytes over 8 ranks
    nbytes = 4 * _small_cnn_parameters()
    modelled = 2 * 7 * (0.05e-3 + nbytes / 8 / (1e9 / 8))
    timings = pd.read_csv(result.run_dir / "timings.csv")
    assert timings["comm_modelled_s"].to_numpy() == pytest.approx(modelled, rel=1e-9)
    assert (timings["sim_compute_s"] + timings["sim_comm_exposed_s"] - timings["sim_time_s"]).abs().max() < 1e-9
    # one allreduce per iteration: in flight from this rank's entry to max(entries) + modelled,
    # so at least the modelled time; the rank waits for at most that span
    assert (timings["sim_comm_busy_s"] >= timings["comm_modelled_s"] - 1e-9).all()
    assert (timings["sim_comm_exposed_s"] <= timings["sim_comm_busy_s"] + 1e-9).all()
    assert (timings["sim_comm_exposed_s"] > 0).all()
    assert (timings["sim_compute_s"] > 0).all()
    assert metrics["final/comm_modelled_per_iter_s"] == pytest.approx(modelled, rel=1e-9)
    assert metrics["final/sim_time_s"] == pytest.approx(timings.groupby("rank")["sim_time_s"].sum().max())
    assert 0 < metrics["final/sim_time_to_target_s"] <= metrics["final/sim_time_s"]
    assert metrics["final/emulation_overruns"] == 0


def _small_cnn_parameters() -> int:
    from dlcomm.config.schema import ModelConfig
    from dlcomm.models import build_model

    return sum(p.numel() for p in build_model(ModelConfig(name="small_cnn"), (1, 28, 28), 10).parameters())


@pytest.mark.parametrize(
    "mode,expected", [("kill", "rank 2 was killed by SIGKILL"), ("raise", "rank 2 raised RuntimeError")]
)
@pytest.mark.timeout(120)  # the bound its process had
def test_failed_rank_ends_the_run(home, mode, expected, cli_here) -> None:
    """(f) A rank that dies mid-run: non-zero exit within 60 s naming the rank; run FAILED. The ranks
    are processes (launcher=local); the driver that names the failure runs through cli.main in this
    process (an interpreter start saved)."""
    started = time.monotonic()
    result = cli_here(
        home,
        "train",
        *FAST,
        "train.epochs=50",
        "debug.fail_rank=2",
        "debug.fail_step=5",
        f"debug.fail_mode={mode}",
    )
    assert time.monotonic() - started < 60
    assert result.returncode == 1
    assert expected in result.stderr
    assert mlflow_run(result).info.status == "FAILED"


@pytest.mark.parametrize(
    ("launcher", "signum"),
    [
        ("local", signal.SIGINT),
        ("threads", signal.SIGINT),
        # the terminal or ssh session closes; a scheduler's notice: both once killed the driver and left
        # the run RUNNING (issue 49)
        ("local", signal.SIGHUP),
        ("local", signal.SIGUSR1),
    ],
    ids=["local-SIGINT", "threads-SIGINT", "local-SIGHUP", "local-SIGUSR1"],
)
def test_ctrl_c_marks_the_run_killed(home, launcher, signum) -> None:
    # a shell's background job inherits SIGINT ignored, and Python then installs no Ctrl-C
    # handler (under `nohup`, SIGHUP too, which dlcomm then keeps ignoring on purpose): give the
    # driver the default dispositions a terminal's foreground job has
    process = subprocess.Popen(
        [sys.executable, "-m", "dlcomm.cli", "train", *FAST, "train.epochs=50", f"launcher={launcher}"],
        cwd=home,
        env=cli_env(home),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: [signal.signal(default, signal.SIG_DFL) for default in (signal.SIGINT, signum)],
    )
    deadline = time.monotonic() + 90
    while not list((home / "results" / "runs").glob("*/config.yaml")) and time.monotonic() < deadline:
        time.sleep(0.5)
    time.sleep(2)
    process.send_signal(signum)
    stdout, stderr = process.communicate(timeout=60)
    assert process.returncode == 130, stderr
    assert "marked KILLED" in stderr
    run_id = next((home / "results" / "runs").iterdir()).name
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{home / 'results' / 'mlflow.db'}")
    assert client.get_run(run_id).info.status == "KILLED"


@pytest.mark.parametrize("launcher", ["local", "threads"])
def test_sigterm_when_the_done_line_appears_leaves_the_run_finished_and_exit_0(home, launcher) -> None:
    """Issue 57 item 7: SIGTERM to the driver the moment ``done:`` was printed (its ranks still
    ending) exited 130 with the run KILLED, though the result was recorded. Once rank 0 has recorded
    it the run is FINISHED, and the exit code is that status's."""
    process = subprocess.Popen(
        [sys.executable, "-m", "dlcomm.cli", "train", *FAST, "model=mlp", "train.max_steps=3", f"launcher={launcher}"],
        cwd=home,
        env=cli_env(home),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    for line in process.stdout:
        if line.startswith("done:"):
            process.send_signal(signal.SIGTERM)
            break
    stdout, stderr = process.communicate(timeout=120)
    assert process.returncode == 0, stderr
    run_id = next((home / "results" / "runs").iterdir()).name
    # (the ranks end within milliseconds of the line: should every rank have ended first, that is said instead)
    assert f"mlflow run {run_id} stays FINISHED" in stderr and "SIGTERM after" in stderr
    from mlflow.tracking import MlflowClient

    run = MlflowClient(tracking_uri=f"sqlite:///{home / 'results' / 'mlflow.db'}").get_run(run_id)
    assert run.info.status == "FINISHED" and run.data.metrics["final/steps"] == 3


def _interrupt_while_closing(monkeypatch, signum: int) -> list[str]:
    """``close_run`` patched to send this process ``signum`` at its first call, as a Ctrl-C
    arriving after every rank ended (while the driver records the outcome) would; the statuses
    closed with, in order."""
    import os

    from dlcomm.tracking import mlflow_run

    real, closed = mlflow_run.close_run, []

    def close_run(uri, run_id, status, error=""):
        if not closed:
            os.kill(os.getpid(), signum)
        closed.append(status)
        return real(uri, run_id, status, error)

    monkeypatch.setattr(mlflow_run, "close_run", close_run)
    return closed


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_after_every_rank_ended_leaves_the_run_finished_and_exit_0(
    home, monkeypatch, capsys, signum, default_sigint
) -> None:
    """Issue 34 class 6: a late Ctrl-C exited 130 with the run FINISHED (or cut the closing short).
    Once every rank has ended the outcome is decided: recorded whole, and the exit code is its own."""
    from mlflow.tracking import MlflowClient

    from dlcomm import cli

    monkeypatch.setenv("DLCOMM_HOME", str(home))
    monkeypatch.chdir(home)
    closed = _interrupt_while_closing(monkeypatch, signum)
    code = cli.main(["train", *FAST, "launcher=threads", "train.max_steps=2", "train.epochs=1"])
    err = capsys.readouterr().err
    assert code == 0 and closed == ["FINISHED"], err
    assert f"{signal.Signals(signum).name} after every rank had ended; mlflow run" in err and "stays FINISHED" in err
    client = MlflowClient(tracking_uri=f"sqlite:///{home / 'results' / 'mlflow.db'}")
    [run] = client.search_runs([client.get_experiment_by_name("dlcomm").experiment_id])
    assert run.info.status == "FINISHED"
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # the handlers are given back


def test_a_signal_after_a_sweep_element_ended_stops_the_sweep_with_the_element_finished(
    home, monkeypatch, capsys, default_sigint
) -> None:
    from mlflow.tracking import MlflowClient

    from dlcomm import cli

    monkeypatch.setenv("DLCOMM_HOME", str(home))
    monkeypatch.chdir(home)
    closed = _interrupt_while_closing(monkeypatch, signal.SIGINT)
    code = cli.main(["train", "-m", *FAST, "launcher=threads", "train.max_steps=2", "train.epochs=1", "seed=1,2"])
    assert code == 130, capsys.readouterr().err
    assert closed == ["FINISHED", "KILLED"]  # the element, then the sweep's parent
    client = MlflowClient(tracking_uri=f"sqlite:///{home / 'results' / 'mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name("dlcomm").experiment_id])
    assert sorted(run.info.status for run in runs) == ["FINISHED", "KILLED"]


def test_two_runs_at_once_do_not_collide(home) -> None:
    command = [sys.executable, "-m", "dlcomm.cli", "train", *FAST, "train.max_steps=10", "nodes=2"]
    env = cli_env(home)
    processes = [
        subprocess.Popen(command, cwd=home, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    outputs = [process.communicate(timeout=240) for process in processes]
    assert [process.returncode for process in processes] == [0, 0], outputs


def test_eval_size_evaluates_the_first_images_only(home, cli_here) -> None:
    """train.eval_size=100: accuracies are counts out of 100 (the whole synthetic test set is 512);
    the mean over two replicas, out of 200. Through cli.main in this process (ranks as threads)."""
    result = cli_here(
        home,
        "train",
        *FAST,
        "train.max_steps=5",
        "nodes=2",
        "algo=local_sgd",
        "train.eval_size=100",
        "launcher=threads",
    )
    assert result.returncode == 0, result.stderr
    metrics = mlflow_run(result).data.metrics
    for key, out_of in (("final/test_acc_mean", 200), ("final/test_acc_avg_model", 100)):
        assert abs(metrics[key] * out_of - round(metrics[key] * out_of)) < 1e-9, (key, metrics[key])
    assert mlflow_run(result).data.params["train.eval_size"] == "100"
