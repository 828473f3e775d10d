"""Who talks to whom at iteration ``step``: the same answer on every rank, computed from the
shared seed alone (pure functions, nothing exchanged).

* ring (D-PSGD): every rank talks to ``i - 1`` and ``i + 1``.
* directed exponential (SGP): the phone book of SGP's reference ``DynamicDirectedExponentialGraph``
  (``gossip/graph_manager.py``): for ``j = 0 .. int(log(n - 1, 2))`` the offsets ``+2^j`` and
  ``-2^j`` (mod ``n``). SGP's duplicate check compares a rank with ``Edge`` objects and never
  removes anything, so a hop appearing twice stays twice: ``n = 16`` cycles
  ``+1 -1 +2 -2 +4 -4 +8 +8`` (period 8), ``n = 12`` cycles ``1 11 2 10 4 8 8 4``. Step 0 uses the
  first entry (SGP's first lookup does not rotate), then one rotation per step; every rank uses
  the same hop, sending to ``i + hop`` and receiving from ``i - hop``. ``cycle="unique"``: the same
  list with repeated offsets dropped (``+1 -1 +2 -2 +4 -4 +8`` for 16). ``cycle="power2"``: the hop
  ``2^(step mod ceil(log2 n))``, which averages exactly in ``log2 n`` steps when ``n`` is a power of two.
* Crossover-SGD's random topologies, drawn as the authors' ``select_layer`` draws them
  (``imagenet_test.py``): ``src[i]`` is the rank that ``i`` *receives from* (a pull), positions
  ``i = 0 .. n-1`` in order.

  - fair (Algorithm 2): position ``i`` draws uniformly among the sources nobody has drawn yet,
    other than ``i`` itself (the roulette row starts uniform off the diagonal; zeroing the drawn
    and renormalising leaves a uniform draw among the rest). When ``n - 1`` has not been drawn by
    position ``n - 2``, position ``n - 2`` is forced to take it (otherwise ``n - 1`` could be left
    with only itself). The result is a permutation without fixed points: each rank receives one
    copy and sends one.
  - unfair (the paper's ablation, the authors' ``imagenet_test_no_group_no_fairness.py``):
    every position draws uniformly among the others, independently, with the same forced
    ``n - 2 <- n - 1`` rule. Each rank receives exactly one copy; a rank sends to every rank
    that drew it (none, one or several).
* groups: ``g`` consecutive blocks of ``n / g`` ranks, the first of each its leader.
* shuffled groups (SESGD): a permutation of the ranks drawn from ``(seed, step)`` cut into ``g``
  consecutive blocks of ``n / g``; each block, sorted, is one group of that iteration.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

EXPONENTIAL_CYCLES = ("sgp", "unique", "power2")


def ring_neighbours(rank: int, n: int) -> tuple[int, int]:
    """``(left, right)`` on the bidirectional ring."""
    return (rank - 1) % n, (rank + 1) % n


def exponential_hops(n: int, unique: bool = False) -> list[int]:
    """SGP's phone book of out-peer offsets (in ``1 .. n-1``) for ``n`` ranks, duplicates kept as
    SGP keeps them; ``unique``: each offset once, in first-seen order."""
    if n < 2:
        return []
    hops: list[int] = []
    # math.log(n - 1, 2) as the reference computes it (int() of a float logarithm).
    for j in range(int(math.log(n - 1, 2)) + 1):
        for offset in ((2**j) % n, (-(2**j)) % n):
            if not (unique and offset in hops):
                hops.append(offset)
    return hops


def directed_exponential_peer(rank: int, step: int, n: int, cycle: str = "sgp") -> int:
    """Rank ``rank``'s one out-peer at ``step``; its in-peer is ``rank - hop`` (all ranks use the same hop)."""
    return (rank + exponential_hop(step, n, cycle)) % n


def exponential_hop(step: int, n: int, cycle: str = "sgp") -> int:
    """The offset every rank sends to at ``step`` (``cycle``: one of :data:`EXPONENTIAL_CYCLES`)."""
    if cycle in ("sgp", "unique"):
        hops = exponential_hops(n, unique=cycle == "unique")
        return hops[step % len(hops)]
    if cycle == "power2":
        rounds = max(1, int(np.ceil(np.log2(n))))
        return (2 ** (step % rounds)) % n or 1
    raise ValueError(f"unknown exponential cycle {cycle!r}: use one of {', '.join(EXPONENTIAL_CYCLES)}")


def _generator(seed: int, step: int, segment: int) -> np.random.Generator:
    return np.random.default_rng([seed & 0xFFFFFFFF, step, segment])


def fair_random_sources(n: int, seed: int, step: int, segment: int = 0) -> list[int]:
    """``src[i]``: the rank that ``i`` receives segment ``segment`` from at ``step`` (Algorithm 2
    with the authors' forced last draw); a permutation with no fixed point, for ``n >= 2``."""
    if n < 2:
        raise ValueError("a fair random topology needs at least 2 ranks")
    return list(_fair_sources(n, seed & 0xFFFFFFFF, step, segment))


@lru_cache(maxsize=4096)  # every rank of a process computes the same draw (threads share it)
def _fair_sources(n: int, seed: int, step: int, segment: int) -> tuple[int, ...]:
    uniforms = _generator(seed, step, segment).random(n)
    undrawn = list(range(n))  # sources nobody receives from yet, kept with their positions
    where = {rank: index for index, rank in enumerate(undrawn)}
    src = [0] * n
    for position in range(n):
        if position == n - 2 and n - 1 in where:
            drawn = n - 1  # the authors' rule: n - 1 must not be left to itself
        else:
            # uniform among the undrawn other than ``position``: move it (if undrawn) to the end, draw before it
            count = len(undrawn)
            if position in where:
                _swap(undrawn, where, where[position], count - 1)
                count -= 1
            drawn = undrawn[int(uniforms[position] * count)]
        src[position] = drawn
        _swap(undrawn, where, where[drawn], len(undrawn) - 1)
        undrawn.pop()
        del where[drawn]
    return tuple(src)


def _swap(items: list[int], where: dict[int, int], a: int, b: int) -> None:
    items[a], items[b] = items[b], items[a]
    where[items[a]], where[items[b]] = a, b


def random_sources(n: int, seed: int, step: int, segment: int = 0) -> list[int]:
    """``src[i]`` drawn uniformly among the other ranks, independently (no fairness), but for the
    authors' forced rule: position ``n - 2`` takes ``n - 1`` when no earlier position drew it."""
    if n < 2:
        raise ValueError("a random topology needs at least 2 ranks")
    draws = _generator(seed, step, segment).integers(0, n - 1, size=n)
    src = [int(d) + (int(d) >= position) for position, d in enumerate(draws)]
    if n - 1 not in src[: n - 2]:
        src[n - 2] = n - 1
    return src


def receivers_of(rank: int, src: list[int]) -> list[int]:
    """The positions that pull from ``rank`` (whom ``rank`` sends to), in order."""
    return [position for position, source in enumerate(src) if source == rank]


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
