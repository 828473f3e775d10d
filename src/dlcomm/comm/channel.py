"""The Channel: every algorithm's only path to the network.

An algorithm asks the Channel for a primitive on a named group (``world``, ``intra``,
``leaders``) and gets a :class:`Handle` back. The Channel records every operation (kind,
group, payload, bytes and messages this rank sent, start, end, time blocked) and folds the
operations of one training iteration into an :class:`IterationComm`:

* ``exposed_s``: wall time the rank spent blocked in :meth:`Handle.wait` during the iteration,
  i.e. communication that was not hidden behind computation;
* ``busy_s``: length of the union of the operations' ``[start, end]`` intervals, i.e. wall
  time during which at least one operation was in flight (hidden or not);
* ``bytes_sent`` and ``messages``: this rank's logical traffic, from :mod:`dlcomm.comm.traffic`.

Operations issued outside an iteration (initial broadcast, metric gathering) are recorded
under their own phase and never counted in an iteration.
"""

from __future__ import annotations

import math
import threading
from collections import defaultdict
from contextlib import contextmanager
from dataclasses import dataclass, field
from time import perf_counter
from typing import Any, Iterator

import torch
import torch.distributed as dist

from dlcomm.comm import traffic
from dlcomm.comm.cluster import Cluster


@dataclass(slots=True)
class OpRecord:
    kind: str
    group: str
    phase: str
    payload_bytes: int
    bytes_sent: int
    messages: int
    start: float
    end: float = math.nan
    blocked_s: float = 0.0


@dataclass(frozen=True)
class IterationComm:
    exposed_s: float
    busy_s: float
    bytes_sent: int
    messages: int
    ops: int


@dataclass
class OpTotals:
    count: int = 0
    bytes_sent: int = 0
    messages: int = 0


class Handle:
    """An operation in flight. :meth:`wait` blocks until it completes and returns its tensor."""

    __slots__ = ("_work", "_record", "_tensor", "_divisor", "_done")

    def __init__(self, work: Any, record: OpRecord, tensor: torch.Tensor | None, divisor: int = 1):
        self._work = work
        self._record = record
        self._tensor = tensor
        self._divisor = divisor
        self._done = False
        _stamp_completion(work, record)

    def wait(self) -> torch.Tensor | None:
        if not self._done:
            started = perf_counter()
            self._work.wait()
            finished = perf_counter()
            self._record.blocked_s += finished - started
            if math.isnan(self._record.end):
                self._record.end = finished
            if self._divisor != 1 and self._tensor is not None:
                self._tensor.div_(self._divisor)
            self._done = True
        return self._tensor


def _stamp_completion(work: Any, record: OpRecord) -> None:
    """Record the moment the operation really completes, not the moment someone waited on it."""

    def stamp(_future: Any) -> None:
        record.end = perf_counter()

    try:
        work.get_future().then(stamp)
    except (RuntimeError, AttributeError):  # a backend without futures: wait() stamps the end
        pass


