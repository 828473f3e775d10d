"""The transport under the Channel: how a primitive on a named group reaches the other ranks.

The Channel (and the control plane and the modelled clock beside it) never call
``torch.distributed`` themselves: they ask the :class:`~dlcomm.comm.cluster.Cluster`'s
transport, by group name (``world``, ``job``, ``intra``, ``leaders``, ``control``) and global
ranks. Two transports offer the same operations:

* :class:`DistTransport`: torch.distributed process groups (gloo, nccl), one rank per process
  (``launcher=local``, ``slurm``, ``srun``);
* :class:`dlcomm.comm.inprocess.ThreadTransport`: every rank a thread of one process
  (``launcher=threads``), messages and reductions done in memory.

Every operation returns a work with ``wait()`` and ``is_completed()``.

Point-to-point traffic of the training path goes through :meth:`batch` only: one step's sends
and receives (:class:`P2P`) posted as one group, ``dist.batch_isend_irecv`` here (one NCCL group
call on GPUs; individual posts on gloo). Tags are not used (NCCL has none): between a pair of
ranks, messages in one direction are matched in the order posted, on both backends. The plain
:meth:`isend` / :meth:`irecv` (with ``src=None``: from any member, :meth:`source_rank` says from
whom) serve the control plane alone (:mod:`dlcomm.comm.control`, always gloo).

Semantics both transports keep: operations on one group are matched in issue order on every
member; messages of one sender to one receiver arrive in the order sent; a send completes once
its receiver has taken the data.
"""

from __future__ import annotations

import os
import signal
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any, ContextManager, Protocol, cast

import torch
import torch.distributed as dist


class Work(Protocol):
    def wait(self) -> Any: ...
    def is_completed(self) -> bool: ...


_OPS = {"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX}

P2P_TAG = 0  # every batched message; pairs match in posting order (NCCL ignores tags anyway)


@dataclass(frozen=True, slots=True)
class P2P:
    """One message of a batch: ``send`` it to global rank ``peer``, or receive into ``tensor``
    from ``peer``; ``what`` names it in error messages (the payload, or a clock stamp)."""

    send: bool
    tensor: torch.Tensor
    peer: int
    what: str = "payload"


class DistTransport:
    """torch.distributed process groups, one per name (the Cluster builds them)."""

    name = "dist"
    shares_process = False  # one rank per process
    times_transfers = False  # torch's works do not say when the peers arrived (dlcomm.comm.waits)

    def __init__(self, groups: dict[str, Any], computes_alone: bool = False) -> None:
        self.groups = groups
        self.computes_alone = computes_alone  # the rank's cores are its own (dlcomm.comm.clock)

    # torch annotates these Work | None: None for a rank outside the group or without async_op, and
    # this rank is in each of self.groups (the Cluster keeps only those) and posts with async_op=True
    def all_reduce(self, tensor: torch.Tensor, group: str, op: str = "sum") -> Work:
        return cast(Work, dist.all_reduce(tensor, op=_OPS[op], group=self.groups[group], async_op=True))

    def broadcast(self, tensor: torch.Tensor, src: int, group: str) -> Work:
        return cast(Work, dist.broadcast(tensor, src=src, group=self.groups[group], async_op=True))

    def reduce(self, tensor: torch.Tensor, dst: int, group: str) -> Work:
        return cast(Work, dist.reduce(tensor, dst=dst, op=dist.ReduceOp.SUM, group=self.groups[group], async_op=True))

    def all_gather(self, outputs: list[torch.Tensor], tensor: torch.Tensor, group: str) -> Work:
        return cast(Work, dist.all_gather(outputs, tensor, group=self.groups[group], async_op=True))

    def batch(self, ops: list[P2P], group: str) -> list[Work]:
        """Post ``ops`` as one batch (``dist.batch_isend_irecv``); one work per op (under NCCL
        the batch's single coalesced work, repeated)."""
        pg = self.groups[group]
        p2p = [
            dist.P2POp(dist.isend if op.send else dist.irecv, op.tensor, op.peer, group=pg, tag=P2P_TAG) for op in ops
        ]
        works: list[Work] = list(dist.batch_isend_irecv(p2p))
        return works if len(works) == len(ops) else [works[-1]] * len(ops)

    def isend(self, tensor: torch.Tensor, dst: int, group: str, tag: int) -> Work:
        """Control plane only (see the module docstring)."""
        return cast(Work, dist.isend(tensor, dst=dst, group=self.groups[group], tag=tag))

    def irecv(self, tensor: torch.Tensor, src: int | None, group: str, tag: int) -> Work:
        """Control plane only (see the module docstring)."""
        return cast(Work, dist.irecv(tensor, src=src, group=self.groups[group], tag=tag))

    @staticmethod
    def source_rank(work: Any) -> int:
        return work._source_rank()

    def barrier(self, group: str) -> None:
        dist.barrier(group=self.groups[group])

    def gather_object(self, obj: Any, gathered: list[Any] | None, dst: int, group: str) -> None:
        """``gathered`` (None except on ``dst``) receives a copy of every member's ``obj``."""
        dist.gather_object(obj, gathered, dst=dst, group=self.groups[group])

    def blocking(self) -> ContextManager[None]:
        """Around a wait outside the transport (a queue, a thread join): nothing to do here."""
        return nullcontext()

    def alone(self) -> ContextManager[None]:
        """A section no other rank of this process runs at once: a process holds one rank."""
        return nullcontext()

    def pass_turn(self) -> None:
        """At an iteration's start: ranks that share compute turns let the others go first
        (:class:`dlcomm.comm.inprocess.Turns`); processes run at once, nothing to do."""

    def batched_compute(self) -> Any:
        """This rank's part of a batched compute (``launcher.compute=batched``,
        :mod:`dlcomm.train.batched`), or None: a process steps its own replica."""
        return None

    @staticmethod
    def kill_self() -> None:
        """``debug.fail_mode=kill``: this rank dies as a crashed process would."""
        os.kill(os.getpid(), signal.SIGKILL)

    def close(self) -> None:
        if dist.is_initialized():
            dist.destroy_process_group()
