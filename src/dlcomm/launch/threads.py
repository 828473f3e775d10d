"""``launcher=threads``: a whole cluster in this process, every rank (and service role) a thread.

Each thread builds its own model, optimizer, algorithm and data order exactly as a rank process
does (:func:`dlcomm.launch.rank.train_rank`); the data set is loaded once and shared (it is
only read). The Channel runs over the in-process fabric (:mod:`dlcomm.comm.inprocess`), whose
sums follow gloo's order, so the numbers are those of ``launcher=local`` on the CPU.

``launcher.compute``:

* ``serial``: one rank computes at a time with all of torch's threads and hands the turn over
  whenever it waits for communication (and at every iteration's start). The interleaving is
  deterministic, each rank keeps its own random stream, and a rank's compute is measured alone
  (what ``network.mode=simulate`` wants). ``network.mode=emulate`` is refused (its waits are
  wall-clock sleeps, which would hold the turn).
* ``parallel``: every thread runs when it can, one torch thread each (torch releases the GIL in
  its kernels): on the 2-core machine 1.4x the samples/s of ``serial`` at 16 workers (figures in
  docs/benchmarks.md). Initial weights are drawn one rank at a time, but the process's random
  generator is shared while training: models that draw then (dropout, GAN noise, imagefolder
  augmentation) are not reproducible.
* ``batched``: the ranks' forward and backward passes run as one vectorised call over their
  stacked parameters, buffers and batches (``torch.func.vmap``, :mod:`dlcomm.train.batched`), with
  the cores shared as under ``parallel``; the rest of a step (the algorithm, the optimizer, the Channel) stays each rank's.
  The numbers are serial's (to rounding); dropout draws its masks from one generator seeded per
  step, so a model with dropout differs from serial by its draws. Refused before launch where
  the ranks do not step in lockstep (service roles, pull-gossip's asynchronous pulls), under AMP,
  for a task whose step is no ``loss(model, inputs, labels)`` (task=gan), and for a simulated
  clock that measures each rank's compute alone (``network.compute=measured``).
* ``auto`` (default): ``batched`` where the committed measurement (:mod:`dlcomm.launch.compute_choice`)
  says it is faster than the mode below for the run's model on its device and the run can be
  batched; else ``parallel``, unless the run needs what only ``serial`` gives: a simulated
  network (compute measured alone) or draws from the random generator while training, or it
  computes on a GPU: the ranks' kernels then share one device, where taking turns was 1.7-2.1x
  faster than all at once (ResNet-18 on one H200, 4 and 16 ranks: 28.1 against 46.8-53.1 ms/iter,
  115.0 against 241-287; docs/benchmarks.md).

``launcher.semantics``: ``gloo`` (default) delivers messages as gloo does; ``nccl`` enforces
NCCL's ordering rules (:mod:`dlcomm.comm.nccl_rules`), so that an algorithm that would hang on
a GPU cluster hangs here too. Under both, a job whose every rank waits and none can proceed is
ended after ``launcher.hang_timeout_s`` with one line naming each rank and what it waits on
(:mod:`dlcomm.comm.hangs`): "will my algorithm hang on the cluster?" answered on a laptop.

A rank that raises ends the job at once: every rank blocked in an operation is released
(:meth:`~dlcomm.comm.inprocess.Fabric.abort`) and the failing rank is named. On the GPU
(``train.device=cuda``) every rank uses the one visible device, each on a CUDA stream of its own.
"""

from __future__ import annotations

import os
import threading
import time
import traceback
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any, cast

from dlcomm import progress
from dlcomm.config.schema import LauncherConfig, RunConfig, computes, domain
from dlcomm.errors import Diverged, UserError
from dlcomm.launch.driver import DriverLauncher, LaunchResult, RankFailure, root_cause
from dlcomm.launch.gpus import trains_on_cuda
from dlcomm.launch.registry import register
from dlcomm.spec import RunSpec

COMPUTE_MODES = ("auto", "serial", "parallel", "batched")
SEMANTICS = ("gloo", "nccl")  # dlcomm.comm.inprocess.SEMANTICS (that module imports torch; a test keeps the two equal)
_POLL_S = 0.1
# Set when ranks were stopped mid-operation (a failure or an interrupt): the `dlcomm` command then
# ends without the interpreter's shutdown (dlcomm.cli.main says why).
RANKS_ABORTED = False