class Channel:
    """Named-group collectives and point-to-point messages, each one recorded."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.totals: dict[tuple[str, str, str], OpTotals] = defaultdict(OpTotals)
        self._phase = "setup"
        self._iteration_ops: list[OpRecord] = []
        self._lock = threading.Lock()

    # ---- phases and accounting -------------------------------------------------------
    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        previous, self._phase = self._phase, name
        try:
            yield
        finally:
            self._phase = previous

    def begin_iteration(self) -> None:
        with self._lock:
            self._iteration_ops = []
        self._phase = "train"

    def end_iteration(self) -> IterationComm:
        now = perf_counter()
        with self._lock:
            ops, self._iteration_ops = self._iteration_ops, []
        self._phase = "idle"
        intervals = sorted((op.start, op.end if not math.isnan(op.end) else now) for op in ops)
        return IterationComm(
            exposed_s=sum(op.blocked_s for op in ops),
            busy_s=_union_length(intervals),
            bytes_sent=sum(op.bytes_sent for op in ops),
            messages=sum(op.messages for op in ops),
            ops=len(ops),
        )

    def _record(self, kind: str, group: str, tensor: torch.Tensor, sent: tuple[int, int]) -> OpRecord:
        record = OpRecord(
            kind=kind,
            group=group,
            phase=self._phase,
            payload_bytes=tensor.numel() * tensor.element_size(),
            bytes_sent=sent[0],
            messages=sent[1],
            start=perf_counter(),
        )
        with self._lock:
            totals = self.totals[(record.phase, kind, group)]
            totals.count += 1
            totals.bytes_sent += record.bytes_sent
            totals.messages += record.messages
            if record.phase == "train":
                self._iteration_ops.append(record)
        return record

    # ---- groups ----------------------------------------------------------------------
    def group_size(self, group: str = "world") -> int:
        return len(self.cluster.ranks(group))

    def _group(self, group: str) -> Any:
        self.cluster.ranks(group)  # raises a clear error for a group this rank is not in
        return self.cluster.groups[group]

    def _position(self, group: str, root: int) -> int:
        members = self.cluster.ranks(group)
        return (members.index(self.cluster.rank) - members.index(root)) % len(members)

    @staticmethod
    def _finish(handle: Handle, async_op: bool) -> Handle | torch.Tensor | None:
        return handle if async_op else handle.wait()

    # ---- primitives ------------------------------------------------------------------
    def allreduce(self, tensor: torch.Tensor, group: str = "world", average: bool = True, async_op: bool = False):
        """In place: ``tensor <- sum (or mean) of tensor over the group``."""
        size = self.group_size(group)
        record = self._record("allreduce", group, tensor, traffic.ring_allreduce(tensor.numel() * tensor.element_size(), size))
        work = dist.all_reduce(tensor, op=dist.ReduceOp.SUM, group=self._group(group), async_op=True)
        return self._finish(Handle(work, record, tensor, size if average else 1), async_op)

    def broadcast(self, tensor: torch.Tensor, src: int, group: str = "world", async_op: bool = False):
        """In place: every member's ``tensor <- tensor of global rank src``."""
        nbytes = tensor.numel() * tensor.element_size()
        sent = traffic.tree_broadcast(nbytes, self.group_size(group), self._position(group, src))
        record = self._record("broadcast", group, tensor, sent)
        work = dist.broadcast(tensor, src=src, group=self._group(group), async_op=True)
        return self._finish(Handle(work, record, tensor), async_op)

    def reduce(self, tensor: torch.Tensor, dst: int, group: str = "world", average: bool = False, async_op: bool = False):
        """``tensor`` of global rank ``dst`` <- sum (or mean) over the group; others' tensors are scratch."""
        size = self.group_size(group)
        nbytes = tensor.numel() * tensor.element_size()
        record = self._record("reduce", group, tensor, traffic.tree_reduce(nbytes, size, self._position(group, dst)))
        work = dist.reduce(tensor, dst=dst, op=dist.ReduceOp.SUM, group=self._group(group), async_op=True)
        divisor = size if (average and self.cluster.rank == dst) else 1
        return self._finish(Handle(work, record, tensor, divisor), async_op)

    def isend(self, tensor: torch.Tensor, dst: int, group: str = "world") -> Handle:
        record = self._record("send", group, tensor, traffic.point_to_point(tensor.numel() * tensor.element_size()))
        return Handle(dist.isend(tensor, dst=dst, group=self._group(group)), record, tensor)

    def irecv(self, tensor: torch.Tensor, src: int, group: str = "world") -> Handle:
        record = self._record("recv", group, tensor, (0, 0))
        return Handle(dist.irecv(tensor, src=src, group=self._group(group)), record, tensor)

    def gather_objects(self, obj: Any, dst: int = 0) -> list[Any] | None:
        """Pickled gather for metrics and logs (not modelled, not counted in iterations)."""
        gathered = [None] * self.cluster.world_size if self.cluster.rank == dst else None
        with self.phase("metrics"):
            dist.gather_object(obj, gathered, dst=dst)
        return gathered

    def barrier(self) -> None:
        dist.barrier()


def _union_length(intervals: list[tuple[float, float]]) -> float:
    """Total length covered by sorted ``(start, end)`` intervals."""
    total, current_start, current_end = 0.0, None, None
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
