"""Hierarchical AllReduce (the Horovod-style baseline of the group schemes): the mean gradient of
all workers, computed in three stages over fast and slow links:

    1. reduce (sum) inside each node to its leader          ``intra`` group
    2. allreduce (sum) among the node leaders, divide by n   ``leaders`` group
    3. broadcast inside each node from its leader            ``intra`` group

Every worker then steps with ``(1/n) sum_i g_i``, as ``allreduce`` (tests agree to 1e-5); only
``nodes`` ranks cross the inter-node network. Gradients are fused into buckets of ``bucket_mb``.

With ``compress=<name>`` the slow stage is compressed: the leaders average their node sums
``s_k`` through the compressor (:mod:`dlcomm.compress`), ``g = C-mean_k(s_k) / workers_per_node``
(the same ``(1/n) sum_i g_i`` when nothing is lost); the node stages stay exact.
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


@dataclass
class AllreduceHierConfig(AlgoConfig):
    """``algo=allreduce_hier``, hierarchical AllReduce (Horovod-style): reduce inside the node,
    allreduce among the node leaders, broadcast inside the node. Equal to allreduce; only the
    leaders cross the inter-node network."""

    name: str = "allreduce_hier"
    bucket_mb: float = field(default=25.0, metadata=doc("gradient buckets", BUCKET_MB))


@register
class AllreduceHier(Algorithm[AllreduceHierConfig]):
    display_name = "hierarchical AllReduce-SGD"
    Config = AllreduceHierConfig
    point_to_point = False  # collectives only (launch/gpus.py: gloo carries them on CUDA)
    compression = ("tensor",)  # the leaders' stage

    def setup(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
        super().setup(model, optimizer)
        params = [p for p in model.parameters() if p.requires_grad]
        self.buckets: list[Bucket] = make_buckets(params, int(self.cfg.bucket_mb * 2**20))
        self.leader = self.cluster.ranks("intra")[0]

    def reduce_gradients(self, step: int) -> None:
        layout = self.cluster.layout
        buffers = [b.pack_grads() for b in self.buckets]
        if layout.workers_per_node > 1:
            for handle in [self.channel.reduce(t, dst=self.leader, group="intra", async_op=True) for t in buffers]:
                handle.wait()
        compressed = not self.compressor.identity and layout.nodes > 1
        if self.cluster.is_leader and layout.nodes > 1:
            if compressed:  # the mean of the node sums through the compressor, bucket by bucket
                handles = [
                    self.compressor.start(t, index, step, self.channel, "leaders", [p.shape for p in bucket.params])
                    for index, (t, bucket) in enumerate(zip(buffers, self.buckets))
                ]
            else:
                handles = [self.channel.allreduce(t, group="leaders", average=False, async_op=True) for t in buffers]
            for handle in handles:
                handle.wait()
        if layout.workers_per_node > 1:
            for handle in [self.channel.broadcast(t, src=self.leader, group="intra", async_op=True) for t in buffers]:
                handle.wait()
        for bucket, buffer in zip(self.buckets, buffers):
            buffer.div_(layout.workers_per_node if compressed else layout.world_size)
            bucket.unpack_grads()

    def state_dict(self) -> dict:
        return {} if self.compressor.identity else {"compressor": self.compressor.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        if "compressor" in state:
            self.compressor.load_state_dict(state["compressor"])
