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

``overlap`` lets the outer gradient's averaging run during the next period's inner steps (the
whole model, as Streaming DiLoCo's ``overlap_steps`` does for a fragment). At the end of period
``k`` (``k = 1, 2, ...``; ``D_{k-1}`` the average sent at the end of period ``k - 1``, none at
``k = 1``), on every worker::

    delayed (prime's delayed_update, as PCCL's async_diloco.py example writes it; INTELLECT-1):
        g_i   = theta - x_i                     # against theta before this boundary's outer step
        theta = OuterSGD(theta, D_{k-1})        # only when D_{k-1} exists (waited for here)
        x_i   = theta                           # at k = 1: the unchanged theta
        start averaging g_i                     # D_k, applied at the end of period k + 1
    eager (Kale, Douillard, Donchev 2025, arXiv 2502.12996, "eager updates"):
        g_i   = theta_i - x_i
        e_i   = D_{k-1} + (g_i - g_i^{k-1}) / n  # the others' delayed mean, this worker's fresh one
        e_i   = g_i / n                          # at k = 1
        theta_i = OuterSGD(theta_i, e_i); x_i = theta_i
        start averaging g_i

With ``eager`` every worker keeps its own ``theta_i`` and outer momentum (they differ by the fresh
local terms). The average in flight (and, for ``eager``, the local ``g_i`` it replaces) is in the
checkpoint; one still in flight after the last iteration is applied by :meth:`DiLoCo.finish`.
The references ran these rules with other outer settings than DiLoCo's: plain outer SGD (prime,
PCCL: ``outer_momentum=0``, lr 0.7 or 1), Nesterov at lr 0.4 (the eager paper); a one-period-late
Nesterov 0.9 / lr 0.7 step can overshoot and diverge (it does on ``experiment=wan_compare``).
docs/algorithms.md has the references read and the choices made.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar

from dlcomm.algorithms.base import Algorithm
from dlcomm.algorithms.buckets import BUCKET_MB, make_buckets
from dlcomm.algorithms.outer import Averaging, OuterSGD
from dlcomm.algorithms.registry import register
from dlcomm.config.schema import AlgoConfig, doc, domain

if TYPE_CHECKING:
    import torch


@dataclass
class OuterLoopConfig(AlgoConfig):
    """The knobs of the outer loop DiLoCo and Streaming DiLoCo share (:mod:`dlcomm.algorithms.outer`)."""

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


@dataclass
class DiLoCoConfig(OuterLoopConfig):
    """``algo=diloco``, DiLoCo (Douillard et al. 2023, arXiv 2311.08105, Algorithm 1): ``period``
    inner steps of the configured optimizer (the paper's AdamW: optim=adamw), then the replicas' mean
    change theta - x_i drives an outer SGD with Nesterov momentum on the global parameters, which
    every replica restarts from. overlap=delayed|eager lets that average travel during the next
    period's inner steps (prime's one-step-delayed outer step; eager updates, arXiv 2502.12996)."""

    name: str = "diloco"
    overlap: str = field(
        default="none",
        metadata=domain(
            one_of=("none", "delayed", "eager"),
            means="how the outer step overlaps the averaging",
            doc="none: the outer step waits for the average (the paper's); delayed: the average of period k "
            "is applied at the end of period k + 1 (prime / INTELLECT-1; its references run plain outer SGD: "
            "outer_momentum=0); eager: applied then too, with this worker's fresh outer gradient standing in "
            "for its own share meanwhile (arXiv 2502.12996, with Nesterov at outer_lr=0.4); both can diverge "
            "at DiLoCo's 0.9 / 0.7",
        ),
    )


