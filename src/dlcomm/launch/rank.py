"""What every rank runs: join the job, build data, model, optimizer and algorithm, train.

Seeding: the model is initialised from ``seed`` on every rank (and broadcast from rank 0
anyway), data order comes from ``(seed, epoch)``, and per-rank randomness (dropout,
augmentation) from ``(seed, rank)``, so the same config and seed give the same numbers.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from dlcomm.algorithms.registry import get_algorithm
from dlcomm.comm.channel import Channel
from dlcomm.comm.cluster import Cluster
from dlcomm.comm.layout import ClusterLayout
from dlcomm.data import build_dataset
from dlcomm.launch.netif import choose_interface
from dlcomm.spec import RunSpec
from dlcomm.tasks import build_task
from dlcomm.train.checkpoint import Checkpointing, WarningSignal
from dlcomm.train.loop import TrainLoop
from dlcomm.train.plan import plan_steps
from dlcomm.train.optim import build_optimizer, build_scheduler
from dlcomm.train.precision import Precision


def resolve_device(device: str, backend: str, machine_rank: int, local_ranks: int) -> tuple[torch.device, str]:
    """``(device, backend)``: cuda with one GPU per process of this machine and nccl, or cpu
    and gloo. ``machine_rank`` is this process's index among the ``local_ranks`` processes on
    this machine (not the rank within an emulated node). ``auto`` takes cuda only when every
    process on this machine can have a GPU of its own."""
    use_cuda = device == "cuda" or (
        device == "auto" and torch.cuda.is_available() and torch.cuda.device_count() >= local_ranks
    )
    if use_cuda:
        chosen = torch.device("cuda", machine_rank % torch.cuda.device_count())
        torch.cuda.set_device(chosen)
        return chosen, "nccl" if backend == "auto" else backend
    return torch.device("cpu"), "gloo" if backend == "auto" else backend


def threads_per_rank(requested: int, local_ranks: int) -> int:
    """``train.threads_per_rank`` if set, else the CPUs SLURM gave the task, else this
    machine's cores shared among its ranks."""
    if requested > 0:
        return requested
    if os.environ.get("SLURM_CPUS_PER_TASK", "").isdigit():
        return int(os.environ["SLURM_CPUS_PER_TASK"])
    return max(1, (os.cpu_count() or 1) // local_ranks)


def job_layout(cfg) -> ClusterLayout:
    """The workers of ``cfg`` and the service processes its algorithm needs."""
    return ClusterLayout(cfg.nodes, cfg.workers_per_node, get_algorithm(cfg.algo.name).roles(cfg.algo))


def run_rank(
    spec: RunSpec, rank: int, store_host: str, store_port: int, machine_rank: int, local_ranks: int,
    resumable: bool = False, warning: WarningSignal | None = None, check_every: int = 10,
) -> dict[str, float]:
    """Train as ``rank`` of the job whose rendezvous store listens on ``store_host:store_port``;
    this process is number ``machine_rank`` of the ``local_ranks`` on its machine. ``resumable``:
    checkpoint at epoch ends (and, with ``warning``, when the scheduler warns, checking every
    ``check_every`` iterations) and resume from the run's newest checkpoint."""
    cfg = spec.cfg()
    torch.set_num_threads(threads_per_rank(cfg.train.threads_per_rank, local_ranks))
    layout = job_layout(cfg)
    store = dist.TCPStore(store_host, store_port, layout.job_size, is_master=False, timeout=timedelta(seconds=120))
    device, backend = resolve_device(cfg.train.device, cfg.launcher.backend, machine_rank, local_ranks)
    choose_interface(cfg.launcher.get("ifname", ""), store_host)
    alone = local_ranks * torch.get_num_threads() <= (os.cpu_count() or 1)  # no other rank competes for a core
    cluster = Cluster.connect(layout, rank, store, backend, device, timeout_s=cfg.launcher.get("comm_timeout_s", 300.0),
                              computes_alone=alone)
    try:
        return train_rank(spec, cluster, resumable=resumable, warning=warning, check_every=check_every)
    finally:
        cluster.close()


def train_rank(
    spec: RunSpec, cluster: Cluster, data: Any = None, resumable: bool = False, warning: WarningSignal | None = None,
    check_every: int = 10,
) -> dict[str, float]:
    """Everything a rank does once it has joined its job (``cluster``, processes or threads):
    build data (unless the launcher shares one ``data`` among its ranks), model, optimizer and
    algorithm, then train, or serve when the rank plays a service role."""
    cfg = spec.cfg()
    rank, device, layout = cluster.rank, cluster.device, cluster.layout
    channel = Channel.for_run(cluster, cfg.network)
    data = data if data is not None else build_dataset(cfg.dataset)
    task = build_task(cfg)
    with cluster.transport.alone():  # ranks that are threads share the process's generator
        torch.manual_seed(cfg.seed)
        model = task.build_model(cfg.model, data).to(device)
        torch.manual_seed(cfg.seed * 100_003 + 1 + rank)
    optimizer = build_optimizer(cfg.optim, task.param_groups(model, cfg.optim))
    algorithm = get_algorithm(cfg.algo.name)(cfg.algo, cluster, channel, seed=cfg.seed)
    if cluster.role != "worker":
        if cfg.debug.fail_rank == rank:  # a service has no steps: it dies fail_step seconds after it starts
            import threading

            threading.Timer(max(0, cfg.debug.fail_step), cluster.transport.kill_self).start()
        algorithm.serve(cluster.role, model, optimizer)
        return {}
    algorithm.setup(model, optimizer)
    reporter = None
    if rank == 0:
        from dlcomm.tracking.reporter import Rank0Reporter

        reporter = Rank0Reporter(spec, cfg.train.batch_size * cfg.train.comm_interval, layout.world_size, cfg.train.epochs,
                                 shared_process=cluster.transport.shares_process)
    per_epoch, total = plan_steps(cfg.train, data.train_size, layout.world_size)
    algorithm.plan(per_epoch, total)
    scheduler = build_scheduler(cfg.optim, optimizer, max(1, per_epoch), max(1, total))
    checkpointing = Checkpointing(Path(spec.run_dir) / "checkpoints", rank, device, warning, check_every) if resumable else None
    precision = Precision(cfg.train.amp, device, cfg.train.amp_dtype)
    try:
        summary = TrainLoop(cfg, channel, algorithm, model, optimizer, scheduler, data, reporter, checkpointing,
                            task, precision).run()
    except BaseException:
        if reporter is not None:  # a failed run keeps its streamed points too
            with contextlib.suppress(Exception):
                reporter.close()
        raise
    if cfg.train.save_model:
        torch.save(model.state_dict(), Path(spec.run_dir) / f"model_rank{rank}.pt")
    channel.barrier()
    if checkpointing is not None and rank == 0:  # the run is complete: its checkpoints are not needed
        shutil.rmtree(checkpointing.folder, ignore_errors=True)
    return summary
