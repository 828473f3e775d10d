"""What a GPU job needs, checked before anything is submitted or recorded (one line each, exit 2).

The rules, the same for every launcher that starts processes (``local``, ``slurm``, ``srun``;
``threads`` runs every rank on the one visible GPU over its in-process fabric and has no backend):

* **One GPU per process.** Every process of a GPU job has a GPU of its own: NCCL refuses two
  ranks of one communicator on one device ("Duplicate GPU detected"). That includes an
  algorithm's service processes (the parameter server of ``ps``/``ps_layerdrop``, the gossip
  manager of ``gossip_pull``): the server exchanges the model with the workers over the job's
  group, which is NCCL on a GPU job, and every process, the manager included, joins that group
  with its device (``init_process_group(device_id=...)`` forms the communicator at once). So
  ``launcher=local`` needs ``nodes*workers_per_node`` GPUs plus one per service, and
  :func:`dlcomm.launch.rank.resolve_device` gives process ``i`` of a machine ``cuda:i``.
* **NCCL carries CUDA tensors only**: ``launcher.backend=nccl`` with a CPU device is refused.
* **gloo carries CUDA tensors in collectives, not point to point.** torch 2.14's
  ``ProcessGroupGloo`` has CUDA variants of allreduce, broadcast, reduce, allgather, gather,
  scatter and alltoall (``AsyncAllreduceCUDA*Work``, ``AsyncReduceCUDAWork``, ... in
  ``libtorch_cpu.so``/``libtorch_cuda.so``), but ``send``/``recv`` hand the tensor's data
  pointer to gloo's TCP transport without a device check (``ProcessGroupGloo::send``): a CUDA
  pointer there is read as host memory. torch's backend table (docs/distributed.rst, "Backends")
  marks gloo's send/recv CPU-only. An algorithm that sends device tensors point to point
  (:func:`sends_point_to_point`) is therefore refused under gloo on CUDA; collective-only
  algorithms run.
* **SLURM**: ``launcher=slurm`` asks for ``launcher.gpus_per_node`` GPUs on every node and starts
  ``workers_per_node`` ranks there, so ``train.device=cuda`` needs ``gpus_per_node >=
  workers_per_node``. ``launcher=srun`` runs inside an allocation made by sbatch: its check counts
  the GPUs this task sees.
"""

from __future__ import annotations

from typing import cast

from dlcomm.config.schema import RunConfig, SlurmLauncherConfig
from dlcomm.errors import UserError


def trains_on_cuda(train) -> bool:
    """Whether the ranks this machine runs train on a GPU: ``train.device=cuda``, or ``auto`` with
    one visible to torch (``train``: the run's ``TrainConfig``)."""
    if train.device == "cuda":
        return True
    if train.device != "auto":
        return False
    import torch

    return torch.cuda.is_available()


def sends_point_to_point(algo: str) -> bool:
    """Whether ``algo`` sends device tensors point to point (``Channel.exchange``). An algorithm class says it is collective-only with ``point_to_point = False``;
    one that says nothing is taken to send point to point (the safe answer)."""
    from dlcomm.algorithms.registry import ALGORITHMS

    return bool(getattr(ALGORITHMS.get(algo), "point_to_point", True))


def visible_gpus() -> int:
    """The GPUs torch sees in this process (0 without a driver or CUDA build)."""
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def check_backend(cfg: RunConfig, cuda: bool, where: str) -> None:
    """``launcher.backend`` against the device the ranks will use (``cuda``: whether they will
    train on GPUs; ``where`` says why, e.g. "train.device=auto finds 0 GPU(s) for 4 processes
    here")."""
    backend, algo = cfg.launcher.backend, cfg.algo.name
    if backend == "nccl" and not cuda:
        raise UserError(
            f"launcher.backend=nccl is invalid with train.device={cfg.train.device}{where}: NCCL carries CUDA "
            "tensors only; pass launcher.backend=gloo (or auto), or train.device=cuda with a GPU per process"
        )
    if backend == "gloo" and cuda and sends_point_to_point(algo):
        raise UserError(
            f"launcher.backend=gloo is invalid with train.device={cfg.train.device} and algo={algo}: torch's gloo "
            f"carries CUDA tensors in collectives only, not the point-to-point send/recv {algo} uses; pass "
            "launcher.backend=nccl (or auto), or train.device=cpu"
        )


