"""GPU jobs on a machine without GPUs: the settings refused before launch when torch.cuda is
mocked to show GPUs (the refusals this machine can show itself are rows of test_bad_input.py),
a rank that finds no GPU, NCCL's failures in words, and srun's --kill-on-bad-exit (issue 33,
items 4 and 5)."""

from __future__ import annotations

import os
import socket
import stat
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from dlcomm.compose import compose
from dlcomm.errors import UserError
from dlcomm.launch.local import LocalLauncher
from dlcomm.launch.srun import SrunLauncher
from dlcomm.launch.threads import ThreadsLauncher
from test_bad_input import answer, runs_left


@pytest.fixture
def gpus(monkeypatch):
    """``gpus(n)``: torch.cuda shows ``n`` GPUs from now on."""

    def show(count: int) -> None:
        monkeypatch.setattr(torch.cuda, "is_available", lambda: count > 0)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: count)

    return show


def roles_of(cfg) -> tuple[str, ...]:
    from dlcomm.algorithms.registry import ALGORITHMS

    return ALGORITHMS.get(cfg.algo.name).roles(cfg.algo)


def refusal(launcher, overrides: list[str]) -> str:
    cfg = compose(overrides)
    with pytest.raises(UserError) as caught:
        launcher.check(cfg, roles_of(cfg))
    message = str(caught.value)
    assert "\n" not in message
    return message


def accepted(launcher, overrides: list[str]) -> None:
    cfg = compose(overrides)
    launcher.check(cfg, roles_of(cfg))


# ---- launcher=local: one GPU per process, the algorithm's services included ----------------------------------


def test_local_counts_the_parameter_server_as_a_process_with_a_gpu_of_its_own(home, monkeypatch, capsys, gpus) -> None:
    """Before: 4 workers on 4 GPUs passed and the server took cuda:0 beside worker 0 ("Duplicate GPU")."""
    gpus(4)
    code, err, _ = answer(home, monkeypatch, capsys, ["train", "algo=ps", "nodes=4", "train.device=cuda"])
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1, err
    assert lines[0] == (
        "dlcomm: error: nodes*workers_per_node=4 is invalid with train.device=cuda: the local launcher gives each of its "
        "5 processes (4 workers and the server of algo=ps) a GPU of its own and 4 are visible; use at most 3 workers, "
        "launcher=threads (every rank on one GPU), or train.device=cpu"
    )
    assert not (home / "results" / "mlflow.db").exists() and runs_left(home) == []


def test_local_counts_the_gossip_manager_too(gpus) -> None:
    gpus(2)
    assert "its 3 processes (2 workers and the manager of algo=gossip_pull)" in refusal(
        LocalLauncher, ["algo=gossip_pull", "nodes=2", "train.device=cuda"]
    )
    gpus(3)
    accepted(LocalLauncher, ["algo=gossip_pull", "nodes=2", "train.device=cuda"])
    gpus(2)  # without a manager (overlap=none) two GPUs do
    accepted(LocalLauncher, ["algo=gossip_pull", "algo.overlap=none", "nodes=2", "train.device=cuda"])


def test_local_accepts_a_gpu_per_process(gpus) -> None:
    gpus(5)
    accepted(LocalLauncher, ["algo=ps", "nodes=4", "train.device=cuda"])
    gpus(4)
    accepted(LocalLauncher, ["algo=allreduce", "nodes=4", "train.device=cuda"])
    assert refusal(LocalLauncher, ["algo=allreduce", "nodes=5", "train.device=cuda"]).startswith(
        "nodes*workers_per_node=5 is invalid with train.device=cuda: the local launcher gives each of its 5 processes "
        "a GPU of its own and 4 are visible; use at most 4 workers"
    )


