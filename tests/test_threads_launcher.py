"""``launcher=threads`` end to end: the numbers of ``launcher=local``, failures, refusals (Ctrl-C:
tests/test_cli_runs.py)."""

from __future__ import annotations

import time

import pandas as pd
import pytest

from conftest import FAST, mlflow_run, run_cli

# One algorithm of each kind of exchange (gossip_pull's outcome depends on timing, by design), between
# them every operation the ranks post and every group shape: each runs under both launchers, a process
# sweep of all twelve fixed-outcome algorithms having cost ~50 s of CI's ~80 s here.
SAME_NUMBERS = [
    "node_based",  # all_reduce on the world and within each node
    "allreduce_hier",  # reduce and broadcast within a node, all_reduce among the nodes' leaders
    "crossover_hier",  # reduce (averaged) and broadcast within a node, a batch of sends/receives among leaders
    "sesgd",  # a ring all-reduce of sends/receives within groups drawn anew every step
    "ps_layerdrop",  # a service rank (the server) on the job group, receives from every worker at once
]
# 4 workers on 2 nodes, 10 steps of one epoch (8192 / 4 / 64 = 32 steps per epoch). One torch
# thread per rank under both launchers: a kernel's own parallel reductions depend on its thread
# count (local gives each of 4 ranks cores/4 threads, serial threads all cores to one rank).
JOB = [
    *FAST,
    "dataset.train_size=8192",
    "train.max_steps=10",
    "nodes=2",
    "workers_per_node=2",
    "seed=3",
    "train.threads_per_rank=1",
    "optim.lr=0.2",
]


