"""Crossover-SGD (paper ``crossover-sgd.txt``, Algorithms 1 and 2): segment-wise gossip on a
random topology with fair peer selection.

The parameters are split into ``segments`` (see :mod:`dlcomm.algorithms.segments`; 0 = the
model's top-level blocks). At iteration ``t``, for every segment ``k``, every rank computes the
same destination list ``dest = fair_random_permutation(n, seed, t, k)`` (a permutation with no
fixed point, :mod:`dlcomm.topology.graphs`), so each rank sends its segment to one peer and
receives one. After the optimizer step all segments' sends and receives are posted at once,
then all are awaited, then

    x_i^(k) <- (x_i^(k) + x_{src_k(i)}^(k)) / 2          for every segment k

(doubly stochastic: the mean over workers is kept). Ablations: ``fair=false`` draws each
destination uniformly among the others, independently; a rank then averages itself with all
``m`` copies it received, ``x <- (x + sum r) / (1 + m)`` (row stochastic only), and keeps ``x``
when it got none. ``segmentwise=false`` makes the whole model one segment.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from dlcomm.algorithms.base import Algorithm
from dlcomm.algorithms.registry import register
from dlcomm.algorithms.segments import bind_segments, split_segments
from dlcomm.config.schema import AlgoConfig
from dlcomm.config.validate import require
from dlcomm.topology.graphs import fair_random_permutation, random_destinations


@dataclass
class CrossoverConfig(AlgoConfig):
    name: str = "crossover"
    segments: int = 0  # 0: the model's top-level blocks; k: k balanced runs of layers
    segmentwise: bool = True  # false: the whole model is one segment (ablation)
    fair: bool = True  # false: independent uniform destinations (ablation)


def check_crossover(cfg: CrossoverConfig) -> None:
    require(cfg.segments >= 0, "algo.segments", cfg.segments, "use 0 (top-level blocks), 1 (whole model) or a count")


class CrossoverGossip:
    """One Crossover round over ``buffers`` among the global ranks ``members`` (this rank among them)."""

    def __init__(self, channel, buffers: list[torch.Tensor], members: list[int], rank: int, fair: bool, seed: int) -> None:
        self.channel, self.buffers, self.members, self.fair, self.seed = channel, buffers, members, fair, seed
        self.me = members.index(rank)
        self.scratch = [torch.empty_like(b) for b in buffers]
        self.extra: list[list[torch.Tensor]] = [[] for _ in buffers]  # unfair: more copies than one

    def destinations(self, step: int, segment: int) -> list[int]:
        n = len(self.members)
        draw = fair_random_permutation if self.fair else random_destinations
        return draw(n, self.seed, step, segment)

    def round(self, step: int, group: str = "world") -> None:
        n = len(self.members)
        if n == 1:
            return
        handles, senders_of = [], []
        for k, buffer in enumerate(self.buffers):
            dest = self.destinations(step, k)
            senders = [j for j, d in enumerate(dest) if d == self.me]
            senders_of.append(senders)
            handles.append(self.channel.isend(buffer, self.members[dest[self.me]], group=group, tag=k))
            while len(self.extra[k]) < len(senders) - 1:
                self.extra[k].append(torch.empty_like(buffer))
            targets = [self.scratch[k]] + self.extra[k]
            for target, sender in zip(targets, senders):
                handles.append(self.channel.irecv(target, self.members[sender], group=group, tag=k))
        for handle in handles:
            handle.wait()
        with torch.no_grad():
            for k, (buffer, senders) in enumerate(zip(self.buffers, senders_of)):
                if not senders:
                    continue
                for target in ([self.scratch[k]] + self.extra[k])[: len(senders)]:
                    buffer.add_(target)
                buffer.div_(1 + len(senders))


@register
class Crossover(Algorithm):
    name = "crossover"
    Config = CrossoverConfig

    @classmethod
    def check_config(cls, cfg: CrossoverConfig) -> None:
        check_crossover(cfg)

    def setup(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
        super().setup(model, optimizer)
        count = self.cfg.segments if self.cfg.segmentwise else 1
        buffers = bind_segments(split_segments(model, count))
        self.gossip = CrossoverGossip(self.channel, buffers, list(range(self.cluster.world_size)), self.cluster.rank,
                                      self.cfg.fair, self.seed)

    def after_step(self, step: int) -> None:
        self.gossip.round(step)
