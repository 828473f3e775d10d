"""One run or sweep from overrides to a finished MLflow run: compose, check (:mod:`dlcomm.stages`),
probe the store, open, launch, close."""

from __future__ import annotations

from dlcomm import progress
from dlcomm.checked import remembering
from dlcomm.compose import compose
from dlcomm.config.schema import RunConfig
from dlcomm.errors import UserError
from dlcomm.launch.interrupts import INTERRUPTS
from dlcomm.spec import RunSpec


def check_runnable(cfg: RunConfig, data_here: bool = True, launcher: bool = True) -> None:
    """Everything that can be known wrong before any process starts or any run is recorded,
    beyond what :func:`dlcomm.compose.compose` checked: the stages of :mod:`dlcomm.stages`, in
    their order (``data_here``, ``launcher``: :class:`dlcomm.stages.Checking`)."""
    from dlcomm.stages import Checking, advance

    advance(Checking(cfg, data_here, launcher))


def prepare_run(overrides: list[str]) -> RunSpec:
    """The run ``overrides`` describe, composed, checked (:func:`check_runnable`) and its store probed."""
    cfg = compose(overrides)
    _checking_stage(cfg)
    check_runnable(cfg)
    return RunSpec.from_config(cfg, _probed_store(cfg), tuple(overrides))


def _checking_stage(cfg: RunConfig) -> None:
    progress.stage(
        f"checking the data set, the model and the launcher ({cfg.dataset.name}, {cfg.model.name}, "
        f"launcher={cfg.launcher.name})"
    )


def _probed_store(cfg: RunConfig) -> str:
    """The store ``tracking.uri`` resolves to, once it answered."""
    from dlcomm.tracking.mlflow_run import resolve_tracking_uri
    from dlcomm.tracking.store import probe

    uri = resolve_tracking_uri(cfg.tracking.uri)
    progress.stage(f"opening the MLflow store {uri}")
    probe(uri, cfg.tracking.connect_timeout_s)
    return uri


def prepare_sweep(overrides: list[str], compare_here: bool = True) -> tuple[list[RunSpec], list[str]]:
    """Every element of the sweep, composed and checked before anything is recorded
    (:func:`check_sweep`), the store probed once, and the sweep's overrides: with ``compare_here``,
    those of the command line plus the network a sweep whose ranks share this machine compares on
    (:func:`dlcomm.sweep.comparison_clock`)."""
    from dataclasses import replace

    from dlcomm.sweep import swept_keys
    from dlcomm.tracking.mlflow_run import resolve_tracking_uri

    with remembering():
        elements, configs, overrides = check_sweep(overrides, compare_here)
    swept = set(swept_keys(overrides))
    uris = [resolve_tracking_uri(cfg.tracking.uri) for cfg in configs]
    if len({(uri, cfg.tracking.experiment, cfg.launcher.name) for uri, cfg in zip(uris, configs)}) > 1:
        raise UserError(
            "a sweep may not vary tracking.uri, tracking.experiment or launcher: its runs share one parent run; "
            "run one sweep per value instead"
        )
    try:
        uri = _probed_store(configs[0])
    except UserError as error:
        raise UserError(f"sweep element [{' '.join(elements[0])}]: {error}") from None
    return [
        replace(
            RunSpec.from_config(cfg, uri, tuple(element)),
            varied=tuple(item for item in element if item.partition("=")[0] in swept),
        )
        for element, cfg in zip(elements, configs)
    ], overrides


def check_sweep(
    overrides: list[str], compare_here: bool = False, data_here: bool = True
) -> tuple[list[list[str]], list[RunConfig], list[str]]:
    """The sweep's elements, each composed once and taken once through every stage of
    :mod:`dlcomm.stages` (``data_here``: :class:`~dlcomm.stages.Checking`), their configurations,
    and the sweep's overrides (with ``compare_here``, the comparison's network added:
    :func:`dlcomm.sweep.comparison_clock`). A refusal names its element.

    Inside :func:`dlcomm.checked.remembering`, what differs between elements is checked once per
    distinct value (Hydra's composition of the overrides that choose files, the model built, the
    optimizer, the data set's files). The elements that bring each swept value first
    (:func:`dlcomm.sweep.screening_order`: the leads) are composed and taken through every stage
    that reads no network before the others are composed: ``model=mlp,vgg16 seed=range(0,300)``
    refuses vgg16 in seconds; then every element's knobs are built as torch builds them, before
    any data is read or any note said. Only then, with every element composed, is the comparison's
    network chosen and set on each (:func:`dlcomm.sweep.with_network`), and each element's
    remaining stages run on the configuration it will run with."""
    from dlcomm.stages import Checking, advance, notes, rank_objects
    from dlcomm.sweep import comparison_clock, expand, screening_order, with_network

    elements = expand(overrides)
    order, first = screening_order(elements)
    runs: dict[int, Checking] = {}

    def each(positions: list[int], check) -> None:
        for position in positions:
            try:
                check(position)
            except UserError as error:
                raise UserError(f"sweep element [{' '.join(elements[position])}]: {error}") from None

    def composed(position: int) -> None:
        runs[position] = Checking(compose(elements[position]), data_here)

    leads, rest = order[:first], order[first:]
    for part in (leads, rest):  # the leads first: every swept value met, and refused, before the rest is composed
        each(part, composed)  # composed and range-checked (torch-free)
        each(part, lambda position: advance(runs[position], rank_objects))  # what torch refuses of the knobs
        if part is leads:  # what needs the data and the model, on the leads as written
            each(leads, lambda position: advance(runs[position], notes))
    added, shared = (
        comparison_clock(overrides, [runs[position].cfg for position in order]) if compare_here else ("", "")
    )
    if added:
        progress.say(
            f"sweep: {shared} here, so the wall clock times their turns, not a cluster's compute and "
            f"communication; every run also keeps the simulated clock of {added} (compute profiled from one "
            f"replica alone), on which the comparison's speedup is computed (network=off: the wall clock)"
        )
        overrides = [*overrides, added]
        elements = [[*element, added] for element in elements]  # what expand(overrides) gives: a key added last
        network = compose([added]).network  # the preset's section, as Hydra composes it (it reads no other key)
        each(order, lambda position: setattr(runs[position], "cfg", with_network(runs[position].cfg, network)))

    def rest_of_stages(position: int) -> None:
        _checking_stage(runs[position].cfg)
        advance(runs[position])

    each(order, rest_of_stages)
    return elements, [runs[position].cfg for position in range(len(elements))], list(overrides)


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
    from dlcomm.launch.registry import LAUNCHERS

    return LAUNCHERS.get(spec.cfg().launcher.name)
