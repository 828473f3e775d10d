"""Optimizers and learning-rate schedules.

Where a maintained package has the optimizer it is used: ``sgd``, ``adam``, ``adamw`` from torch;
``muon`` from torch (``torch.optim.Muon`` on the hidden matrices, ``torch.optim.AdamW`` on
the rest, one optimizer: :mod:`dlcomm.train.muon`); ``adabelief`` (Zhuang et al., NeurIPS 2020: Adam whose second moment tracks ``(g - m)^2``, the
"belief" in the gradient, instead of ``g^2``) and ``lars`` from timm. ``angulargrad`` (Roy et al.,
2021) is in no maintained package and lives in :mod:`dlcomm.train.angulargrad`.

``lars`` is timm's ``Lars`` (SGD with momentum and a layer-wise trust ratio): for each adapted
tensor ``w`` with gradient ``g``, ``g <- (g + wd * w) * trust * ||w|| / (||g|| + wd * ||w|| + eps)``,
then the momentum step with ``lr``. With ``exclude_bias_and_norm`` (the Crossover paper's
setting) one-dimensional tensors (biases, normalisation scales) are neither adapted nor decayed.

Every optimizer is a registered :class:`Optimizer` subclass: its ``name`` (``optim=<name>``,
stored as Hydra's ``optim/<name>``), its ``Config`` (a dataclass subclassing
:class:`~dlcomm.config.schema.OptimConfig`; several names may share one), ``build(cfg,
param_groups)`` and, optionally, ``check(cfg)``: one-line :class:`~dlcomm.errors.UserError` for
its own knobs, called while composing. dlcomm's own are in this module; installed packages add
theirs through the ``dlcomm.optimizers`` entry points (:mod:`dlcomm.plugins`). Composing imports
this module to register the schemas and run the checks, so it (and a plugin's optimizer module)
loads without torch: ``build`` imports torch inside.

The schedule is a per-iteration multiplier ``f(t)`` of ``optim.lr`` (a ``LambdaLR``):

* warm-up over ``W = warmup_epochs * steps_per_epoch`` iterations: ``f(t) = (t + 1) / W``;
* ``constant``: ``f = 1``;
* ``cosine``: ``f = m + (1 - m) * (1 + cos(pi * p)) / 2`` with ``p = (t - W) / (T - W)`` the
  progress after warm-up over the ``T`` iterations of the run and ``m = min_lr / lr``;
* ``multistep``: ``f = gamma ** (number of milestones, in epochs, already reached)``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Generic, List, TypeVar

from dlcomm.config.schema import EPS, LR, WARMUP_EPOCHS, WEIGHT_DECAY, OptimConfig, Schedule, doc, domain
from dlcomm.errors import UserError
from dlcomm.registry import Registry, registry_of

if TYPE_CHECKING:
    import torch


C = TypeVar("C", bound=OptimConfig)  # the optimizer's own ``Config``: ``class SGD(Optimizer[SGDConfig])``


class Optimizer(Generic[C]):
    """An optimizer by name; see the module's docstring. Classmethods only: it holds no state."""

    name: ClassVar[str]
    Config: ClassVar[type] = OptimConfig

    @classmethod
    def check(cls, cfg: C) -> None:
        """Raise a one-line ``UserError`` for a knob of ``cfg`` out of range (default: none), while
        composing (:func:`dlcomm.compose.check_algorithm`)."""

    @classmethod
    def build(cls, cfg: C, groups: list[dict[str, Any]]) -> "torch.optim.Optimizer":
        """The optimizer over parameter ``groups`` (a group's own keys win over ``cfg``'s)."""
        raise NotImplementedError(f"optimizer {cls.name} lacks build()")


def _betas(betas: list[float]) -> tuple[float, float]:
    """``optim.betas`` as the pair torch takes (its domain declares length 2)."""
    first, second = betas
    return first, second


OPTIMIZERS: Registry[type[Optimizer]] = registry_of("optim")  # all in this module
register = OPTIMIZERS.register


@dataclass
class SGDConfig(OptimConfig):
    """sgd: SGD with momentum (torch); lr is the rate of the global (all-worker) mean gradient.
    Every optimizer's schedule: constant | cosine | multistep (dlcomm.train.optim)."""

    lr: float = field(default=0.05, metadata=LR)
    momentum: float = field(
        default=0.9, metadata=domain(below=1.0, doc="heavy-ball momentum (torch refuses < 0 itself)")
    )
    nesterov: bool = field(default=False, metadata=doc("true: Nesterov's momentum"))