@dataclass
class ThreadsLauncherConfig(LauncherConfig):
    """``launcher=threads``: a whole cluster in this process: every rank (and service role) a
    thread, the network in memory, the data set loaded once. Runs 64-256 workers on one machine and
    many ranks on one GPU. ``compute``: parallel runs the ranks at once, one torch thread each;
    serial lets one rank compute at a time with every core (each rank's own random stream, compute
    measured alone); batched runs every rank's forward and backward as one vectorised call (ranks
    in lockstep only); auto: parallel unless network.mode=simulate or the job draws random numbers
    while training (dropout, GAN, imagefolder augmentation).
    docs/launchers.md."""

    name: str = "threads"
    compute: str = field(
        default="auto",
        metadata=computes(
            domain(
                one_of=COMPUTE_MODES,
                means="the compute mode",
                doc="parallel: all ranks at once, one torch thread each | serial: one rank at a time, every core | batched: every rank's forward and backward as one vmapped call (ranks in lockstep) | auto: parallel unless network.mode=simulate or training draws random numbers",
            )
        ),
    )
    semantics: str = field(
        default="gloo",
        metadata=computes(
            domain(
                one_of=SEMANTICS,
                means="the message semantics (gloo: gloo's delivery, nccl: NCCL's ordering rules)",
                doc="NCCL's: no buffering, one queue per group and rank, batches as one unit, so what hangs on a GPU cluster hangs here",
            )
        ),
    )
    hang_timeout_s: float = field(
        default=10.0,
        metadata=domain(
            above=0,
            means="the seconds of all ranks waiting before the run fails",
            doc="with nothing moving: a deadlock, the run FAILED",
        ),
    )


@register
class ThreadsLauncher(DriverLauncher):
    """``launcher=threads``: the ranks and the algorithm's service roles are threads of this
    process; it waits for them and closes the run."""

    where = "as threads of this process"
    Config = ThreadsLauncherConfig

    @classmethod
    def shared_hardware(cls, cfg: RunConfig, ranks: int) -> str:
        """Threads on a GPU share that one GPU; serial compute takes turns on all the cores."""
        if trains_on_cuda(cfg.train):
            return f"{ranks} ranks shared one GPU"
        if resolve_compute(cfg)[0] == "serial":
            return f"{ranks} ranks took turns on {os.cpu_count() or 1} cores"
        return super().shared_hardware(cfg, ranks)

    @classmethod
    def check(cls, cfg: RunConfig, roles: tuple[str, ...] = ()) -> None:
        """Beside the base checks (``launcher.*`` are checked against their declared domains while
        composing): no wall-clock emulation under serial compute, a visible GPU for
        ``train.device=cuda``, and the job's memory."""
        super().check(cfg, roles)
        compute, why = resolve_compute(cfg)
        if compute == "batched":
            check_batched(cfg, roles, why)
        if compute == "serial" and cfg.network.mode == "emulate":
            raise UserError(
                f"network.mode=emulate is invalid with launcher=threads and serial compute ({why}): emulation "
                "sleeps in wall time while one rank holds the turn; use network.mode=simulate or "
                "launcher.compute=parallel"
            )
        if cfg.train.device == "cuda":
            import torch

            if not torch.cuda.is_available():
                raise UserError("train.device=cuda is invalid: no CUDA device is visible; use train.device=cpu or auto")
        from dlcomm.launch.footprint import check_fits, estimate

        check_fits(
            cfg,
            estimate(cfg, cfg.nodes * cfg.workers_per_node + len(roles), compute == "serial"),  # batched: all at once
            len(roles),
            cls.name,
            "ranks",
            "or launcher=slurm",
        )

    @classmethod
    def run_job(cls, spec: RunSpec) -> LaunchResult:
        """Every rank a thread: :func:`launch_threads`."""
        return launch_threads(spec)


def resolve_compute(cfg: RunConfig) -> tuple[str, str]:
    """``(serial, parallel or batched, why)`` for ``launcher.compute`` (``auto`` decided as the module
    docstring says)."""
    launcher = cast(ThreadsLauncherConfig, cfg.launcher)  # launcher=threads's schema
    if launcher.compute != "auto":
        return launcher.compute, f"launcher.compute={launcher.compute}"
    if cfg.network.mode == "simulate" and cfg.network.compute == "measured":
        return "serial", "auto: network.mode=simulate measures each rank's compute alone"
    if cfg.network.mode == "simulate":  # the profile charges compute: serial only keeps memory down
        return "serial", (
            "auto: network.mode=simulate, one rank's activations alive at a time "
            "(compute=profile: launcher.compute=parallel charges the same profile)"
        )
    if trains_on_cuda(cfg.train):
        measured = _batched_measured_faster(cfg, "cuda", "serial")
        if measured:
            return "batched", measured
        return "serial", "auto: the ranks share one GPU, where taking turns is faster than all at once"
    drawing = draws_while_training(cfg)
    if drawing:
        return "serial", f"auto: {drawing} draws from the random generator while training"
    measured = _batched_measured_faster(cfg, "cpu", "parallel")
    if measured:
        return "batched", measured
    return "parallel", "auto"


