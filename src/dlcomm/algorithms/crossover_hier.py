"""Hierarchical Crossover-SGD (the Crossover-SGD paper, Sec. 3.3 and Fig. 7): the workers of a
node form a group whose first rank is its leader (``nodes`` groups of ``workers_per_node``).

    1. g_leader <- (1/R) sum_{i in node} g_i         reduce (mean) to the leader, ``intra`` group
    2. the leader takes the optimizer step
    3. the leaders run one Crossover-SGD round among themselves (``leaders`` group; segments,
       fairness as in ``crossover``)
    4. the leader broadcasts its parameters to its node

so after every step each worker equals its leader. Non-leaders also run the optimizer on their
own gradients, which step 4 overwrites (their optimizer state is not used).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from dlcomm.algorithms.base import Algorithm
from dlcomm.algorithms.crossover import CrossoverConfig, CrossoverGossip, check_crossover
from dlcomm.algorithms.registry import register
from dlcomm.algorithms.segments import bind_segments, split_segments


@dataclass
class CrossoverHierConfig(CrossoverConfig):
    """The leaders' Crossover round takes ``crossover``'s knobs."""

    name: str = "crossover_hier"


@register
class CrossoverHier(Algorithm):
    name = "crossover_hier"
    Config = CrossoverHierConfig

    @classmethod
    def check_config(cls, cfg: CrossoverHierConfig) -> None:
        check_crossover(cfg)

    def setup(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
        super().setup(model, optimizer)
        count = self.cfg.segments if self.cfg.segmentwise else 1
        self.buffers = bind_segments(split_segments(model, count))
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.leader = self.cluster.ranks("intra")[0]
        self.gossip = None
        if self.cluster.is_leader:
            self.gossip = CrossoverGossip(self.channel, self.buffers, self.cluster.ranks("leaders"), self.cluster.rank,
                                          self.cfg.fair, self.seed)

    def reduce_gradients(self, step: int) -> None:
        if self.cluster.layout.workers_per_node == 1:
            return
        handles = [self.channel.reduce(p.grad, dst=self.leader, group="intra", average=True, async_op=True)
                   for p in self.params if p.grad is not None]
        for handle in handles:
            handle.wait()

    def after_step(self, step: int) -> None:
        if self.gossip is not None:
            self.gossip.round(step, group="leaders")
        if self.cluster.layout.workers_per_node > 1:
            handles = [self.channel.broadcast(b, src=self.leader, group="intra", async_op=True) for b in self.buffers]
            for handle in handles:
                handle.wait()
