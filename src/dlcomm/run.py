"""One run from overrides to a finished MLflow run: compose, validate, open, launch, close."""

from __future__ import annotations

from dlcomm import progress
from dlcomm.checked import once, remembering
from dlcomm.compose import compose
from dlcomm.config.schema import RunConfig
from dlcomm.config.validate import check_fault_injection
from dlcomm.errors import UserError
from dlcomm.launch.interrupts import INTERRUPTS
from dlcomm.spec import RunSpec


def check_runnable(cfg: RunConfig, data_here: bool = True, launcher: bool = True) -> None:
    """Everything that can be known wrong before any process starts or any run is recorded,
    beyond what :func:`dlcomm.compose.compose` checked (every torch-free rule of the configuration
    alone), the checks that need no torch first.
    ``data_here`` False (``dlcomm sweep export``, whose jobs run elsewhere): the data set's files
    are not looked for, and what depends on them (its shape, its size) is checked where it is
    known without them. ``launcher`` False (``dlcomm profile``, which steps one replica here and
    launches nothing): the launcher's own checks (sbatch, GPUs, the job's memory) are left out."""
    from dlcomm.algorithms.registry import get_algorithm
    from dlcomm.data import check_dataset, dataset_shape, dataset_sizes
    from dlcomm.train.plan import UNBOUNDED, check_plan

    # once(...): in a sweep, each check once per distinct value of what it reads (dlcomm.checked)
    if data_here:
        once("dataset", cfg.dataset, lambda: check_dataset(cfg.dataset))
    algorithm = get_algorithm(cfg.algo.name)
    roles = algorithm.roles(cfg.algo)
    check_fault_injection(cfg, roles, None, ranks_only=True)  # the steps once the plan is known (imports torch)
    sizes = _without_files(lambda data: once("sizes", data, lambda: dataset_sizes(data)), cfg.dataset, data_here)
    plan = None
    if sizes is not None:
        train_size, test_size = sizes
        per_epoch, total = plan = check_plan(
            cfg.train, train_size, cfg.nodes * cfg.workers_per_node, test_size, cfg.dataset.name
        )
        algorithm.check_plan(cfg.algo, per_epoch, total)
    check_fault_injection(cfg, roles, None if plan is None or plan[1] == UNBOUNDED else plan[1])
    from dlcomm.models import check_model_fits  # torch from here on
    from dlcomm.train.prelaunch import check_model_knobs, check_rank_objects

    described = _without_files(lambda data: once("shape", data, lambda: dataset_shape(data)), cfg.dataset, data_here)
    if described is not None:
        shape, classes = described

        def model_checks() -> None:
            model = check_model_fits(cfg.model, shape, classes, cfg.dataset.name)
            check_model_knobs(cfg, model)  # the limits that depend on the model: fragments, block sizes, ranks

        once("model", (cfg.model, shape, classes, cfg.dataset.name, cfg.algo, cfg.compress), model_checks)
    if plan is not None and plan[1] != UNBOUNDED:
        for note in algorithm.plan_notes(cfg.algo, *plan):
            line = f"dlcomm: note: algo={cfg.algo.name}: {note}"
            once("note", line, lambda: progress.say(line))  # a sweep's elements share their notes: said once
    check_rank_objects(cfg, plan)  # the optimizer, schedule, precision and compressor, as a rank builds them
    if roles and _scales_loss_here(cfg.train):
        raise UserError(
            f"train.amp with fp16 loss scaling is invalid for algo={cfg.algo.name}: its {', '.join(roles)} would apply the "
            "workers' scaled gradients; pass train.amp_dtype=bf16 (no scaling)"
        )
    if not launcher:
        return
    from dlcomm.launch.registry import get_launcher

    get_launcher(cfg.launcher.name).check(cfg, roles)  # its launcher.* ranges, GPUs, sbatch, service processes


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


def prepare_run(overrides: list[str], cfg: RunConfig | None = None) -> RunSpec:
    """The run ``overrides`` describe, checked (``cfg``: their composition, when already made)."""
    from dlcomm.tracking.mlflow_run import resolve_tracking_uri
    from dlcomm.tracking.store import probe

    cfg = compose(overrides) if cfg is None else cfg
    progress.stage(
        f"checking the data set, the model and the launcher ({cfg.dataset.name}, {cfg.model.name}, "
        f"launcher={cfg.launcher.name})"
    )
    check_runnable(cfg)
    uri = resolve_tracking_uri(cfg.tracking.uri)
    progress.stage(f"opening the MLflow store {uri}")
    once("store", (uri, cfg.tracking.connect_timeout_s), lambda: probe(uri, cfg.tracking.connect_timeout_s))
    return RunSpec.from_config(cfg, uri, tuple(overrides))


