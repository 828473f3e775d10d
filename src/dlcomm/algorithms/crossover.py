"""Crossover-SGD (paper ``crossover-sgd.txt``, Algorithms 1 and 2): segment-wise gossip on a
random topology with fair peer selection.

The parameters are split into ``segments`` (see :mod:`dlcomm.algorithms.segments`; 0 = the
model's top-level blocks). At iteration ``t``, for every segment ``k``, every rank computes the
same source list ``src = fair_random_sources(n, seed, t, k)`` (:mod:`dlcomm.topology.graphs`:
``src[i]`` is the rank ``i`` receives from, drawn as the authors' ``select_layer`` draws it), so
each rank receives segment ``k`` from ``src[i]`` and sends it to the rank that drew it. After the
optimizer step all segments' sends and receives are one exchange (segment order: between two
ranks the messages match in that order), then

    x_i^(k) <- (x_i^(k) + x_{src_k(i)}^(k)) / 2          for every segment k

(doubly stochastic for the fair draw, a permutation: the mean over workers is kept). Ablations:
``fair=false`` draws each source uniformly among the others, independently (the authors'
unfair variant: every rank still receives exactly one copy and averages with it, a rank sends to
every rank that drew it, none or several; row stochastic only). ``segmentwise=false`` makes the
whole model one segment.

With ``compress=<name>`` (:mod:`dlcomm.compress`) the round follows CHOCO-Gossip's rule
(Koloskova, Stich, Jaggi, ICML 2019, Alg. 2; as ``dpsgd`` does), with a public copy per
directed pair because the peers change every iteration: ``s -> r`` is the copy of ``x_s`` that
``s`` and ``r`` both hold (from 0, updated only when ``s`` sends to ``r``). For every segment,
with ``r`` the rank this one sends to and ``s`` the rank it receives from,

    q = Q(x_i - x^_{i->r});   x^_{i->r} += D(q)  on both ends;   x^_{s->i} += D(q_s)
    x_i <- x_i + (gamma / 2) (x^_{s->i} - x^_{i->r})

Both ends add the same ``D(q)``, so the copies agree bit for bit, and the fair draw is a
permutation (every rank sends each segment once): ``sum_i x^_{src(i)->i} = sum_i x^_{i->dest(i)}``,
so the workers' sum is kept exactly. With a lossless ``Q`` and ``gamma`` = 1 the copies are the
parameters and the round is ``(x_i + x_s) / 2``, the uncompressed one. The compressor's own
memory is not used (the copies carry the error). ``fair=false`` is refused with a compressor:
a rank may then send a segment to several ranks or none, and no subtracted copy keeps the sum.
Memory: at most two copies of each segment per other rank (one sent, one heard), made when a
pair first meets.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from dlcomm.algorithms.base import Algorithm
from dlcomm.algorithms.pair_copies import PairCopies
from dlcomm.algorithms.registry import register
from dlcomm.algorithms.segments import bind_segments, split_segments
from dlcomm.config.schema import AlgoConfig, doc, domain
from dlcomm.config.validate import require
from dlcomm.topology.graphs import fair_random_sources, random_sources, receivers_of

if TYPE_CHECKING:
    import torch

    from dlcomm.compress.base import Compressor


@dataclass
class CrossoverConfig(AlgoConfig):
    """``algo=crossover``, Crossover-SGD: segment-wise gossip on a random topology with fair peer
    selection (section 5)."""

    name: str = "crossover"
    segments: int = field(
        default=0,
        metadata=domain(
            low=0,
            means="the number of segments (0: the model's top-level blocks)",
            doc="ResNet's: stem, stages, FC; k: k balanced runs of layers",
        ),
    )
    segmentwise: bool = field(
        default=True, metadata=doc("false: the whole model is one segment (the paper's ablation)")
    )
    fair: bool = field(
        default=True,
        metadata=doc("false: each rank pulls from an independent uniform source (the authors' unfair ablation)"),
    )
    gamma: float = field(
        default=1.0,
        metadata=domain(
            above=0,
            high=1,
            means="CHOCO's consensus step",
            doc="compress=<name>: CHOCO-Gossip's step towards the per-pair copies (docs/compression.md; unused uncompressed)",
        ),
    )


class CrossoverGossip:
    """One Crossover round over ``buffers`` among the global ranks ``members`` (this rank among them)."""

    def __init__(
        self,
        channel,
        buffers: list[torch.Tensor],
        members: list[int],
        rank: int,
        fair: bool,
        seed: int,
        compressor: Compressor | None = None,
        gamma: float = 1.0,
    ) -> None:
        import torch

        self.channel, self.buffers, self.members, self.fair, self.seed = channel, buffers, members, fair, seed
        self.me = members.index(rank)
        self.rank = rank
        self.scratch = [torch.empty_like(b) for b in buffers]
        self.gamma = gamma
        # compressed: CHOCO's public copies per (segment, member position) pair
        self.copies = None if compressor is None or compressor.identity else PairCopies(compressor, rank)

    def sources(self, step: int, segment: int) -> list[int]:
        """``src[i]``: the member position that position ``i`` receives ``segment`` from."""
        draw = fair_random_sources if self.fair else random_sources
        return draw(len(self.members), self.seed, step, segment)

    def round(self, step: int, group: str = "world") -> None:
        import torch

        if len(self.members) == 1:
            return
        if self.copies is not None:
            self._choco_round(step, group, self.copies)
            return
        sends, recvs = [], []
        for k, buffer in enumerate(self.buffers):
            src = self.sources(step, k)
            sends += [(buffer, self.members[receiver]) for receiver in receivers_of(self.me, src)]
            recvs.append((self.scratch[k], self.members[src[self.me]]))
        self.channel.exchange(sends, recvs, group=group).wait()
        with torch.no_grad():
            for buffer, received in zip(self.buffers, self.scratch):
                buffer.add_(received).mul_(0.5)

    def _choco_round(self, step: int, group: str, copies: PairCopies) -> None:
        """One round with compressed messages against the pairs' public copies (module docstring):
        every segment's payload to its receiver in one exchange."""
        import torch

        sends, recvs, plans = [], [], []
        for k, buffer in enumerate(self.buffers):
            src = self.sources(step, k)
            (receiver,) = receivers_of(self.me, src)  # the fair draw: exactly one
            message, decoder = copies.push(k, receiver, buffer, step)
            inbox = torch.empty_like(message)  # payload sizes never depend on the data
            sends.append((message, self.members[receiver]))
            recvs.append((inbox, self.members[src[self.me]]))
            plans.append((receiver, src[self.me], inbox, decoder))
        self.channel.exchange(sends, recvs, group=group).wait()
        with torch.no_grad():
            for k, (buffer, (receiver, source, inbox, decoder)) in enumerate(zip(self.buffers, plans)):
                heard = copies.pull(k, source, inbox, decoder)
                buffer.add_(heard - copies.sent_copy(k, receiver), alpha=self.gamma / 2)

    def state_dict(self) -> dict:
        """The public copies (empty uncompressed)."""
        return self.copies.state_dict() if self.copies is not None else {}

    def load_state_dict(self, state: dict) -> None:
        if self.copies is not None:
            self.copies.load_state_dict(state)


