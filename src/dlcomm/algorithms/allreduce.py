"""AllReduce-SGD ("Ring-SGD"): every replica steps with the mean gradient of all workers.

    g_t = (1/n) * sum_i g_i,t          x_{t+1} = optimizer(x_t, g_t)   on every worker

Gradients are fused into flat buckets (``bucket_mb``; 0 = one bucket per parameter tensor)
and each bucket is averaged with one ring allreduce over the ``world`` group. With
``overlap=true`` a bucket's allreduce is launched from a post-accumulate-grad hook as soon as
the last of its gradients is ready, so communication runs while backward continues (what
DDP and Horovod do); ``reduce_gradients`` then only waits. Replicas stay identical.
Reference: ``torch.nn.parallel.DistributedDataParallel`` (tests agree to 1e-5).

With ``compress=<name>`` each bucket is averaged through the compressor instead
(:mod:`dlcomm.compress`: ``g_t`` is then the compressor's estimate of the mean, e.g. PowerSGD's
``P Q^T`` as DDP's ``powerSGD_hook`` gives it); its compression is compute on the rank, its
payload what the network carries.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from dlcomm.algorithms.base import Algorithm
from dlcomm.algorithms.buckets import BUCKET_MB, Bucket, make_buckets
from dlcomm.algorithms.registry import register
from dlcomm.config.schema import AlgoConfig, doc

if TYPE_CHECKING:
    import torch

    from dlcomm.comm.channel import Handle
    from dlcomm.compress.base import Pending


@dataclass
class AllreduceConfig(AlgoConfig):
    """``algo=allreduce``, AllReduce-SGD: the mean gradient by ring allreduce every iteration
    (docs/algorithms.md, "allreduce")."""

    name: str = "allreduce"
    bucket_mb: float = field(
        default=25.0,
        metadata=doc("gradient buckets; 0 is layer-wise", BUCKET_MB),
    )
    overlap: bool = field(
        default=False, metadata=doc("true: launch each bucket's allreduce during backward, as DDP does")
    )


@register
class Allreduce(Algorithm[AllreduceConfig]):
    display_name = "AllReduce-SGD"
    Config = AllreduceConfig
    point_to_point = False  # collectives only (launch/gpus.py: gloo carries them on CUDA)
    compression = ("tensor",)

    def setup(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
        super().setup(model, optimizer)
        params = [p for p in model.parameters() if p.requires_grad]
        self.buckets: list[Bucket] = make_buckets(params, int(self.cfg.bucket_mb * 2**20))
        self._step = 0
        self._handles: list[Handle | Pending | None] = [None] * len(self.buckets)
        self._pending: list[int] = [len(b.params) for b in self.buckets]
        if self.cfg.overlap:
            bucket_of = {id(p): i for i, b in enumerate(self.buckets) for p in b.params}
            for p in params:
                p.register_post_accumulate_grad_hook(self._make_hook(bucket_of[id(p)]))

    def _make_hook(self, index: int):
        def on_grad_ready(_param: torch.Tensor) -> None:
            if self.accumulating:  # gradients of a micro-batch that is not the last: keep accumulating
                return
            self._pending[index] -= 1
            if self._pending[index] == 0:
                self._launch(index)

        return on_grad_ready

    def _launch(self, index: int) -> None:
        bucket = self.buckets[index]
        buffer = bucket.pack_grads()
        if self.compressor.identity:
            self._handles[index] = self.channel.allreduce(buffer, group="world", average=True, async_op=True)
        else:
            shapes = [p.shape for p in bucket.params]
            self._handles[index] = self.compressor.start(buffer, index, self._step, self.channel, "world", shapes)

    def before_step(self, step: int) -> None:
        self._step = step
        self._handles = [None] * len(self.buckets)
        if self.cfg.overlap:  # the hooks count the gradients still to come
            self._pending = [len(b.params) for b in self.buckets]

    def reduce_gradients(self, step: int) -> None:
        for index, handle in enumerate(self._handles):
            if handle is None:  # no overlap, or a bucket whose parameters got no gradient
                self._launch(index)
        for bucket, handle in zip(self.buckets, self._handles):
            assert handle is not None  # every bucket launched above
            handle.wait()
            bucket.unpack_grads()

    def state_dict(self) -> dict:
        return {} if self.compressor.identity else {"compressor": self.compressor.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        if "compressor" in state:
            self.compressor.load_state_dict(state["compressor"])
