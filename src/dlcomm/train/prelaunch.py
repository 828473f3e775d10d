"""What a rank builds from the knobs, built once before launch, so that what torch refuses is
refused here in one line and not by a rank after the run was recorded.

:func:`check_rank_objects` builds, with the functions the rank calls
(:mod:`dlcomm.launch.rank`), the optimizer (on a stand-in weight and bias: ``lars`` splits
1-d tensors apart), the learning-rate schedule over the run's planned steps, the precision
object (on the CPU) and the compressor. The arguments torch (or timm) checks when they are
built (``eps``, ``betas``, ``momentum`` with ``nesterov``, ``weight_decay``, ...) then fail here; the
error becomes a :class:`~dlcomm.errors.UserError` naming the knob, quoting torch's words and
giving a valid value. Values torch accepts but that make no sense (a non-positive ``gamma``,
a warm-up longer than the run, ...) are declared where the schema's ranges are
(:mod:`dlcomm.config.schema`, :func:`dlcomm.config.validate.validate_run`). No data, no model,
no process: a few milliseconds.
"""

from __future__ import annotations

import dataclasses
import re
from typing import TYPE_CHECKING, Any, Optional, Sequence

from dlcomm.config.schema import CompressConfig, OptimConfig, RunConfig
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


def check_rank_objects(cfg: RunConfig, plan: Optional[tuple[int, int]] = None) -> None:
    """Build what a rank builds from ``cfg``'s knobs on stand-ins; a one-line ``UserError`` for
    the first one torch refuses. ``plan``: ``(iterations per epoch, iterations of the run)``
    when the data set's size is known (:func:`dlcomm.train.plan.check_plan`), else one
    iteration per epoch."""
    from dlcomm.checked import once

    # in a sweep, once per distinct value of what each part reads (dlcomm.checked)
    once("optimizer", (cfg.optim, cfg.train, plan), lambda: _check_optimizer(cfg, plan))
    once("compressor", (cfg.compress, cfg.seed), lambda: _check_compressor(cfg))


def _check_optimizer(cfg: RunConfig, plan: Optional[tuple[int, int]]) -> None:
    """The optimizer, its schedule and the precision object of :func:`check_rank_objects`."""
    import torch

    from dlcomm.train.optim import build_optimizer, build_scheduler
    from dlcomm.train.plan import schedule_steps
    from dlcomm.train.precision import Precision

    weight, bias = torch.nn.Parameter(torch.zeros(1, 1)), torch.nn.Parameter(torch.zeros(1))
    try:
        optimizer = build_optimizer(cfg.optim, [{"params": [weight, bias]}])
    except REFUSALS as error:
        raise UserError(optimizer_refusal(cfg.optim, error)) from None
    per_epoch, total = plan if plan is not None else (1, cfg.train.epochs)
    try:
        build_scheduler(cfg.optim, optimizer, max(1, per_epoch), max(1, schedule_steps(cfg.train, per_epoch, total)))
    except REFUSALS as error:
        raise UserError(
            _refusal("optim", cfg.optim, error, f"the learning-rate schedule optim.schedule={cfg.optim.schedule}")
        ) from None
    try:
        with Precision(cfg.train.amp, torch.device("cpu"), cfg.train.amp_dtype).autocast():
            pass
    except REFUSALS as error:
        raise UserError(
            f"train.amp_dtype={cfg.train.amp_dtype} is invalid with train.amp={str(cfg.train.amp).lower()}: torch "
            f"refuses it ({_words(error)}); pass train.amp_dtype=bf16 or train.amp=false"
        ) from None


def _check_compressor(cfg: RunConfig) -> None:
    """The compressor of :func:`check_rank_objects`, built as a rank builds it."""
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
    from dlcomm.algorithms.registry import get_algorithm
    from dlcomm.compress.registry import COMPRESSORS

    get_algorithm(cfg.algo.name).check_model(cfg.algo, model)
    COMPRESSORS.get(cfg.compress.name).check_model(cfg.compress, model)


def suspects_first(configs: Sequence[RunConfig]) -> list[int]:
    """Indices of ``configs`` in the order a sweep checks them with :func:`check_rank_objects`: first
    those whose optimizer, built over no parameter, raises before torch's own "optimizer got an empty
    parameter list" (its argument checks come first), then the rest. The first construction that gets
    past the arguments loads ``torch._dynamo`` (about 1 s here: ``Optimizer.add_param_group``), so a
    refused element is refused without waiting for it. Only the order changes: every element is
    still built in full."""
    from dlcomm.train.optim import build_optimizer

    def suspect(cfg: RunConfig) -> bool:
        try:
            build_optimizer(cfg.optim, [])
        except REFUSALS as error:
            return "empty parameter list" not in str(error)
        except Exception:  # noqa: BLE001 - a plugin's optimizer that needs parameters: its full build tells
            return False
        return False

    flagged = [suspect(cfg) for cfg in configs]
    return [i for i, bad in enumerate(flagged) if bad] + [i for i, bad in enumerate(flagged) if not bad]


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
