"""Measuring a compute profile so that other work on the machine moves it as little as possible
(:mod:`dlcomm.train.profile` charges it; docs/network.md, "Compute on the simulated clock").

**The clock.** On a CPU the replica is stepped on **one torch thread** and each instant is read
from **that thread's CPU-time clock** (``CLOCK_THREAD_CPUTIME_ID`` through
``time.pthread_getcpuclockid``): the seconds the thread itself ran. Other processes on the machine
take turns with it, which stretches the wall clock (one CPU hog per core doubles a step's wall
time) but not the thread's own CPU time, so the profile is "one core of this CPU computing alone"
whatever else runs. Autograd runs a CPU backward pass on the thread that called ``backward()``, so
the gradient-ready instants are on the same clock. On CUDA the instants are wall clock after a
device synchronisation (the device's work is what is timed; the host's load moves it only through
launch latency).

**Windows.** After :data:`WARMUP_STEPS` untimed steps the steps are timed in :data:`WINDOWS`
windows of at least :data:`WINDOW_MIN_STEPS` steps and :data:`WINDOW_MIN_S` seconds of wall time
each. A window's figure is its median step ``m_w``. The profile is the median of every step of the
fastest ``ceil(WINDOWS / 2)`` windows (lead, last backward, optimizer and each gradient-ready
instant separately), and its **spread** is ``(max m_w - min m_w) / median m_w`` over those kept
windows: the measurement's own error.

**Too busy to measure.** A measurement is refused (:class:`BusyMachine`, one line naming the way
out) when its spread is above :data:`SPREAD_LIMIT`, or, on a CPU, when the measuring thread ran
less than :data:`MIN_CPU_SHARE` of the wall time (so many runnable tasks that caches and
frequency no longer resemble a machine computing alone: beside one CPU hog per core the thread
runs about 2/3 of the time and its CPU time stays within 10% of the figure alone; beside two per
core it runs about 40% of the time and its CPU time grew up to 29%, docs/benchmarks.md). The
runnable tasks seen (``/proc/loadavg``), the thread's share and the spread are kept in the
profile. ``DLCOMM_PROFILE_BUSY=accept`` in the environment takes such a measurement anyway (a test
suite sharing its cores), its spread and share still in it.
"""

from __future__ import annotations

import contextlib
import math
import os
import socket
import statistics
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterator

import torch

from dlcomm.comm.clock import StepMeter
from dlcomm.errors import UserError

WARMUP_STEPS = 3
WINDOWS = 8
WINDOW_MIN_STEPS = 2
WINDOW_MIN_S = 0.4
MAX_STEPS = 200
SPREAD_LIMIT = 0.15
MIN_CPU_SHARE = 0.5
ACCEPT_BUSY = (
    "DLCOMM_PROFILE_BUSY"  # =accept: use (and cache) a busy machine's measurement anyway (test suites on shared cores)
)
METHOD = 2  # 1: all threads, wall clock, median of every step (profiles before issue 56)


class BusyMachine(UserError):
    """The machine was too busy for a measurement to be trusted (see the module docstring)."""


@dataclass(frozen=True)
class Measurement:
    """The medians of the kept windows' steps (seconds) and what the measurement saw."""

    lead_s: float
    backward_s: float
    optimizer_s: float
    ready_s: tuple[float, ...]
    steps: int
    windows: int
    spread: float
    clock: str
    threads: int
    cpu_share: float  # the measuring thread's CPU time over the wall time (CPU only; 1.0 on CUDA)
    runnable: int  # the most runnable tasks /proc/loadavg showed while measuring (0: unknown)
    cores: int
    measured_at: str
    host: str


def cores_here() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def runnable_tasks() -> int:
    """Tasks running or ready to run on the machine now (the 4th field of ``/proc/loadavg``
    counts this one); 0 where it cannot be read."""
    with contextlib.suppress(OSError, ValueError, IndexError):
        return int(Path("/proc/loadavg").read_text().split()[3].split("/")[0])
    return 0


def measuring_thread_count(device: torch.device) -> int:
    """The torch thread count a profile is measured with: 1 on a CPU (the module docstring), all
    this process's cores on CUDA (host work only)."""
    return 1 if device.type == "cpu" else cores_here()


@contextlib.contextmanager
def measuring_threads(device: torch.device) -> Iterator[int]:
    """torch's thread count set to :func:`measuring_thread_count`, given back after; the count."""
    previous = torch.get_num_threads()
    threads = measuring_thread_count(device)
    torch.set_num_threads(threads)
    try:
        yield threads
    finally:
        torch.set_num_threads(previous)


class _Stopwatch(StepMeter):
    """Records a step's instants on the profile's clock, and its wall time."""

    def __init__(self, model: torch.nn.Module, device: torch.device) -> None:
        self._device = device
        if device.type == "cuda":
            self.clock = "wall clock, CUDA synchronized"
            self._read: Callable[[], float] = self._cuda_now
        else:
            # read from any thread (a hook runs where autograd calls it): always the measuring thread's clock
            clock_id = time.pthread_getcpuclockid(threading.get_ident())
            self.clock = "thread CPU time"
            self._read = lambda: time.clock_gettime(clock_id)
        self._params = [p for p in model.parameters() if p.requires_grad]
        self.ready: list[float] = [math.nan] * len(self._params)
        self._last = False
        for index, param in enumerate(self._params):
            param.register_post_accumulate_grad_hook(self._hook(index))

    def _cuda_now(self) -> float:
        torch.cuda.synchronize(self._device)
        return time.perf_counter()

    def _hook(self, index: int) -> Callable[[torch.Tensor], None]:
        def ready(param: torch.Tensor) -> None:
            if self._last:
                self.ready[index] = self._read()

        return ready

    def step_begins(self, step: int) -> None:
        self.ready = [math.nan] * len(self._params)
        self.wall_start = time.perf_counter()
        self.start = self._read()

    def backward_begins(self, last: bool) -> None:
        if last:
            self._last = True
            self.backward_start = self._read()

    def backward_ends(self, last: bool) -> None:
        if last:
            self._last = False
            self.backward_end = self._read()

    def step_ends(self) -> None:
        self.end = self._read()
        self.wall_end = time.perf_counter()

    def sample(self) -> "_Step":
        ready = tuple(r - self.backward_start if math.isfinite(r) else 0.0 for r in self.ready)
        return _Step(
            self.backward_start - self.start,
            self.backward_end - self.backward_start,
            self.end - self.backward_end,
            ready,
            self.wall_end - self.wall_start,
        )


