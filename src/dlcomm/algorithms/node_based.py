"""Node-based communication (paper ``node-based-communication.txt``, Algorithm 2 and eqs. 8-9).

Every iteration the gradients are averaged within the node only (``intra`` group), and every
worker steps with its node's gradient ``G_m = (1/R_m) sum_{r in m} g_r``: the replicas of one node
stay identical. Inter-node consensus: after every ``k_prime``-th iteration of an epoch and after
its last, parameters AND BatchNorm buffers are averaged over all workers (``world`` group) and
every replica takes the average (eq. 9), so replicas are identical at every consensus point.
Optimizer state is not averaged. The paper's pseudocode reads ``if i == K'`` but its text and
footnote say "every K' and at the final iteration": implemented as the text, so an epoch of
``K`` iterations has ``floor(K / K') + 1`` exchanges, or ``K / K'`` when ``K'`` divides ``K``
(the last multiple is the final iteration; the paper's footnote: once per epoch when ``K' = K``,
at most ``1 + floor(K / K')``). ``k_prime = -1``: once per epoch. A run that ``train.max_steps`` ends within an epoch averages
after its last step too (the cut epoch's final iteration).

With ``compress=<name>`` both levels go through the compressor (:mod:`dlcomm.compress`), each
bucket with its own memory: the node's gradient ``G_m = C-mean_{r in m}(g_r)``, and at a consensus
point the change since the last one, ``d_i = x_i - a`` (``a``: the parameters of the last consensus
point, the same on every worker), ``x_i <- a + C-mean_i(d_i)``, ``a <- x_i``, local_sgd's
(Qsparse-local-SGD's) rule: a compressor of the parameters themselves would average sparse or
quantised models. BatchNorm's buffers stay exact. With no loss both are the plain averages.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from dlcomm.algorithms.anchored import ChangeAverage
from dlcomm.algorithms.base import Algorithm
from dlcomm.algorithms.buckets import BUCKET_MB, Bucket, make_buckets
from dlcomm.algorithms.registry import register
from dlcomm.config.schema import AlgoConfig, doc, domain
from dlcomm.config.validate import require
from dlcomm.errors import UserError

if TYPE_CHECKING:
    import torch


@dataclass
class NodeBasedConfig(AlgoConfig):
    """``algo=node_based``, node-based communication: gradients averaged inside the node every step;
    parameters and BatchNorm buffers averaged over all workers every ``k_prime`` iterations and at
    each epoch's end (section 6)."""

    name: str = "node_based"
    k_prime: int = field(
        default=-1,
        metadata=domain(
            low=-1,
            means="K', the iterations between consensus points (-1: once per epoch),",
            doc="inter-node consensus, within an epoch",
        ),
    )
    bucket_mb: float = field(default=25.0, metadata=doc("gradient and parameter buckets", BUCKET_MB))


@register
class NodeBased(Algorithm[NodeBasedConfig]):
    display_name = "node-based averaging"
    Config = NodeBasedConfig
    point_to_point = False  # collectives only (launch/gpus.py: gloo carries them on CUDA)
    compression = ("tensor",)  # the node's gradient and the change since the last consensus point

    @classmethod
    def check_config(cls, cfg: NodeBasedConfig) -> None:
        # -1 or 1 and more: the declared domain is the widest range (-1 or more), so 0 is refused here
        require(
            cfg.k_prime == -1 or cfg.k_prime >= 1,
            "algo.k_prime",
            cfg.k_prime,
            "pass a positive number of iterations, or -1 for once per epoch",
        )

    @classmethod
    def check_plan(cls, cfg: NodeBasedConfig, steps_per_epoch: int, total_steps: int) -> None:
        if cfg.k_prime > steps_per_epoch:
            raise UserError(
                f"algo.k_prime={cfg.k_prime} is invalid: an epoch has {steps_per_epoch} iterations; "
                f"pass at most {steps_per_epoch}, or -1 for once per epoch"
            )

    def plan(self, steps_per_epoch: int, total_steps: int) -> None:
        super().plan(steps_per_epoch, total_steps)
        self.steps_per_epoch, self.total_steps = steps_per_epoch, total_steps

    def setup(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
        super().setup(model, optimizer)
        params = [p for p in model.parameters() if p.requires_grad]
        self.grad_buckets: list[Bucket] = make_buckets(params, int(self.cfg.bucket_mb * 2**20))
        self.param_buckets: list[Bucket] = make_buckets(params, int(self.cfg.bucket_mb * 2**20))
        self.param_buffers = [b.bind_params() for b in self.param_buckets]
        self.float_buffers = [b for b in model.buffers() if b.is_floating_point()]  # BatchNorm running stats
        # the consensus points' keys follow the gradient buckets': the two memories never mix
        self.changes = (
            None
            if self.compressor.identity
            else ChangeAverage(self.compressor, self.param_buffers, self.param_buckets, len(self.grad_buckets))
        )
        self.steps_per_epoch = getattr(self, "steps_per_epoch", 0)
        self.total_steps = getattr(self, "total_steps", 0)

    def reduce_gradients(self, step: int) -> None:
        if self.cluster.layout.workers_per_node == 1:
            return
        if self.compressor.identity:
            handles = [
                self.channel.allreduce(b.pack_grads(), group="intra", average=True, async_op=True)
                for b in self.grad_buckets
            ]
        else:  # keys 0..B-1: the gradient buckets (the consensus points' are B..)
            handles = [
                self.compressor.start(b.pack_grads(), index, step, self.channel, "intra", [p.shape for p in b.params])
                for index, b in enumerate(self.grad_buckets)
            ]
        for bucket, handle in zip(self.grad_buckets, handles):
            handle.wait()
            bucket.unpack_grads()

    def consensus_after(self, step: int) -> bool:
        """Is there a global exchange after ``step`` (counted over the run from 0)? Also after the
        run's last step when ``train.max_steps`` cuts an epoch short: that step is the cut epoch's
        final iteration, and the run ends with one model."""
        in_epoch = step % self.steps_per_epoch + 1 if self.steps_per_epoch else step + 1
        last = bool(self.steps_per_epoch) and in_epoch == self.steps_per_epoch
        run_ends = self.total_steps > 0 and step == self.total_steps - 1
        return last or run_ends or (self.cfg.k_prime > 0 and in_epoch % self.cfg.k_prime == 0)

    def after_step(self, step: int) -> None:
        import torch

        if self.cluster.layout.nodes == 1 or not self.consensus_after(step):
            return
        with torch.no_grad():
            exact = self.float_buffers if self.changes is not None else self.param_buffers + self.float_buffers
            handles = [self.channel.allreduce(t, group="world", average=True, async_op=True) for t in exact]
            if self.changes is not None:
                self.changes.average(self.channel, "world", step)
            for handle in handles:
                handle.wait()

    def state_dict(self) -> dict:
        return {} if self.changes is None else self.changes.state_dict()

    def load_state_dict(self, state: dict) -> None:
        if self.changes is not None:
            self.changes.load_state_dict(state)
