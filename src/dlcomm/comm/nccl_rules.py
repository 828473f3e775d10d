"""NCCL's ordering rules for the in-process fabric (``launcher=threads launcher.semantics=nccl``).

gloo buffers a message and matches it by tag, so a hand-ordered exchange that works on CPUs may
hang on GPUs. Under these rules the fabric behaves as NCCL does (each rule with the document
that states it in ``docs/launchers.md``):

1. **One queue per communicator and rank.** Every operation a rank posts on a group (a
   collective, an ungrouped send or receive, or a batch) waits until the rank's previous
   operation on that group has completed, then starts: operations of one communicator run in
   posting order on one stream. ``job`` and ``world`` are one communicator when the job has no
   service roles (``Cluster.connect`` uses the default group for both).
2. **A batch is one unit** (``dist.batch_isend_irecv``, one ``ncclGroupStart/End``): all its
   messages start together and it completes when all have.
3. **No buffering, no tags.** A send completes only when the matching receive has started on
   its peer; between two ranks the messages of one direction are matched in posting order.
   Sizes must agree.

A collective of a queue's head meets the same collective (by sequence number on the group) of
every member; the last to start performs it (the data operations of :mod:`dlcomm.comm.inprocess`).
Everything happens under the fabric's lock, in whichever thread made the last piece of progress;
the works that completed are returned for the fabric to signal once the lock is released.
"""

from __future__ import annotations

from collections import defaultdict, deque
from dataclasses import dataclass, field
from typing import Any, Callable

import torch


@dataclass(eq=False)
class Op:
    """One operation of a unit: ``kind`` is ``send``, ``recv`` or a collective's kind."""

    kind: str
    work: Any  # dlcomm.comm.inprocess._Work
    peer: int = -1  # p2p: the other rank
    tensor: torch.Tensor | None = None  # p2p: the data
    key: tuple = ()  # collective: (group, members, sequence)
    position: int = -1  # collective: this rank's position in the group
    size: int = 0  # collective: the group's size
    entry: Any = None  # collective: what this rank brings (inprocess._PERFORM's entry)
    unit: "Unit | None" = None

    def describe(self) -> str:
        if self.kind == "send":
            return f"send to rank {self.peer}"
        if self.kind == "recv":
            return f"receive from rank {self.peer}"
        return f"{self.kind} #{self.key[-1]}"


@dataclass(eq=False)
class Unit:
    """What one post put on a queue: a single operation, or a batch of messages."""

    queue: tuple  # (owner, communicator)
    ops: list[Op]
    batch: bool
    remaining: int = 0
    active: bool = False

    def describe(self) -> str:
        shown = ", ".join(op.describe() for op in self.ops[:4]) + (", ..." if len(self.ops) > 4 else "")
        return f"batch [{shown}]" if self.batch else shown


@dataclass
class _Pair:
    sends: deque = field(default_factory=deque)  # started sends not yet matched
    recvs: deque = field(default_factory=deque)  # started receives not yet matched