def _batched_measured_faster(cfg: RunConfig, device: str, otherwise: str) -> str:
    """``auto``'s reason for ``batched`` where the committed measurement says it beats ``otherwise``
    for this model on ``device`` (:mod:`dlcomm.launch.compute_choice`) and the run can be batched;
    empty otherwise."""
    from dlcomm.algorithms.registry import ALGORITHMS
    from dlcomm.launch.compute_choice import batched_if_faster

    why = batched_if_faster(device, cfg.model.name, cfg.nodes * cfg.workers_per_node, cfg.train.batch_size, otherwise)
    if why is None:
        return ""
    try:
        check_batched(cfg, ALGORITHMS.get(cfg.algo.name).roles(cfg.algo), why)
    except UserError:
        return ""
    return why


def check_batched(cfg: RunConfig, roles: tuple[str, ...], why: str) -> None:
    """Refuse in one line what ``launcher.compute=batched`` cannot run (the module docstring), naming
    the compute mode that can."""
    from dlcomm.algorithms.registry import ALGORITHMS
    from dlcomm.tasks.registry import TASKS

    mode = f"launcher.compute=batched ({why})" if why != "launcher.compute=batched" else "launcher.compute=batched"
    algorithm = ALGORITHMS.get(cfg.algo.name)
    if roles:
        raise UserError(
            f"{mode} is invalid with algo={cfg.algo.name}: its {', '.join(roles)} rank(s) serve the workers out of "
            "lockstep, and batched compute steps every rank at once; use launcher.compute=serial or parallel"
        )
    if not algorithm.lockstep:
        raise UserError(
            f"{mode} is invalid with algo={cfg.algo.name}: its workers step out of lockstep "
            f"({algorithm.lockstep_note}), and batched compute steps every rank at once; use launcher.compute=serial "
            "or parallel"
        )
    if cfg.train.amp:
        raise UserError(
            f"{mode} is invalid with train.amp=true: the loss scaler steps each rank alone; "
            "pass train.amp=false or launcher.compute=serial"
        )
    if not TASKS.get(cfg.task.name).batchable:
        raise UserError(
            f"{mode} is invalid with task={cfg.task.name}: its step is more than one loss of (model, inputs, labels); "
            "use launcher.compute=serial or parallel"
        )
    if cfg.network.mode == "simulate" and cfg.network.compute == "measured":
        raise UserError(
            f"{mode} is invalid with network.compute=measured: the simulated clock measures each rank's compute "
            "alone; pass network.compute=profile or launcher.compute=serial"
        )


def draws_while_training(cfg: RunConfig) -> str:
    """What in the run draws from torch's process-wide generator after the initial weights
    (empty if nothing): dropout in the model, a GAN's noise, imagefolder's augmentation."""
    import torch

    from dlcomm.launch.footprint import probe_model

    if cfg.task.name == "gan":
        return "task=gan"
    if cfg.dataset.name == "imagefolder":
        return "dataset=imagefolder"
    model, _ = probe_model(cfg)
    if any(isinstance(module, torch.nn.modules.dropout._DropoutNd) and module.p > 0 for module in model.modules()):
        return f"model={cfg.model.name} (dropout)"
    return ""


