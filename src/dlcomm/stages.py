"""Everything checked before a run is recorded, as named stages in the order they run.

Each stage is a function of one run being checked (:class:`Checking`: the typed
:class:`~dlcomm.config.schema.RunConfig` and what the earlier stages found), refuses in one
:class:`~dlcomm.errors.UserError` line, and runs once per run (:func:`advance` keeps which ran). A
new rule belongs to the first stage that has what it reads:

0. **compose** (:func:`dlcomm.compose.compose`, before this module; no torch, milliseconds): what
   the configuration alone shows. Hydra's composition (an unknown key or choice), each field's
   declared domain (``limits``, ``one_of``: :func:`dlcomm.config.validate.check_values`), the rules
   across keys (:func:`dlcomm.config.validate.validate_run`) and each chosen class's own
   (:func:`dlcomm.compose.check_algorithm`: an algorithm's ``check_config``, an optimizer's or a
   compressor's ``check``).
1. :func:`rank_objects` (torch; no data): what torch refuses of the knobs alone, built as a rank
   builds it (:mod:`dlcomm.train.prelaunch`): the optimizer, once, kept for the schedule; the
   precision object; the compressor.
2. :func:`plan` (the data set's files and sizes): the data set's own check, the run's plan
   (:func:`dlcomm.train.plan.check_plan`, the algorithm's ``check_plan``), fault injection's ranks
   and steps, the learning-rate schedule over the plan. Each rank computes the plan again from the
   data it loaded (:mod:`dlcomm.launch.rank`): it is what the run trains by, and for a data set
   whose size the driver does not count (``imagefolder``: :func:`dlcomm.data.dataset_sizes` is
   None) the only place its plan is checked.
3. :func:`model` (the data's shape): the model built and fed a zero batch, then the knobs whose
   limits depend on it (the algorithm's and the compressor's ``check_model``).
4. :func:`notes` (the plan): what is worth saying before the run starts; never a refusal.
5. :func:`processes` (this machine, the launcher): what the processes to be started need: fp16
   loss scaling against an algorithm's service roles, the launcher's own ``check`` (its
   ``launcher.*`` ranges, GPUs, sbatch, the job's memory).
6. **store** (:func:`dlcomm.run.prepare_run`): the MLflow store answers; once per sweep.

A sweep (:func:`dlcomm.run.check_sweep`) runs the same stages, each once per element (and once
per distinct value of what it reads: :mod:`dlcomm.checked`), in the order that refuses a bad
swept value soonest (:func:`dlcomm.sweep.screening_order`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from dlcomm import progress
from dlcomm.checked import once
from dlcomm.config.schema import RunConfig
from dlcomm.errors import UserError


@dataclass
class Checking:
    """One run being checked: its configuration, what the stages found (the optimizer
    :func:`rank_objects` built, the plan), and which stages ran.

    ``data_here`` False (``dlcomm sweep export``, whose jobs run elsewhere): the data set's files
    are not looked for, and what depends on them (its shape, its size) is checked where it is known
    without them. ``launcher`` False (``dlcomm profile``, which steps one replica here and launches
    nothing): the launcher's own checks (sbatch, GPUs, the job's memory) are left out."""

    cfg: RunConfig
    data_here: bool = True
    launcher: bool = True
    optimizer: Any = None
    plan: Optional[tuple[int, int]] = None
    done: list[str] = field(default_factory=list)


def rank_objects(run: Checking) -> None:
    """What torch refuses of the knobs alone, built as a rank builds it (no data, no model)."""
    from dlcomm.train.prelaunch import built_optimizer, check_compressor, check_precision

    cfg = run.cfg
    # once(...): in a sweep, each once per distinct value of what it reads (dlcomm.checked)
    run.optimizer = once("optimizer", cfg.optim, lambda: built_optimizer(cfg.optim))
    once("precision", (cfg.train.amp, cfg.train.amp_dtype), lambda: check_precision(cfg.train))
    once("compressor", (cfg.compress, cfg.seed), lambda: check_compressor(cfg))


def plan(run: Checking) -> None:
    """The data set's files and sizes, the run's plan and what depends on it."""
    from dlcomm.config.validate import check_fault_ranks, check_fault_steps
    from dlcomm.data import check_dataset, dataset_sizes
    from dlcomm.train.plan import UNBOUNDED, check_plan
    from dlcomm.train.prelaunch import check_schedule

    cfg = run.cfg
    if run.data_here:
        once("dataset", cfg.dataset, lambda: check_dataset(cfg.dataset))
    algorithm = _algorithm(cfg)
    check_fault_ranks(cfg, algorithm.roles(cfg.algo))  # its steps once the plan is known
    sizes = _without_files(lambda data: once("sizes", data, lambda: dataset_sizes(data)), cfg.dataset, run.data_here)
    if sizes is not None:
        train_size, test_size = sizes
        per_epoch, total = run.plan = check_plan(
            cfg.train, train_size, cfg.nodes * cfg.workers_per_node, test_size, cfg.dataset.name
        )
        algorithm.check_plan(cfg.algo, per_epoch, total)
    check_fault_steps(cfg, None if run.plan is None or run.plan[1] == UNBOUNDED else run.plan[1])
    once("schedule", (cfg.optim, cfg.train, run.plan), lambda: check_schedule(cfg, run.optimizer, run.plan))


def model(run: Checking) -> None:
    """The model against the data's shape, and the knobs whose limits depend on the model."""
    from dlcomm.data import dataset_shape
    from dlcomm.models import check_model_fits
    from dlcomm.train.prelaunch import check_model_knobs

    cfg = run.cfg
    described = _without_files(
        lambda data: once("shape", data, lambda: dataset_shape(data)), cfg.dataset, run.data_here
    )
    if described is None:
        return
    shape, classes = described

    def model_checks() -> None:
        built = check_model_fits(cfg.model, shape, classes, cfg.dataset.name)
        check_model_knobs(cfg, built)  # the limits that depend on the model: fragments, block sizes, ranks

    once("model", (cfg.model, shape, classes, cfg.dataset.name, cfg.algo, cfg.compress), model_checks)