def _children(home, parent: str) -> dict[str, object]:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{home / 'results' / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("dlcomm").experiment_id
    runs = client.search_runs([experiment], filter_string=f"tags.mlflow.parentRunId = '{parent}'")
    return {run.data.tags["algo"]: run for run in runs}


def _parent(result) -> str:
    line = next(line for line in result.stdout.splitlines() if "parent mlflow run" in line)
    return line.rsplit(" ", 1)[-1]


def test_each_kind_of_exchange_gives_the_same_numbers_under_threads_and_processes(home, cli_here) -> None:
    sweep = ["train", "-m", f"algo={','.join(SAME_NUMBERS)}", *JOB]
    # both through cli.main in this process: the ranks are processes of its fork server, or its threads, either way
    processes = cli_here(home, *sweep, "launcher=local")
    threads = cli_here(home, *sweep, "launcher=threads")
    for result in (processes, threads):
        assert result.returncode == 0, "\n".join(
            line for line in (result.stdout + result.stderr).splitlines() if "train:" not in line
        )[-4000:]
    by_process, by_thread = _children(home, _parent(processes)), _children(home, _parent(threads))
    assert sorted(by_process) == sorted(by_thread) == sorted(SAME_NUMBERS)
    for algo in SAME_NUMBERS:
        a, b = by_process[algo].data.metrics, by_thread[algo].data.metrics
        for key in ("final/train_loss", "final/test_acc_mean", "final/test_acc_avg_model", "epoch/consensus_distance"):
            assert a[key] == b[key], (algo, key, a[key], b[key])
        losses = [
            pd.read_csv(home / "results" / "runs" / run.info.run_id / "timings.csv")
            .sort_values(["step", "rank"])["loss"]
            .tolist()
            for run in (by_process[algo], by_thread[algo])
        ]
        assert losses[0] == losses[1], algo
        assert by_thread[algo].data.tags["launcher"] == "threads"


@pytest.mark.parametrize(
    "mode,expected",
    [("kill", "rank 2 was killed (debug.fail_mode=kill)"), ("raise", "rank 2 raised RuntimeError: fault injected")],
)
@pytest.mark.timeout(120)  # the bound its process had: a run the failure does not end fails here
def test_a_failing_rank_thread_ends_the_run_naming_it(home, cli_here, mode, expected) -> None:
    started = time.monotonic()
    result = cli_here(  # through cli.main in this process: the ranks are its threads either way
        home,
        "train",
        *FAST,
        "launcher=threads",
        "nodes=4",
        "train.epochs=5000",  # hours, were the failure not to end it
        "debug.fail_rank=2",
        "debug.fail_step=5",
        f"debug.fail_mode={mode}",
    )
    assert time.monotonic() - started < 60  # 10-30 s here as a process, with another test running beside it
    assert result.returncode == 1
    assert expected in result.stderr
    assert mlflow_run(result).info.status == "FAILED"


@pytest.mark.timeout(120)
def test_a_failing_service_thread_ends_the_run_naming_it(home, cli_here) -> None:
    result = cli_here(
        home,
        "train",
        *FAST,
        "launcher=threads",
        "algo=ps",
        "nodes=2",
        "train.epochs=50",
        "debug.fail_rank=2",
        "debug.fail_step=1",
    )
    assert result.returncode == 1
    assert "rank 2 (server) was killed" in result.stderr
    assert mlflow_run(result).info.status == "FAILED"


def test_the_declared_semantics_are_the_fabrics() -> None:
    """launcher.semantics declares its words in dlcomm.launch.threads (composing stays torch-free);
    the in-process fabric, which imports torch, knows the same ones."""
    import dataclasses

    from dlcomm.comm.inprocess import SEMANTICS
    from dlcomm.launch.threads import ThreadsLauncherConfig

    declared = {item.name: item for item in dataclasses.fields(ThreadsLauncherConfig)}["semantics"]
    assert tuple(declared.metadata["limits"]["one_of"]) == SEMANTICS


# launcher.compute=fast, emulation under launcher.compute=serial and under the serial compute auto picks
# for a dropout model: rows of tests/test_bad_input.py (in this process, one line, exit 2, nothing recorded)


def test_auto_compute_is_parallel_unless_the_run_needs_serial(home, monkeypatch) -> None:
    import torch

    from dlcomm.compose import compose
    from dlcomm.launch.threads import resolve_compute

    def mode(*overrides: str) -> str:
        return resolve_compute(compose(["launcher=threads", *overrides]))[0]

    assert mode() == "parallel"
    assert mode("network=eth_1g", "network.mode=simulate") == "serial"
    assert mode("model=mlp", "model.dropout=0.2") == "serial"
    assert mode("task=gan", "model=acgan") == "serial"
    assert mode("launcher.compute=serial") == "serial"
    assert mode("launcher.compute=parallel", "model=mlp", "model.dropout=0.2") == "parallel"
    # on a GPU the ranks take turns (one H200: 1.7-2.1x faster than all at once), unless told otherwise
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert mode("train.device=cuda") == "serial" and mode("train.device=auto") == "serial"
    assert mode() == "parallel"  # train.device=cpu, the default
    assert mode("train.device=cuda", "launcher.compute=parallel") == "parallel"


def test_a_job_too_large_for_this_machine_is_refused_with_the_estimate(home) -> None:
    result = run_cli(
        home, "train", *FAST, "dataset.train_size=8192", "train.batch_size=2", "launcher=threads", "nodes=4096"
    )  # 2 samples per worker: the plan holds, the memory does not
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr
    assert lines[0].startswith(
        "dlcomm: error: nodes*workers_per_node=4096 is invalid with launcher=threads on this "
        "machine: the job needs about "
    )
    assert "(4096 ranks x " in lines[0] and "; use at most " in lines[0]


@pytest.mark.timeout(240)  # its two processes' bounds
def test_an_algorithm_that_would_hang_on_gpus_fails_in_one_line_under_nccls_rules(home, cli_here, monkeypatch) -> None:
    """D-PSGD's exchange replaced by tests/hand_ordered_dpsgd.py's, a user's own algorithm: the runs
    through cli.main in this process (their ranks are threads either way)."""
    from dlcomm.algorithms.dpsgd import DPSGD

    from hand_ordered_dpsgd import hand_ordered_after_step

    monkeypatch.setattr(DPSGD, "after_step", hand_ordered_after_step)
    job = [
        "train",
        *FAST,
        "launcher=threads",
        "algo=dpsgd",
        "nodes=3",
        "train.max_steps=3",
        "launcher.hang_timeout_s=3",
    ]
    gloo = cli_here(home, *job)
    assert gloo.returncode == 0, gloo.stderr[-2000:]
    started = time.monotonic()
    nccl = cli_here(home, *job, "launcher.semantics=nccl")
    assert time.monotonic() - started < 30
    assert nccl.returncode == 1, nccl.stderr[-2000:]
    assert "Traceback" not in nccl.stderr
    last = nccl.stderr.strip().splitlines()[-1]
    assert "deadlock under launcher.semantics=nccl: every rank waits and none can proceed" in last, last
    for rank in range(3):
        assert f"rank {rank} waits on send to rank {(rank + 1) % 3} on world" in last, last
    assert mlflow_run(nccl).info.status == "FAILED"


@pytest.mark.timeout(120)
def test_a_rank_killed_mid_exchange_under_nccls_rules_ends_the_run_naming_it(home, cli_here) -> None:
    started = time.monotonic()
    result = cli_here(
        home,
        "train",
        *FAST,
        "launcher=threads",
        "launcher.semantics=nccl",
        "algo=dpsgd",
        "nodes=4",
        "train.epochs=50",
        "debug.fail_rank=2",
        "debug.fail_step=5",
        "debug.fail_mode=kill",
    )
    assert time.monotonic() - started < 30
    assert result.returncode == 1
    assert "rank 2 was killed (debug.fail_mode=kill)" in result.stderr
    assert mlflow_run(result).info.status == "FAILED"
