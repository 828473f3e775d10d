"""Per-iteration time split, measured where the work runs (DESIGN: "Time is measured where the
work runs"; the quantities are defined in docs/metrics.md, "The same meaning on CPU and GPU").

A rank's iteration splits into ``time_s`` (the iteration), ``exposed_s`` (time its computation
stood still waiting for communication, in ``Handle.wait``), ``compute_s = time_s - exposed_s``
and ``busy_s`` (time with communication in flight, hidden or not). Where those are read depends
on where the work runs:

* :class:`HostTimer` (CPU): the host's ``perf_counter``. The host runs the computation, so a wait
  blocks the thread that computes; the numbers are the ones the loop and the Channel always took
  (the iteration between two readings, ``OpRecord.blocked_s``, the union of the operations'
  ``[wall_start, wall_end]``).
* :class:`CudaTimer` (CUDA): CUDA events on the rank's compute stream (the current stream when the
  iteration begins). Kernels and NCCL run asynchronously, and NCCL's ``Work.wait()`` makes "the
  currently active CUDA stream" wait for the operation and returns at once on the host (torch's
  distributed docs), so a host clock around it reads ~0. Instead:

  - the iteration: an event recorded when it begins and one when it ends; the end event is
    synchronised (``Event.synchronize``: the host waits for that one stream) and every elapsed
    time of the iteration is read then, once: one host sync per iteration, never a device-wide
    ``torch.cuda.synchronize`` (it would also wait for NCCL's streams);
  - exposed communication: per wait, an event on the compute stream just before ``work.wait()``
    and one after the Handle's wait; the compute stream stalls between them until the transfer
    ends (and, under ``emulate``, until the host has slept to the modelled end);
  - busy communication: per operation issued in the iteration, ``[issue, completion]`` on the
    compute stream's timeline, the union of those. Issue: an event at the Channel's record (the
    NCCL stream waits for the compute stream there, so no transfer starts earlier). Completion:
    the event right after the works' wait when the stream stalled there (the stream resumed when
    the transfer ended: exact); otherwise the transfer had ended by the time the stream reached
    the wait: NCCL's own duration (``TORCH_NCCL_ENABLE_TIMING=1``, ``Work._get_duration()``,
    milliseconds, readable once the work completed) placed after the issue and after the previous
    operation of its group (one communicator's operations run in posting order), capped by the
    point the stream reached the wait; without NCCL's timing, that point (an upper bound, as the
    CPU's "first moment seen complete"). An operation not waited in the iteration completes, at
    the latest, at its end.

The Channel calls :meth:`issued` for every operation it records in an iteration and brackets the
works' wait in ``Handle.wait`` with :meth:`before_wait`, :meth:`transferred` and
:meth:`after_wait`; the loop calls :meth:`begin_iteration` after ``Channel.begin_iteration`` and
:meth:`end_iteration` after ``Channel.end_iteration``.

:class:`StreamClock` is the simulated clock's compute reading on CUDA (:func:`dlcomm.comm.clock.compute_timer`).
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass
from time import perf_counter
from typing import Any, Iterable, Protocol

import torch

# A wait shorter than this (ms) did not stall the compute stream: two back-to-back events differ
# by the timer's resolution (about half a microsecond) and the host's few instructions between them.
STALL_MS = 0.01


@dataclass(slots=True)
class IterationSplit:
    """One iteration's time split, in seconds (docs/metrics.md): ``time_s = compute_s +
    peer_wait_s + exposed_s``, with ``exposed_s`` the communication the rank stood still for and
    ``peer_wait_s`` the time it stood still for its peers (nan where the transport cannot tell
    them apart: then ``exposed_s`` holds both and ``compute_s = time_s - exposed_s``)."""

    time_s: float
    exposed_s: float
    busy_s: float
    peer_wait_s: float = math.nan

    @property
    def compute_s(self) -> float:
        waiting = 0.0 if math.isnan(self.peer_wait_s) else self.peer_wait_s
        return self.time_s - self.exposed_s - waiting


def split_waits(time_s: float, stalled_s: float, comm: Any) -> IterationSplit:
    """``(exposed, peer_wait)`` out of ``stalled_s``, the time the rank's computation stood still
    in waits, given the Channel's :class:`~dlcomm.comm.channel.IterationComm`: the host's share
    spent waiting for peers (at most ``stalled_s``) comes off, the transfers the rank performed
    in its own issuing calls (``carried_s``, counted as compute by the clock) go on."""
    waiting = comm.peer_wait_s
    if math.isnan(waiting):
        return IterationSplit(time_s, min(stalled_s, time_s), comm.busy_s)
    waiting = min(waiting, stalled_s)
    exposed = min(stalled_s - waiting + comm.carried_s, time_s - waiting)
    return IterationSplit(time_s, exposed, comm.busy_s, waiting)


class DeviceTimer(Protocol):
    """What :class:`HostTimer` and :class:`CudaTimer` share: ``before_wait``'s token (a host time,
    or a CUDA wait) goes back to the same timer's ``transferred`` and ``after_wait``."""

    on_device: bool

    def begin_iteration(self) -> None: ...
    def issued(self, record: Any) -> None: ...
    def before_wait(self) -> Any: ...
    def transferred(self, token: Any) -> None: ...
    def after_wait(self, token: Any, record: Any, works: Iterable[Any] = ()) -> None: ...
    def end_iteration(self, comm: Any) -> IterationSplit: ...


