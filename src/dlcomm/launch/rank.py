"""What every rank runs: join the job, build data, model, optimizer and algorithm, train.

Seeding: the model is initialised from ``seed`` on every rank (and broadcast from rank 0
anyway), data order comes from ``(seed, epoch)``, and per-rank randomness (dropout,
augmentation) from ``(seed, rank)``, so the same config and seed give the same numbers.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch

from dlcomm import progress
from dlcomm.algorithms.registry import ALGORITHMS
from dlcomm.comm.channel import Channel
from dlcomm.comm.clock import compute_timer
from dlcomm.comm.cluster import Cluster
from dlcomm.comm.layout import ClusterLayout
from dlcomm.config.schema import ProcessLauncherConfig, RunConfig
from dlcomm.data import build_dataset
from dlcomm.errors import UserError
from dlcomm.launch.base import launcher_settings
from dlcomm.launch.netif import choose_interface
from dlcomm.launch.store import join_store
from dlcomm.paths import profiles_dir
from dlcomm.spec import RunSpec
from dlcomm.tasks import build_task
from dlcomm.train.checkpoint import Checkpointing, WarningSignal, model_state
from dlcomm.train.determinism import apply_determinism
from dlcomm.train.loop import TrainLoop
from dlcomm.train.optim import build_optimizer, build_scheduler
from dlcomm.train.plan import check_plan, schedule_steps, step_batch
from dlcomm.train.precision import Precision
from dlcomm.train.profile import profiled_compute


def resolve_device(device: str, backend: str, machine_rank: int, local_ranks: int) -> tuple[torch.device, str]:
    """``(device, backend)``: cuda with one GPU per process of this machine and nccl, or cpu
    and gloo. ``machine_rank`` is this process's index among the ``local_ranks`` processes on
    this machine (not the rank within an emulated node; an algorithm's service processes count
    too: each has a GPU of its own, :mod:`dlcomm.launch.gpus`). ``auto`` takes cuda only when
    every process on this machine can have a GPU of its own. ``cuda`` on a machine that shows
    fewer GPUs than processes (none, or GPUs bound one per task) is a one-line
    :class:`~dlcomm.errors.UserError`: process ``i`` always takes ``cuda:i``, never a GPU another
    process of the job already uses (NCCL: "Duplicate GPU detected")."""
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    use_cuda = device == "cuda" or (device == "auto" and gpus >= local_ranks)
    if not use_cuda:
        if backend == "nccl":
            raise UserError(
                f"launcher.backend=nccl is invalid on host {socket.gethostname()}: train.device={device} found "
                f"{gpus} GPU(s) for the {local_ranks} processes there and chose the CPU, whose tensors NCCL cannot "
                "carry; give every process a GPU (launcher.gpus_per_node) or pass launcher.backend=auto"
            )
        return torch.device("cpu"), "gloo" if backend == "auto" else backend
    if gpus < local_ranks:
        seen = os.environ.get("CUDA_VISIBLE_DEVICES")
        shown = f" (CUDA_VISIBLE_DEVICES={seen})" if seen is not None else ""
        found = "no GPU" if gpus == 0 else f"{gpus} GPU(s)"
        raise UserError(
            f"train.device=cuda is invalid on host {socket.gethostname()}: process {machine_rank} of the "
            f"{local_ranks} there finds {found}{shown} and each needs a GPU of its own; ask for {local_ranks} GPUs "
            f"per node (launcher.gpus_per_node={local_ranks}, or sbatch --gpus-per-node={local_ranks} without "
            "--gpus-per-task/--gpu-bind) or pass train.device=cpu"
        )
    chosen = torch.device("cuda", machine_rank)
    torch.cuda.set_device(chosen)
    return chosen, "nccl" if backend == "auto" else backend


def nccl_failures_raise() -> None:
    """Make NCCL failures reach the rank's Python code, where the launcher records them.

    ``launcher.comm_timeout_s`` is the ``timeout`` of every ``init_process_group`` / ``new_group``
    (:meth:`dlcomm.comm.cluster.Cluster.connect`); under NCCL that is ProcessGroupNCCL's watchdog
    timeout: torch 2.14's ``_create_nccl_process_group`` sets ``backend_options._timeout =
    opts.timeout``, and the watchdog thread's ``WorkNCCL::checkTimeout`` compares each operation's
    age with it ("Watchdog caught collective operation timeout: WorkNCCL(...) ran for N
    milliseconds before timing out"). What the watchdog then does is
    ``TORCH_NCCL_ASYNC_ERROR_HANDLING``: torch's default, 3 (SkipCleanUp), rethrows on the
    watchdog thread and takes the process down (SIGABRT) without a Python exception, so the run
    would end without a reason (and SLURM's other tasks would read it as a cancellation). 2
    (CleanUpOnly) aborts the communicators, which releases every kernel waiting on them, and
    ``Work.wait()`` / the next operation then raises ``DistBackendError`` in the rank's thread:
    the launcher names the rank and NCCL's words (:mod:`dlcomm.launch.job_end`) and srun's
    ``--kill-on-bad-exit=1`` ends the rest. A value the site or the user set is kept."""
    os.environ.setdefault("TORCH_NCCL_ASYNC_ERROR_HANDLING", "2")


def threads_per_rank(requested: int, local_ranks: int) -> int:
    """``train.threads_per_rank`` if set, else the CPUs SLURM gave the task, else this
    machine's cores shared among its ranks."""
    if requested > 0:
        return requested
    if os.environ.get("SLURM_CPUS_PER_TASK", "").isdigit():
        return int(os.environ["SLURM_CPUS_PER_TASK"])
    return max(1, (os.cpu_count() or 1) // local_ranks)


def job_layout(cfg: RunConfig) -> ClusterLayout:
    """The workers of ``cfg`` and the service processes its algorithm needs."""
    return ClusterLayout(cfg.nodes, cfg.workers_per_node, ALGORITHMS.get(cfg.algo.name).roles(cfg.algo))


def run_rank(
    spec: RunSpec,
    rank: int,
    store_host: str,
    store_port: int,
    machine_rank: int,
    local_ranks: int,
    resumable: bool = False,
    warning: WarningSignal | None = None,
    check_every: int = 10,
) -> dict[str, float]:
    """Train as ``rank`` of the job whose rendezvous store listens on ``store_host:store_port``;
    this process is number ``machine_rank`` of the ``local_ranks`` on its machine. ``resumable``:
    checkpoint at epoch ends (and, with ``warning``, when the scheduler warns, checking every
    ``check_every`` iterations) and resume from the run's newest checkpoint."""
    cfg = spec.cfg()
    apply_determinism(cfg.train.deterministic)  # before CUDA is first used (resolve_device)
    torch.set_num_threads(threads_per_rank(cfg.train.threads_per_rank, local_ranks))
    layout = job_layout(cfg)
    if rank == 0:
        progress.mark_stage(spec.run_dir, "joining the job")
    store = join_store(store_host, store_port, layout.job_size, timeout=timedelta(seconds=120))
    device, backend = resolve_device(cfg.train.device, cfg.launcher.backend, machine_rank, local_ranks)
    if backend == "nccl":
        nccl_failures_raise()  # before the process groups are made: ProcessGroupNCCL reads it then
    choose_interface(getattr(cfg.launcher, "ifname", ""), store_host)  # a knob of the launchers that span hosts
    alone = local_ranks * torch.get_num_threads() <= (os.cpu_count() or 1)  # no other rank competes for a core
    if rank == 0:
        progress.mark_stage(spec.run_dir, f"connecting the {layout.job_size} ranks ({backend})")
    launcher = launcher_settings(cfg, ProcessLauncherConfig)  # run_rank runs under the process launchers alone
    cluster = Cluster.connect(
        layout, rank, store, backend, device, timeout_s=launcher.comm_timeout_s, computes_alone=alone
    )
    try:
        return train_rank(spec, cluster, resumable=resumable, warning=warning, check_every=check_every)
    finally:
        cluster.close()


def train_rank(
    spec: RunSpec,
    cluster: Cluster,
    data: Any = None,
    resumable: bool = False,
    warning: WarningSignal | None = None,
    check_every: int = 10,
    track: bool = True,
) -> dict[str, float]:
    """Everything a rank does once it has joined its job (``cluster``, processes or threads):
    build data (unless the launcher shares one ``data`` among its ranks), model, optimizer and
    algorithm, then train, or serve when the rank plays a service role. ``track=False``: rank 0
    records nothing in MLflow (tests that train many small jobs in one process)."""
    cfg = spec.cfg()
    apply_determinism(cfg.train.deterministic)  # again for launchers that reach the ranks otherwise (idempotent)
    rank, device, layout = cluster.rank, cluster.device, cluster.layout
    stage = (lambda text: progress.mark_stage(spec.run_dir, text)) if rank == 0 and track else (lambda text: None)
    if data is None:
        stage(f"loading the data ({cfg.dataset.name})")
        data = build_dataset(cfg.dataset)
    stage(f"building the model ({cfg.model.name})")
    task = build_task(cfg)
    with cluster.transport.alone():  # ranks that are threads share the process's generator
        torch.manual_seed(cfg.seed)
        model = task.build_model(cfg.model, data).to(device)
        torch.manual_seed(cfg.seed * 100_003 + 1 + rank)
    # before the algorithm's gradient hooks: a bucket becomes ready at its profiled instant
    stage(f"setting up {cfg.algo.name}")
    profiled = profiled_compute(
        cfg, Path(spec.run_dir), rank, model, data, device, profiles_dir(), service=cluster.role != "worker"
    )
    channel = Channel.for_run(cluster, cfg.network, profiled)
    optimizer = build_optimizer(cfg.optim, task.param_groups(model, cfg.optim))
    algorithm = ALGORITHMS.get(cfg.algo.name)(cfg.algo, cluster, channel, seed=cfg.seed, compress=cfg.compress)
    if profiled is not None and not algorithm.compressor.identity:  # the profile has no compressor in it
        algorithm.compressor.charge_compute(compute_timer(device, cluster.transport.computes_alone), profiled.add)
    if cluster.role != "worker":
        if cfg.debug.fail_rank == rank:  # a service has no steps: it dies fail_step seconds after it starts
            import threading

            threading.Timer(max(0, cfg.debug.fail_step), cluster.transport.kill_self).start()
        algorithm.serve(cluster.role, model, optimizer)
        return {}
    algorithm.setup(model, optimizer)
    reporter = None
    if rank == 0 and track:
        from dlcomm.tracking.reporter import Rank0Reporter

        reporter = Rank0Reporter(
            spec,
            step_batch(cfg.train),
            layout.world_size,
            cfg.train.epochs,
            shared_process=cluster.transport.shares_process,
            accuracy_label=task.accuracy_label,
        )
    # the run's plan, computed once here: the algorithm, the schedule and the loop share it (checked
    # here too: a data set whose size the driver could not know before launch, e.g. imagefolder)
    per_epoch, total = check_plan(cfg.train, data.train_size, layout.world_size)
    algorithm.plan(per_epoch, total)
    if reporter is not None and per_epoch > 0 and cfg.train.time_budget_s <= 0:
        reporter.epochs = min(cfg.train.epochs, -(-total // per_epoch))  # the epochs it will run (train.max_steps)
    scheduler = build_scheduler(
        cfg.optim, optimizer, max(1, per_epoch), max(1, schedule_steps(cfg.train, per_epoch, total))
    )
    checkpointing = (
        Checkpointing(Path(spec.run_dir) / "checkpoints", rank, device, warning, check_every) if resumable else None
    )
    precision = Precision(cfg.train.amp, device, cfg.train.amp_dtype)
    try:
        summary = TrainLoop(
            cfg,
            channel,
            algorithm,
            model,
            optimizer,
            scheduler,
            data,
            reporter,
            checkpointing,
            task,
            precision,
            plan=(per_epoch, total),
        ).run()
    except BaseException:
        if reporter is not None:  # a failed run keeps its streamed points too
            with contextlib.suppress(Exception):
                reporter.close()
        raise
    if cfg.train.save_model:
        torch.save(model_state(model), Path(spec.run_dir) / f"model_rank{rank}.pt")
    channel.barrier()
    if checkpointing is not None and rank == 0:  # the run is complete: its checkpoints are not needed
        shutil.rmtree(checkpointing.folder, ignore_errors=True)
    return summary
