"""What a rank builds from the knobs, built once before launch, so that what torch refuses is
refused here in one line and not by a rank after the run was recorded.

With the functions the rank calls (:mod:`dlcomm.launch.rank`): :func:`built_optimizer` (on a
stand-in weight and bias: ``lars`` splits 1-d tensors apart), :func:`check_precision` (the
precision object, on the CPU) and :func:`check_compressor`, before any data is read
(:func:`dlcomm.stages.rank_objects`); :func:`check_schedule`, the learning-rate schedule on that
optimizer over the run's planned steps, once the plan is known (:func:`dlcomm.stages.plan`). The
arguments torch (or timm) checks when they are built (``eps``, ``betas``, ``momentum`` with
``nesterov``, ``weight_decay``, ...) then fail here; the error becomes a
:class:`~dlcomm.errors.UserError` naming the knob, quoting torch's words and giving a valid value.
Values torch accepts but that make no sense (a non-positive ``gamma``, a warm-up longer than the
run, ...) are declared where the schema's ranges are (:mod:`dlcomm.config.schema`,
:func:`dlcomm.config.validate.validate_run`). No data, no model, no process: a few milliseconds.
"""

from __future__ import annotations

import dataclasses
import re
from typing import TYPE_CHECKING, Any, Optional

from dlcomm.config.schema import CompressConfig, OptimConfig, RunConfig, TrainConfig
from dlcomm.errors import UserError

if TYPE_CHECKING:
    import torch

REFUSALS = (ValueError, TypeError, RuntimeError, ArithmeticError)
"""What torch's argument checks raise (and what a schedule's arithmetic can)."""

# (knob, how torch's and timm's messages name it), most specific first: torch's refusal of
# nesterov names momentum and dampening too
_WORDS = (
    ("nesterov", r"nesterov"),
    ("betas", r"\bbetas?\b"),
    ("eps", r"\beps\b|epsilon"),
    ("weight_decay", r"weight[_ ]decay"),
    ("momentum", r"momentum"),
    ("trust_coefficient", r"trust"),
    ("min_lr", r"\bmin_lr\b"),
    ("lr", r"learning rate|\blr\b"),
    ("gamma", r"\bgamma\b"),
    ("milestones", r"milestone"),
)
# the valid values of each knob, as its refusal words them
_VALID = {
    "lr": "> 0",
    "eps": "> 0",
    "weight_decay": ">= 0",
    "momentum": "in [0, 1)",
    "betas": "with each value in [0, 1)",
    "trust_coefficient": "> 0",
    "gamma": "> 0",
    "min_lr": ">= 0",
    "milestones": "with each epoch >= 0",
}


def built_optimizer(optim: OptimConfig) -> "torch.optim.Optimizer":
    """The optimizer a rank builds from ``optim``, built on a stand-in weight and bias (``lars``
    splits 1-d tensors apart); a one-line ``UserError`` naming the knob when torch refuses it. The
    learning-rate schedule is built on it once the run's plan is known (:func:`check_schedule`)."""
    import torch

    from dlcomm.train.optim import build_optimizer

    weight, bias = torch.nn.Parameter(torch.zeros(1, 1)), torch.nn.Parameter(torch.zeros(1))
    try:
        return build_optimizer(optim, [{"params": [weight, bias]}])
    except REFUSALS as error:
        raise UserError(optimizer_refusal(optim, error)) from None


def check_schedule(cfg: RunConfig, optimizer: "torch.optim.Optimizer", plan: Optional[tuple[int, int]]) -> None:
    """The learning-rate schedule a rank builds, on ``optimizer`` (:func:`built_optimizer`), over
    ``plan``: ``(iterations per epoch, iterations of the run)`` when the data set's size is known
    (:func:`dlcomm.train.plan.check_plan`), else one iteration per epoch."""
    from dlcomm.train.optim import build_scheduler
    from dlcomm.train.plan import schedule_steps

    per_epoch, total = plan if plan is not None else (1, cfg.train.epochs)
    try:
        build_scheduler(cfg.optim, optimizer, max(1, per_epoch), max(1, schedule_steps(cfg.train, per_epoch, total)))
    except REFUSALS as error:
        raise UserError(
            _refusal("optim", cfg.optim, error, f"the learning-rate schedule optim.schedule={cfg.optim.schedule}")
        ) from None


def check_precision(train: TrainConfig) -> None:
    """The precision object a rank builds for ``train.amp``, on the CPU."""
    import torch

    from dlcomm.train.precision import Precision

    try:
        with Precision(train.amp, torch.device("cpu"), train.amp_dtype).autocast():
            pass
    except REFUSALS as error:
        raise UserError(
            f"train.amp_dtype={train.amp_dtype} is invalid with train.amp={str(train.amp).lower()}: torch "
            f"refuses it ({_words(error)}); pass train.amp_dtype=bf16 or train.amp=false"
        ) from None