def device_timer(device: torch.device) -> DeviceTimer:
    """The timer of a rank computing on ``device``."""
    return CudaTimer(device) if device.type == "cuda" else HostTimer()


class HostTimer:
    """CPU: the host's clock, the numbers the loop and the Channel have always taken."""

    on_device = False

    def __init__(self) -> None:
        self._start = 0.0

    def begin_iteration(self) -> None:
        self._start = perf_counter()

    def issued(self, record: Any) -> None:
        """``record.wall_start`` is the issue time."""

    def before_wait(self) -> float:
        return perf_counter()

    def transferred(self, token: float) -> None:
        """The host returned from the works' wait: ``Channel.poll`` stamps the completion."""

    def after_wait(self, token: float, record: Any, works: Iterable[Any] = ()) -> None:
        record.blocked_s += perf_counter() - token

    def end_iteration(self, comm: Any) -> IterationSplit:
        """``comm``: the Channel's :class:`~dlcomm.comm.channel.IterationComm` of the iteration."""
        return split_waits(perf_counter() - self._start, comm.exposed_s, comm)


class _Wait:
    __slots__ = ("started", "before", "done", "after", "record", "works")

    def __init__(self, started: float) -> None:
        self.started = started
        self.before: Any = None  # events on the compute stream (None: not timed)
        self.done: Any = None
        self.after: Any = None
        self.record: Any = None
        self.works: tuple[Any, ...] = ()


