"""Timing the Channel's primitives on the real network, and fitting links to the timings.

Shared by ``dlcomm calibrate`` (fits ``(alpha, beta)`` per kind of link and writes a network
preset) and ``scripts/bench_real_links.py`` (sets each primitive beside the cost model).

Every rank of a job on one machine reads the same monotonic clock (``perf_counter`` is
CLOCK_MONOTONIC, shared by network namespaces), so an operation's time is measured as in
:mod:`dlcomm.comm.timing`: from the moment its last member entered it to the moment its last
member left it. Across real machines the ranks' clocks differ; there
:func:`time_collective` still bounds the operation by the slowest member's own span after a
barrier, and :func:`pingpong` uses one clock only (half a round trip).

The fit: a message of ``S`` bytes takes ``alpha + S / beta`` (:mod:`dlcomm.comm.cost`), so a
least-squares line through ``(S, t(S))`` gives ``alpha`` as its intercept and ``beta`` as the
inverse of its slope.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from time import perf_counter
from typing import Sequence

import numpy as np
import torch

from dlcomm.comm.channel import Channel

KIB, MIB = 1024, 1024 * 1024


def payload(nbytes: int) -> torch.Tensor:
    """A float32 tensor of ``nbytes`` bytes (rounded down to whole floats, at least one)."""
    return torch.ones(max(1, nbytes // 4), dtype=torch.float32)


def time_collective(channel: Channel, kind: str, nbytes: int, repeats: int) -> list[float]:
    """Seconds per ``kind`` (allreduce | broadcast | allgather) of ``nbytes`` (per rank for
    allgather) over the channel's world, ``repeats`` times; every rank calls it and gets the
    same list: last entry to last exit."""
    tensor = payload(nbytes)
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
    tensor = payload(nbytes)
    times = []
    for _ in range(repeats):
        if me == a:
            started = perf_counter()
            channel.isend(tensor, b).wait()
            channel.irecv(tensor, b).wait()
            times.append((perf_counter() - started) / 2)
        elif me == b:
            channel.irecv(tensor, a).wait()
            channel.isend(tensor, a).wait()
    return times


def _last_to_last(channel: Channel, entered: float, left: float) -> float:
    gathered = channel.allgather(torch.tensor([entered, left], dtype=torch.float64))
    return float(max(float(t[1]) for t in gathered) - max(float(t[0]) for t in gathered))


@dataclass(frozen=True)
class FittedLink:
    """``alpha`` seconds and ``beta`` bytes/s fitted over ``samples`` series, with their spread
    (standard deviation of the per-series fits; 0 for one series)."""

    alpha_s: float
    beta_Bps: float
    alpha_std_s: float
    beta_std_Bps: float
    samples: int


def fit_line(sizes: Sequence[int], times: Sequence[float]) -> tuple[float, float]:
    """``(alpha, beta)`` of the least-squares line ``t = alpha + S / beta``."""
    slope, intercept = np.polyfit(np.asarray(sizes, dtype=float), np.asarray(times, dtype=float), 1)
    return max(0.0, float(intercept)), float(1.0 / slope) if slope > 0 else float("inf")


def fit_link(sizes: Sequence[int], series: Sequence[Sequence[float]]) -> FittedLink:
    """Fit every series (one time per size: a pair of ranks, one repeat) and the median series;
    the link is the median's fit, the spread the per-series fits' standard deviation."""
    fits = [fit_line(sizes, times) for times in series]
    median = [statistics.median(column) for column in zip(*series)]
    alpha, beta = fit_line(sizes, median)
    spread = (lambda values: statistics.stdev(values) if len(values) > 1 else 0.0)
    return FittedLink(alpha, beta, spread([a for a, _ in fits]), spread([b for _, b in fits]), len(series))
