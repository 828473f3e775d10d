"""The clock a rank's modelled communication runs on.

* :class:`WallClock` (``network.mode=emulate``): the machine's monotonic clock, shared by every
  process on this machine. Waiting until a modelled completion time sleeps.
* :class:`VirtualClock` (``network.mode=simulate``): a per-rank clock that only moves while the
  rank trains (inside an iteration) and only by (a) its compute time and (b) waiting for
  modelled communication. Compute is measured as wall time when the rank has its cores to itself
  while it computes (``launcher=threads`` with serial compute turns; a process whose machine's
  cores cover every local rank's torch threads), else as CPU time, so that many ranks sharing a
  few cores do not slow each other's clocks: the calling thread's CPU time when torch runs one
  thread per rank (the CPU autograd engine runs backward on the calling thread, and the
  communication library's own threads are not compute), the whole process's CPU time when torch
  runs several; on a GPU, time on the rank's compute stream: each reading records an event on the
  current stream and synchronises that event, never the whole device
  (:class:`~dlcomm.comm.device_timing.StreamClock`). That is right although ``Work.wait()`` under
  NCCL makes the compute stream wait for the transfer: ``Handle.wait`` reads the clock before the
  wait and ``exclude_blocked`` rebases it after, so the stall lies between two readings the clock
  forgets; and NCCL operations the stream has not waited on (still in flight, hidden behind
  compute) do not delay a reading, as a device-wide ``torch.cuda.synchronize`` would, charging
  their transfer time as compute on top of the modelled time.

``now()`` reads the clock; ``advance_to(t)`` makes it read at least ``t`` (sleep or jump);
``exclude(since)`` forgets the compute measured while blocked in a real transfer (simulate).
"""

from __future__ import annotations

import time
from time import perf_counter
from typing import Callable

import torch

from dlcomm.comm.device_timing import StreamClock


class StepMeter:
    """What :func:`dlcomm.train.loop.hooked_step` tells about the step it runs; nothing by
    default. ``last`` marks the step's last backward pass (the one gradient hooks communicate on).
    A simulated clock whose compute comes from a profile
    (:class:`dlcomm.train.profile.ProfiledCompute`) moves at these instants."""

    def step_begins(self, step: int) -> None:
        pass

    def backward_begins(self, last: bool) -> None:
        pass

    def backward_ends(self, last: bool) -> None:
        pass

    def step_ends(self) -> None:
        pass


NO_METER = StepMeter()


class WallClock:
    """Real time; ``advance_to`` sleeps until the clock reads ``t``."""

    simulated = False

    def now(self) -> float:
        return perf_counter()

    def advance_to(self, t: float) -> None:
        remaining = t - perf_counter()
        if remaining > 0:
            time.sleep(remaining)

    def exclude_blocked(self, reading_before: float) -> None:
        pass

    def pause(self) -> None:
        pass

    def resume(self) -> None:
        pass


def compute_timer(device: torch.device, alone: bool = False) -> Callable[[], float]:
    """The per-rank compute clock of simulate mode (see the module docstring); ``alone``: the
    rank has its cores to itself while it computes."""
    if device.type == "cuda":
        return StreamClock(device)
    if alone:
        return perf_counter
    return time.thread_time if torch.get_num_threads() == 1 else time.process_time


class VirtualClock:
    """``now() = base + scale (compute() - mark)`` while running; only compute and modelled
    waits move it. ``scale`` (``network.compute_scale``) models devices faster (< 1) or slower
    (> 1) than the one measured, leaving the modelled communication as it is. Starts paused at
    0: the loop resumes it at the start of every iteration and pauses it at the end, so time
    outside iterations (data loading, evaluation) never counts."""

    simulated = True

    def __init__(self, compute: Callable[[], float], scale: float = 1.0) -> None:
        self._compute = compute
        self._scale = scale
        self._base = 0.0
        self._mark: float | None = None  # compute() reading when last rebased; None: paused

    def now(self) -> float:
        if self._mark is None:
            return self._base
        return self._base + self._scale * (self._compute() - self._mark)

    def _rebase(self, value: float) -> None:
        self._base = value
        if self._mark is not None:
            self._mark = self._compute()

    def advance_to(self, t: float) -> None:
        self._rebase(max(self.now(), t))

    def exclude_blocked(self, reading_before: float) -> None:
        """Set the clock back to ``reading_before`` (taken before blocking in a real transfer):
        what the CPU did while blocked is the network's work, not the model's compute."""
        self._rebase(reading_before)

    def pause(self) -> None:
        self._base, self._mark = self.now(), None

    def resume(self) -> None:
        if self._mark is None:
            self._mark = self._compute()
