"""Where each rank lives: a pure description of ``nodes x workers_per_node`` ranks.

Rank ``r`` sits on node ``r // workers_per_node`` with local rank ``r % workers_per_node``;
the first rank of every node is that node's leader. No communication happens here, so the
mapping is unit-testable and shared by the launcher, the Cluster and the algorithms.

Service roles (an algorithm's extra processes that do not train: a parameter server, a gossip
manager) come after the workers: role ``k`` of ``services`` is rank ``world_size + k`` and sits
on a node of its own, ``nodes + k`` (its link is an ordinary inter-node link). ``world_size``
counts the training workers only; ``job_size`` every process.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ClusterLayout:
    nodes: int
    workers_per_node: int
    services: tuple[str, ...] = ()

    @property
    def world_size(self) -> int:
        return self.nodes * self.workers_per_node

    @property
    def job_size(self) -> int:
        return self.world_size + len(self.services)

    def service_rank(self, role: str) -> int:
        return self.world_size + self.services.index(role)

    def role_of(self, rank: int) -> str:
        """``worker`` or the service role that ``rank`` plays."""
        return "worker" if rank < self.world_size else self.services[rank - self.world_size]

    def node_of(self, rank: int) -> int:
        if rank >= self.world_size:
            return self.nodes + rank - self.world_size
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