def notes(run: Checking) -> None:
    """The algorithm's notes on the plan (a sweep's elements share their notes: each said once)."""
    from dlcomm.train.plan import UNBOUNDED

    cfg = run.cfg
    if run.plan is None or run.plan[1] == UNBOUNDED:
        return
    for note in _algorithm(cfg).plan_notes(cfg.algo, *run.plan):
        line = f"dlcomm: note: algo={cfg.algo.name}: {note}"
        once("note", line, lambda: progress.say(line))


def processes(run: Checking) -> None:
    """What the processes the launcher starts need of this machine and of the run."""
    cfg = run.cfg
    roles = _algorithm(cfg).roles(cfg.algo)
    if _algorithm(cfg).takes_own_step and _scales_loss_here(cfg.train):
        raise UserError(
            f"train.amp with fp16 loss scaling is invalid for algo={cfg.algo.name}: it steps with the gradients before "
            "the loss scaler could unscale them; pass train.amp_dtype=bf16 (no scaling)"
        )
    if roles and _scales_loss_here(cfg.train):
        raise UserError(
            f"train.amp with fp16 loss scaling is invalid for algo={cfg.algo.name}: its {', '.join(roles)} would apply the "
            "workers' scaled gradients; pass train.amp_dtype=bf16 (no scaling)"
        )
    if not run.launcher:
        return
    from dlcomm.launch.registry import LAUNCHERS

    LAUNCHERS.get(cfg.launcher.name).check(cfg, roles)  # its launcher.* ranges, GPUs, sbatch, service processes


STAGES: tuple[Callable[[Checking], None], ...] = (rank_objects, plan, model, notes, processes)
"""The stages after composition, in their order (the module's docstring says what belongs where)."""


def advance(run: Checking, through: Optional[Callable[[Checking], None]] = None) -> None:
    """Run ``run``'s stages that have not run yet, in order, up to and including ``through``
    (every stage when None): a sweep takes each element part of the way, then the rest."""
    for stage in STAGES:
        if stage.__name__ not in run.done:
            stage(run)
            run.done.append(stage.__name__)
        if stage is through:
            return


def _algorithm(cfg: RunConfig):
    from dlcomm.algorithms.registry import ALGORITHMS

    return ALGORITHMS.get(cfg.algo.name)


def _without_files(describe, dataset, data_here: bool):
    """``describe(dataset)``; None when the data set's files are not here and need not be."""
    try:
        return describe(dataset)
    except UserError:
        if data_here:
            raise
        return None


def _scales_loss_here(train) -> bool:
    """Whether ``train.amp`` uses fp16 loss scaling on the device this machine's launcher will
    pick (services, the only reason to ask, run only under launchers that start them here)."""
    import torch

    from dlcomm.launch.gpus import trains_on_cuda
    from dlcomm.train.precision import scales_loss

    return scales_loss(train.amp, train.amp_dtype, torch.device("cuda" if trains_on_cuda(train) else "cpu"))