@register
class SGD(Optimizer[SGDConfig]):
    name = "sgd"
    Config = SGDConfig

    @classmethod
    def build(cls, cfg: SGDConfig, groups: list[dict[str, Any]]) -> "torch.optim.Optimizer":
        import torch

        return torch.optim.SGD(
            groups, lr=cfg.lr, momentum=cfg.momentum, nesterov=cfg.nesterov, weight_decay=cfg.weight_decay
        )


@dataclass
class LarsConfig(SGDConfig):
    """lars (timm's Lars): SGD with momentum whose step per tensor is scaled by a trust ratio
    trust * ||w|| / (||g|| + wd * ||w||). Large mini-batch training (the Crossover paper:
    coefficient 0.0025, warm-up epochs, label smoothing 0.1, together with train.comm_interval)."""

    lr: float = field(default=1.0, metadata=LR)
    weight_decay: float = field(default=0.00005, metadata=WEIGHT_DECAY)
    schedule: Schedule = Schedule.cosine
    warmup_epochs: float = field(default=1.0, metadata=WARMUP_EPOCHS)
    trust_coefficient: float = field(
        default=0.001,
        metadata=domain(
            above=0.0,
            means="the trust coefficient",
            doc="layer-wise (the Crossover paper: 0.0025); timm's Lars does not check it",
        ),
    )
    exclude_bias_and_norm: bool = field(
        default=True, metadata=doc("1-d tensors (biases, norm scales) neither adapted nor decayed")
    )
    eps: float = field(default=1e-8, metadata=domain(low=0.0, doc="added to the trust ratio's denominator"))


@register
class Lars(Optimizer[LarsConfig]):
    name = "lars"
    Config = LarsConfig

    @classmethod
    def build(cls, cfg: LarsConfig, groups: list[dict[str, Any]]) -> "torch.optim.Optimizer":
        from timm.optim import Lars

        split = []
        for group in groups:
            adapted = [p for p in group["params"] if not (cfg.exclude_bias_and_norm and p.ndim <= 1)]
            excluded = [p for p in group["params"] if cfg.exclude_bias_and_norm and p.ndim <= 1]
            split.append({**group, "params": adapted, "always_adapt": True})
            if excluded:
                split.append({**group, "params": excluded, "weight_decay": 0.0, "always_adapt": False})
        return Lars(
            split,
            lr=cfg.lr,
            momentum=cfg.momentum,
            nesterov=cfg.nesterov,
            weight_decay=cfg.weight_decay,
            trust_coeff=cfg.trust_coefficient,
            eps=cfg.eps,
        )


@dataclass
class AdamConfig(OptimConfig):
    """adam, adamw (torch); adamw.yaml sets AdamW's weight decay (decoupled)."""

    lr: float = field(default=0.001, metadata=LR)
    betas: List[float] = field(
        default_factory=lambda: [0.9, 0.999],
        metadata=domain(low=0.0, below=1.0, length=2, doc="the moments' decay rates"),
    )
    eps: float = field(default=1e-8, metadata=EPS)


@register
class Adam(Optimizer[AdamConfig]):
    name = "adam"
    Config = AdamConfig

    @classmethod
    def build(cls, cfg: AdamConfig, groups: list[dict[str, Any]]) -> "torch.optim.Optimizer":
        import torch

        return torch.optim.Adam(groups, lr=cfg.lr, betas=_betas(cfg.betas), eps=cfg.eps, weight_decay=cfg.weight_decay)


@register
class AdamW(Optimizer[AdamConfig]):
    name = "adamw"
    Config = AdamConfig

    @classmethod
    def build(cls, cfg: AdamConfig, groups: list[dict[str, Any]]) -> "torch.optim.Optimizer":
        import torch

        return torch.optim.AdamW(groups, lr=cfg.lr, betas=_betas(cfg.betas), eps=cfg.eps, weight_decay=cfg.weight_decay)


@dataclass
class AdaBeliefConfig(AdamConfig):
    """adabelief (Zhuang et al., NeurIPS 2020; timm.optim.AdaBelief): Adam whose second moment is the
    EMA of (g - m)^2. Defaults: the AdaBelief authors' CIFAR settings (eps 1e-8, L2 weight decay,
    no rectification); for ImageNet they use decoupled_weight_decay=true weight_decay=1e-2."""

    weight_decay: float = field(
        default=0.0005,
        metadata=domain(
            low=0.0,
            doc="L2 weight decay (decoupled with decoupled_weight_decay=true); timm's AdaBelief does not check it",
        ),
    )
    decoupled_weight_decay: bool = field(
        default=False, metadata=doc("AdamW-style decay (x <- x - lr * wd * x) instead of L2 in the gradient")
    )
    rectify: bool = field(default=False, metadata=doc("RAdam's variance rectification"))


