"""Who sends to whom at iteration ``step``: the same answer on every rank, computed from the
shared seed alone (pure functions, nothing exchanged).

* ring (D-PSGD): every rank talks to ``i - 1`` and ``i + 1``.
* directed exponential (SGP): the hop list ``+1, -1, +2, -2, +4, -4, ...`` (``+-2^j`` for
  ``j = 0 .. floor(log2(n - 1))``, a hop equal modulo ``n`` to one already listed dropped; for
  ``n = 16``: ``+1 -1 +2 -2 +4 -4 +8``), rank ``i`` sends to ``i + hop[step mod len]`` as SGP's
  reference ``DynamicDirectedExponentialGraph`` does. ``cycle="power2"``: the hop ``2^(step mod
  log2 n)`` instead, which averages exactly in ``log2 n`` steps when ``n`` is a power of two.
* fair random (Crossover-SGD, Algorithm 2): a permutation without fixed points, drawn from
  ``(seed, step, segment)``: ranks in order, each draws its destination from the roulette row of
  the not-yet-chosen destinations other than itself (the table starts uniform off the diagonal,
  so zeroing the chosen and renormalising is a uniform draw among those left). Only the last rank
  can be left with itself; the paper is silent there and we repair by a swap: the last rank takes
  the destination of an earlier rank drawn from the same generator, which sends to it instead.
  Every rank sends one copy and receives one.
* random without fairness (the paper's ablation): each rank draws a destination uniformly among
  the others, independently; a rank may receive several copies or none.
* groups: ``g`` consecutive blocks of ``n / g`` ranks, the first of each its leader.
* shuffled groups (SESGD): a permutation of the ranks drawn from ``(seed, step)`` cut into ``g``
  consecutive blocks of ``n / g``; each block, sorted, is one group of that iteration.
"""

from __future__ import annotations

import numpy as np


def ring_neighbours(rank: int, n: int) -> tuple[int, int]:
    """``(left, right)`` on the bidirectional ring."""
    return (rank - 1) % n, (rank + 1) % n


def exponential_hops(n: int) -> list[int]:
    """SGP's out-peer hop list for ``n`` ranks (hops as offsets in ``1 .. n-1``)."""
    if n < 2:
        return []
    hops: list[int] = []
    for j in range(int(np.floor(np.log2(n - 1))) + 1):
        for hop in (2**j, -(2**j)):
            offset = hop % n
            if offset and offset not in hops:
                hops.append(offset)
    return hops


def directed_exponential_peer(rank: int, step: int, n: int, cycle: str = "sgp") -> int:
    """Rank ``rank``'s one out-peer at ``step``; its in-peer is ``rank - hop`` (all ranks use the same hop)."""
    return (rank + exponential_hop(step, n, cycle)) % n


def exponential_hop(step: int, n: int, cycle: str = "sgp") -> int:
    if cycle == "sgp":
        hops = exponential_hops(n)
        return hops[step % len(hops)]
    if cycle == "power2":
        rounds = max(1, int(np.ceil(np.log2(n))))
        return (2 ** (step % rounds)) % n or 1
    raise ValueError(f"unknown exponential cycle {cycle!r}: use sgp or power2")


def _generator(seed: int, step: int, segment: int) -> np.random.Generator:
    return np.random.default_rng([seed & 0xFFFFFFFF, step, segment])


def fair_random_permutation(n: int, seed: int, step: int, segment: int = 0) -> list[int]:
    """``dest[i]``: where rank ``i`` sends segment ``segment`` at ``step`` (Algorithm 2); a
    permutation with no fixed point, for ``n >= 2``."""
    if n < 2:
        raise ValueError("a fair random topology needs at least 2 ranks")
    uniforms = _generator(seed, step, segment).random(n + 1)
    unchosen = list(range(n))  # destinations nobody sends to yet
    where = {rank: index for index, rank in enumerate(unchosen)}
    dest = [0] * n
    for rank in range(n - 1):
        # uniform among the unchosen other than ``rank``: move ``rank`` (if unchosen) to the end, draw before it
        count = len(unchosen)
        if rank in where:
            _swap(unchosen, where, where[rank], count - 1)
            count -= 1
        index = int(uniforms[rank] * count)
        dest[rank] = chosen = unchosen[index]
        _swap(unchosen, where, index, len(unchosen) - 1)
        unchosen.pop()
        del where[chosen]
    last = n - 1
    if unchosen[0] != last:
        dest[last] = unchosen[0]
    else:  # only itself is left: swap with an earlier rank
        other = int(uniforms[n] * (n - 1))
        dest[last], dest[other] = dest[other], last
    return dest


def _swap(items: list[int], where: dict[int, int], a: int, b: int) -> None:
    items[a], items[b] = items[b], items[a]
    where[items[a]], where[items[b]] = a, b


def random_destinations(n: int, seed: int, step: int, segment: int = 0) -> list[int]:
    """``dest[i]`` drawn uniformly among the other ranks, independently (no fairness)."""
    if n < 2:
        raise ValueError("a random topology needs at least 2 ranks")
    draws = _generator(seed, step, segment).integers(0, n - 1, size=n)
    return [int(d) + (int(d) >= rank) for rank, d in enumerate(draws)]


def groups(n: int, count: int) -> list[list[int]]:
    """``count`` consecutive groups of ``n / count`` ranks; ``count`` must divide ``n``."""
    if count < 1 or n % count:
        raise ValueError(f"{count} groups cannot split {n} ranks evenly")
    size = n // count
    return [list(range(start, start + size)) for start in range(0, n, size)]


def shuffled_groups(n: int, count: int, seed: int, step: int) -> list[list[int]]:
    """SESGD's groups at ``step``: a partition of the ranks into ``count`` groups of ``n / count``,
    redrawn every step from the shared seed (each group sorted, the groups ordered by their first rank)."""
    if count < 1 or n % count:
        raise ValueError(f"{count} groups cannot split {n} ranks evenly")
    order = _generator(seed, step, 1 << 20).permutation(n)
    size = n // count
    return sorted(sorted(int(r) for r in order[start : start + size]) for start in range(0, n, size))


def group_of(rank: int, partition: list[list[int]]) -> list[int]:
    return next(group for group in partition if rank in group)