def test_local_auto_with_nccl_needs_a_gpu_for_every_process(gpus) -> None:
    gpus(4)  # auto takes the CPU when the 5 processes of ps cannot have a GPU each: NCCL cannot carry that
    assert refusal(LocalLauncher, ["algo=ps", "nodes=4", "train.device=auto", "launcher.backend=nccl"]).startswith(
        "launcher.backend=nccl is invalid with train.device=auto (it finds 4 GPU(s) for 5 processes here): NCCL carries "
        "CUDA tensors only"
    )
    gpus(5)
    accepted(LocalLauncher, ["algo=ps", "nodes=4", "train.device=auto", "launcher.backend=nccl"])


def test_gloo_on_cuda_is_refused_for_point_to_point_algorithms_only(gpus) -> None:
    gpus(8)
    for algo in ("dpsgd", "sgp", "crossover", "crossover_hier", "sesgd", "local_sesgd", "ps", "ps_layerdrop"):
        nodes = "nodes=4" if algo != "crossover_hier" else "nodes=2"
        message = refusal(LocalLauncher, [f"algo={algo}", nodes, "train.device=cuda", "launcher.backend=gloo"])
        assert message.startswith(
            f"launcher.backend=gloo is invalid with train.device=cuda and algo={algo}: torch's "
            "gloo carries CUDA tensors in collectives only"
        ), message
    for algo in ("allreduce", "allreduce_hier", "local_sgd", "node_based", "gossip_pull"):
        accepted(LocalLauncher, [f"algo={algo}", "nodes=4", "train.device=cuda", "launcher.backend=gloo"])
    # auto resolves to cuda when every process has a GPU: the same refusal
    assert "algo=dpsgd" in refusal(
        LocalLauncher, ["algo=dpsgd", "nodes=4", "train.device=auto", "launcher.backend=gloo"]
    )


def test_threads_keeps_every_rank_on_the_one_gpu(gpus) -> None:
    """launcher=threads needs one visible GPU, whatever the ranks and services (and has no backend)."""
    gpus(1)
    accepted(ThreadsLauncher, ["launcher=threads", "algo=ps", "nodes=8", "train.device=cuda"])
    accepted(
        ThreadsLauncher, ["launcher=threads", "algo=dpsgd", "nodes=8", "train.device=cuda", "launcher.backend=gloo"]
    )
    gpus(0)
    assert refusal(ThreadsLauncher, ["launcher=threads", "nodes=2", "train.device=cuda"]).startswith(
        "train.device=cuda is invalid: no CUDA device is visible"
    )


# ---- launcher=srun: the GPUs this task of the allocation sees --------------------------------------------------


@pytest.fixture
def in_srun_step(monkeypatch):
    monkeypatch.setenv("SLURM_JOB_ID", "4242")
    monkeypatch.setenv("SLURM_PROCID", "0")


def test_srun_needs_a_gpu_per_rank_of_the_node(gpus, in_srun_step) -> None:
    gpus(2)
    assert refusal(SrunLauncher, ["launcher=srun", "nodes=2", "workers_per_node=4", "train.device=cuda"]) == (
        "train.device=cuda is invalid in this allocation: this srun task sees 2 GPU(s) and its node runs "
        "workers_per_node=4 ranks, each needing a GPU of its own; ask sbatch for --gpus-per-node=4 (without "
        "--gpus-per-task or --gpu-bind, so that every task sees them all), or pass train.device=cpu"
    )
    gpus(4)
    accepted(SrunLauncher, ["launcher=srun", "nodes=2", "workers_per_node=4", "train.device=cuda"])
    assert "algo=dpsgd" in refusal(
        SrunLauncher,
        ["launcher=srun", "nodes=2", "workers_per_node=4", "algo=dpsgd", "train.device=cuda", "launcher.backend=gloo"],
    )
    gpus(0)
    assert refusal(SrunLauncher, ["launcher=srun", "train.device=auto", "launcher.backend=nccl"]).startswith(
        "launcher.backend=nccl is invalid with train.device=auto (this srun task sees 0 GPU(s) for the 1 ranks of its node)"
    )


# ---- a rank at start: one line, never a ZeroDivisionError --------------------------------------------------------