class CudaTimer:
    """CUDA: events on the rank's compute stream (see the module docstring)."""

    on_device = True

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.stream: Any = None  # the compute stream of the current iteration
        self._thread: int | None = None  # the training loop's thread (service threads are not timed)
        self._begin: Any = None  # None: outside an iteration
        self._issues: list[tuple[Any, Any]] = []  # (record, issue event), in issue order
        self._waits: list[_Wait] = []
        self._open = False  # a timed wait is open (nested waits are inside it)
        self._pool: list[Any] = []  # events, reused once the iteration's end was synchronised
        self._used = 0

    def _mark(self) -> Any:
        if self._used == len(self._pool):
            self._pool.append(torch.cuda.Event(enable_timing=True))
        event = self._pool[self._used]
        self._used += 1
        event.record(self.stream)
        return event

    def _timing(self) -> bool:
        return self._begin is not None and threading.get_ident() == self._thread

    def begin_iteration(self) -> None:
        self.stream = torch.cuda.current_stream(self.device)
        self._thread = threading.get_ident()
        self._used = 0
        self._issues, self._waits, self._open = [], [], False
        self._begin = None
        self._begin = self._mark()

    def issued(self, record: Any) -> None:
        if self._timing():
            self._issues.append((record, self._mark()))

    def before_wait(self) -> _Wait:
        wait = _Wait(perf_counter())
        if self._timing() and not self._open:
            self._open = True
            wait.before = self._mark()
        return wait

    def transferred(self, wait: _Wait) -> None:
        if wait.before is not None:
            wait.done = self._mark()

    def after_wait(self, wait: _Wait, record: Any, works: Iterable[Any] = ()) -> None:
        record.blocked_s += perf_counter() - wait.started  # the host's share (~0 under NCCL)
        if wait.before is not None:
            wait.after = self._mark()
            if wait.done is None:  # transferred() not called: the after event is the best bound
                wait.done = wait.after
            wait.record, wait.works = record, tuple(works)
            self._waits.append(wait)
            self._open = False

    def end_iteration(self, comm: Any = None) -> IterationSplit:
        end = self._mark()
        end.synchronize()  # the iteration's one host sync, on the compute stream only
        begin, self._begin = self._begin, None
        time_ms = begin.elapsed_time(end)
        exposed_ms = 0.0
        waited: dict[int, _Wait] = {}
        for wait in self._waits:
            exposed_ms += wait.before.elapsed_time(wait.after)
            waited[id(wait.record)] = wait
        intervals = []
        group_end: dict[str, float] = {}  # the completion of the group's previous operation
        for record, issue in self._issues:
            start = begin.elapsed_time(issue)
            record_wait = waited.get(id(record))
            done = self._completion(begin, start, record_wait, group_end.get(record.group, start), time_ms)
            group_end[record.group] = done
            intervals.append((start, max(start, done)))
        self._issues, self._waits = [], []
        busy = union_length(sorted(intervals)) / 1e3
        if comm is None:
            return IterationSplit(time_ms / 1e3, exposed_ms / 1e3, busy)
        split = split_waits(time_ms / 1e3, exposed_ms / 1e3, comm)
        return IterationSplit(split.time_s, split.exposed_s, busy, split.peer_wait_s)

    @staticmethod
    def _completion(begin: Any, start: float, wait: _Wait | None, previous: float, time_ms: float) -> float:
        """When the operation issued at ``start`` (ms after the iteration began) completed."""
        if wait is None:  # not waited in the iteration: in flight at most until its end
            return time_ms
        reached = begin.elapsed_time(wait.before)
        resumed = begin.elapsed_time(wait.done)
        if resumed - reached > STALL_MS:  # the stream stood still until the transfer ended
            return resumed
        duration = nccl_duration_ms(wait.works)
        if duration is None:
            return reached
        return min(reached, max(start, previous) + duration)


def nccl_duration_ms(works: Iterable[Any]) -> float | None:
    """The longest of NCCL's own durations of ``works`` (ms), None where none has one: NCCL's
    timing is on only with ``TORCH_NCCL_ENABLE_TIMING=1`` (or ``_enable_collectives_timing``),
    other backends have none, and a work not yet completed raises."""
    longest = None
    for work in works:
        get = getattr(work, "_get_duration", None)
        if get is None:
            continue
        try:
            duration = float(get())
        except (RuntimeError, NotImplementedError):
            continue
        longest = duration if longest is None else max(longest, duration)
    return longest


class StreamClock:
    """The simulated clock's compute reading on CUDA: seconds on the compute stream's timeline.

    Each reading records an event on the current stream and synchronises that event (never the
    whole device), and adds the time elapsed since the previous reading's event (summed in float64:
    one interval at a time keeps the events' float32 milliseconds precise). So a reading waits for
    the kernels the rank queued and for the transfers its compute stream was made to wait on, and
    not for NCCL operations still in flight that it did not wait on: ``torch.cuda.synchronize``
    would also wait for those and charge their transfer time as compute. A transfer the stream did
    wait on (``Work.wait()`` in ``Handle.wait``) is not counted either: ``Handle.wait`` reads the
    clock before it and ``VirtualClock.exclude_blocked`` rebases the clock after it, so the stall
    falls between two readings the clock forgets."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self._last: Any = None
        self._seconds = 0.0

    def __call__(self) -> float:
        event = torch.cuda.Event(enable_timing=True)
        event.record(torch.cuda.current_stream(self.device))
        event.synchronize()
        if self._last is not None:
            self._seconds += self._last.elapsed_time(event) / 1e3
        self._last = event
        return self._seconds


def union_length(intervals: list[tuple[float, float]]) -> float:
    """Total length covered by sorted ``(start, end)`` intervals."""
    total, current_start, current_end = 0.0, 0.0, None
    for start, end in intervals:
        if current_end is None or start > current_end:
            if current_end is not None:
                total += current_end - current_start
            current_start, current_end = start, end
        else:
            current_end = max(current_end, end)
    if current_end is not None:
        total += current_end - current_start
    return total
