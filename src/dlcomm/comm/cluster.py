"""The groups of one job and the transport that joins them, built once per rank and handed
to the algorithm (through the Channel).

Groups, by name:

* ``world``: every training worker (ranks ``0 .. world_size-1``);
* ``job``: every process, the service roles included (the same as ``world`` when the
  algorithm declares none);
* ``intra``: the ranks of this rank's node (``ClusterLayout.node_ranks``);
* ``leaders``: the first rank of every node (absent on non-leaders);
* ``control``: every process over gloo, for :mod:`dlcomm.comm.control` (the job's group
  itself under gloo).

Between processes (:meth:`Cluster.connect`) every group is a torch.distributed process group
under a :class:`~dlcomm.comm.transport.DistTransport`; ``new_group`` must be called by every
rank for every group in the same order, which is why all groups are created here, up front, and
never lazily. Between the threads of one process (:meth:`Cluster.in_process`) the groups are
lists of ranks on the in-process fabric (:mod:`dlcomm.comm.inprocess`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from dlcomm.comm.inprocess import Fabric, ThreadTransport
from dlcomm.comm.layout import ClusterLayout
from dlcomm.comm.transport import DistTransport

# How long a service or a control receive may wait for its next message: a dead peer is found by
# the launcher (which ends the job), not by this timeout, so it only has to outlast any run.
CONTROL_TIMEOUT = timedelta(days=30)


def group_ranks_of(layout: ClusterLayout, rank: int) -> dict[str, list[int]]:
    """The global ranks of every named group ``rank`` belongs to (see the module docstring)."""
    groups = {"job": list(range(layout.job_size)), "control": list(range(layout.job_size))}
    if rank < layout.world_size:
        groups["world"] = list(range(layout.world_size))
    for node in range(layout.nodes):
        if rank in layout.node_ranks(node):
            groups["intra"] = layout.node_ranks(node)
    if rank in layout.leaders():
        groups["leaders"] = layout.leaders()
    return groups


def _first_collectives(transport: DistTransport, members: dict[str, list[int]], device: torch.device) -> None:
    """One small allreduce on every NCCL group this rank belongs to, by all its members, before
    any point-to-point traffic. torch's ``batch_isend_irecv``: "if this API is the first collective
    call in the group passed to dist.P2POp, all ranks of the group must participate in this API
    call; otherwise, the behavior is undefined" (a parameter server's first batch involves two
    ranks of ``job``). Every member reaches this point and calls the groups in the same order."""
    for name in ("job", "world", "intra", "leaders"):
        if name in members and (name != "job" or members["job"] != members.get("world")):
            transport.all_reduce(torch.zeros(1, device=device), name).wait()


@dataclass
class Cluster:
    layout: ClusterLayout
    rank: int
    device: torch.device
    backend: str
    transport: DistTransport | ThreadTransport  # how the primitives reach the other ranks
    group_ranks: dict[str, list[int]] = field(default_factory=dict)

    @property
    def world_size(self) -> int:
        return self.layout.world_size

    @property
    def role(self) -> str:
        return self.layout.role_of(self.rank)

    @property
    def node(self) -> int:
        return self.layout.node_of(self.rank)

    @property
    def local_rank(self) -> int:
        return self.layout.local_rank(self.rank)

    @property
    def is_leader(self) -> bool:
        return self.layout.is_leader(self.rank)

    def ranks(self, group: str) -> list[int]:
        """Global ranks of a named group this rank belongs to."""
        try:
            return self.group_ranks[group]
        except KeyError:
            raise ValueError(f"rank {self.rank} is not a member of group {group!r}") from None

    @classmethod
    def in_process(cls, layout: ClusterLayout, rank: int, fabric: Fabric, device: torch.device) -> "Cluster":
        """Rank ``rank`` of a job whose ranks are threads of this process, joined by ``fabric``
        (:mod:`dlcomm.comm.inprocess`)."""
        groups = group_ranks_of(layout, rank)
        return cls(
            layout=layout,
            rank=rank,
            device=device,
            backend="inprocess",
            transport=ThreadTransport(fabric, rank, groups),
            group_ranks=groups,
        )

    @classmethod
    def connect(
        cls,
        layout: ClusterLayout,
        rank: int,
        store: dist.Store,
        backend: str,
        device: torch.device,
        timeout_s: float = 300.0,
        computes_alone: bool = False,
    ) -> "Cluster":
        """Join the job through ``store`` and build the worker, intra-node and leader groups;
        ``computes_alone``: this process's cores are its own (see :mod:`dlcomm.comm.clock`)."""
        timeout = timedelta(seconds=timeout_s)
        if backend == "nccl":  # NCCL's own durations of every operation (dlcomm.comm.device_timing)
            os.environ.setdefault("TORCH_NCCL_ENABLE_TIMING", "1")
        # A service (parameter server, manager) waits for the workers' next message for as long
        # as they evaluate, which may outlast any timeout: the job's group (workers <-> services)
        # then waits without one, the workers' own group keeps it.
        dist.init_process_group(
            backend,
            store=store,
            rank=rank,
            world_size=layout.job_size,
            timeout=CONTROL_TIMEOUT if layout.services else timeout,
            device_id=device if device.type == "cuda" else None,
        )
        groups: dict[str, Any] = {"job": dist.group.WORLD}
        worker_group = (
            dist.new_group(list(range(layout.world_size)), timeout=timeout) if layout.services else dist.group.WORLD
        )
        groups["world"] = worker_group
        for node in range(layout.nodes):
            node_ranks = layout.node_ranks(node)
            group = dist.new_group(node_ranks, timeout=timeout)
            if rank in node_ranks:
                groups["intra"] = group
        # Control messages (any-source receives, answered from a thread) need gloo: NCCL has
        # neither. A group of their own, because a responder legitimately waits for the next
        # message as long as its peers evaluate: on the job's group a receive that outlasted the
        # job's timeout closed the gloo pairs under the training collectives too.
        groups["control"] = dist.new_group(backend="gloo", timeout=CONTROL_TIMEOUT)
        groups["leaders"] = dist.new_group(layout.leaders(), timeout=timeout)
        members = group_ranks_of(layout, rank)
        transport = DistTransport({name: group for name, group in groups.items() if name in members}, computes_alone)
        if backend == "nccl":
            _first_collectives(transport, members, device)
        return cls(layout=layout, rank=rank, device=device, backend=backend, transport=transport, group_ranks=members)

    def close(self) -> None:
        self.transport.close()