def test_a_rank_that_finds_no_gpu_fails_with_one_line(gpus, monkeypatch) -> None:
    from dlcomm.launch.rank import resolve_device

    gpus(0)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    with pytest.raises(UserError) as caught:  # before: ZeroDivisionError (machine_rank % 0)
        resolve_device("cuda", "auto", 1, 4)
    assert str(caught.value) == (
        f"train.device=cuda is invalid on host {socket.gethostname()}: process 1 of the 4 there finds no GPU "
        "(CUDA_VISIBLE_DEVICES=) and each needs a GPU of its own; ask for 4 GPUs per node (launcher.gpus_per_node=4, "
        "or sbatch --gpus-per-node=4 without --gpus-per-task/--gpu-bind) or pass train.device=cpu"
    )


def test_a_rank_never_doubles_up_on_a_gpu(gpus, monkeypatch) -> None:
    from dlcomm.launch.rank import resolve_device

    chosen = []
    monkeypatch.setattr(torch.cuda, "set_device", chosen.append)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    gpus(2)
    with pytest.raises(UserError, match="process 3 of the 4 there finds 2 GPU"):  # before: cuda:1, beside process 1
        resolve_device("cuda", "nccl", 3, 4)
    gpus(4)
    assert resolve_device("cuda", "auto", 3, 4) == (torch.device("cuda", 3), "nccl")
    assert chosen == [torch.device("cuda", 3)]
    gpus(2)  # auto: the CPU (gloo) unless every process has a GPU; with nccl asked for, a line instead
    assert resolve_device("auto", "auto", 0, 4) == (torch.device("cpu"), "gloo")
    with pytest.raises(UserError, match="launcher.backend=nccl is invalid on host .*found 2 GPU"):
        resolve_device("auto", "nccl", 0, 4)


# ---- NCCL's failures end runs: the watchdog's timeout and NCCL's errors in words ------------------------------------

# Texts as torch 2.14's ProcessGroupNCCL and NCCL 2.30 write them (WorkNCCL::checkTimeout, C10D_NCCL_CHECK with
# ncclGetErrorWithVersion + getNcclErrorDetailStr, NCCLComm::getNcclComm; strings of libtorch_cuda.so and libnccl.so.2).
WATCHDOG = (
    "[Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=78, OpType=BROADCAST, NumelIn=80, "
    "NumelOut=80, Timeout(ms)=300000) ran for 300096 milliseconds before timing out."
)
REMOTE = (
    "NCCL error in: /pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:3356, remote process exited or there "
    "was a network error, NCCL version 2.30.7\nncclRemoteError: A call failed possibly due to a network error or a "
    "remote process exiting prematurely.\nLast error:\nnet.cc:1283 NCCL WARN Net : Connection closed by remote peer"
)
SYSTEM = (
    "NCCL error in: /pytorch/torch/csrc/distributed/c10d/NCCLUtils.cpp:77, unhandled system error (run with "
    "NCCL_DEBUG=INFO for details), NCCL version 2.30.7\nncclSystemError: System call (e.g. socket, malloc) or "
    "external library call failed or device error. \nLast error:\nsocketPollConnect: connect returned Connection "
    "refused"
)
ABORTED_AFTER_TIMEOUT = f"NCCL communicator was aborted on rank 1.  Original reason for failure was: {WATCHDOG}"
ABORTED = "NCCL communicator was aborted on rank 2. "