class NcclRules:
    """The queues, pending messages and meetings of a fabric under NCCL's rules. Every method is
    called with the fabric's lock held."""

    def __init__(self, perform: dict[str, Callable[[list[Any]], None]], settle: Callable[[torch.Tensor], None]) -> None:
        self._perform = perform
        self._settle = settle
        self._queues: dict[tuple, deque[Unit]] = defaultdict(deque)
        self._pairs: dict[tuple, _Pair] = defaultdict(_Pair)
        self._meetings: dict[tuple, dict[int, Op]] = {}
        self.error: str | None = None  # set when ranks broke a rule (sizes, kinds): the job must end

    def post(self, owner: int, communicator: tuple, ops: list[Op], batch: bool) -> list[Any]:
        """Queue ``ops`` as one unit of rank ``owner`` on ``communicator``; the works that
        completed as a consequence (to be signalled by the caller)."""
        unit = Unit((owner, communicator), ops, batch, remaining=len(ops))
        for op in ops:
            op.unit = unit
        queue = self._queues[unit.queue]
        queue.append(unit)
        completed: list[Any] = []
        if len(queue) == 1:
            self._run([unit], completed)
        return completed

    def blocker(self, work: Any) -> str:
        """What ``work`` waits for: its own operation, or the head of its queue it is behind."""
        op: Op | None = getattr(work, "op", None)
        if op is None or op.unit is None:
            return ""
        owner, communicator = op.unit.queue
        if not op.unit.active:
            return f", queued behind its {self._queues[op.unit.queue][0].describe()} on {communicator[0]}"
        if op.kind not in ("send", "recv"):
            return ""
        wanted = "recv" if op.kind == "send" else "send"
        for unit in self._queues.get((op.peer, communicator), ()):
            if any(other.kind == wanted and other.peer == owner for other in unit.ops) and not unit.active:
                head = self._queues[(op.peer, communicator)][0]
                return f", whose match on rank {op.peer} is queued behind rank {op.peer}'s {head.describe()}"
        return f", which rank {op.peer} has not posted"

    # ---- under the lock --------------------------------------------------------------
    def _run(self, units: list[Unit], completed: list[Any]) -> None:
        """Start ``units`` (each the new head of its queue) and everything that follows."""
        todo = deque(units)
        while todo:
            unit = todo.popleft()
            unit.active = True
            finished: list[Unit] = []
            for op in unit.ops:
                self._start(unit.queue[1], unit.queue[0], op, finished)
                if self.error is not None:  # the first broken rule ends the job
                    return
            if not unit.ops:
                finished.append(unit)
            for done in finished:
                completed.extend(op.work for op in done.ops)
                queue = self._queues[done.queue]
                queue.popleft()
                if queue:
                    todo.append(queue[0])

    def _start(self, communicator: tuple, owner: int, op: Op, finished: list[Unit]) -> None:
        if op.kind == "send":
            pair = self._pairs[(communicator, owner, op.peer)]
            if pair.recvs:
                self._deliver(op, pair.recvs.popleft(), owner, finished)
            else:
                pair.sends.append(op)
        elif op.kind == "recv":
            pair = self._pairs[(communicator, op.peer, owner)]
            if pair.sends:
                self._deliver(pair.sends.popleft(), op, op.peer, finished)
            else:
                pair.recvs.append(op)
        else:
            meeting = self._meetings.setdefault(op.key, {})
            other = next(iter(meeting.values()), None)
            if other is not None and other.kind != op.kind:
                self.error = (
                    f"the ranks disagree on operation {op.key[-1]} of group {op.key[0]!r}: {other.kind} and {op.kind}"
                )
                return
            meeting[op.position] = op
            if len(meeting) == op.size:
                del self._meetings[op.key]
                self._perform[op.kind]([meeting[position].entry for position in range(op.size)])
                for member in meeting.values():
                    self._done(member, finished)

    def _deliver(self, send: Op, recv: Op, sender: int, finished: list[Unit]) -> None:
        assert send.tensor is not None and recv.tensor is not None and recv.unit is not None  # posted p2p ops
        if send.tensor.numel() != recv.tensor.numel() or send.tensor.dtype != recv.tensor.dtype:
            self.error = (
                f"rank {sender} sent {send.tensor.numel()} {send.tensor.dtype} elements to a receive of "
                f"{recv.tensor.numel()} {recv.tensor.dtype} on rank {recv.unit.queue[0]} (NCCL matches a pair's "
                "messages in posting order: the two ranks posted them in different orders)"
            )
            return
        recv.tensor.copy_(send.tensor.view_as(recv.tensor))
        self._settle(recv.tensor)
        recv.work.source = sender
        self._done(send, finished)
        self._done(recv, finished)

    @staticmethod
    def _done(op: Op, finished: list[Unit]) -> None:
        assert op.unit is not None  # set when the op was posted
        op.unit.remaining -= 1
        if op.unit.remaining == 0:
            finished.append(op.unit)
