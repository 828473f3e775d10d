"""The modelled network of one job: which link joins two ranks, and what each primitive costs.

A preset (``configs/network/*.yaml``) gives two link classes: ``intra`` between ranks of the
same node (shared memory / NVLink class) and ``inter`` between nodes. Every worker has its own
inter-node bandwidth, ``inter.bandwidth_gbps`` unless overridden (``wide_workers`` ranks
``0 .. wide_workers-1`` get ``wide_bandwidth_gbps``; ``worker_bandwidth_gbps``, one value per rank,
wins). A link between two workers of different nodes has the inter-node latency and
runs at the slower end: ``beta(i, j) = min(beta_i, beta_j)``.

How the Channel's collectives are charged is ``network.collectives``:

* ``nccl`` (the default), the algorithms NCCL runs: allreduce = the ring or the pipelined
  double binary tree, whichever is faster for the size; broadcast and reduce = a pipelined chain
  from (to) the root along the group in rank order; all-gather = ring; each plus
  ``network.launch_us``;
* ``textbook``: allreduce = ring over the group in rank order; broadcast and reduce = binomial
  tree rooted at the root; all-gather = ring.

Rings and chains follow rank order, so they cross node boundaries as few times as possible (a
node's ranks are consecutive). Send = one message, under both. Formulas: :mod:`dlcomm.comm.cost`.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Sequence

from dlcomm.comm import cost
from dlcomm.comm.cost import Link
from dlcomm.comm.layout import ClusterLayout
from dlcomm.config.schema import LinkConfig, NetworkConfig

GBPS = 1e9 / 8  # bytes per second in one Gb/s


def link_of(link_cfg: LinkConfig) -> Link:
    """A ``{latency_ms, bandwidth_gbps}`` config as a :class:`Link` in seconds and bytes/s."""
    return Link(link_cfg.latency_ms / 1e3, link_cfg.bandwidth_gbps * GBPS)


@dataclass(frozen=True)
class NetworkModel:
    layout: ClusterLayout
    intra: Link
    inter: Link
    worker_bandwidth_Bps: tuple[float, ...]  # inter-node bandwidth of each rank's own link
    collectives: str = "nccl"  # nccl | textbook: how collectives are charged (module docstring)
    launch_s: float = 0.0  # per collective on more than one rank, under nccl

    @classmethod
    def from_config(cls, cfg: NetworkConfig, layout: ClusterLayout) -> "NetworkModel":
        inter = link_of(cfg.inter)
        bandwidth = [inter.bandwidth_Bps] * layout.job_size  # service roles: the ordinary inter-node link
        for rank in range(min(cfg.wide_workers, layout.world_size)):
            bandwidth[rank] = cfg.wide_bandwidth_gbps * GBPS
        for rank, gbps in enumerate(cfg.worker_bandwidth_gbps):
            bandwidth[rank] = gbps * GBPS
        return cls(layout, link_of(cfg.intra), inter, tuple(bandwidth), str(cfg.collectives), cfg.launch_us / 1e6)

    def link(self, a: int, b: int) -> Link:
        """The link between ranks ``a`` and ``b``: intra-node, or inter-node at the slower end."""
        if self.layout.node_of(a) == self.layout.node_of(b):
            return self.intra
        return Link(self.inter.latency_s, min(self.worker_bandwidth_Bps[a], self.worker_bandwidth_Bps[b]))

    @lru_cache(maxsize=256)
    def ring(self, members: tuple[int, ...]) -> tuple[Link, ...]:
        """Links of the ring through ``members`` in order: ``m_k -> m_(k+1 mod p)``."""
        p = len(members)
        return tuple(self.link(members[k], members[(k + 1) % p]) for k in range(p))

    @lru_cache(maxsize=256)
    def chain(self, order: tuple[int, ...]) -> tuple[Link, ...]:
        """Links of the chain through ``order`` (the root first): ``o_k -> o_(k+1)``."""
        return tuple(self.link(order[k], order[k + 1]) for k in range(len(order) - 1))

    @lru_cache(maxsize=256)
    def slowest_pair(self, members: tuple[int, ...]) -> Link:
        """The slowest link between any two of ``members``: ``(max alpha, min beta)``, what a
        tree over them, whose edges join ranks far apart in rank order, is charged at."""
        if len({self.layout.node_of(m) for m in members}) == 1:
            return self.intra
        return Link(
            max(self.intra.latency_s, self.inter.latency_s),
            min(self.intra.bandwidth_Bps, *(self.worker_bandwidth_Bps[m] for m in members)),
        )

    @property
    def nccl(self) -> bool:
        return self.collectives == "nccl"

    def _launched(self, seconds: float, members: Sequence[int]) -> float:
        """``seconds`` plus NCCL's launch overhead on a group of more than one rank."""
        return seconds + self.launch_s if len(members) > 1 else seconds

    # ---- the Channel's primitives ----------------------------------------------------
    def allreduce_algorithm(self, nbytes: int, members: Sequence[int]) -> str:
        """``ring`` or ``tree``: the allreduce charged for ``nbytes`` on ``members``."""
        if not self.nccl:
            return "ring"
        return cost.nccl_allreduce(nbytes, self.ring(tuple(members)), self.slowest_pair(tuple(members)))[0]

    def allreduce_s(self, nbytes: int, members: Sequence[int]) -> float:
        if not self.nccl:
            return cost.ring_allreduce_s(nbytes, self.ring(tuple(members)))
        _, seconds = cost.nccl_allreduce(nbytes, self.ring(tuple(members)), self.slowest_pair(tuple(members)))
        return self._launched(seconds, members)

    def allgather_s(self, nbytes_per_rank: int, members: Sequence[int]) -> float:
        seconds = cost.ring_allgather_s(nbytes_per_rank, self.ring(tuple(members)))
        return self._launched(seconds, members) if self.nccl else seconds

    def broadcast_s(self, nbytes: int, members: Sequence[int], root: int) -> float:
        order = _rooted(members, root)
        if self.nccl:
            return self._launched(cost.chain_broadcast_s(nbytes, self.chain(tuple(order))), order)
        return cost.tree_broadcast_s(nbytes, len(order), lambda a, b: self.link(order[a], order[b]))

    def reduce_s(self, nbytes: int, members: Sequence[int], root: int) -> float:
        order = _rooted(members, root)
        if self.nccl:
            return self._launched(cost.chain_reduce_s(nbytes, self.chain(tuple(order))), order)
        return cost.tree_reduce_s(nbytes, len(order), lambda a, b: self.link(order[a], order[b]))

    def send_s(self, nbytes: int, src: int, dst: int) -> float:
        return cost.point_to_point_s(nbytes, self.link(src, dst))

    def incast_s(self, sizes: Sequence[int], srcs: Sequence[int], dst: int) -> float:
        """Every ``srcs[i]`` sends ``sizes[i]`` bytes to ``dst`` at once (a parameter server's
        gather): ``dst``'s own link is shared (:func:`dlcomm.comm.cost.ps_incast_s`)."""
        links = [self.link(src, dst) for src in srcs]
        own = (
            self.intra.bandwidth_Bps
            if all(not self.is_inter(src, dst) for src in srcs)
            else self.worker_bandwidth_Bps[dst]
        )
        return cost.ps_incast_s(sizes, links, own)

    def is_inter(self, a: int, b: int) -> bool:
        return self.layout.node_of(a) != self.layout.node_of(b)


def _rooted(members: Sequence[int], root: int) -> list[int]:
    """``members`` rotated so that ``root`` is first (tree position 0), as the traffic count does."""
    start = list(members).index(root)
    return [*members[start:], *members[:start]]
