"""The modelled clock's part of every Channel primitive, in one place.

:class:`Timing` models nothing (``network.mode=off``, or an operation outside an iteration);
:class:`ModelledTiming` gives every operation a modelled ``[ready, end]`` on the run's clock
(wall clock under ``emulate``, a per-rank virtual clock under ``simulate``) and makes the
clocks travel with the data, as :mod:`dlcomm.comm.channel` describes. The Channel picks one per
operation and calls it from each primitive; nothing else touches the modelled fields of an
:class:`~dlcomm.comm.channel.OpRecord`.

A message's clock stamp travels in the same batch as its payload, just before it (one ``float64``
per message, :class:`~dlcomm.comm.transport.P2P` ``what="clock"``): :meth:`Timing.send` and
:meth:`Timing.receive` return the stamp messages for the Channel to put in the batch. The sender
and the receiver agree on which messages carry a stamp because both are inside an iteration
(``phase == "train"``) or both outside.
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import TYPE_CHECKING, Any, Callable

import torch

from dlcomm.comm.transport import P2P

if TYPE_CHECKING:
    from dlcomm.comm.channel import Channel, Handle, OpRecord


class Timing:
    """The modelled clock's part of each primitive; this base models nothing (``network.mode=off``,
    or an operation outside an iteration): the operation is only recorded."""

    def collective(self, handle: "Handle", group: str, modelled_s: Callable[[], float]) -> None:
        pass

    def send(self, handle: "Handle", dst: int, nbytes: int) -> list[P2P]:
        """The clock messages to post just before the payload to ``dst`` (none here)."""
        return []

    def receive(self, handle: "Handle", srcs: list[int], modelled_s: Callable[[], float]) -> list[P2P]:
        """The clock messages to receive just before each payload from ``srcs[i]`` (none here)."""
        return []

    def arrival(self, handle: "Handle", start: float, modelled_s: Callable[[], float]) -> None:
        pass


UNMODELLED = Timing()


def _already_resolved() -> None:
    """The ``resolve`` of an operation whose clocks were set when it was issued."""


class ModelledTiming(Timing):
    """Every operation gets a modelled ``[ready, end]`` on the run's clock (see the module
    docstring): a collective ends at ``max(entry clocks, group free) + modelled``, a send leaves
    when this rank's outbound link is free, a receive ends at ``sender's ready + modelled``
    (the latest sender's for an incast), an arrival at ``max(start, now) + modelled``."""

    def __init__(self, channel: "Channel") -> None:
        self.channel = channel
        self.group_free: dict[str, float] = defaultdict(float)  # collectives run one after the other per group
        self.send_free: dict[bool, float] = defaultdict(float)  # sends leave one after the other per link class

    @property
    def clock(self) -> Any:  # read at each use: a test may give the Channel another clock
        return self.channel.clock

    @property
    def network(self) -> Any:
        return self.channel.network

    def _stamp(self, value: float) -> torch.Tensor:
        return torch.tensor([value], dtype=torch.float64, device=self.channel.cluster.device)

    def _enter(self, record: "OpRecord", modelled_s: float) -> None:
        record.start = self.clock.now()
        record.modelled_s = modelled_s

    def collective(self, handle: "Handle", group: str, modelled_s: Callable[[], float]) -> None:
        """Entry clocks max-reduced over the group (a one-number allreduce beside the payload);
        resolved in issue order per group (:meth:`Channel.resolve_through`). In a group of one
        the maximum is this rank's own entry clock: resolved at once, nothing exchanged (under
        ``launcher=local`` that exchange was a second gloo call per step of a one-worker run,
        ~50 us of a 0.8 ms step; docs/benchmarks.md)."""
        record = handle.record
        self._enter(record, modelled_s())
        if self.channel.sole_member(group):
            record.ready = max(record.start, self.group_free[group])
            record.end = self.group_free[group] = record.ready + record.modelled_s
            handle.resolve = _already_resolved
            handle.resolved = True
            return
        entry = self._stamp(record.start)
        handle.exchange = self.channel.transport.all_reduce(entry, group, op="max")
        handle.add_work(handle.exchange)

        def resolve() -> None:
            record.ready = max(float(entry[0]), self.group_free[group])
            record.end = record.ready + record.modelled_s
            self.group_free[group] = record.end

        handle.resolve = resolve
        self.channel.await_resolution(handle)

    def send(self, handle: "Handle", dst: int, nbytes: int) -> list[P2P]:
        """The start clock travels just ahead of the payload, in the same batch."""
        record, rank = handle.record, self.channel.cluster.rank
        self._enter(record, self.network.send_s(nbytes, rank, dst))
        inter = self.network.is_inter(rank, dst)
        record.ready = max(record.start, self.send_free[inter])
        record.end = record.ready + record.modelled_s
        self.send_free[inter] = record.end
        handle.resolve = lambda: None
        handle.resolved = True
        return [P2P(True, self._stamp(record.ready), dst, "clock")]

    def receive(self, handle: "Handle", srcs: list[int], modelled_s: Callable[[], float]) -> list[P2P]:
        record = handle.record
        self._enter(record, modelled_s())
        stamps = [self._stamp(math.nan) for _ in srcs]

        def resolve() -> None:
            record.ready = max(float(stamp[0]) for stamp in stamps)
            record.end = record.ready + record.modelled_s

        handle.resolve = resolve
        return [P2P(False, stamp, src, "clock") for stamp, src in zip(stamps, srcs)]

    def arrival(self, handle: "Handle", start: float, modelled_s: Callable[[], float]) -> None:
        record = handle.record
        self._enter(record, modelled_s())
        record.ready = record.start if math.isnan(start) else max(start, record.start)

        def resolve() -> None:
            record.end = record.ready + record.modelled_s

        handle.resolve = resolve