@register
class AdaBelief(Optimizer[AdaBeliefConfig]):
    name = "adabelief"
    Config = AdaBeliefConfig

    @classmethod
    def build(cls, cfg: AdaBeliefConfig, groups: list[dict[str, Any]]) -> "torch.optim.Optimizer":
        from timm.optim import AdaBelief

        return AdaBelief(
            groups,
            lr=cfg.lr,
            betas=_betas(cfg.betas),
            eps=cfg.eps,
            weight_decay=cfg.weight_decay,
            decoupled_decay=cfg.decoupled_weight_decay,
            rectify=cfg.rectify,
            degenerated_to_sgd=False,
        )


@dataclass
class AngularGradConfig(AdamConfig):
    """angulargrad (Roy et al., 2021, arXiv:2105.10190; dlcomm.train.angulargrad): Adam whose first
    moment is scaled per element by 0.5 tanh(|cos A_min|) + 0.5, A_min the smallest angle so far
    between consecutive gradients. Defaults: the authors' (lr 1e-3, Adam's betas and eps)."""

    method: str = field(
        default="cos",
        metadata=domain(one_of=("cos", "tan"), means="angulargrad's coefficient", doc="its function: cos | tan"),
    )


@register
class AngularGrad(Optimizer[AngularGradConfig]):
    name = "angulargrad"
    Config = AngularGradConfig

    @classmethod
    def check(cls, cfg: AngularGradConfig) -> None:
        if cfg.method not in ("cos", "tan"):
            raise UserError(f"optim.method={cfg.method} is invalid: angulargrad's coefficient: use cos or tan")

    @classmethod
    def build(cls, cfg: AngularGradConfig, groups: list[dict[str, Any]]) -> "torch.optim.Optimizer":
        from dlcomm.train.angulargrad import AngularGrad

        return AngularGrad(
            groups, lr=cfg.lr, betas=_betas(cfg.betas), eps=cfg.eps, weight_decay=cfg.weight_decay, method=cfg.method
        )


@dataclass
class MuonConfig(OptimConfig):
    """muon (torch.optim.Muon with torch.optim.AdamW, dlcomm.train.muon): Muon (momentum, then
    Newton-Schulz orthogonalisation) on the hidden 2-D weight matrices, AdamW on the rest (biases,
    norms, convolution filters, the first and last weight: the input layer and the output head).
    Defaults: the MuLoCo reference's inner optimizer (facebookresearch/MuLoCo,
    torchtitan/config/diloco/2x_4gpu_muloco.py): lr 0.044, momentum 0.9 without Nesterov, the
    spectral-norm lr scaling, weight decay 0.00125, AdamW betas (0.9, 0.99); the AdamW part's lr is
    dlcomm's DiLoCo AdamW lr 1e-3 (the reference's 0.044 diverged at this scale)."""

    lr: float = field(default=0.044, metadata=doc("Muon's learning rate, before adjust_lr_fn's scaling", LR))
    weight_decay: float = field(default=0.00125, metadata=doc("Muon's decoupled weight decay", WEIGHT_DECAY))
    momentum: float = field(
        default=0.9,
        metadata=domain(
            below=1.0,
            doc="Muon's (0 or more: Muon.check); torch keeps an EMA of the gradients, the reference a sum: "
            "a factor Newton-Schulz removes",
        ),
    )
    nesterov: bool = field(
        default=False, metadata=doc("Nesterov momentum in Muon (the MuLoCo reference: false; torch's default: true)")
    )
    ns_steps: int = field(
        default=5,
        metadata=domain(low=1, below=100, means="the Newton-Schulz iterations", doc="torch refuses 100 or more"),
    )
    adjust_lr_fn: str = field(
        default="spectral_unclamped",
        metadata=domain(
            one_of=("original", "match_rms_adamw", "spectral_unclamped"),
            means="Muon's learning-rate scaling",
            doc="for a matrix of shape (A, B) = (fan_out, fan_in): original sqrt(max(1, A/B)) (Keller Jordan's), "
            "match_rms_adamw 0.2 sqrt(max(A, B)) (Moonshot's), spectral_unclamped sqrt(A/B) (the MuLoCo "
            "reference's spectral_norm)",
        ),
    )
    io_layers: bool = field(
        default=False,
        metadata=doc("true: the first and last weight matrices (the input layer, the head) on Muon too"),
    )
    adamw_lr: float = field(
        default=0.001,
        metadata=domain(
            above=0.0,
            means="the AdamW part's learning rate",
            doc="the reference runs AdamW at Muon's lr after a 500-step warm-up on a 180M model; here that "
            "diverged (docs/algorithms.md, muloco): 1e-3, DiLoCo's inner AdamW lr in dlcomm",
        ),
    )
    adamw_betas: List[float] = field(
        default_factory=lambda: [0.9, 0.99],
        metadata=domain(low=0.0, below=1.0, length=2, doc="the AdamW part's moments' decay rates"),
    )
    adamw_eps: float = field(default=1e-8, metadata=doc("the AdamW part's", EPS))
    adamw_weight_decay: float = field(default=0.00125, metadata=doc("the AdamW part's, decoupled", WEIGHT_DECAY))


