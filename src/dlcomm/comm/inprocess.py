"""An in-process cluster: every rank a thread, the network a few dictionaries in memory.

:class:`Fabric` is the job's network, shared by its threads; :class:`ThreadTransport` is one
rank's door to it, the transport the Channel runs on under ``launcher=threads``
(:mod:`dlcomm.comm.transport` names the operations).

Collectives: the k-th operation a member issues on a group meets the k-th of every other
member; the last to arrive does the operation for all of them (reads every input, writes every
output) and completes everyone's work. Sums follow gloo's ring algorithms exactly: the tensor is
cut into one chunk per member by gloo's segment arithmetic (:func:`allreduce_chunk`,
:func:`reduce_chunk`) and chunk ``k`` is reduced as ``x_k + (x_{k+1} + (... + x_{k+n-1}))``
over group positions (indices mod ``n``), so a run under threads gives the bits a run of
processes over gloo gives (checked against gloo in tests/test_inprocess.py).

Messages: a send waits in its receiver's mailbox until a receive of the same group and tag
from that sender (or from any) takes it, and a receive waits for such a send; the earliest
posted match wins, so the messages of one sender with one tag arrive in the order sent, and a
send completes when its data has been copied into the receiver's tensor (as gloo's does).

Compute scheduling (:class:`Turns`, ``launcher.compute=serial``): one rank runs at a time, with
all of torch's threads; it hands the turn over when it waits on an operation not yet complete
and gets it back once the operation has completed and the turn comes round (the next ready rank
after the last holder, in rank order). Operations complete inside the call of the rank that
holds the turn, so which ranks are ready at each hand-over follows from program order alone: the
interleaving is deterministic. The process's random generators are saved and restored at every
hand-over, so each rank draws from its own stream, as in a process of its own.

Semantics (``launcher.semantics``): ``gloo`` (the default) as above; ``nccl`` adds NCCL's
ordering rules (:mod:`dlcomm.comm.nccl_rules`: one queue per group and rank, a batch as one unit,
no buffering, no tags), so that an exchange that would hang on GPUs hangs here too. Under both,
a job whose every rank waits and none can proceed is ended within ``hang_timeout_s`` by
:class:`dlcomm.comm.hangs.HangWatch`, with one line naming each rank and what it waits on.

Failure: :meth:`Fabric.abort` ends every pending wait with :class:`JobAborted` (no rank stays
blocked) and every later operation raises it.
"""

from __future__ import annotations

import bisect
import math
import pickle
import threading
from collections import defaultdict
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from time import perf_counter
from typing import Any, Callable, ContextManager, Iterator, Sequence, cast

import torch

from dlcomm.comm.hangs import HangWatch
from dlcomm.comm.nccl_rules import NcclRules, Op
from dlcomm.comm.transport import P2P, Work

SEMANTICS = ("gloo", "nccl")
CONTROL_GROUP = "control"  # always gloo, also on GPU clusters (dlcomm.comm.cluster)

_MAX_SEGMENT_BYTES = 1 << 20  # gloo's AllreduceOptions::kMaxSegmentSize (also its reduce's)


class JobAborted(RuntimeError):
    """Raised in a rank whose job another rank's failure (or an interrupt) has ended."""


class RankKilled(BaseException):
    """``debug.fail_mode=kill`` under threads: this rank stops as a killed process would."""


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _round_up(a: int, b: int) -> int:
    return _cdiv(a, b) * b