def _processes(cfg: RunConfig, roles: tuple[str, ...]) -> str:
    workers = cfg.nodes * cfg.workers_per_node
    if not roles:
        return f"{workers} processes"
    return f"{workers + len(roles)} processes ({workers} workers and the {', '.join(roles)} of algo={cfg.algo.name})"


def check_local_gpus(cfg: RunConfig, roles: tuple[str, ...]) -> None:
    """``launcher=local``: the backend, then one visible GPU per process, services included."""
    processes = cfg.nodes * cfg.workers_per_node + len(roles)
    gpus = visible_gpus()
    device = cfg.train.device
    cuda = device == "cuda" or (device == "auto" and gpus >= processes)
    where = f" (it finds {gpus} GPU(s) for {processes} processes here)" if device == "auto" else ""
    check_backend(cfg, cuda, where)
    if device != "cuda":
        return
    if gpus == 0:
        raise UserError("train.device=cuda is invalid: no CUDA device is visible; use train.device=cpu or auto")
    if processes > gpus:
        workers = cfg.nodes * cfg.workers_per_node
        fits = f"at most {gpus - len(roles)} workers" if gpus > len(roles) else "launcher=threads"
        raise UserError(
            f"nodes*workers_per_node={workers} is invalid with train.device=cuda: the local launcher gives each of "
            f"its {_processes(cfg, roles)} a GPU of its own and {gpus} are visible; use {fits}, launcher=threads "
            "(every rank on one GPU), or train.device=cpu"
        )


def check_slurm_gpus(cfg: RunConfig) -> None:
    """``launcher=slurm``: ``launcher.gpus_per_node`` GPUs are asked for on every node, one per rank."""
    launcher = cast(SlurmLauncherConfig, cfg.launcher)  # launcher=slurm's schema
    device, per_node = cfg.train.device, cfg.workers_per_node
    gpus = launcher.gpus_per_node
    cuda = device == "cuda" or (device == "auto" and gpus >= per_node)
    where = (
        f" and launcher.gpus_per_node={gpus} (auto picks the CPU on nodes without a GPU per rank)"
        if device == "auto"
        else ""
    )
    check_backend(cfg, cuda, where)
    if device == "cuda" and gpus < per_node:
        raise UserError(
            f"launcher.gpus_per_node={gpus} is invalid with train.device=cuda and workers_per_node={per_node}: every "
            f"rank needs a GPU of its own on its node; pass launcher.gpus_per_node={per_node} (or fewer "
            "workers_per_node), or train.device=cpu"
        )


def check_srun_gpus(cfg: RunConfig, in_step: bool) -> None:
    """``launcher=srun``: the GPUs this task of the allocation sees, one per rank of its node
    (outside an srun step there is nothing to count: the launch refuses it)."""
    device, per_node = cfg.train.device, cfg.workers_per_node
    if not in_step:
        if device != "auto":  # auto is decided on the node
            check_backend(cfg, device == "cuda", "")
        return
    gpus = visible_gpus()
    cuda = device == "cuda" or (device == "auto" and gpus >= per_node)
    where = f" (this srun task sees {gpus} GPU(s) for the {per_node} ranks of its node)" if device == "auto" else ""
    check_backend(cfg, cuda, where)
    if device == "cuda" and gpus < per_node:
        raise UserError(
            f"train.device=cuda is invalid in this allocation: this srun task sees {gpus} GPU(s) and its node runs "
            f"workers_per_node={per_node} ranks, each needing a GPU of its own; ask sbatch for "
            f"--gpus-per-node={per_node} (without --gpus-per-task or --gpu-bind, so that every task sees them all), "
            "or pass train.device=cpu"
        )
