"""The alpha-beta cost model: how long each primitive takes on given links.

A link is ``(alpha, beta)``: ``alpha`` seconds of latency per message and ``beta`` bytes per
second of bandwidth, so one message of ``S`` bytes takes ``alpha + S / beta``. A message that
goes between two workers uses the slower end (see :mod:`dlcomm.comm.network`). When the
steps of an algorithm run in lockstep over several links (a ring), each step lasts as long as
its slowest link: ``alpha_max = max alpha`` and ``beta_min = min beta`` over the links.

Formulas, for a payload of ``S`` bytes over a group of ``p`` ranks (each function's docstring
repeats its own):

* point to point: ``alpha + S/beta``;
* ring allreduce (scatter-reduce then all-gather): ``2(p-1) * (alpha + S/(p*beta))``;
* ring all-gather, every rank contributing ``S``: ``(p-1) * (alpha + S/beta)``;
* binomial-tree broadcast and reduce: ``ceil(log2 p) * (alpha + S/beta)`` on uniform links (on
  mixed links the critical path of the tree, a parent sending to its children one after the
  other);
* ring broadcast (ring scatter then ring all-gather) and ring reduce (ring reduce-scatter then
  ring gather to the root): ``2(p-1) * (alpha + S/(p*beta))``;
* parameter-server incast (``n`` workers each send ``S_i`` to one server whose own link has
  bandwidth ``B``): ``max_i alpha_i + max(sum_i S_i / B, max_i S_i / beta_i)``; uniform:
  ``alpha + n*S/B``. The reverse (the server sends to every worker) costs the same.

References: Thakur, Rabenseifner, Gropp, "Optimization of collective communication operations
in MPICH" (IJHPCA 2005); Patarasuk and Yuan, "Bandwidth optimal all-reduce algorithms for
clusters of workstations" (JPDC 2009).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence


@dataclass(frozen=True)
class Link:
    """``latency_s`` per message, ``bandwidth_Bps`` bytes per second."""

    latency_s: float
    bandwidth_Bps: float

    def message_s(self, nbytes: float) -> float:
        """``alpha + S/beta``."""
        return self.latency_s + nbytes / self.bandwidth_Bps


def slowest(links: Sequence[Link]) -> Link:
    """The lockstep bottleneck of ``links``: ``(max alpha, min beta)``."""
    return Link(max(link.latency_s for link in links), min(link.bandwidth_Bps for link in links))


def point_to_point(nbytes: float, link: Link) -> float:
    """``alpha + S/beta``."""
    return link.message_s(nbytes)


def ring_allreduce(nbytes: float, ring: Sequence[Link]) -> float:
    """``2(p-1) * (alpha + S/(p*beta))`` over the ``p`` links of the ring (rank k to k+1)."""
    p = len(ring)
    if p <= 1:
        return 0.0
    return 2 * (p - 1) * slowest(ring).message_s(nbytes / p)


def ring_allgather(nbytes_per_rank: float, ring: Sequence[Link]) -> float:
    """``(p-1) * (alpha + S/beta)``: ``p-1`` steps, each forwarding one rank's ``S`` bytes."""
    p = len(ring)
    if p <= 1:
        return 0.0
    return (p - 1) * slowest(ring).message_s(nbytes_per_rank)


def ring_broadcast(nbytes: float, ring: Sequence[Link]) -> float:
    """``2(p-1) * (alpha + S/(p*beta))``: a ring scatter of ``p`` pieces of ``S/p`` from the
    root (``p-1`` pipelined steps), then a ring all-gather of the pieces (``p-1`` steps)."""
    p = len(ring)
    if p <= 1:
        return 0.0
    return 2 * (p - 1) * slowest(ring).message_s(nbytes / p)


def ring_reduce(nbytes: float, ring: Sequence[Link]) -> float:
    """``2(p-1) * (alpha + S/(p*beta))``: a ring reduce-scatter (``p-1`` steps of ``S/p``),
    then the ``p-1`` reduced pieces travel along the ring to the root (``p-1`` steps)."""
    return ring_broadcast(nbytes, ring)


def binomial_children(position: int, p: int) -> list[int]:
    """Tree positions the rank at ``position`` (root 0) sends to, in sending order:
    ``position + 2^k`` for every ``2^k > position`` with ``position + 2^k < p``."""
    step = 1
    while step <= position:
        step *= 2
    children = []
    while position + step < p:
        children.append(position + step)
        step *= 2
    return children


def tree_broadcast(nbytes: float, p: int, link: Callable[[int, int], Link]) -> float:
    """Binomial-tree broadcast: ``ceil(log2 p) * (alpha + S/beta)`` on uniform links.

    ``link(parent, child)`` gives the link between two tree positions (0 = root). A rank
    holds the data at ``t(child) = t(parent) + sum of (alpha + S/beta)`` of the parent's sends
    up to and including the one to ``child`` (a parent sends to one child at a time); the
    broadcast ends when the last rank holds the data: ``max t``.
    """
    if p <= 1:
        return 0.0
    ready = [0.0] * p
    for parent in range(p):  # a parent's position is always smaller than its children's
        clock = ready[parent]
        for child in binomial_children(parent, p):
            clock += link(parent, child).message_s(nbytes)
            ready[child] = clock
    return max(ready)


def tree_reduce(nbytes: float, p: int, link: Callable[[int, int], Link]) -> float:
    """Binomial-tree reduce, the broadcast's tree with the edges reversed:
    ``ceil(log2 p) * (alpha + S/beta)`` on uniform links (the time to add is not modelled).
    A parent receives from its children in the reverse of the broadcast's sending order, so
    the critical path is the broadcast's with the time running backwards."""
    return tree_broadcast(nbytes, p, lambda parent, child: link(child, parent))


def ps_incast(sizes: Sequence[float], links: Sequence[Link], server_bandwidth_Bps: float) -> float:
    """``n`` workers send ``S_i`` bytes to one parameter server at once:
    ``max_i alpha_i + max(sum_i S_i / B, max_i S_i / beta_i)`` with ``B`` the server's own
    bandwidth and ``links[i]`` worker ``i``'s link to the server (its slower end). The server's
    link is shared by all the transfers; uniform links: ``alpha + n*S/B``."""
    if not sizes:
        return 0.0
    shared = sum(sizes) / server_bandwidth_Bps
    own = max(size / link.bandwidth_Bps for size, link in zip(sizes, links))
    return max(link.latency_s for link in links) + max(shared, own)