@register
class Crossover(Algorithm[CrossoverConfig]):
    display_name = "Crossover-SGD"
    Config = CrossoverConfig
    compression = ("payload",)  # CHOCO-Gossip with a public copy per directed pair

    @classmethod
    def check_compressor(cls, cfg: CrossoverConfig, compressor: type[Compressor]) -> None:
        require(
            compressor.identity or cfg.fair,
            "algo.fair",
            cfg.fair,
            f"compress={compressor.name} needs the fair draw (every rank sends each segment once, which keeps the "
            "workers' sum): pass algo.fair=true or compress=none",
        )

    group = "world"  # the group the gossip round runs on

    def gossip_members(self) -> list[int] | None:
        """The global ranks of this rank's gossip round (None: it takes no part)."""
        return list(range(self.cluster.world_size))

    def setup(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
        super().setup(model, optimizer)
        count = self.cfg.segments if self.cfg.segmentwise else 1
        self.buffers = bind_segments(split_segments(model, count))
        members = self.gossip_members()
        self.gossip = (
            None
            if members is None
            else CrossoverGossip(
                self.channel,
                self.buffers,
                members,
                self.cluster.rank,
                self.cfg.fair,
                self.seed,
                compressor=self.compressor,
                gamma=self.cfg.gamma,
            )
        )

    def after_step(self, step: int) -> None:
        if self.gossip is not None:
            self.gossip.round(step, group=self.group)

    def state_dict(self) -> dict:
        return self.gossip.state_dict() if self.gossip is not None else {}

    def load_state_dict(self, state: dict) -> None:
        if self.gossip is not None:
            self.gossip.load_state_dict(state)
