"""Bytes and messages one rank puts on the wire for each primitive.

These are the logical traffic of the algorithm each primitive is modelled as, seen from the
calling rank, for a payload of ``S`` bytes in a group of ``p`` ranks:

* ring allreduce: scatter-reduce then all-gather, ``2(p-1)`` messages of ``S/p`` bytes,
  so ``2(p-1)/p * S`` bytes;
* broadcast (binomial tree rooted at the source): one message of ``S`` bytes per child of the
  rank in the tree; the rank at tree position ``v`` has the children ``v + 2^k`` for every
  ``2^k > v`` with ``v + 2^k < p``;
* reduce (the same tree, edges reversed): every non-root rank sends its partial sum once;
* point-to-point send: one message of ``S`` bytes; a receive sends nothing.
"""

from __future__ import annotations


def ring_allreduce(nbytes: int, group_size: int) -> tuple[int, int]:
    """(bytes sent, messages sent) by one rank in a ring allreduce."""
    p = group_size
    if p <= 1:
        return 0, 0
    return round(2 * (p - 1) * nbytes / p), 2 * (p - 1)


def _tree_children(position: int, group_size: int) -> int:
    children, step = 0, 1
    while step <= position:
        step *= 2
    while position + step < group_size:
        children += 1
        step *= 2
    return children


def tree_broadcast(nbytes: int, group_size: int, position: int) -> tuple[int, int]:
    """(bytes, messages) sent by the rank at ``position`` (0 = root) of a binomial-tree broadcast."""
    children = _tree_children(position, group_size)
    return children * nbytes, children


def tree_reduce(nbytes: int, group_size: int, position: int) -> tuple[int, int]:
    """(bytes, messages) sent by the rank at ``position`` (0 = root) of a binomial-tree reduce."""
    if group_size <= 1 or position == 0:
        return 0, 0
    return nbytes, 1


def point_to_point(nbytes: int) -> tuple[int, int]:
    return nbytes, 1
