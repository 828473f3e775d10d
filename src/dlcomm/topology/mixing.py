"""Mixing matrices and the Crossover-SGD paper's Fig. 6 analysis.

Convention: after a gossip step ``x_new = W x`` (row ``i`` holds the weights rank ``i`` ends with),
and the first ``k`` steps mix as ``P_k = W_k ... W_1``.

* ring (D-PSGD): ``W[i, i] = W[i, i-1] = W[i, i+1] = 1/3`` (for ``n = 2`` both neighbours are the
  other rank: ``2/3``); doubly stochastic.
* one source per rank with halves (SGP's push-sum with one out-peer, Crossover-SGD's random
  topologies): rank ``i`` keeps half and takes half of its source's, ``W[i, i] = W[i, src(i)] = 1/2``;
  doubly stochastic when ``src`` is a permutation (SGP, fair crossover), row stochastic only when
  sources repeat (crossover without fairness: a rank drawn by several is in several rows, one
  drawn by none in its own only).

``lambda_2(P)``: the second largest singular value of ``P`` (how far ``k`` steps are from exact
averaging; 0 when ``P = J = 11^T / n``). The imbalance factor: the variance of the entries of
``P - J`` (0 exactly when every rank holds the plain average).
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from dlcomm.topology.graphs import exponential_hop, fair_random_sources, random_sources, ring_neighbours


def ring_matrix(n: int) -> np.ndarray:
    w = np.zeros((n, n))
    for i in range(n):
        left, right = ring_neighbours(i, n)
        for j in (i, left, right):
            w[i, j] += 1.0 / 3.0
    return w


def pull_matrix(src: list[int]) -> np.ndarray:
    """Every rank averages itself with the one copy it received: ``src[i]`` is where rank ``i`` received from."""
    n = len(src)
    w = np.zeros((n, n))
    for i, j in enumerate(src):
        w[i, i] += 0.5
        w[i, j] += 0.5
    return w


def exponential_matrix(n: int, step: int, cycle: str = "sgp") -> np.ndarray:
    hop = exponential_hop(step, n, cycle)
    return pull_matrix([(i - hop) % n for i in range(n)])


TOPOLOGIES: dict[str, Callable[[int, int, int], np.ndarray]] = {
    "ring": lambda n, seed, step: ring_matrix(n),
    "sgp": lambda n, seed, step: exponential_matrix(n, step, "sgp"),
    "sgp_unique": lambda n, seed, step: exponential_matrix(n, step, "unique"),
    "sgp_power2": lambda n, seed, step: exponential_matrix(n, step, "power2"),
    "crossover": lambda n, seed, step: pull_matrix(fair_random_sources(n, seed, step)),
    "crossover_unfair": lambda n, seed, step: pull_matrix(random_sources(n, seed, step)),
}
RANDOM = ("crossover", "crossover_unfair")


def mixing_matrix(name: str, n: int, seed: int, step: int) -> np.ndarray:
    try:
        return TOPOLOGIES[name](n, seed, step)
    except KeyError:
        raise ValueError(f"unknown topology {name!r}: use one of {', '.join(TOPOLOGIES)}") from None


def lambda_2(product: np.ndarray) -> float:
    values = np.linalg.svd(product, compute_uv=False)
    return float(values[1]) if len(values) > 1 else 0.0


def imbalance(product: np.ndarray) -> float:
    n = product.shape[0]
    return float(np.var(product - np.full((n, n), 1.0 / n)))


def mixing_curve(name: str, n: int, steps: int, seed: int = 0) -> list[tuple[float, float]]:
    """``(lambda_2(P_k), imbalance(P_k))`` for ``k = 1 .. steps``."""
    product = np.eye(n)
    curve = []
    for step in range(steps):
        product = mixing_matrix(name, n, seed, step) @ product
        curve.append((lambda_2(product), imbalance(product)))
    return curve
