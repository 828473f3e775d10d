"""Where each rank lives: a pure description of ``nodes x workers_per_node`` ranks.

Rank ``r`` sits on node ``r // workers_per_node`` with local rank ``r % workers_per_node``;
the first rank of every node is that node's leader. No communication happens here, so the
mapping is unit-testable and shared by the launcher, the Cluster and the algorithms.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ClusterLayout:
    nodes: int
    workers_per_node: int

    @property
    def world_size(self) -> int:
        return self.nodes * self.workers_per_node

    def node_of(self, rank: int) -> int:
        return rank // self.workers_per_node

    def local_rank(self, rank: int) -> int:
        return rank % self.workers_per_node

    def node_ranks(self, node: int) -> list[int]:
        first = node * self.workers_per_node
        return list(range(first, first + self.workers_per_node))

    def leaders(self) -> list[int]:
        return [self.node_ranks(node)[0] for node in range(self.nodes)]

    def is_leader(self, rank: int) -> bool:
        return self.local_rank(rank) == 0
