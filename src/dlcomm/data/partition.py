"""Per-epoch partition of the training set among the ranks."""

from __future__ import annotations

import torch

_MASK64 = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15  # odd multiplier that spreads seeds apart


def epoch_seed(seed: int, epoch: int) -> int:
    """The generator seed of ``epoch`` under run ``seed``: a 64-bit value, equal on every rank.

    torch's CPU generator uses only the low 32 bits, ``seed * 0x7F4A7C15 + epoch (mod 2**32)``,
    which still differ between the epochs of a run and between small run seeds."""
    return (seed * _GOLDEN + epoch) & _MASK64


def epoch_permutation(num_samples: int, seed: int, epoch: int) -> torch.Tensor:
    """A permutation of ``range(num_samples)`` (int64) that depends only on ``(seed, epoch)``."""
    generator = torch.Generator().manual_seed(epoch_seed(seed, epoch))
    return torch.randperm(num_samples, generator=generator, dtype=torch.int64)


def epoch_partition(num_samples: int, world_size: int, rank: int, seed: int, epoch: int) -> torch.Tensor:
    """Indices of the training samples that ``rank`` visits in ``epoch``, in visiting order.

    Every rank draws the same permutation ``perm`` of ``range(num_samples)`` from a generator
    seeded with ``(seed, epoch)``, so each epoch reshuffles yet all ranks agree without talking.
    ``perm`` is cut to ``total = num_samples - num_samples % world_size`` elements and rank ``r``
    gets ``perm[r:total:world_size]`` (DistributedSampler-style interleaving). Hence:

    * the partitions of the ranks are disjoint, all of length ``total // world_size``, and
      together cover ``perm[:total]``;
    * the result is a fresh int64 tensor, identical for identical arguments;
    * key property: with a batch of ``B`` samples per rank and ``n = world_size`` ranks, the union
      of the ranks' ``t``-th batches (``part[t*B:(t+1)*B]`` on each rank) equals
      ``perm[t*B*n:(t+1)*B*n]``, i.e. the same global batch that a single worker with batch
      ``B*n`` sees as its ``t``-th batch: ``epoch_partition(num_samples, 1, 0, seed, epoch)`` is
      ``perm`` itself, and both sides have ``num_samples // (B*n)`` full batches. Dropping the
      last incomplete batch, data-parallel runs with any ``n`` train on the same global batches.
    """
    if world_size < 1:
        raise ValueError(f"world_size must be >= 1, got {world_size}")
    if not 0 <= rank < world_size:
        raise ValueError(f"rank must be in [0, {world_size}), got {rank}")
    if num_samples < 0:
        raise ValueError(f"num_samples must be >= 0, got {num_samples}")
    perm = epoch_permutation(num_samples, seed, epoch)
    total = num_samples - num_samples % world_size
    return perm[rank:total:world_size].clone()