@register
class DiLoCo(Algorithm[DiLoCoConfig]):
    display_name = "DiLoCo"
    Config = DiLoCoConfig
    point_to_point = False  # collectives only (launch/gpus.py: gloo carries them on CUDA)
    compression: ClassVar[tuple[str, ...]] = (
        "tensor",
    )  # the outer gradient, averaged through the compressor (compress=<name>)

    @classmethod
    def plan_notes(cls, cfg: DiLoCoConfig, steps_per_epoch: int, total_steps: int) -> list[str]:
        notes = []
        left = total_steps % cfg.period
        if cfg.overlap != "none" and total_steps >= cfg.period:
            dropped = (
                f" (the last {left} iterations' inner steps, after the last boundary, are dropped)" if left else ""
            )
            notes.append(
                f"algo.overlap={cfg.overlap}: the average of the last period's outer gradients is still in flight "
                "after the last iteration; it is applied then, before the final evaluation, and the replicas "
                f"restart from the outer parameters{dropped}"
            )
        elif left:
            notes.append(
                f"the run's last {left} of {total_steps} iterations take no outer step ({total_steps} is not a "
                f"multiple of algo.period={cfg.period}): the replicas end apart, their communication share leaves "
                "that outer step out, and test_acc_mean is over the replicas as they are (test_acc_avg_model: "
                "their average)"
            )
        return notes

    def setup(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
        super().setup(model, optimizer)
        params = [p for p in model.parameters() if p.requires_grad]
        self.buckets = make_buckets(params, int(self.cfg.bucket_mb * 2**20))
        self.buffers = [bucket.bind_params() for bucket in self.buckets]
        self.outer = OuterSGD(self.cfg, self.buffers, self.buckets, self.channel, self.compressor)
        self.in_flight: Averaging | None = None  # overlap != none: the average of the last period's outer gradients
        self.sent: list[torch.Tensor] = []  # overlap=eager: this worker's outer gradients in that average

    @property
    def theta(self) -> list[torch.Tensor]:
        return self.outer.theta

    def after_step(self, step: int) -> None:
        import torch

        if (step + 1) % self.cfg.period != 0:
            return
        with torch.no_grad():
            if self.cfg.overlap != "none":
                self._overlapped(step)
                return
            # each replica's outer gradient theta - x_i, in place of x_i (the buffer is restored below)
            deltas = [self.outer.gradient(index, out=buffer) for index, buffer in enumerate(self.buffers)]
            self.outer.average(range(len(deltas)), deltas, step).wait()
            for index, delta in enumerate(deltas):
                delta.copy_(self.outer.step(index, delta))  # x_i <- theta

    def _overlapped(self, step: int) -> None:
        """The end of a period under ``overlap=delayed|eager`` (the module docstring)."""
        fresh = [self.outer.gradient(index) for index in range(len(self.buffers))]  # against theta before the step
        arrived = self.in_flight.wait() if self.in_flight is not None else None
        for index, (buffer, local) in enumerate(zip(self.buffers, fresh)):
            if self.cfg.overlap == "eager":
                share = local / self.cluster.world_size
                if arrived is not None:
                    share = arrived[index] + share - self.sent[index] / self.cluster.world_size
                buffer.copy_(self.outer.step(index, share))
            elif arrived is not None:
                buffer.copy_(self.outer.step(index, arrived[index]))
            else:
                buffer.copy_(self.outer.theta[index])  # the first period: back to the unchanged theta
        if self.cfg.overlap == "eager":
            self.sent = [local.clone() for local in fresh]  # averaged in place below
        self.in_flight = self.outer.average(range(len(fresh)), fresh, step)

    def finish(self) -> None:
        """An average still in flight after the last iteration is applied now, as the end of a
        period would (its outer step, the replicas restarted from it: under ``eager`` without a
        fresh local share), so that every outer gradient sent reaches the model evaluated at the end."""
        import torch

        if self.in_flight is None:
            return
        arrived, self.in_flight = self.in_flight.wait(), None
        with torch.no_grad():
            for index, buffer in enumerate(self.buffers):
                share = arrived[index]
                if self.cfg.overlap == "eager":
                    share = share - self.sent[index] / self.cluster.world_size
                buffer.copy_(self.outer.step(index, share))

    def state_dict(self) -> dict:
        state = self.outer.state_dict()
        if self.in_flight is not None:  # waited for here: the resumed run applies the same average when due
            state["in_flight"] = {"delta": [d.clone() for d in self.in_flight.wait()]}
            if self.cfg.overlap == "eager":
                state["in_flight"]["sent"] = [s.clone() for s in self.sent]
        return state

    def load_state_dict(self, state: dict) -> None:
        """The outer state, and an average in flight checked against this run's buckets before any
        of it is used (:mod:`dlcomm.saved`)."""
        from dlcomm.saved import copy_into, entry

        in_flight, sent = None, []
        if "in_flight" in state:
            saved = entry(state, "in_flight", "the algorithm's state")
            in_flight = [buffer.new_empty(buffer.shape) for buffer in self.buffers]
            copy_into(in_flight, entry(saved, "delta", "the average in flight"), "the outer gradient in flight")
            if self.cfg.overlap == "eager":
                sent = [buffer.new_empty(buffer.shape) for buffer in self.buffers]
                copy_into(sent, entry(saved, "sent", "the average in flight"), "this worker's outer gradient sent")
        self.outer.load_state_dict(state)
        self.in_flight = None if in_flight is None else Averaging(in_flight, [])
        self.sent = sent