@dataclass(frozen=True)
class _Step:
    lead: float
    backward: float
    optimizer: float
    ready: tuple[float, ...]
    wall: float

    @property
    def total(self) -> float:
        return self.lead + self.backward + self.optimizer


def _alone() -> Any:
    """An algorithm whose hooks all do nothing (the base class's): a replica that communicates with no one."""
    from dlcomm.algorithms.base import Algorithm

    alone = Algorithm.__new__(Algorithm)  # no cluster or channel: none of its hooks uses them
    alone.accumulating = False
    return alone


def measure_step(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    loss_fn: Callable[..., torch.Tensor],
    batches: Iterator[tuple[torch.Tensor, torch.Tensor]],
    device: torch.device,
    micro_batches: int = 1,
    precision: Any = None,
    progress: Callable[[str], None] | None = None,
    check_load: bool = True,
) -> Measurement:
    """Step ``model`` alone on ``batches`` in windows (the module docstring); the kept windows'
    medians. Raises :class:`BusyMachine` when the machine was too busy (``check_load``)."""
    from dlcomm.train.loop import hooked_step
    from dlcomm.train.precision import FULL

    with measuring_threads(device) as threads:
        watch = _Stopwatch(model, device)
        alone = _alone()
        step = 0
        runnable = 0

        def one_step() -> _Step:
            nonlocal step
            inputs, labels = next(batches)
            inputs, labels = inputs.to(device), labels.to(device)
            hooked_step(
                alone, model, optimizer, loss_fn, inputs, labels, step, micro_batches, precision or FULL, meter=watch
            )
            step += 1
            return watch.sample()

        for _ in range(WARMUP_STEPS):
            one_step()
        windows: list[list[_Step]] = []
        per_window = max(WINDOW_MIN_STEPS, MAX_STEPS // WINDOWS)
        for index in range(WINDOWS):
            window: list[_Step] = []
            started = time.perf_counter()
            while len(window) < WINDOW_MIN_STEPS or (
                time.perf_counter() - started < WINDOW_MIN_S and len(window) < per_window
            ):
                window.append(one_step())
            runnable = max(runnable, runnable_tasks())
            windows.append(window)
            if progress is not None:
                progress(
                    f"window {index + 1} of {WINDOWS}: {statistics.median(s.total for s in window) * 1e3:.2f} ms per step"
                )
    every = [s for window in windows for s in window]
    share = 1.0 if device.type == "cuda" else min(1.0, sum(s.total for s in every) / sum(s.wall for s in every))
    medians = [statistics.median(s.total for s in window) for window in windows]
    kept_at = sorted(range(WINDOWS), key=medians.__getitem__)[: math.ceil(WINDOWS / 2)]
    kept = [s for at in kept_at for s in windows[at]]
    kept_medians = [medians[at] for at in kept_at]
    spread = (max(kept_medians) - min(kept_medians)) / statistics.median(kept_medians)
    found = Measurement(
        lead_s=statistics.median(s.lead for s in kept),
        backward_s=statistics.median(s.backward for s in kept),
        optimizer_s=statistics.median(s.optimizer for s in kept),
        ready_s=tuple(statistics.median(s.ready[i] for s in kept) for i in range(len(watch.ready))),
        steps=len(kept),
        windows=len(kept_at),
        spread=spread,
        clock=f"{watch.clock}, {threads} thread{'s' if threads > 1 else ''}",
        threads=threads,
        cpu_share=share,
        runnable=runnable,
        cores=cores_here(),
        measured_at=datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        host=socket.gethostname(),
    )
    if check_load:
        refuse_if_busy(found)
    return found


def busy_reason(found: Any) -> str:
    """Why ``found`` (a :class:`Measurement` or a profile: ``spread``, ``cpu_share``, ``runnable``,
    ``cores``) was measured on a machine too busy to trust it; "" when it was not."""
    load = f"{found.runnable} runnable tasks on {found.cores} cores" if found.runnable else "load unknown"
    if found.spread > SPREAD_LIMIT:
        return f"its windows differ by {found.spread:.0%} (limit {SPREAD_LIMIT:.0%}; {load})"
    if 0 <= found.cpu_share < MIN_CPU_SHARE:
        return (
            f"the measuring thread ran {found.cpu_share:.0%} of the time (at least {MIN_CPU_SHARE:.0%} needed; {load})"
        )
    return ""


def refuse_if_busy(found: Measurement) -> None:
    """Raise :class:`BusyMachine` when ``found`` was measured on a machine too busy to trust it."""
    reason = busy_reason(found)
    if reason and os.environ.get(ACCEPT_BUSY, "") != "accept":
        raise BusyMachine(
            f"the machine is too busy to measure a compute profile: {reason}; nothing was cached; measure when it "
            "is quieter (`dlcomm profile <overrides> --fresh`), set the step yourself (network.compute_ms=<ms>), "
            f"or pass a profile (network.compute_profile=<file or shipped name>); {ACCEPT_BUSY}=accept takes it anyway"
        )
