"""Hierarchical Crossover-SGD (the Crossover-SGD paper, Sec. 3.3 and Fig. 7): the workers of a
node form a group whose first rank is its leader (``nodes`` groups of ``workers_per_node``).

    1. g_leader <- (1/R) sum_{i in node} g_i         reduce (mean) to the leader, ``intra`` group
    2. the leader takes the optimizer step
    3. the leaders run one Crossover-SGD round among themselves (``leaders`` group; segments,
       fairness as in ``crossover``)
    4. the leader broadcasts its parameters to its node

so after every step each worker equals its leader. Non-leaders also run the optimizer on their
own gradients, which step 4 overwrites (their optimizer state is not used). Under fp16 loss
scaling the node shares the found-inf flag (:meth:`found_inf_group`): the leader sums the
node's scaled gradients, so the node's ranks must keep one loss scale, and only the leader
sees the sum.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from dlcomm.algorithms.crossover import Crossover, CrossoverConfig
from dlcomm.algorithms.registry import register

if TYPE_CHECKING:
    import torch


@dataclass
class CrossoverHierConfig(CrossoverConfig):
    """``algo=crossover_hier``, hierarchical Crossover-SGD: reduce gradients to each node's leader,
    the leaders step and run Crossover-SGD among themselves, then broadcast to their node (section
    5, paper Sec. 3.3). The leaders' Crossover round takes ``crossover``'s knobs (``gamma``: the
    leaders' consensus step)."""

    name: str = "crossover_hier"


@register
class CrossoverHier(Crossover):
    """``crossover``'s segments, draw and round (:class:`~dlcomm.algorithms.crossover.Crossover`),
    run by the leaders alone on the ``leaders`` group, framed by the node's reduce and broadcast."""

    display_name = "hierarchical Crossover-SGD"
    Config = CrossoverHierConfig
    group = "leaders"

    def gossip_members(self) -> list[int] | None:
        return self.cluster.ranks("leaders") if self.cluster.is_leader else None

    def setup(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
        super().setup(model, optimizer)
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.leader = self.cluster.ranks("intra")[0]

    def found_inf_group(self) -> str | None:
        return "intra"  # the reduce to the leader adds the node's scaled gradients

    def reduce_gradients(self, step: int) -> None:
        if self.cluster.layout.workers_per_node == 1:
            return
        handles = [
            self.channel.reduce(p.grad, dst=self.leader, group="intra", average=True, async_op=True)
            for p in self.params
            if p.grad is not None
        ]
        for handle in handles:
            handle.wait()

    def after_step(self, step: int) -> None:
        super().after_step(step)
        if self.cluster.layout.workers_per_node > 1:
            handles = [self.channel.broadcast(b, src=self.leader, group="intra", async_op=True) for b in self.buffers]
            for handle in handles:
                handle.wait()
