"""The Channel: every algorithm's only path to the network.

An algorithm asks the Channel for a primitive on a named group (``world``, ``intra``,
``leaders``) and gets a :class:`Handle` back. The Channel records every operation
(:class:`OpRecord`: kind, group, bytes and messages this rank sent, wall start and end, time
blocked, and under a network model its modelled start, end and duration) and folds the
operations of one training iteration into an :class:`IterationComm`.

Network model (``network.mode``, see :mod:`dlcomm.comm.network` and :mod:`dlcomm.comm.clock`):

* ``off``: operations take the time they really take; nothing is modelled.
* ``emulate`` and ``simulate``: every operation issued inside an iteration also gets a modelled
  completion time on the run's clock (wall clock in emulate, a per-rank virtual clock in
  simulate), and waiting on it advances the clock to at least that time (emulate sleeps,
  simulate jumps). Clocks travel with the data:

  - a collective's entry clocks are max-reduced over the group (a one-number allreduce issued
    beside the payload), and it ends at ``max(entry clocks) + modelled`` on every member;
    operations on one group run one after the other, so an operation starts no earlier than the
    previous one on its group ended;
  - a send carries its start clock (a one-number message just before the payload, in the same
    batch: :meth:`Channel.exchange`); sends of one rank leave one after the other; the receiver's clock becomes
    ``max(own, sender's start + modelled)``.

  An iteration's ``modelled_s`` sums the modelled durations of the collectives this rank joined
  and of the messages it sent: a point-to-point message counts once, at its sender, as its bytes
  do (a pull, :mod:`dlcomm.comm.control`, is counted by the puller: its answer is not modelled).
  The answer's bytes are counted at its sender all the same, in ``bytes_sent`` of the iteration
  during which its responder sent it.

Operations issued outside an iteration (initial broadcast, evaluation, metric gathering) are
recorded under their own phase, never modelled and never counted in an iteration.
"""

from __future__ import annotations

import math
import threading
from collections import defaultdict, deque
from contextlib import contextmanager
from dataclasses import dataclass
from time import perf_counter
from typing import Any, Callable, Iterator, Sequence

import torch

from dlcomm.comm import traffic
from dlcomm.comm.clock import NO_METER, StepMeter, VirtualClock, WallClock, compute_timer
from dlcomm.comm.cluster import Cluster
from dlcomm.comm.device_timing import device_timer, union_length
from dlcomm.comm.network import NetworkModel
from dlcomm.comm.timing import UNMODELLED, ModelledTiming, Timing
from dlcomm.comm.transport import P2P
from dlcomm.comm.waits import peer_wait, transfer_within
from dlcomm.config.schema import NetworkConfig


@dataclass(slots=True)
class OpRecord:
    kind: str
    group: str
    phase: str
    payload_bytes: int
    bytes_sent: int
    messages: int
    wall_start: float
    wall_end: float = math.nan  # first moment the transfer was seen complete (see Channel.poll)
    blocked_s: float = 0.0  # wall time blocked in wait() (emulate: the sleep included)
    # Under a network model, on the run's clock (nan when not modelled):
    start: float = math.nan  # this rank's entry
    ready: float = math.nan  # modelled start: all members in, the link free
    end: float = math.nan  # modelled completion (or later, when the real transfer overran it)
    modelled_s: float = math.nan  # modelled duration, from dlcomm.comm.cost
    exposed_s: float = 0.0  # clock time spent in wait()
    overran: bool = False  # the real transfer finished after the modelled end (emulate)
    # False for a receive: a message's modelled duration counts once in IterationComm.modelled_s,
    # at its sender (as its bytes do); the receive uses it only to advance its own clock.
    counts_modelled: bool = True