def prepare_sweep(overrides: list[str], compare_here: bool = True) -> tuple[list[RunSpec], list[str]]:
    """Every element of the sweep, composed and checked before anything is recorded, and the
    sweep's overrides: with ``compare_here``, those of the command line plus the network a sweep
    whose ranks share this machine compares on (:func:`dlcomm.sweep.comparison_clock`).

    What differs between elements is checked once per distinct value (:mod:`dlcomm.checked`:
    Hydra's composition of the overrides that choose files, the model built, the optimizer, the
    data set's files, the store), and the elements that bring each swept value first
    (:func:`dlcomm.sweep.screening_order`) are checked in full, as written, before the others are
    composed: ``model=mlp,vgg16 seed=range(0,300)`` refuses vgg16 in seconds."""
    with remembering():
        return _prepare_sweep(overrides, compare_here)


def _prepare_sweep(overrides: list[str], compare_here: bool) -> tuple[list[RunSpec], list[str]]:
    from dataclasses import replace

    from dlcomm.sweep import comparison_clock, expand, screening_order, swept_keys

    swept = set(swept_keys(overrides))
    elements = expand(overrides)
    order, first = screening_order(elements, leads=True)
    typed: dict[int, RunConfig] = {}

    def checked(positions: list[int], check) -> None:
        for position in positions:
            try:
                check(position)
            except UserError as error:
                raise UserError(f"sweep element [{' '.join(elements[position])}]: {error}") from None

    def composed(position: int) -> None:
        typed[position] = compose(elements[position])

    def rank_objects(position: int) -> None:
        check_rank_objects(typed[position])

    from dlcomm.train.prelaunch import check_rank_objects, suspects_first

    leads, rest = order[:first], order[first:]
    for part in (leads, rest):  # the leads first: every swept value met, and refused, before the rest is composed
        checked(part, composed)  # composed and range-checked (torch-free)
        # what torch refuses of each element's knobs (imports torch), before any note
        checked([part[at] for at in suspects_first([typed[position] for position in part])], rank_objects)
        if part is leads:  # what needs the data and the model, as written (checked again below, remembered)
            checked(leads, lambda position: check_runnable(typed[position]))
    added, shared = comparison_clock(overrides, list(typed.values())) if compare_here else ("", "")
    if added:
        progress.say(
            f"sweep: {shared} here, so the wall clock times their turns, not a cluster's compute and "
            f"communication; every run also keeps the simulated clock of {added} (compute profiled from one "
            f"replica alone), on which the comparison's speedup is computed (network=off: the wall clock)"
        )
        return _prepare_sweep([*overrides, added], compare_here=False)
    found: dict[int, RunSpec] = {}

    def prepared(position: int) -> None:  # then what needs the data, the model and the store
        element = elements[position]
        spec = prepare_run(element, typed[position])
        found[position] = replace(spec, varied=tuple(item for item in element if item.partition("=")[0] in swept))

    checked(order, prepared)
    specs = [found[position] for position in range(len(elements))]
    where = {(spec.tracking_uri, spec.cfg().tracking.experiment, spec.cfg().launcher.name) for spec in specs}
    if len(where) > 1:
        raise UserError(
            "a sweep may not vary tracking.uri, tracking.experiment or launcher: its runs share one parent run; "
            "run one sweep per value instead"
        )
    return specs, list(overrides)


def run_sweep(overrides: list[str]) -> int:
    """A parent MLflow run and one child run per element, as the launcher runs sweeps: one
    SLURM job array (``launcher=slurm``, returns at once), or here, one run after another."""
    specs, overrides = prepare_sweep(overrides)
    INTERRUPTS.check()
    _close_lost(specs[0].tracking_uri)
    from dlcomm.report.sweep import compare_sweep

    launcher = _launcher(specs[0])
    launcher.before_runs(specs)
    return launcher.sweep(specs, overrides, on_end=compare_sweep)


def launch(spec: RunSpec) -> int:
    """Start (or submit) one prepared run with its launcher; the exit code."""
    INTERRUPTS.check()
    _close_lost(spec.tracking_uri)
    launcher = _launcher(spec)
    launcher.before_runs([spec])
    return launcher.launch(spec)


def _close_lost(uri: str) -> None:
    """Runs left RUNNING by a driver or job that is gone are closed FAILED before a new one starts."""
    import sys

    from dlcomm.runs.reap import close_lost_on_open

    for line in close_lost_on_open(uri, "dlcomm train"):
        print(line, file=sys.stderr)


def _launcher(spec: RunSpec):
    from dlcomm.launch.registry import get_launcher

    return get_launcher(spec.cfg().launcher.name)