@register
class Muon(Optimizer[MuonConfig]):
    name = "muon"
    Config = MuonConfig

    @classmethod
    def check(cls, cfg: MuonConfig) -> None:
        # torch.optim.Muon refuses a negative momentum only when built over a hidden matrix, which the
        # pre-launch stand-in model may not have: refused here, before anything is recorded
        if cfg.momentum < 0:
            raise UserError(f"optim.momentum={cfg.momentum} is invalid: Muon's momentum must be 0 or more, e.g. 0.9")

    @classmethod
    def build(cls, cfg: MuonConfig, groups: list[dict[str, Any]]) -> "torch.optim.Optimizer":
        from dlcomm.train.muon import MuonWithAdamW, split_for_muon

        muon_groups, adamw_groups = [], []
        for group in groups:
            matrices, others = split_for_muon(group["params"], cfg.io_layers)
            muon_groups.append({**group, "params": matrices})
            adamw_groups.append({**group, "params": others})
        muon = {
            "lr": cfg.lr,
            "weight_decay": cfg.weight_decay,
            "momentum": cfg.momentum,
            "nesterov": cfg.nesterov,
            "ns_steps": cfg.ns_steps,
            "adjust_lr_fn": cfg.adjust_lr_fn,
        }
        adamw = {
            "lr": cfg.adamw_lr,
            "betas": _betas(cfg.adamw_betas),
            "eps": cfg.adamw_eps,
            "weight_decay": cfg.adamw_weight_decay,
        }
        return MuonWithAdamW(muon_groups, adamw_groups, muon, adamw)


def check_optimizer(cfg: OptimConfig) -> None:
    """The optimizer's own checks of the composed ``optim`` node (:meth:`Optimizer.check`)."""
    OPTIMIZERS.get(cfg.name).check(cfg)


def build_optimizer(cfg: OptimConfig, groups: list[dict[str, Any]]) -> "torch.optim.Optimizer":
    """The optimizer ``cfg.name`` over parameter ``groups`` (``[{"params": [...], ...}]``, as a
    task gives them; a group's own keys, e.g. its ``lr``, win over ``cfg``'s)."""
    return OPTIMIZERS.get(cfg.name).build(cfg, groups)


def lr_factor(cfg: OptimConfig, step: int, steps_per_epoch: int, total_steps: int) -> float:
    """The multiplier ``f(step)`` of the module docstring."""
    warmup = int(round(cfg.warmup_epochs * steps_per_epoch))
    if step < warmup:
        return (step + 1) / warmup
    if cfg.schedule == "cosine":
        span = max(1, total_steps - warmup)
        progress = min(1.0, (step - warmup) / span)
        floor = cfg.min_lr / cfg.lr
        return floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * progress))
    if cfg.schedule == "multistep":
        epoch = step / steps_per_epoch
        return cfg.gamma ** sum(1 for milestone in cfg.milestones if epoch >= milestone)
    return 1.0


def schedule_is_constant(cfg: OptimConfig, steps_per_epoch: int) -> bool:
    """Whether ``f(step) = 1`` at every step: ``schedule=constant`` and no warm-up step."""
    return cfg.schedule == "constant" and int(round(cfg.warmup_epochs * steps_per_epoch)) == 0


class ConstantSchedule:
    """The schedule ``f(step) = 1``: its step changes nothing. torch's ``LambdaLR`` would set every
    learning rate to itself each step and wrap ``optimizer.step`` in a Python function of its own,
    host time a plain loop does not spend (scripts/bench_step_overhead.py)."""

    def __init__(self, optimizer: "torch.optim.Optimizer") -> None:
        self.optimizer = optimizer

    def step(self) -> None:
        pass

    def get_last_lr(self) -> list[float]:
        return [group["lr"] for group in self.optimizer.param_groups]

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Nothing to restore (a checkpoint of a LambdaLR of the constant schedule holds nothing this needs)."""


def build_scheduler(
    cfg: OptimConfig, optimizer: "torch.optim.Optimizer", steps_per_epoch: int, total_steps: int
) -> "torch.optim.lr_scheduler.LambdaLR | ConstantSchedule":
    """The schedule ``f`` of the module docstring over ``optimizer``'s learning rates."""
    import torch

    if schedule_is_constant(cfg, steps_per_epoch):
        return ConstantSchedule(optimizer)
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: lr_factor(cfg, step, steps_per_epoch, total_steps))