def check_compressor(cfg: RunConfig) -> None:
    """The compressor a rank builds from ``compress.*``, built as a rank builds it."""
    from dlcomm.compress.registry import COMPRESSORS

    compressor = COMPRESSORS.get(cfg.compress.name)
    try:
        compressor(cfg.compress, cfg.seed)
    except REFUSALS as error:
        raise UserError(
            _refusal("compress", cfg.compress, error, f"{compressor.__module__}.{compressor.__name__}")
        ) from None


def check_model_knobs(cfg: RunConfig, model: "torch.nn.Module") -> None:
    """The knobs whose limits depend on the model, on ``model`` as the pre-launch check built it
    (:func:`dlcomm.models.check_model_fits`): the algorithm's (Streaming DiLoCo's fragments, one layer
    each at least) and the compressor's sizes (a block, a bucket, a rank), each bounded by what it can
    mean for this model before a rank allocates by it. One ``UserError`` line."""
    from dlcomm.algorithms.registry import ALGORITHMS
    from dlcomm.compress.registry import COMPRESSORS

    ALGORITHMS.get(cfg.algo.name).check_model(cfg.algo, model)
    COMPRESSORS.get(cfg.compress.name).check_model(cfg.compress, model)


def optimizer_refusal(optim: OptimConfig, error: BaseException) -> str:
    """The line for ``error``, raised while building the optimizer ``optim.name`` from ``optim``."""
    return _refusal("optim", optim, error, _refuser(error) or f"optim={optim.name}")


def _refusal(group: str, node: OptimConfig | CompressConfig, error: BaseException, refuser: str) -> str:
    from dlcomm.train.optim import SGDConfig

    words = _words(error)
    knob = _knob(node, words)
    if knob is None:
        return (
            f"{group}.* is invalid for {group}={node.name}: {refuser} refuses its settings ({words}); "
            f"see them with `dlcomm config --explain {group} {group}={node.name}`"
        )
    value = _shown(getattr(node, knob))
    if knob == "nesterov" and isinstance(node, SGDConfig):
        return (
            f"{group}.nesterov={value} is invalid with {group}.momentum={_shown(node.momentum)}: {refuser} refuses it "
            f"({words}); pass {group}.momentum > 0, e.g. 0.9, or {group}.nesterov=false"
        )
    rule = _VALID.get(knob)
    example = _default(node, knob)
    hint = f"pass {group}.{knob} {rule}" if rule else f"see {group}.{knob} with `dlcomm config --explain {group}`"
    if rule and example is not None:
        hint += f", e.g. {_shown(example)}"
    return f"{group}.{knob}={value} is invalid: {refuser} refuses it ({words}); {hint}"


def _words(error: BaseException) -> str:
    return " ".join(str(error).split()) or type(error).__name__


def _knob(node: OptimConfig | CompressConfig, words: str) -> Optional[str]:
    """The knob of ``node`` that torch's ``words`` name, if any: first the words torch uses for
    dlcomm's knobs, then any of the node's own keys."""
    names = [item.name for item in dataclasses.fields(node)] if dataclasses.is_dataclass(node) else []
    for knob, pattern in _WORDS:
        if knob in names and re.search(pattern, words, re.IGNORECASE):
            return knob
    return next((name for name in names if name != "name" and re.search(rf"\b{name}\b", words)), None)


def _default(node: OptimConfig | CompressConfig, knob: str) -> Any:
    """The schema's default of ``knob`` (the optimizer's own ``Config``)."""
    for item in dataclasses.fields(node) if dataclasses.is_dataclass(node) else []:
        if item.name == knob:
            if item.default is not dataclasses.MISSING:
                return item.default
            if item.default_factory is not dataclasses.MISSING:
                return item.default_factory()
    return None


def _shown(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (list, tuple)):
        return str(list(value))
    return str(value)


def _refuser(error: BaseException) -> Optional[str]:
    """``torch.optim.Adam``: the optimizer class whose constructor raised ``error`` (found on its
    traceback), under the name its package exports it by."""
    import importlib

    import torch

    found = None
    trace = error.__traceback__
    while trace is not None:
        candidate = trace.tb_frame.f_locals.get("self")
        if isinstance(candidate, torch.optim.Optimizer):
            found = type(candidate)
            break
        trace = trace.tb_next
    if found is None:
        return None
    package = ".".join(found.__module__.split(".")[:2])  # torch.optim, timm.optim
    try:
        exported = getattr(importlib.import_module(package), found.__name__, None) is found
    except ImportError:
        exported = False
    return f"{package if exported else found.__module__}.{found.__name__}"
