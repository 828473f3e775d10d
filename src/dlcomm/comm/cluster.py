"""The process groups of one job, built once per rank and handed to the algorithm.

Groups, by name:

* ``world``: every training worker (ranks ``0 .. world_size-1``);
* ``job``: every process, the service roles included (the same as ``world`` when the
  algorithm declares none);
* ``intra``: the ranks of this rank's node (``ClusterLayout.node_ranks``);
* ``leaders``: the first rank of every node (absent on non-leaders);
* ``control``: every process over gloo, for :mod:`dlcomm.comm.control` (the job's group
  itself under gloo).

``torch.distributed.new_group`` must be called by every rank for every group in the same
order, which is why all groups are created here, up front, and never lazily.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta

import torch
import torch.distributed as dist

from dlcomm.comm.layout import ClusterLayout

# How long a service or a control receive may wait for its next message: a dead peer is found by
# the launcher (which ends the job), not by this timeout, so it only has to outlast any run.
CONTROL_TIMEOUT = timedelta(days=30)


@dataclass
class Cluster:
    layout: ClusterLayout
    rank: int
    device: torch.device
    backend: str
    groups: dict[str, object | None] = field(default_factory=dict)
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
    def connect(
        cls,
        layout: ClusterLayout,
        rank: int,
        store: dist.Store,
        backend: str,
        device: torch.device,
        timeout_s: float = 300.0,
    ) -> "Cluster":
        """Join the job through ``store`` and build the worker, intra-node and leader groups."""
        timeout = timedelta(seconds=timeout_s)
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
        cluster = cls(layout=layout, rank=rank, device=device, backend=backend)
        cluster.groups["job"] = dist.group.WORLD
        cluster.group_ranks["job"] = list(range(layout.job_size))
        workers = list(range(layout.world_size))
        worker_group = dist.new_group(workers, timeout=timeout) if layout.services else dist.group.WORLD
        if rank < layout.world_size:
            cluster.groups["world"] = worker_group
            cluster.group_ranks["world"] = workers
        for node in range(layout.nodes):
            members = layout.node_ranks(node)
            group = dist.new_group(members, timeout=timeout)
            if rank in members:
                cluster.groups["intra"] = group
                cluster.group_ranks["intra"] = members
        # Control messages (any-source receives, answered from a thread) need gloo: NCCL has
        # neither. A group of their own, because a responder legitimately waits for the next
        # message as long as its peers evaluate: on the job's group a receive that outlasted the
        # job's timeout closed the gloo pairs under the training collectives too.
        cluster.groups["control"] = dist.new_group(backend="gloo", timeout=CONTROL_TIMEOUT)
        cluster.group_ranks["control"] = list(range(layout.job_size))
        leaders = layout.leaders()
        leader_group = dist.new_group(leaders, timeout=timeout)
        if rank in leaders:
            cluster.groups["leaders"] = leader_group
            cluster.group_ranks["leaders"] = leaders
        return cluster

    def close(self) -> None:
        if dist.is_initialized():
            dist.destroy_process_group()