def torch_threads(requested: int, compute: str, ranks: int) -> int:
    """torch's (process-wide) thread count: ``train.threads_per_rank`` if set, else every core
    for the one rank computing at a time (serial), else the cores shared among the ranks (parallel,
    and batched: its rank threads run their own work at once, the optimizer and the algorithm, and
    every thread that runs torch's parallel kernels keeps a team of that many spinning; measured
    on 2 cores, 16 ranks of a small MLP: 2 threads slower than 1)."""
    if requested > 0:
        return requested
    cores = os.cpu_count() or 1
    return cores if compute == "serial" else max(1, cores // ranks)


def launch_threads(spec: RunSpec) -> LaunchResult:
    """Run every rank of ``spec`` as a thread here; return when all finished or one failed."""
    import torch

    from dlcomm.comm.inprocess import Fabric, Turns
    from dlcomm.data import build_dataset
    from dlcomm.launch.rank import job_layout
    from dlcomm.train.batched import BatchedCompute
    from dlcomm.train.determinism import apply_determinism

    cfg = spec.cfg()
    apply_determinism(cfg.train.deterministic)  # before CUDA is first used, for every rank of the process
    layout = job_layout(cfg)
    compute, why = resolve_compute(cfg)
    torch.set_num_threads(torch_threads(cfg.train.threads_per_rank, compute, layout.job_size))
    progress.say(
        f"launcher=threads: {layout.job_size} ranks in this process, compute={compute} ({why}), "
        f"{torch.get_num_threads()} torch thread(s)"
    )
    device = torch.device("cuda", torch.cuda.current_device()) if trains_on_cuda(cfg.train) else torch.device("cpu")
    progress.mark_stage(spec.run_dir, f"loading the data ({cfg.dataset.name}, shared by the ranks)")
    data = build_dataset(cfg.dataset)
    ranks = range(layout.job_size)
    fabric = Fabric(
        Turns(ranks) if compute == "serial" else None,
        semantics=cast(ThreadsLauncherConfig, cfg.launcher).semantics,  # launcher=threads's schema
        hang_timeout_s=cast(ThreadsLauncherConfig, cfg.launcher).hang_timeout_s,
        ranks=layout.job_size,
        batched=BatchedCompute(layout.world_size) if compute == "batched" else None,
    )
    failures: list[RankFailure] = []
    threads = [
        threading.Thread(
            target=_rank_thread,
            args=(spec, rank, layout, fabric, device, data, failures),
            name=f"dlcomm-{layout.role_of(rank)}{rank}",
            daemon=True,
        )
        for rank in ranks
    ]
    global RANKS_ABORTED
    grace_s = cfg.launcher.teardown_grace_s
    try:
        for thread in threads:
            thread.start()
        while fabric.failure is None:
            alive = [thread for thread in threads if thread.is_alive()]
            if not alive:
                return LaunchResult()
            alive[0].join(timeout=_POLL_S)
        RANKS_ABORTED = True
        _join(threads, grace_s)
        return LaunchResult(failure=_root_cause(failures, fabric, layout))
    except KeyboardInterrupt:
        RANKS_ABORTED = True
        fabric.abort("interrupted")
        _join(threads, grace_s)
        return LaunchResult(interrupted=True)


def _rank_thread(
    spec: RunSpec, rank: int, layout: Any, fabric: Any, device: Any, data: Any, failures: list[RankFailure]
) -> None:
    import torch

    from dlcomm.comm.cluster import Cluster
    from dlcomm.comm.inprocess import JobAborted, RankKilled
    from dlcomm.launch.rank import train_rank

    role = layout.role_of(rank)
    turns = fabric.turns
    if turns is not None:
        turns.begin(rank)
    try:
        stream = torch.cuda.Stream(device) if device.type == "cuda" else None
        with torch.cuda.stream(stream) if stream is not None else nullcontext():
            train_rank(spec, Cluster.in_process(layout, rank, fabric, device), data=data)
    except (JobAborted, RankKilled):
        pass  # another rank's failure (or this one's kill) ended the job: not the cause
    except UserError as error:
        failures.append(RankFailure(rank, f"stopped: {error}", user_error=True, at=time.time(), role=role))
        fabric.abort(f"rank {rank} stopped")
    except Diverged as error:
        failures.append(RankFailure.diverged(error, role))
        fabric.abort(f"rank {rank} diverged")
    except BaseException as error:  # noqa: BLE001 - every failure must reach the driver
        failures.append(
            RankFailure(
                rank,
                f"raised {type(error).__name__}: {error}",
                details=traceback.format_exc(),
                at=time.time(),
                role=role,
            )
        )
        fabric.abort(f"rank {rank} failed")
    finally:
        fabric.leave(rank)
        if turns is not None:
            turns.end(rank)


def _join(threads: list[threading.Thread], grace_s: float) -> None:
    """Wait up to ``grace_s`` for the threads to end (daemon threads still running then die with
    the process)."""
    deadline = time.monotonic() + grace_s
    for thread in threads:
        thread.join(timeout=max(0.0, deadline - time.monotonic()))


def _root_cause(failures: list[RankFailure], fabric: Any, layout: Any) -> RankFailure:
    if fabric.killed is not None:
        rank = fabric.killed
        return RankFailure(
            rank, "was killed (debug.fail_mode=kill)", signalled=True, at=time.time(), role=layout.role_of(rank)
        )
    if failures:
        return root_cause(failures)
    if fabric.hang is not None:
        return RankFailure(0, fabric.hang, at=time.time(), whole_story=True)
    return RankFailure(0, f"ended: {fabric.failure}", at=time.time())
