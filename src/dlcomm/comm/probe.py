"""Timing the Channel's primitives on the real network.

Shared by ``dlcomm calibrate`` (:mod:`dlcomm.calibrate` fits ``(alpha, beta)`` per kind of link
and writes a network preset) and ``scripts/bench_real_links.py`` (sets each primitive beside the
cost model).

Every rank of a job on one machine reads the same monotonic clock (``perf_counter`` is
CLOCK_MONOTONIC, shared by network namespaces), so an operation's time is measured as in
:mod:`dlcomm.comm.timing`: from the moment its last member entered it to the moment its last
member left it. Across real machines the clocks differ: :func:`time_collective` is for hosts of
one machine; :func:`pingpong` reads one clock only (half a round trip) and works anywhere.
"""

from __future__ import annotations

from time import perf_counter

import torch

from dlcomm.comm.channel import Channel


def payload(nbytes: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """A float32 tensor of ``nbytes`` bytes (rounded down to whole floats, at least one) on
    ``device`` (the cluster's: NCCL carries CUDA tensors only)."""
    return torch.ones(max(1, nbytes // 4), dtype=torch.float32, device=device)


def time_collective(channel: Channel, kind: str, nbytes: int, repeats: int) -> list[float]:
    """Seconds per ``kind`` (allreduce | broadcast | allgather) of ``nbytes`` (per rank for
    allgather) over the channel's world, ``repeats`` times; every rank calls it and gets the
    same list: last entry to last exit."""
    tensor = payload(nbytes, channel.cluster.device)
    spans = []
    for _ in range(repeats):
        channel.barrier()
        entered = perf_counter()
        if kind == "allreduce":
            channel.allreduce(tensor, average=False)
        elif kind == "broadcast":
            channel.broadcast(tensor, src=0)
        elif kind == "allgather":
            channel.allgather(tensor)
        else:
            raise ValueError(f"unknown collective {kind!r}")
        left = perf_counter()
        spans.append(_last_to_last(channel, entered, left))
    return spans


def pingpong(channel: Channel, a: int, b: int, nbytes: int, repeats: int) -> list[float]:
    """One-way seconds of an ``nbytes`` message between ranks ``a`` and ``b`` (half a round
    trip, timed on ``a``'s clock), ``repeats`` times; ``a`` and ``b`` call it, the others not."""
    me = channel.cluster.rank
    tensor = payload(nbytes, channel.cluster.device)
    times = []
    for _ in range(repeats):
        if me == a:
            started = perf_counter()
            channel.exchange(sends=[(tensor, b)]).wait()
            channel.exchange(recvs=[(tensor, b)]).wait()
            times.append((perf_counter() - started) / 2)
        elif me == b:
            channel.exchange(recvs=[(tensor, a)]).wait()
            channel.exchange(sends=[(tensor, a)]).wait()
    return times


def _last_to_last(channel: Channel, entered: float, left: float) -> float:
    gathered = channel.allgather(torch.tensor([entered, left], dtype=torch.float64, device=channel.cluster.device))
    return float(max(float(t[1]) for t in gathered) - max(float(t[0]) for t in gathered))
