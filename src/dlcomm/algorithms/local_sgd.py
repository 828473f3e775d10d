"""Local-SGD: local steps, and every ``period`` (H) steps all workers average their parameters.

    x_i <- x_i - eta * g_i                                   every step, on every worker
    x_i <- (1/n) * sum_j x_j     after steps t with (t + 1) mod H == 0

Only parameters are averaged (optimizer state and buffers stay local), as torch's
``PeriodicModelAverager`` does; tests agree with it (with ``warmup_steps = H - 1``, which
makes its averaging fall after the same steps). The parameters live in flat buckets of
``bucket_mb`` (each parameter a view of its bucket), so averaging is one in-place ring
allreduce per bucket over the ``world`` group, with no copies.

With ``compress=<name>`` what is averaged is each worker's change since the last averaging,
``d_i = x_i - a`` (``a``: the averaged parameters, the same on every worker), through the
compressor with its memory, and ``x_i <- a + C-mean_i(d_i)``, ``a <- x_i``: compressing the
parameters themselves would average sparse or quantised models; compressing the local update
with error feedback is Qsparse-local-SGD's rule (Basu et al., NeurIPS 2019, Alg. 1). With no
loss it is the plain average (``a + mean(x_i - a) = mean(x_i)``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from dlcomm.algorithms.anchored import ChangeAverage
from dlcomm.algorithms.base import Algorithm
from dlcomm.algorithms.buckets import BUCKET_MB, make_buckets
from dlcomm.algorithms.registry import register
from dlcomm.config.schema import AlgoConfig, doc, domain

if TYPE_CHECKING:
    import torch


@dataclass
class LocalSGDConfig(AlgoConfig):
    """``algo=local_sgd``, Local-SGD: local steps; the parameters averaged over all workers every
    ``period`` steps (section 2)."""

    name: str = "local_sgd"
    period: int = field(
        default=2,
        metadata=domain(low=1, means="H, the number of local steps between averagings,", doc="the SESGD paper uses 2"),
    )
    bucket_mb: float = field(default=25.0, metadata=doc("the flat buffers of the averaging allreduce", BUCKET_MB))


@register
class LocalSGD(Algorithm[LocalSGDConfig]):
    display_name = "Local-SGD"
    Config = LocalSGDConfig
    point_to_point = False  # collectives only (launch/gpus.py: gloo carries them on CUDA)
    compression = ("tensor",)  # the change since the last averaging

    @classmethod
    def plan_notes(cls, cfg: LocalSGDConfig, steps_per_epoch: int, total_steps: int) -> list[str]:
        left = total_steps % cfg.period
        if left == 0:
            return []
        return [
            f"the run's last {left} of {total_steps} iterations are not averaged ({total_steps} is not a multiple of "
            f"algo.period={cfg.period}): the replicas end apart, their communication share leaves that averaging out, "
            "and test_acc_mean is over the replicas as they are (test_acc_avg_model: their average)"
        ]

    def setup(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
        super().setup(model, optimizer)
        params = [p for p in model.parameters() if p.requires_grad]
        self.buckets = make_buckets(params, int(self.cfg.bucket_mb * 2**20))
        self.buffers = [bucket.bind_params() for bucket in self.buckets]
        self.changes = None if self.compressor.identity else ChangeAverage(self.compressor, self.buffers, self.buckets)

    def after_step(self, step: int) -> None:
        if (step + 1) % self.cfg.period != 0:
            return
        if self.changes is not None:
            self.changes.average(self.channel, "world", step)
            return
        handles = [self.channel.allreduce(buffer, average=True, async_op=True) for buffer in self.buffers]
        for handle in handles:
            handle.wait()

    def state_dict(self) -> dict:
        return {} if self.changes is None else self.changes.state_dict()

    def load_state_dict(self, state: dict) -> None:
        if self.changes is not None:
            self.changes.load_state_dict(state)