def allreduce_chunk(total_bytes: int, element_size: int, members: int) -> int:
    """Elements of one member's chunk in gloo's ring allreduce (gloo/allreduce.cc): the buffer is
    cut into ``S`` segments, ``S`` a multiple of ``n`` and at least ``2n`` and
    ``ceil(bytes / 1 MiB)``, each of ``ceil(bytes / S)`` bytes rounded up to an element; member
    ``k`` owns segments ``k*S/n .. (k+1)*S/n - 1``."""
    max_segment = element_size * max(1, _MAX_SEGMENT_BYTES // element_size)
    segments = _round_up(max(_cdiv(total_bytes, max_segment), 2 * members), members)
    segment_bytes = _round_up(_cdiv(total_bytes, segments), element_size)
    return segments // members * segment_bytes // element_size


def reduce_chunk(total_bytes: int, element_size: int, members: int) -> int:
    """Elements of one member's chunk in gloo's ring reduce (gloo/reduce.cc): segments of
    ``min(ceil(bytes / 2n), 1 MiB)`` bytes rounded up to an element, their number rounded up to
    a multiple of ``n`` and at least ``2n``."""
    max_segment = element_size * max(1, _MAX_SEGMENT_BYTES // element_size)
    segment_bytes = _round_up(min(_cdiv(total_bytes, 2 * members), max_segment), element_size)
    segments = _round_up(max(_cdiv(total_bytes, segment_bytes), 2 * members), members)
    return segments // members * segment_bytes // element_size


def ring_sum(inputs: Sequence[torch.Tensor], chunk: int) -> torch.Tensor:
    """``sum(inputs)`` (flat tensors of one length) with gloo's association: chunk ``k`` (of
    ``chunk`` elements) is ``x_k + (x_{k+1} + (... + x_{k+n-1}))``, indices mod ``n``.

    Folded from the last term, all chunks at once: ``n - 1`` multi-tensor additions (each adds
    chunk ``k`` of input ``(k + j) mod n`` to chunk ``k`` of the sum for every ``k``), so the inputs
    are read once and the Python overhead is ``n`` calls, not ``n^2``."""
    n = len(inputs)
    out = torch.empty_like(inputs[0])
    if n == 1:
        return out.copy_(inputs[0])
    parts = [x.split(chunk) for x in inputs]
    acc = list(out.split(chunk))
    chunks = range(len(acc))
    torch._foreach_copy_(acc, [parts[(k + n - 1) % n][k] for k in chunks])
    for j in range(n - 2, -1, -1):
        torch._foreach_add_(acc, [parts[(k + j) % n][k] for k in chunks])
    return out


def _flat(tensor: torch.Tensor) -> torch.Tensor:
    if not tensor.is_contiguous():
        raise ValueError("the in-process transport needs contiguous tensors (as torch.distributed does)")
    return tensor.view(-1)


def _settle(tensor: torch.Tensor | None) -> None:
    """Make the calling thread's pending GPU work on ``tensor`` visible to the other threads."""
    if tensor is not None and tensor.is_cuda:
        torch.cuda.current_stream(tensor.device).synchronize()


class _Work:
    """One rank's part of an operation. ``started`` and ``finished`` (``perf_counter``, nan until
    known) bound the transfer itself: from the moment every party had posted (the last member of
    a collective, the second side of a message) to the completion. A wait before ``started`` is
    waiting for peers, not communication (:func:`dlcomm.comm.waits.transfer_within`)."""

    __slots__ = ("fabric", "owner", "event", "ok", "source", "what", "op", "started", "finished")

    def __init__(self, fabric: "Fabric", owner: int, what: str = "") -> None:
        self.fabric = fabric
        self.owner = owner
        self.event = threading.Event()
        self.ok = False
        self.source = -1
        self.what = what  # for a hang's message: "send to rank 3 on world"
        self.op: Op | None = None  # under NCCL's rules: the queued operation
        self.started = math.nan
        self.finished = math.nan

    def is_completed(self) -> bool:
        return self.event.is_set()

    def wait(self) -> bool:
        if not self.event.is_set():
            self.fabric.wait(self)
        if not self.ok:
            raise JobAborted(self.fabric.failure or "the job was ended")
        return True


@dataclass
class _Meeting:
    kind: str
    entries: list[Any]
    works: list[Any]
    arrived: int = 0


@dataclass
class _Message:
    peer: int | None  # a send: its sender; a receive: whom it receives from (None: any)
    tag: int
    tensor: torch.Tensor
    work: _Work


@dataclass
class _Mailbox:
    sends: list[_Message] = field(default_factory=list)
    receives: list[_Message] = field(default_factory=list)


class Turns:
    """One rank computes at a time (see the module docstring). Ranks are the threads that
    called :meth:`begin`; other threads (a responder) run freely."""

    def __init__(self, ranks: Sequence[int], swap_rng: bool = True) -> None:
        self._lock = threading.Lock()
        self._wake = {rank: threading.Condition(self._lock) for rank in ranks}
        self._ready: list[int] = sorted(ranks)  # kept sorted
        self._holder: int | None = None
        self._last = -1
        self._blocked: dict[int, _Work] = {}
        self._aborted = False
        self._swap_rng = swap_rng
        self._rng: dict[int, Any] = {}
        self._rng_owner: int | None = None
        self._local = threading.local()

    @property
    def current(self) -> int | None:
        """The rank of the calling thread, None for a thread that is no rank."""
        return getattr(self._local, "rank", None)

    def begin(self, rank: int) -> None:
        """Called by rank ``rank``'s thread before it does anything: wait for its first turn."""
        self._local.rank = rank
        with self._lock:
            self._grant()
            self._wait_for_turn(rank)
        self._take_rng(rank)

    def end(self, rank: int) -> None:
        """Called by the rank's thread when it is finished, whatever the outcome."""
        with self._lock:
            if rank in self._ready:
                self._ready.remove(rank)
            self._blocked.pop(rank, None)
            if self._holder == rank:
                self._release(rank)
        self._local.rank = None

    def block(self, work: _Work) -> None:
        """The calling rank waits for ``work``: the turn goes to the next ready rank meanwhile."""
        rank = self.current
        if rank is None:
            return
        with self._lock:
            if work.event.is_set() or self._aborted:
                return
            self._blocked[rank] = work
            self._release(rank)
            self._wait_for_turn(rank)
        self._take_rng(rank)

    def pass_turn(self) -> None:
        """The calling rank lets every other ready rank go first (at an iteration's start), so
        that ranks that never wait (asynchronous algorithms) still take turns step by step."""
        rank = self.current
        if rank is None:
            return
        with self._lock:
            if self._aborted:
                return
            bisect.insort(self._ready, rank)
            self._release(rank)
            self._wait_for_turn(rank)
        self._take_rng(rank)

    def completed(self, works: Sequence[_Work]) -> None:
        """``works`` completed: the ranks blocked on them are ready."""
        with self._lock:
            for work in works:
                if self._blocked.get(work.owner) is work:
                    del self._blocked[work.owner]
                    bisect.insort(self._ready, work.owner)
            self._grant()

    @contextmanager
    def yielding(self) -> Iterator[None]:
        """Around a wait the fabric does not see (a queue, a thread's end): the turn is handed
        over before and taken back after."""
        rank = self.current
        if rank is None:
            yield
            return
        with self._lock:
            self._release(rank)
        try:
            yield
        finally:
            with self._lock:
                bisect.insort(self._ready, rank)
                self._grant()
                self._wait_for_turn(rank)
            self._take_rng(rank)

    def abort(self) -> None:
        with self._lock:
            self._aborted = True
            for wake in self._wake.values():
                wake.notify_all()

    # ---- under the lock --------------------------------------------------------------
    def _release(self, rank: int) -> None:
        if self._swap_rng:
            self._rng[rank] = _rng_state()
        self._holder = None
        self._last = rank
        self._grant()

    def _grant(self) -> None:
        if self._holder is not None or not self._ready:
            return
        index = bisect.bisect_right(self._ready, self._last) % len(self._ready)
        self._holder = self._ready.pop(index)
        self._wake[self._holder].notify()

    def _wait_for_turn(self, rank: int) -> None:
        while self._holder != rank and not self._aborted:
            self._wake[rank].wait()

    def _take_rng(self, rank: int) -> None:
        if self._swap_rng and self._rng_owner != rank:
            if rank in self._rng:
                _set_rng_state(self._rng[rank])
            self._rng_owner = rank


def _rng_state() -> tuple[torch.Tensor, list[torch.Tensor]]:
    cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_available() and torch.cuda.is_initialized() else []
    return torch.get_rng_state(), cuda


def _set_rng_state(state: tuple[torch.Tensor, list[torch.Tensor]]) -> None:
    cpu, cuda = state
    torch.set_rng_state(cpu)
    if cuda:
        torch.cuda.set_rng_state_all(cuda)


class Fabric:
    """The in-process network of one job, shared by its rank threads."""

    def __init__(
        self,
        turns: Turns | None = None,
        semantics: str = "gloo",
        hang_timeout_s: float = 10.0,
        ranks: int | None = None,
        batched: Any = None,
    ) -> None:
        """``batched``: the job's :class:`dlcomm.train.batched.BatchedCompute` under
        ``launcher.compute=batched`` (the ranks' forward and backward passes as one call), else None."""
        if semantics not in SEMANTICS:
            raise ValueError(f"unknown semantics {semantics!r}; use one of {', '.join(SEMANTICS)}")
        self.turns = turns
        self.batched = batched
        self.semantics = semantics
        self.failure: str | None = None
        self.killed: int | None = None
        self.hang: str | None = None  # the deadlock message, when the hang watch ended the job
        self.alone = threading.Lock()  # ThreadTransport.alone: one rank at a time
        self._lock = threading.Lock()
        self._meetings: dict[tuple, _Meeting] = {}
        self._mailboxes: dict[tuple, _Mailbox] = defaultdict(_Mailbox)
        self._pending: set[_Work] = set()
        self._nccl = NcclRules(_PERFORM, _settle) if semantics == "nccl" else None
        self._progress = 0  # bumped on every post and completion (the hang watch reads it)
        self._alive: dict[int, int] = {}  # rank -> its thread's ident, while the rank runs
        self._started: set[int] = set()  # ranks that ever entered
        self._ranks = ranks  # how many rank threads the job has (None: unknown)
        self._waiting: dict[int, _Work] = {}  # rank -> what its thread waits on
        self._thread_rank = threading.local()  # .rank: the rank whose thread this is
        self._hang_timeout_s = hang_timeout_s
        self._watch: HangWatch | None = None

    # ---- rank threads and hangs ---------------------------------------------------------
    def enter(self, rank: int) -> None:
        """The calling thread is rank ``rank``'s (the hang watch counts it until :meth:`leave`)."""
        self._thread_rank.rank = rank
        with self._lock:
            self._alive[rank] = threading.get_ident()
            self._started.add(rank)
            if self._watch is None and self._hang_timeout_s > 0:
                self._watch = HangWatch(
                    self._hang_timeout_s,
                    lambda: self._progress,
                    self._hang_snapshot,
                    self._describe_wait,
                    self._on_hang,
                    self.semantics,
                )

    def leave(self, rank: int) -> None:
        if getattr(self._thread_rank, "rank", None) == rank:
            self._thread_rank.rank = None
        with self._lock:
            if self._alive.get(rank) == threading.get_ident():
                del self._alive[rank]
            if not self._alive and self._watch is not None:
                self._watch.stop()
                self._watch = None

    def _hang_snapshot(self) -> tuple[set, dict]:
        with self._lock:
            if self.failure is not None or (self._ranks is not None and len(self._started) < self._ranks):
                return set(), {}  # a rank still starting may be the one the others wait for
            return set(self._alive), dict(self._waiting)

    def _describe_wait(self, work: _Work) -> str:
        with self._lock:
            behind = self._nccl.blocker(work) if self._nccl is not None else ""
        return f"{work.what or 'an operation'}{behind}"

    def _on_hang(self, message: str) -> None:
        self.hang = message
        self.abort(message)

    def kill(self, rank: int) -> None:
        """``debug.fail_mode=kill``: rank ``rank`` is gone; the job ends as it would when a
        process is killed (:attr:`killed` names the rank)."""
        with self._lock:
            if self.failure is None and self.killed is None:
                self.killed = rank
        self.abort(f"rank {rank} was killed")

    def abort(self, reason: str) -> None:
        """End the job: every pending and later operation raises :class:`JobAborted`."""
        with self._lock:
            if self.failure is not None:
                return
            self.failure = reason
            self._progress += 1
            pending, self._pending = self._pending, set()
        for work in pending:
            work.event.set()
        if self.turns is not None:
            self.turns.abort()

    def wait(self, work: _Work) -> None:
        rank = self._rank_of_thread()
        if rank is not None:
            with self._lock:
                self._waiting[rank] = work
        try:
            if self.turns is not None:
                self.turns.block(work)
            work.event.wait()
        finally:
            if rank is not None:
                with self._lock:
                    self._waiting.pop(rank, None)

    def _rank_of_thread(self) -> int | None:
        return getattr(self._thread_rank, "rank", None)

    def _check(self) -> None:
        if self.failure is not None:
            raise JobAborted(self.failure)

    def _complete(self, works: Sequence[_Work], started: float) -> None:
        """``works`` are done; their transfer began at ``started`` (every party had posted)."""
        finished = perf_counter()
        with self._lock:
            self._progress += 1
            for work in works:
                self._pending.discard(work)
                work.ok = True
                work.started, work.finished = started, finished
        for work in works:
            work.event.set()
        if self.turns is not None:
            self.turns.completed(works)

    # ---- collectives -------------------------------------------------------------------
    def meet(
        self,
        key: tuple,
        position: int,
        size: int,
        kind: str,
        entry: Any,
        owner: int,
        perform: Callable[[list[Any]], None] | None = None,
    ) -> _Work:
        """Member ``position`` of ``size`` joins the operation ``key`` (group and sequence
        number); the last to join performs it for all: the collective ``kind``, or ``perform``
        (given the entries in position order) where the meeting is no transfer (the batched
        compute of ``launcher.compute=batched``, :mod:`dlcomm.train.batched`). Waiting for it is
        waiting as for any operation: the hang watch sees it and an abort releases it."""
        work = _Work(self, owner, f"{kind} #{key[-1]} on {key[0]}")
        with self._lock:
            self._check()
            self._progress += 1
            meeting = self._meetings.get(key)
            if meeting is None:
                meeting = self._meetings[key] = _Meeting(kind, [None] * size, [None] * size)
            elif meeting.kind != kind:
                raise RuntimeError(
                    f"the ranks disagree on operation {key[-1]} of group {key[0]!r}: {meeting.kind} and {kind}"
                )
            meeting.entries[position] = entry
            meeting.works[position] = work
            meeting.arrived += 1
            last = meeting.arrived == size
            if last:
                del self._meetings[key]
            else:
                self._pending.add(work)
        if last:
            started = perf_counter()
            (perform or _PERFORM[kind])(meeting.entries)
            self._complete(meeting.works, started)
        return work

    # ---- messages ----------------------------------------------------------------------
    def post_send(self, box: tuple, sender: int, tag: int, tensor: torch.Tensor) -> _Work:
        work = _Work(self, sender, f"send to rank {box[-1]} on {box[0]}")
        with self._lock:
            self._check()
            self._progress += 1
            mailbox = self._mailboxes[box]
            receive = _take(mailbox.receives, lambda r: r.tag == tag and r.peer in (None, sender))
            if receive is None:
                mailbox.sends.append(_Message(sender, tag, tensor, work))
                self._pending.add(work)
                return work
        self._deliver(tensor, sender, receive, work)
        return work

    def post_receive(self, box: tuple, receiver: int, src: int | None, tag: int, tensor: torch.Tensor) -> _Work:
        work = _Work(self, receiver, f"receive from {'any rank' if src is None else f'rank {src}'} on {box[0]}")
        with self._lock:
            self._check()
            self._progress += 1
            mailbox = self._mailboxes[box]
            send = _take(mailbox.sends, lambda s: s.tag == tag and (src is None or s.peer == src))
            if send is None:
                mailbox.receives.append(_Message(src, tag, tensor, work))
                self._pending.add(work)
                return work
        assert send.peer is not None  # a send's peer is its sender
        self._deliver(send.tensor, send.peer, _Message(src, tag, tensor, work), send.work)
        return work

    # ---- NCCL's rules ----------------------------------------------------------------------
    def post_unit(self, owner: int, communicator: tuple, ops: list[Op], batch: bool) -> list[_Work]:
        """Queue ``ops`` (their works made by the caller) as one unit under NCCL's rules."""
        with self._lock:
            self._check()
            self._progress += 1
            for op in ops:
                op.work.op = op
                self._pending.add(op.work)
            started = perf_counter()  # what this post completes, it performs now
            assert self._nccl is not None  # only ThreadTransport under semantics=nccl posts units
            completed = self._nccl.post(owner, communicator, ops, batch)
            error = self._nccl.error
        if error is not None:
            self.abort(error)
            raise RuntimeError(error)
        if completed:
            self._complete(completed, started)
        return [op.work for op in ops]

    def _deliver(self, data: torch.Tensor, sender: int, receive: _Message, send_work: _Work) -> None:
        if data.numel() != receive.tensor.numel():
            message = (
                f"rank {sender} sent {data.numel()} elements (tag {receive.tag}) to a receive of "
                f"{receive.tensor.numel()}"
            )
            self.abort(message)
            raise RuntimeError(message)
        started = perf_counter()
        receive.tensor.copy_(data.view_as(receive.tensor))
        _settle(receive.tensor)
        receive.work.source = sender
        self._complete([send_work, receive.work], started)


def _take(messages: list[_Message], matches: Any) -> _Message | None:
    for index, message in enumerate(messages):
        if matches(message):
            return messages.pop(index)
    return None


# ---- what the last member of a meeting does, by kind ---------------------------------------
def _all_reduce(entries: list[tuple[torch.Tensor, str]]) -> None:
    tensors = [_flat(tensor) for tensor, _ in entries]
    if tensors[0].numel() == 0 or len(tensors) == 1:  # the sum (or maximum) of one tensor is itself
        return
    if entries[0][1] == "max":
        result = tensors[0].clone()
        for tensor in tensors[1:]:
            torch.maximum(result, tensor, out=result)
    else:
        result = ring_sum(
            tensors,
            allreduce_chunk(tensors[0].numel() * tensors[0].element_size(), tensors[0].element_size(), len(tensors)),
        )
    for tensor in tensors:
        tensor.copy_(result)
    _settle(result)


def _broadcast(entries: list[tuple[torch.Tensor, int]]) -> None:
    source = entries[0][1]
    for position, (tensor, _) in enumerate(entries):
        if position != source:
            tensor.copy_(entries[source][0])
    _settle(entries[0][0])


def _reduce(entries: list[tuple[torch.Tensor, int]]) -> None:
    tensors = [_flat(tensor) for tensor, _ in entries]
    if tensors[0].numel() == 0 or len(tensors) == 1:  # the sum (or maximum) of one tensor is itself
        return
    root = entries[0][1]
    size = tensors[0].element_size()
    tensors[root].copy_(ring_sum(tensors, reduce_chunk(tensors[0].numel() * size, size, len(tensors))))
    _settle(tensors[root])


def _all_gather(entries: list[tuple[list[torch.Tensor], torch.Tensor]]) -> None:
    for outputs, _ in entries:
        for output, (_, tensor) in zip(outputs, entries):
            output.copy_(tensor)
    _settle(entries[0][1])


def _barrier(entries: list[Any]) -> None:
    pass


def _gather_object(entries: list[tuple[bytes, list[Any] | None]]) -> None:
    for _, gathered in entries:
        if gathered is not None:
            gathered[:] = [pickle.loads(data) for data, _ in entries]


_PERFORM: dict[str, Callable[[list[Any]], None]] = {
    "all_reduce": _all_reduce,
    "broadcast": _broadcast,
    "reduce": _reduce,
    "all_gather": _all_gather,
    "barrier": _barrier,
    "gather_object": _gather_object,
}


class ThreadTransport:
    """Rank ``rank``'s door to ``fabric``, on the groups ``group_ranks`` (name -> global ranks)."""

    name = "threads"
    shares_process = True  # every rank a thread of this process
    times_transfers = True  # works carry their transfer's [started, finished] (dlcomm.comm.waits)

    def __init__(self, fabric: Fabric, rank: int, group_ranks: dict[str, list[int]]) -> None:
        self.fabric = fabric
        self.rank = rank
        self.group_ranks = group_ranks
        self._issued: dict[str, int] = defaultdict(int)
        # torch's default group serves both ``job`` and ``world`` when there are no services:
        # one communicator, one queue under NCCL's rules (dlcomm.comm.cluster.Cluster.connect)
        self._same_as_world = "world" in group_ranks and group_ranks.get("job") == group_ranks["world"]
        fabric.enter(rank)

    def _communicator(self, group: str) -> tuple | None:
        """The queue an operation on ``group`` joins under NCCL's rules; None: gloo's rules
        (the semantics chosen, or the control plane, which is gloo on every cluster)."""
        if self.fabric.semantics != "nccl" or group == CONTROL_GROUP:
            return None
        name = "world" if group == "job" and self._same_as_world else group
        return (name, tuple(self.group_ranks[group]))

    @property
    def computes_alone(self) -> bool:
        """Under serial turns a rank computes with every core and nothing else runs (see
        :mod:`dlcomm.comm.clock`)."""
        return self.fabric.turns is not None

    def _meet(self, group: str, kind: str, entry: Any, settle: torch.Tensor | None = None) -> _Work:
        members = self.group_ranks[group]
        sequence = self._issued[group]
        self._issued[group] = sequence + 1
        _settle(settle)
        key, position = (group, tuple(members), sequence), members.index(self.rank)
        communicator = self._communicator(group)
        if communicator is not None:
            work = _Work(self.fabric, self.rank, f"{kind} #{sequence} on {group}")
            op = Op(kind, work, key=key, position=position, size=len(members), entry=entry)
            return self.fabric.post_unit(self.rank, communicator, [op], batch=False)[0]
        return self.fabric.meet(key, position, len(members), kind, entry, self.rank)

    def _position(self, group: str, rank: int) -> int:
        return self.group_ranks[group].index(rank)

    def all_reduce(self, tensor: torch.Tensor, group: str, op: str = "sum") -> _Work:
        return self._meet(group, "all_reduce", (tensor, op), tensor)

    def broadcast(self, tensor: torch.Tensor, src: int, group: str) -> _Work:
        return self._meet(group, "broadcast", (tensor, self._position(group, src)), tensor)

    def reduce(self, tensor: torch.Tensor, dst: int, group: str) -> _Work:
        return self._meet(group, "reduce", (tensor, self._position(group, dst)), tensor)

    def all_gather(self, outputs: list[torch.Tensor], tensor: torch.Tensor, group: str) -> _Work:
        return self._meet(group, "all_gather", (outputs, tensor), tensor)

    def _box(self, group: str, dst: int) -> tuple:
        return (group, tuple(self.group_ranks[group]), dst)

    def batch(self, ops: list[P2P], group: str) -> list[_Work]:
        """Post ``ops`` as one batch: under NCCL's rules one unit of the group's queue; under
        gloo's each message on its own (matched by pair and posting order: one tag)."""
        communicator = self._communicator(group)
        if communicator is None:
            return [
                self.isend(op.tensor, op.peer, group, 0) if op.send else self.irecv(op.tensor, op.peer, group, 0)
                for op in ops
            ]
        units = [self._p2p(op.send, op.tensor, op.peer, group, f" (a batch of {len(ops)})") for op in ops]
        return self.fabric.post_unit(self.rank, communicator, units, batch=True)

    def _p2p(self, send: bool, tensor: torch.Tensor, peer: int, group: str, note: str = "") -> Op:
        if send:
            _settle(tensor)
        what = f"{'send to' if send else 'receive from'} rank {peer} on {group}{note}"
        return Op("send" if send else "recv", _Work(self.fabric, self.rank, what), peer=peer, tensor=_flat(tensor))

    def isend(self, tensor: torch.Tensor, dst: int, group: str, tag: int) -> _Work:
        """A message on its own: under NCCL's rules an ungrouped send, queued as one unit (the
        tag is ignored, as NCCL has none); under gloo's, matched by tag."""
        communicator = self._communicator(group)
        if communicator is not None:
            return self.fabric.post_unit(self.rank, communicator, [self._p2p(True, tensor, dst, group)], batch=False)[0]
        _settle(tensor)
        return self.fabric.post_send(self._box(group, dst), self.rank, tag, tensor)

    def irecv(self, tensor: torch.Tensor, src: int | None, group: str, tag: int) -> _Work:
        """As :meth:`isend`; ``src=None`` (any source) exists under gloo's rules only."""
        communicator = self._communicator(group)
        if communicator is not None:
            if src is None:
                raise ValueError(f"a receive from any source on group {group!r}: NCCL has none; use the control plane")
            return self.fabric.post_unit(self.rank, communicator, [self._p2p(False, tensor, src, group)], batch=False)[
                0
            ]
        return self.fabric.post_receive(self._box(group, self.rank), self.rank, src, tag, tensor)

    @staticmethod
    def source_rank(work: Work) -> int:
        return cast(_Work, work).source  # a work of this transport's irecv

    def barrier(self, group: str) -> None:
        self._meet(group, "barrier", None).wait()

    def gather_object(self, obj: Any, gathered: list[Any] | None, dst: int, group: str) -> None:
        # pickled, as torch.distributed does: the receiver gets a copy, not the sender's object
        self._meet(group, "gather_object", (pickle.dumps(obj), gathered)).wait()

    def blocking(self) -> ContextManager[None]:
        return self.fabric.turns.yielding() if self.fabric.turns is not None else nullcontext()

    def alone(self) -> ContextManager[Any]:
        """A section no other rank of this process runs at the same time: seeding the process's
        random generator and drawing a model's initial weights from it."""
        return self.fabric.alone

    def pass_turn(self) -> None:
        if self.fabric.turns is not None:
            self.fabric.turns.pass_turn()

    def batched_compute(self) -> Any:
        """This rank's part of the job's batched compute (:class:`dlcomm.train.batched.BatchedCompute`,
        ``launcher.compute=batched``), or None when the ranks step one by one."""
        return None if self.fabric.batched is None else self.fabric.batched.for_rank(self.fabric, self.rank)

    def kill_self(self) -> None:
        """``debug.fail_mode=kill``: the job learns this rank is gone, and this thread stops."""
        self.fabric.kill(self.rank)
        raise RankKilled()

    def close(self) -> None:
        self.fabric.leave(self.rank)
