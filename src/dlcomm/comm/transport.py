"""The transport under the Channel: how a primitive on a named group reaches the other ranks.

The Channel (and the control plane and the modelled clock beside it) never call
``torch.distributed`` themselves: they ask the :class:`~dlcomm.comm.cluster.Cluster`'s
transport, by group name (``world``, ``job``, ``intra``, ``leaders``, ``control``) and global
ranks. Two transports offer the same operations:

* :class:`DistTransport`: torch.distributed process groups (gloo, nccl), one rank per process
  (``launcher=local``, ``slurm``, ``srun``);
* :class:`dlcomm.comm.inprocess.ThreadTransport`: every rank a thread of one process
  (``launcher=threads``), messages and reductions done in memory.

Every operation returns a work with ``wait()`` and ``is_completed()``; :meth:`irecv` with
``src=None`` receives from any member and :meth:`source_rank` then says from whom.
Semantics both keep: operations on one group are matched in issue order on every member;
messages of one sender to one receiver with one tag arrive in the order sent; a send completes
once its receiver has taken the data.
"""

from __future__ import annotations

import os
import signal
from contextlib import nullcontext
from typing import Any, ContextManager, Protocol

import torch
import torch.distributed as dist


class Work(Protocol):
    def wait(self) -> Any: ...
    def is_completed(self) -> bool: ...


_OPS = {"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX}


class DistTransport:
    """torch.distributed process groups, one per name (the Cluster builds them)."""

    name = "dist"
    shares_process = False  # one rank per process

    def __init__(self, groups: dict[str, Any], computes_alone: bool = False) -> None:
        self.groups = groups
        self.computes_alone = computes_alone  # the rank's cores are its own (dlcomm.comm.clock)

    def all_reduce(self, tensor: torch.Tensor, group: str, op: str = "sum") -> Work:
        return dist.all_reduce(tensor, op=_OPS[op], group=self.groups[group], async_op=True)

    def broadcast(self, tensor: torch.Tensor, src: int, group: str) -> Work:
        return dist.broadcast(tensor, src=src, group=self.groups[group], async_op=True)

    def reduce(self, tensor: torch.Tensor, dst: int, group: str) -> Work:
        return dist.reduce(tensor, dst=dst, op=dist.ReduceOp.SUM, group=self.groups[group], async_op=True)

    def all_gather(self, outputs: list[torch.Tensor], tensor: torch.Tensor, group: str) -> Work:
        return dist.all_gather(outputs, tensor, group=self.groups[group], async_op=True)

    def isend(self, tensor: torch.Tensor, dst: int, group: str, tag: int) -> Work:
        return dist.isend(tensor, dst=dst, group=self.groups[group], tag=tag)

    def irecv(self, tensor: torch.Tensor, src: int | None, group: str, tag: int) -> Work:
        return dist.irecv(tensor, src=src, group=self.groups[group], tag=tag)

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

    @staticmethod
    def kill_self() -> None:
        """``debug.fail_mode=kill``: this rank dies as a crashed process would."""
        os.kill(os.getpid(), signal.SIGKILL)

    def close(self) -> None:
        if dist.is_initialized():
            dist.destroy_process_group()