@pytest.mark.parametrize(
    "text,starts,consequence",
    [
        (
            WATCHDOG,
            "an NCCL operation waited launcher.comm_timeout_s=300 s (NCCL's watchdog): a peer died, hangs or never "
            "posted the matching operation, or a host or its link stopped answering (NCCL said: [Rank 1] Watchdog "
            "caught collective operation timeout: WorkNCCL(SeqNum=78, OpType=BROADCAST",
            False,
        ),
        (ABORTED_AFTER_TIMEOUT, "an NCCL operation waited launcher.comm_timeout_s=300 s (NCCL's watchdog)", False),
        (
            REMOTE,
            "a peer's NCCL connection was lost: another rank failed first, or a host or its link stopped answering "
            "(NCCL said: remote process exited or there was a network error, NCCL version 2.30.7; ncclRemoteError: "
            "A call failed possibly due to a network error",
            True,
        ),
        (ABORTED, "a peer's NCCL connection was lost", True),
        (
            SYSTEM,
            "NCCL failed: unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.30.7; "
            "ncclSystemError: System call (e.g. socket, malloc) or external library call failed",
            False,
        ),
    ],
)
def test_nccl_failures_read_as_one_line(text: str, starts: str, consequence: bool) -> None:
    from dlcomm.launch.job_end import comm_failure_line

    line, seen_consequence = comm_failure_line(dist.DistBackendError(text), 3, 300)
    assert line.startswith(f"rank 3 on host {socket.gethostname()}: {starts}"), line
    assert "\n" not in line and "ProcessGroupNCCL.cpp:" not in line and "NCCLUtils.cpp:" not in line
    assert seen_consequence is consequence


def test_any_dist_backend_error_is_a_communication_failure() -> None:
    from dlcomm.launch.job_end import comm_failure_line

    line, consequence = comm_failure_line(dist.DistBackendError("Some backend went away\nframe #0"), 0, 30)
    assert (
        line.endswith(
            ": the communication backend failed (DistBackendError: Some backend went away); check the "
            "GPUs, driver and network of the job's hosts"
        )
        and not consequence
    )
    assert comm_failure_line(RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB"), 0, 30) is None


def test_local_ranks_report_nccl_failures_in_one_line(monkeypatch) -> None:
    from dlcomm.launch import local
    from dlcomm.spec import RunSpec

    monkeypatch.setattr(local, "_CONSEQUENCE_S", 0.0)
    spec = RunSpec.from_config(compose([]), "sqlite:///unused.db", ())
    assert local._failure_message(dist.DistBackendError(WATCHDOG), spec).startswith(
        "failed: an NCCL operation waited launcher.comm_timeout_s=300 s (NCCL's watchdog)"
    )
    assert local._failure_message(dist.DistBackendError(REMOTE), spec).startswith(
        "failed: a peer's NCCL connection was lost"
    )
    # gloo on one machine: a lost peer is a rank that failed (named by its own report), said as before
    assert local._failure_message(RuntimeError("Connection closed by peer [127.0.0.1]:4711"), spec) == (
        "raised RuntimeError: Connection closed by peer [127.0.0.1]:4711"
    )


def test_nccl_errors_are_raised_in_the_rank_unless_the_site_chose(monkeypatch) -> None:
    from dlcomm.launch.rank import nccl_failures_raise

    monkeypatch.delenv("TORCH_NCCL_ASYNC_ERROR_HANDLING", raising=False)
    nccl_failures_raise()
    assert os.environ["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "2"  # CleanUpOnly: DistBackendError in Work.wait()
    monkeypatch.setenv("TORCH_NCCL_ASYNC_ERROR_HANDLING", "3")
    nccl_failures_raise()
    assert os.environ["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "3"


# ---- srun ends the step when a task dies -----------------------------------------------------------------------


def test_the_slurm_jobs_srun_kills_the_step_when_a_task_exits_non_zero(tmp_path: Path, monkeypatch) -> None:

    from dlcomm.launch.slurm import _executor

    bin_dir = tmp_path / "bin"  # submitit wants an srun on PATH to build the executor
    bin_dir.mkdir()
    fake = bin_dir / "srun"
    fake.write_text("#!/bin/sh\nexit 0\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    executor = _executor(tmp_path / "slurm", compose(["launcher=slurm", "nodes=2", "workers_per_node=4"]))
    assert executor.parameters["srun_args"] == ["--kill-on-bad-exit=1"]
    script = executor._make_submission_file_text("python -m task", "uid")
    srun_lines = [line for line in script.splitlines() if line.startswith("srun ")]
    assert len(srun_lines) == 1 and "--kill-on-bad-exit=1" in srun_lines[0].split(), script
