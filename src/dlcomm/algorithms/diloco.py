"""DiLoCo: Local-SGD whose averaged change drives an outer optimizer (Douillard et al., "DiLoCo:
Distributed Low-Communication Training of Language Models", arXiv 2311.08105, Algorithm 1).

Every worker keeps ``theta`` (the global parameters, the same on every worker) and runs the
configured optimizer (``optim=...``, the paper's inner AdamW) on its own replica ``x_i``; after
iterations ``t`` with ``(t + 1) mod H == 0`` (``H = period``)::

    delta = (1/n) * sum_i (theta - x_i)       # the outer gradient: one allreduce (mean) per bucket
    v     = mu * v + delta                    # outer momentum (v starts at 0)
    theta = theta - lr_outer * (delta + mu * v)   # nesterov=true (torch.optim.SGD(nesterov=True))
    theta = theta - lr_outer * v                  # nesterov=false (heavy ball)
    x_i   = theta                             # every replica restarts from the global parameters

``delta`` points from the replicas towards the global parameters, so SGD's minus sign moves
``theta`` towards the replicas' average (the paper's rule; some published codes take ``x_i -
theta`` and descend on it, which moves away: docs/algorithms.md). Every worker applies the same
outer step to the same ``theta`` with the same averaged ``delta``, so the replicas stay equal
without sending ``theta``. With ``outer_lr=1`` and ``outer_momentum=0`` it is Local-SGD:
``theta - mean(theta - x_i) = mean(x_i)``.

The paper's values are ``outer_lr=0.7``, ``outer_momentum=0.9`` with Nesterov (the defaults here)
and ``H=500`` inner steps over runs of ~88k steps; dlcomm's default ``period=20`` suits its
runs of a few hundred steps (fashion_mnist's 2 default epochs on 4 workers are 468 steps: ~23
outer steps). Only parameters take part: the inner optimizer's state and buffers stay local,
as the paper's workers keep their own inner AdamW state. The parameters live in flat buckets
of ``bucket_mb`` (each parameter a view of its bucket, as ``local_sgd``); ``theta`` and ``v``
are flat copies beside them, kept in :meth:`state_dict` so that a resumed run continues exactly.
The outer loop (``theta``, ``v``, the averaging, the outer step) is :mod:`dlcomm.algorithms.outer`'s,
shared with ``streaming_diloco``.

With ``compress=<name>`` each bucket's outer gradient is averaged through the compressor (and its
error-feedback memory, kept in the checkpoint) instead of the plain allreduce, as ``allreduce``
averages gradients: ``delta = C-mean_i(theta - x_i)``. Streaming DiLoCo quantises outer gradients
to 4-bit floats this way (``compress=lowbit``, docs/compression.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from dlcomm.algorithms.base import Algorithm
from dlcomm.algorithms.buckets import BUCKET_MB, make_buckets
from dlcomm.algorithms.outer import OuterSGD
from dlcomm.algorithms.registry import register
from dlcomm.config.schema import AlgoConfig, doc, domain

if TYPE_CHECKING:
    import torch


@dataclass
class DiLoCoConfig(AlgoConfig):
    """``algo=diloco``, DiLoCo (Douillard et al. 2023, arXiv 2311.08105, Algorithm 1): ``period``
    inner steps of the configured optimizer (the paper's AdamW: optim=adamw), then the replicas' mean
    change theta - x_i drives an outer SGD with Nesterov momentum on the global parameters, which
    every replica restarts from."""

    name: str = "diloco"
    period: int = field(
        default=20,
        metadata=domain(
            low=1,
            means="H, the number of inner steps between outer steps,",
            doc="the paper's H is 500 (over ~88k steps); 20 fits dlcomm's runs of a few hundred steps",
        ),
    )
    outer_lr: float = field(
        default=0.7,
        metadata=domain(above=0, means="the outer SGD's learning rate", doc="the paper's 0.7"),
    )
    outer_momentum: float = field(
        default=0.9,
        metadata=domain(
            low=0,
            below=1,
            means="the outer SGD's momentum",
            doc="Nesterov's, the paper's 0.9; 0: plain outer SGD (nesterov then changes nothing; with outer_lr=1 it is Local-SGD)",
        ),
    )
    nesterov: bool = field(
        default=True, metadata=doc("Nesterov momentum on the outer step (the paper's); false: heavy ball")
    )
    bucket_mb: float = field(
        default=25.0, metadata=doc("the flat buffers of the outer gradient's allreduce", BUCKET_MB)
    )


@register
class DiLoCo(Algorithm[DiLoCoConfig]):
    display_name = "DiLoCo"
    Config = DiLoCoConfig
    point_to_point = False  # collectives only (launch/gpus.py: gloo carries them on CUDA)
    compression = ("tensor",)  # the outer gradient, averaged through the compressor (compress=<name>)

    @classmethod
    def plan_notes(cls, cfg: DiLoCoConfig, steps_per_epoch: int, total_steps: int) -> list[str]:
        left = total_steps % cfg.period
        if left == 0:
            return []
        return [
            f"the run's last {left} of {total_steps} iterations take no outer step ({total_steps} is not a multiple "
            f"of algo.period={cfg.period}): the replicas end apart, their communication share leaves that outer step "
            "out, and test_acc_mean is over the replicas as they are (test_acc_avg_model: their average)"
        ]

    def setup(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
        super().setup(model, optimizer)
        params = [p for p in model.parameters() if p.requires_grad]
        self.buckets = make_buckets(params, int(self.cfg.bucket_mb * 2**20))
        self.buffers = [bucket.bind_params() for bucket in self.buckets]
        self.outer = OuterSGD(self.cfg, self.buffers, self.buckets, self.channel, self.compressor)

    @property
    def theta(self) -> list[torch.Tensor]:
        return self.outer.theta

    def after_step(self, step: int) -> None:
        import torch

        if (step + 1) % self.cfg.period != 0:
            return
        with torch.no_grad():
            # each replica's outer gradient theta - x_i, in place of x_i (the buffer is restored below)
            deltas = [self.outer.gradient(index, out=buffer) for index, buffer in enumerate(self.buffers)]
            self.outer.average(range(len(deltas)), deltas, step).wait()
            for index, delta in enumerate(deltas):
                delta.copy_(self.outer.step(index, delta))  # x_i <- theta

    def state_dict(self) -> dict:
        return self.outer.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.outer.load_state_dict(state)
