"""SESGD, Shuffle-Exchange SGD (paper ``shuffle-exchange-sgd.txt``, eq. 6), and Local-SESGD.

The ``n`` workers are regrouped every iteration into ``groups`` groups of ``n / groups`` by a
permutation drawn from the shared seed (:func:`dlcomm.topology.graphs.shuffled_groups`: the same
on every rank, nothing exchanged). After the local step

    x^_i = x_i - eta * grad_i                 (the optimizer; momentum stays local)
    x_i <- (1 / |G|) sum_{j in G(i)} x^_j      G(i): i's group this iteration

by a ring allreduce among the group's ranks over point-to-point messages
(:func:`dlcomm.comm.ring.ring_allreduce`: ``2 (n/groups - 1)`` handshakes instead of the global
ring's ``2 (n - 1)``). Averaging parameters rather than gradients carries each group's error
forward (the paper's "gradient correction"). The parameters live in buckets of ``bucket_mb``;
0 (the default) is one message per parameter tensor, the paper's layer-wise regime.

``local_sesgd``: local steps, and the shuffled group averaging only after every ``period``-th
step (``period = 1`` is SESGD).

With ``compress=<name>`` (:mod:`dlcomm.compress`) the groups change every averaging, so their
members share no common reference to compress against; each member sends every other member of
its group its compressed bucket against their pair's public copy
(:mod:`dlcomm.algorithms.pair_copies`: CHOCO-Gossip's copies, kept per directed pair), then

    x_i <- x_i + (gamma / |G|) sum_{j in G(i), j != i} (c_{j->i} - c_{i->j})

The terms are antisymmetric in ``(i, j)`` and both ends of a pair hold the same copies, so the
group's sum is kept exactly; with a lossless ``Q`` and ``gamma`` = 1 it is the group's mean. The
messages go to every other member (``|G| - 1`` payloads a bucket, one exchange) instead of the
ring's ``2 (|G| - 1) / |G|`` of the bucket: compression pays when a payload is under about
``2 / |G|`` of its bucket.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from dlcomm.algorithms.base import Algorithm
from dlcomm.algorithms.buckets import BUCKET_MB, make_buckets
from dlcomm.algorithms.pair_copies import PairCopies
from dlcomm.algorithms.registry import register
from dlcomm.comm.ring import ring_allreduce
from dlcomm.config.schema import AlgoConfig, doc, domain
from dlcomm.config.validate import require
from dlcomm.topology.graphs import group_of, shuffled_groups

if TYPE_CHECKING:
    import torch


PERIOD = domain(low=1, means="the number of local steps between averagings")


@dataclass
class SESGDConfig(AlgoConfig):
    """``algo=sesgd``, SESGD: regroup the workers at random every iteration; average the parameters
    inside the group with a ring over point-to-point messages (section 9)."""

    name: str = "sesgd"
    groups: int = field(
        default=4,
        metadata=domain(low=1, means="k, the number of groups per iteration,", doc="it must divide the world size"),
    )
    bucket_mb: float = field(default=0.0, metadata=doc("0 is layer-wise, as the paper", BUCKET_MB))
    period: int = field(
        default=1, metadata=doc("averaging after every period-th step (local_sesgd; 1 = SESGD)", PERIOD)
    )
    gamma: float = field(
        default=1.0,
        metadata=domain(
            above=0,
            high=1,
            means="the consensus step",
            doc="compress=<name>: towards the group's per-pair copies (docs/compression.md; unused uncompressed)",
        ),
    )


@dataclass
class LocalSESGDConfig(SESGDConfig):
    """``algo=local_sesgd``, Local-SESGD: local steps, and SESGD's shuffled group averaging every
    ``period`` (H) steps (section 9)."""

    name: str = "local_sesgd"
    period: int = field(default=2, metadata=doc("H (the paper uses 2)", PERIOD))


@register
class SESGD(Algorithm[SESGDConfig]):
    display_name = "Shuffle-Exchange SGD"
    Config = SESGDConfig
    compression = ("payload",)  # each bucket to the group's other members, against per-pair copies

    @classmethod
    def check_world(cls, cfg: SESGDConfig, nodes: int, workers_per_node: int) -> None:
        world = nodes * workers_per_node
        require(
            world % cfg.groups == 0,
            "algo.groups",
            cfg.groups,
            f"the groups must split the {world} workers evenly; pass a divisor of {world}",
        )

    def setup(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
        super().setup(model, optimizer)
        params = [p for p in model.parameters() if p.requires_grad]
        self.buffers = [bucket.bind_params() for bucket in make_buckets(params, int(self.cfg.bucket_mb * 2**20))]
        self.copies = None if self.compressor.identity else PairCopies(self.compressor, self.cluster.rank)

    def group(self, step: int) -> list[int]:
        """This rank's group at ``step`` (the same answer on every member)."""
        return group_of(self.cluster.rank, shuffled_groups(self.cluster.world_size, self.cfg.groups, self.seed, step))

    def after_step(self, step: int) -> None:
        import torch

        if (step + 1) % self.cfg.period:
            return
        with torch.no_grad():
            if self.copies is None:
                ring_allreduce(self.channel, self.buffers, self.group(step), average=True)
            else:
                self._compressed_average(step, self.group(step), self.copies)

    def _compressed_average(self, step: int, group: list[int], copies: PairCopies) -> None:
        """Every bucket, compressed against each pair's copy, to every other member in one
        exchange; then the antisymmetric update (module docstring)."""
        import torch

        others = [member for member in group if member != self.cluster.rank]
        if not others:
            return
        sends, recvs, plans = [], [], []
        for key, buffer in enumerate(self.buffers):
            for peer in others:
                message, decoder = copies.push(key, peer, buffer, step)
                inbox = torch.empty_like(message)
                sends.append((message, peer))
                recvs.append((inbox, peer))
                plans.append((key, peer, inbox, decoder))
        self.channel.exchange(sends, recvs).wait()
        change = [torch.zeros_like(buffer) for buffer in self.buffers]
        for key, peer, inbox, decoder in plans:
            change[key].add_(copies.pull(key, peer, inbox, decoder)).sub_(copies.sent_copy(key, peer))
        for buffer, delta in zip(self.buffers, change):
            buffer.add_(delta, alpha=self.cfg.gamma / len(group))

    def state_dict(self) -> dict:
        return self.copies.state_dict() if self.copies is not None else {}

    def load_state_dict(self, state: dict) -> None:
        if self.copies is not None:
            self.copies.load_state_dict(state)


@register
class LocalSESGD(SESGD):
    display_name = "local Shuffle-Exchange SGD"
    Config = LocalSESGDConfig