@dataclass(slots=True)
class IterationComm:
    """One iteration's communication. The blocked times (``exposed_s``, ``peer_wait_s``,
    ``clock_exposed_s``) count the waits made during the iteration, whichever iteration issued
    the operation waited on (SGP's overlap and gossip_pull wait in the next one)."""

    exposed_s: float  # wall time blocked in wait(): transfer and waiting for peers
    busy_s: float  # wall length of the union of the operations' [start, end]
    bytes_sent: int  # the iteration's operations', plus the pulls this rank's responder answered meanwhile
    messages: int
    ops: int
    # On the run's clock (nan under network=off):
    clock_time_s: float  # the iteration's duration
    clock_exposed_s: float  # time spent waiting for communication
    clock_busy_s: float  # union of the operations' [start, end]
    modelled_s: float  # sum of the modelled durations of the collectives joined and messages sent
    overruns: int  # operations whose real transfer outlasted the model (emulate)
    records: Sequence[OpRecord] = ()  # the iteration's operations, in issue order
    # the part of exposed_s spent waiting for peers, not transferring (dlcomm.comm.waits; nan
    # where the transport cannot tell: torch.distributed's processes)
    peer_wait_s: float = math.nan
    carried_s: float = 0.0  # transfers this rank performed inside its own issuing calls (in-process fabric)


class _Waits:
    """The blocked times of the waits made during one iteration (see :class:`IterationComm`)."""

    __slots__ = ("blocked_s", "peer_wait_s", "clock_exposed_s", "carried_s")

    def __init__(self, split: bool) -> None:
        self.blocked_s = 0.0
        self.peer_wait_s = 0.0 if split else math.nan
        self.clock_exposed_s = 0.0
        self.carried_s = 0.0


@dataclass
class OpTotals:
    count: int = 0
    bytes_sent: int = 0
    messages: int = 0


class Handle:
    """An operation in flight. :meth:`wait` blocks until it completes and returns its result."""

    __slots__ = ("channel", "record", "works", "result", "divisor", "done", "exchange", "resolve", "resolved")

    def __init__(self, channel: "Channel", record: OpRecord, result: Any, divisor: int = 1) -> None:
        self.channel = channel
        self.record = record
        self.works: list[Any] = []
        self.result = result
        self.divisor = divisor
        self.done = False
        self.exchange: Any = None  # the work carrying the clocks (modelled ops)
        self.resolve: Callable[[], None] | None = None  # sets record.ready/end (modelled ops)
        self.resolved = False

    def add_work(self, work: Any, payload: bool = False) -> None:
        self.works.append(work)
        if payload:
            self.channel.watch(work, self.record)

    def wait(self) -> Any:
        if self.done:
            return self.result
        record, clock = self.record, self.channel.clock
        modelled = self.resolve is not None
        exposed_before = record.exposed_s
        before = clock.now() if modelled else 0.0
        timer = self.channel.timer  # host clock on CPU, CUDA events on the compute stream on GPU
        started = timer.before_wait()
        lo = perf_counter()
        for work in self.works:
            work.wait()
        returned = perf_counter()
        if timer.on_device:  # the host timer reads the completion off Channel.poll
            timer.transferred(started)
        if self.channel._in_flight:
            self.channel.poll()
        if math.isnan(record.wall_end):
            record.wall_end = perf_counter()
        if modelled:
            self.channel.resolve_through(self)
            clock.exclude_blocked(before)
            record.overran = record.wall_end > record.end and not clock.simulated
            clock.advance_to(record.end)  # emulate: sleeps until the modelled end
            after = clock.now()
            record.exposed_s += after - before
            if after > record.end and before < record.end:  # it was waited while in flight
                record.end = after
        timer.after_wait(started, record, self.works)
        self.channel.waited(self.works, lo, returned, record.exposed_s - exposed_before)
        if self.divisor != 1 and isinstance(self.result, torch.Tensor):
            self.result.div_(self.divisor)
        self.done = True
        return self.result


class Exchange:
    """A posted :meth:`Channel.exchange`: :meth:`wait` completes every message of it."""

    __slots__ = ("handles",)

    def __init__(self, handles: list[Handle]) -> None:
        self.handles = handles

    def wait(self) -> None:
        for handle in self.handles:
            handle.wait()


class Channel:
    """Named-group collectives and point-to-point messages, each one recorded (and modelled
    when ``network`` is given)."""

    def __init__(
        self, cluster: Cluster, network: NetworkModel | None = None, clock: WallClock | VirtualClock | None = None
    ) -> None:
        if clock is not None and clock.simulated and network is None:
            raise ValueError("a virtual clock needs a network model to advance it")
        self.cluster = cluster
        self.transport = cluster.transport  # dlcomm.comm.transport: processes or threads
        self.network = network
        self.clock = clock or WallClock()
        self.timer = device_timer(cluster.device)  # dlcomm.comm.device_timing: where the work runs
        self.totals: dict[tuple[str, str, str], OpTotals] = defaultdict(OpTotals)
        self._phase = "setup"
        self._iteration_ops: list[OpRecord] = []
        self._served = [0, 0]  # bytes and messages of pulls answered since the last iteration ended
        # the pulls answered (one message each) counted in this rank's iterations so far: the count that
        # agrees with the iterations' bytes (an answer sent after the rank's last iteration is in neither)
        self.answers_counted = 0
        self._iteration_start = math.nan
        self._lock = threading.Lock()
        self._unresolved: dict[str, deque[Handle]] = defaultdict(deque)
        self._in_flight: deque[tuple[Any, OpRecord]] = deque()
        self._modelled = ModelledTiming(self) if network is not None else None
        self.compute_meter: StepMeter = NO_METER  # told where each training step is (profiled compute)
        # the transport's works say when their transfer ran (dlcomm.comm.waits): waiting is split off
        self._splits_waits = getattr(self.transport, "times_transfers", False)
        self._waits: _Waits | None = None  # the current iteration's, while one runs
        self._loop_thread: int | None = None  # the thread that runs the iterations

    @classmethod
    def for_run(cls, cluster: Cluster, network_cfg: NetworkConfig, profiled: Any = None) -> "Channel":
        """The Channel a run's ``network`` config asks for. ``profiled``: the rank's
        :class:`~dlcomm.train.profile.ProfiledCompute` under ``network.compute=profile`` (simulate),
        which then is the virtual clock's compute reading and the loop's step meter."""
        if network_cfg.mode == "off":
            return cls(cluster)
        model = NetworkModel.from_config(network_cfg, cluster.layout)
        alone = cluster.transport.computes_alone
        simulate = network_cfg.mode == "simulate"
        if not simulate:
            return cls(cluster, model, WallClock())
        if profiled is not None:
            channel = cls(cluster, model, VirtualClock(profiled, network_cfg.compute_scale))
            channel.compute_meter = profiled
            return channel
        return cls(cluster, model, VirtualClock(compute_timer(cluster.device, alone), network_cfg.compute_scale))

    @property
    def mode(self) -> str:
        if self.network is None:
            return "off"
        return "simulate" if self.clock.simulated else "emulate"

    # ---- phases and accounting -------------------------------------------------------
    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        previous, self._phase = self._phase, name
        try:
            yield
        finally:
            self._phase = previous

    def begin_iteration(self) -> None:
        self.transport.pass_turn()
        # (self._iteration_ops is empty: end_iteration swapped in a new list, and only the loop's
        # thread records in the "train" phase, which begins here)
        self._waits = _Waits(self._splits_waits)
        self._loop_thread = threading.get_ident()
        self._phase = "train"
        if self.network is not None:
            self.clock.resume()
            self._iteration_start = self.clock.now()

    def end_iteration(self) -> IterationComm:
        """The iteration's :class:`IterationComm`. Called once per training step: kept to one pass
        over the operations (a step of a small model is a few hundred microseconds of host time)."""
        modelled = self.network is not None
        if modelled:
            clock_end = self.clock.now()
            self.clock.pause()
        if self._in_flight:
            self.poll()
        now = perf_counter()
        totals, overruns = self.totals, 0
        with self._lock:
            ops, self._iteration_ops = self._iteration_ops, []
            # a pull's answer leaves from the responder thread, outside any iteration: its bytes
            # are still this rank's traffic, counted in the iteration during which it was sent
            (sent, messages), self._served = self._served, [0, 0]
            self.answers_counted += messages
            for op in ops:  # into the run's totals (_count, inline: one pass over the operations)
                total = totals[("train", op.kind, op.group)]
                total.count += 1
                total.bytes_sent += op.bytes_sent
                total.messages += op.messages
                sent += op.bytes_sent
                messages += op.messages
                overruns += op.overran
        waits, self._waits = self._waits or _Waits(self._splits_waits), None
        self._phase = "idle"
        if len(ops) == 1:
            busy = _or(ops[0].wall_end, now) - ops[0].wall_start
        else:
            busy = union_length(sorted((op.wall_start, _or(op.wall_end, now)) for op in ops))
        comm = IterationComm(
            waits.blocked_s, busy, sent, messages, len(ops), *_NOT_MODELLED, overruns, ops,
            waits.peer_wait_s, waits.carried_s,
        )  # fmt: skip
        if modelled:
            comm.clock_time_s = clock_end - self._iteration_start
            comm.clock_exposed_s = waits.clock_exposed_s
            comm.clock_busy_s = union_length(sorted((op.start, _or(op.end, clock_end)) for op in ops))
            comm.modelled_s = sum(op.modelled_s for op in ops if op.counts_modelled)
        return comm

    def _counts(self) -> _Waits | None:
        """The iteration's wait totals when the calling thread is the one running an iteration."""
        waits = self._waits
        return waits if waits is not None and threading.get_ident() == self._loop_thread else None

    def waited(self, works: Sequence[Any], lo: float, returned: float, clock_exposed_s: float) -> None:
        """A ``Handle.wait`` from host time ``lo`` to now, its works' own waits returning at
        ``returned``, ``clock_exposed_s`` on the run's clock: counted in the running iteration."""
        waits = self._counts()
        if waits is None:
            return
        waits.blocked_s += perf_counter() - lo
        waits.clock_exposed_s += clock_exposed_s
        if self._splits_waits:
            waits.peer_wait_s += peer_wait(works, lo, returned)

    def _launch(self, launch: Callable[[], Any]) -> Any:
        """``launch()`` (the transport's call posting an operation), off the simulated clock; a
        transfer the call itself performed (the in-process fabric's last party moves the data
        for all) is counted as this rank's communication (:attr:`IterationComm.carried_s`)."""
        called = perf_counter()
        if self.clock.simulated:  # (only a virtual clock rebases: no context manager on the hot path)
            before = self.clock.now()
            try:
                posted = launch()
            finally:
                self.clock.exclude_blocked(before)
        else:
            posted = launch()
        waits = self._counts() if self._splits_waits else None
        if waits is not None:
            works = posted if isinstance(posted, list) else [posted]
            done = [work for work in works if work.is_completed()]
            if done:
                waits.carried_s += transfer_within(done, called, perf_counter())
        return posted

    def watch(self, work: Any, record: OpRecord) -> None:
        self._in_flight.append((work, record))

    def poll(self) -> None:
        """Stamp ``wall_end`` on the operations found complete, oldest first, stopping at the
        first still in flight. Called whenever the Channel is used: the end is the first moment
        the operation was seen complete (a completion callback would cost a GIL hand-over from
        the backend's thread per operation: 7% of a ResNet-18 iteration with 62 buckets)."""
        now = None
        while self._in_flight and self._in_flight[0][0].is_completed():
            _, record = self._in_flight.popleft()
            if math.isnan(record.wall_end):
                now = now or perf_counter()
                record.wall_end = now

    def record(
        self, kind: str, group: str, payload_bytes: int, sent: tuple[int, int], phase: str | None = None
    ) -> OpRecord:
        """Count an operation (``sent``: this rank's bytes and messages) under the current phase,
        in the iteration's records when training; ``phase``: given by threads other than the
        training loop's (a service responder), which are never part of an iteration."""
        if phase is None and self._in_flight:
            self.poll()
        # positional: the fields kind, group, phase, payload_bytes, bytes_sent, messages, wall_start
        record = OpRecord(kind, group, phase or self._phase, payload_bytes, sent[0], sent[1], perf_counter())
        with self._lock:
            if record.phase == "train":  # counted in the totals when the iteration ends (_count)
                self._iteration_ops.append(record)
                if self.timer.on_device:  # the host timer reads wall_start
                    self.timer.issued(record)
            else:
                self._count(record)
        return record

    def _count(self, record: OpRecord) -> None:
        """Add ``record`` to :attr:`totals` (under the lock)."""
        if record.phase == "serve":
            self._served[0] += record.bytes_sent
            self._served[1] += record.messages
        totals = self.totals[(record.phase, record.kind, record.group)]
        totals.count += 1
        totals.bytes_sent += record.bytes_sent
        totals.messages += record.messages

    def _timing(self) -> Timing:
        """The modelled clock for operations inside an iteration under a network model; outside
        (setup, evaluation, metrics) or under ``off`` operations are only recorded."""
        return self._modelled if self._modelled is not None and self._phase == "train" else UNMODELLED

    def _network(self) -> NetworkModel:
        """The network model, for the modelled durations: only a modelled clock asks for them."""
        assert self.network is not None, "a modelled duration asked for under network.mode=off"
        return self.network

    # ---- groups ----------------------------------------------------------------------
    def group_size(self, group: str = "world") -> int:
        return len(self.cluster.ranks(group))

    def sole_member(self, group: str) -> bool:
        """This rank is the group's only member: every collective over it is this rank's own
        value (a sum or mean of one, a broadcast from itself, a gather of one), so nothing of it
        goes to the transport: not the payload (:meth:`_collective` completes it in place), not
        the modelled clock's entry clocks, not the control traffic. A one-worker run pays no
        backend call per step (gloo's all_reduce of one rank still hands the buffer to its own
        thread and back: ~50 us inside a CPU step, scripts/bench_step_overhead.py)."""
        return len(self.cluster.ranks(group)) == 1

    def _position(self, group: str, root: int) -> int:
        members = self.cluster.ranks(group)
        return (members.index(self.cluster.rank) - members.index(root)) % len(members)

    @staticmethod
    def _finish(handle: Handle, async_op: bool) -> Any:
        return handle if async_op else handle.wait()

    def await_resolution(self, handle: Handle) -> None:
        """Queue ``handle`` (with a ``resolve`` still to run) behind the unresolved operations
        issued before it on its group, so that :meth:`resolve_through` resolves them in issue
        order: a group's operations complete in the order they were posted."""
        self._unresolved[handle.record.group].append(handle)

    def resolve_through(self, handle: Handle) -> None:
        """Resolve ``handle`` and, first, every operation issued before it on its group."""
        if handle.resolved:
            return
        queue = self._unresolved.get(handle.record.group)
        if queue is not None and handle in queue:
            while queue:
                earlier = queue.popleft()
                if earlier is not handle:
                    earlier.exchange.wait()  # its entry clocks; its payload may still be in flight
                assert earlier.resolve is not None  # queued by the modelled timing, which sets it
                earlier.resolve()
                earlier.resolved = True
                if earlier is handle:
                    return
        assert handle.resolve is not None  # Handle.wait resolves only modelled operations
        handle.resolve()
        handle.resolved = True

    def _collective(
        self,
        kind: str,
        group: str,
        tensor: torch.Tensor,
        sent: tuple[int, int],
        modelled_s: Callable[[], float],
        launch: Callable[[], Any],
        result: Any = None,
        divisor: int = 1,
        alone: Callable[[], object] | None = None,
    ) -> Handle:
        """Record, model and post one collective; on a group of one (:meth:`sole_member`) the
        transport is not called: ``alone()`` (if given) makes the result in place and the
        operation is complete at once, its traffic nothing (the ring and tree formulas give 0)."""
        record = self.record(kind, group, tensor.numel() * tensor.element_size(), sent)
        handle = Handle(self, record, tensor if result is None else result, divisor)
        if self._modelled is not None and self._phase == "train":  # else nothing to model (_timing)
            self._modelled.collective(handle, group, modelled_s)
        if self.sole_member(group):
            if alone is not None:
                alone()
            return self._completed(handle)
        work = self._launch(launch)
        handle.works.append(work)  # add_work(work, payload=True), inline: once an operation
        self._in_flight.append((work, record))
        return handle

    def _done_in_place(self, kind: str, group: str, nbytes: int, result: Any) -> Handle:
        """The complete handle of an unmodelled collective over a group of one (:meth:`sole_member`)."""
        return self._completed(Handle(self, self.record(kind, group, nbytes, _NOTHING_SENT), result))

    @staticmethod
    def _completed(handle: Handle) -> Handle:
        """``handle`` of a collective over a group of one, complete at once: nothing to wait for
        unless a modelled clock still has to move (``handle.resolve``)."""
        handle.works.append(_Completed())
        handle.record.wall_end = perf_counter()
        handle.done = handle.resolve is None
        return handle

    # ---- primitives ------------------------------------------------------------------
    def allreduce(self, tensor: torch.Tensor, group: str = "world", average: bool = True, async_op: bool = False):
        """In place: ``tensor <- sum (or mean) of tensor over the group`` (modelled as a ring)."""
        members = self.cluster.ranks(group)
        nbytes = tensor.numel() * tensor.element_size()
        if len(members) == 1 and (self._modelled is None or self._phase != "train"):
            # a sum or mean of one, nothing modelled: the value is the result (what _collective
            # does for a group of one, without the costs it would not use; a one-worker run's step)
            return self._finish(self._done_in_place("allreduce", group, nbytes, tensor), async_op)
        handle = self._collective(
            "allreduce",
            group,
            tensor,
            traffic.ring_allreduce_traffic(nbytes, len(members)),
            lambda: self._network().allreduce_s(nbytes, members),
            lambda: self.transport.all_reduce(tensor, group),
            divisor=len(members) if average else 1,
        )
        return self._finish(handle, async_op)

    def broadcast(self, tensor: torch.Tensor, src: int, group: str = "world", async_op: bool = False):
        """In place: every member's ``tensor <- tensor of global rank src`` (binomial tree)."""
        members = self.cluster.ranks(group)
        nbytes = tensor.numel() * tensor.element_size()
        handle = self._collective(
            "broadcast",
            group,
            tensor,
            traffic.tree_broadcast_traffic(nbytes, len(members), self._position(group, src)),
            lambda: self._network().broadcast_s(nbytes, members, src),
            lambda: self.transport.broadcast(tensor, src, group),
        )
        return self._finish(handle, async_op)

    def reduce(
        self, tensor: torch.Tensor, dst: int, group: str = "world", average: bool = False, async_op: bool = False
    ):
        """``tensor`` of global rank ``dst`` <- sum (or mean) over the group; others' tensors are
        scratch (binomial tree)."""
        members = self.cluster.ranks(group)
        nbytes = tensor.numel() * tensor.element_size()
        handle = self._collective(
            "reduce",
            group,
            tensor,
            traffic.tree_reduce_traffic(nbytes, len(members), self._position(group, dst)),
            lambda: self._network().reduce_s(nbytes, members, dst),
            lambda: self.transport.reduce(tensor, dst, group),
            divisor=len(members) if (average and self.cluster.rank == dst) else 1,
        )
        return self._finish(handle, async_op)

    def allgather(self, tensor: torch.Tensor, group: str = "world", async_op: bool = False):
        """Every member gets ``[tensor of each member, in group order]`` (modelled as a ring)."""
        members = self.cluster.ranks(group)
        nbytes = tensor.numel() * tensor.element_size()
        gathered = [torch.empty_like(tensor) for _ in members]
        handle = self._collective(
            "allgather",
            group,
            tensor,
            traffic.ring_allgather_traffic(nbytes, len(members)),
            lambda: self._network().allgather_s(nbytes, members),
            lambda: self.transport.all_gather(gathered, tensor, group),
            result=gathered,
            alone=lambda: gathered[0].copy_(tensor),
        )
        return self._finish(handle, async_op)

    def exchange(
        self,
        sends: Sequence[tuple[torch.Tensor, int]] = (),
        recvs: Sequence[tuple[torch.Tensor, int]] = (),
        group: str = "world",
        incast: bool = False,
    ) -> "Exchange":
        """One step's point-to-point messages, posted as one batch: send ``tensor`` to global rank
        ``dst`` for every ``(tensor, dst)`` of ``sends``, receive into ``tensor`` from ``src`` for
        every ``(tensor, src)`` of ``recvs``. The only way algorithms send messages.

        Matching rule (NCCL's, and ``batch_isend_irecv``'s): between two ranks, the messages of
        one direction are matched in the order they appear, here and in any later exchange; the
        order of sends against receives does not matter. No tags. Every message of the batch
        progresses at once, so any pattern of sends and receives that matches is deadlock-free
        under NCCL; an algorithm that posts two exchanges and waits only on the second is not.

        Under a model a send leaves when this rank's outbound link is free, its start clock
        travelling just ahead of it in the batch; a receive completes at ``max(own clock, sender's
        start + modelled)``. ``incast``: the receives are one record completing at ``max(senders'
        start clocks) + incast``, sharing this rank's link (:meth:`NetworkModel.incast_s`: what a
        parameter server does)."""
        timing = self._timing()
        ops: list[P2P] = []
        owners: list[Handle] = []  # the handle each op's work belongs to
        handles: list[Handle] = []

        def post(handle: Handle, batch: list[P2P]) -> None:
            ops.extend(batch)
            owners.extend([handle] * len(batch))

        for tensor, dst in sends:
            nbytes = tensor.numel() * tensor.element_size()
            handle = Handle(self, self.record("send", group, nbytes, traffic.point_to_point_traffic(nbytes)), tensor)
            post(handle, [*timing.send(handle, dst, nbytes), P2P(True, tensor, dst)])
            handles.append(handle)
        if incast and recvs:
            tensors, srcs = [t for t, _ in recvs], [s for _, s in recvs]
            sizes = [t.numel() * t.element_size() for t in tensors]
            handle = Handle(self, self.record("recv_incast", group, sum(sizes), (0, 0)), tensors)
            handle.record.counts_modelled = False
            stamps = timing.receive(handle, srcs, lambda: self._network().incast_s(sizes, srcs, self.cluster.rank))
            for index, (tensor, src) in enumerate(recvs):
                post(handle, [*stamps[index : index + 1], P2P(False, tensor, src)])
            handles.append(handle)
        else:
            for tensor, src in recvs:
                nbytes = tensor.numel() * tensor.element_size()
                handle = Handle(self, self.record("recv", group, nbytes, (0, 0)), tensor)
                handle.record.counts_modelled = False
                modelled = (lambda n, s: lambda: self._network().send_s(n, s, self.cluster.rank))(nbytes, src)
                post(handle, [*timing.receive(handle, [src], modelled), P2P(False, tensor, src)])
                handles.append(handle)
        self.cluster.ranks(group)
        if ops:
            works = self._launch(lambda: self.transport.batch(ops, group))
            for op, owner, work in zip(ops, owners, works):
                owner.add_work(work, payload=op.what == "payload")
        return Exchange(handles)

    def expect(self, kind: str, tensor: torch.Tensor, src: int, start: float, group: str = "world") -> Handle:
        """A message ``src -> this rank`` that travels outside the Channel's primitives (the
        answer to a pull, :mod:`dlcomm.comm.control`): recorded as ``kind`` and, under a model,
        completing at ``max(start, now) + modelled`` on this rank's clock (``start`` nan: now). It
        counts in the modelled communication here, since its sender does not model it. The caller
        adds the transfer's work (``handle.add_work(work, payload=True)``)."""
        nbytes = tensor.numel() * tensor.element_size()
        handle = Handle(self, self.record(kind, group, nbytes, (0, 0)), tensor)
        self._timing().arrival(handle, start, lambda: self._network().send_s(nbytes, src, self.cluster.rank))
        return handle

    def gather_objects(self, obj: Any, dst: int = 0) -> list[Any] | None:
        """Pickled gather for metrics and logs (not modelled, not counted in iterations)."""
        gathered = [None] * self.cluster.world_size if self.cluster.rank == dst else None
        self.cluster.ranks("world")
        with self.phase("metrics"):
            self.transport.gather_object(obj, gathered, dst, "world")
        return gathered

    def barrier(self) -> None:
        """Every worker (the service roles do not take part)."""
        self.cluster.ranks("world")
        self.transport.barrier("world")

    def any_rank(self, flag: bool) -> bool:
        """True on every rank if ``flag`` is true on any (a MAX allreduce of one integer over
        ``world``; control traffic: not recorded, not modelled, outside the iterations)."""
        return self.max_over_workers(float(flag)) > 0

    def max_over_workers(self, value: float) -> float:
        """The maximum of ``value`` over the workers (control traffic, as :meth:`any_rank`);
        ``value`` itself where this rank is the only worker (nothing exchanged)."""
        if self.sole_member("world"):
            return float(value)
        tensor = torch.tensor([value], dtype=torch.float64, device=self.cluster.device)
        self.transport.all_reduce(tensor, "world", op="max").wait()
        return float(tensor.item())


class _Completed:
    """The work of a collective over a group of one: done when posted, a transfer of no length
    (``started == finished``, so :func:`dlcomm.comm.waits.peer_wait` counts its wait as waiting)."""

    __slots__ = ("started", "finished")

    def __init__(self) -> None:
        self.started = self.finished = perf_counter()

    def is_completed(self) -> bool:
        return True

    def wait(self) -> bool:
        return True


_NOTHING_SENT = (0, 0)  # bytes and messages of a collective over a group of one
_NOT_MODELLED = (math.nan,) * 4  # IterationComm's clock_time_s .. modelled_s under network=off


def _or(value: float, default: float) -> float:
    return default if math.isnan(value) else value
