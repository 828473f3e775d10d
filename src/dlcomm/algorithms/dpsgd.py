"""D-PSGD (the Crossover-SGD paper's Fig. 1): after the local step every worker averages with
its two neighbours on a bidirectional ring,

    x_i <- (x_{i-1} + x_i + x_{i+1}) / 3

(mixing matrix ``ring`` in :mod:`dlcomm.topology.mixing`, doubly stochastic: the mean over
workers is kept). The parameters live in one flat buffer (``segments``: see
:mod:`dlcomm.algorithms.segments`); every segment's two sends and two receives are one exchange.
Between two neighbours the messages of one direction match in order: what this rank sends to its
right is what the right receives from its left (the order is the same on both sides).

With ``compress=<name>`` (:mod:`dlcomm.compress`) the messages are compressed by CHOCO-Gossip's
rule (Koloskova, Stich, Jaggi, ICML 2019, Alg. 2, CHOCO-SGD): compressing the parameters
themselves would average sparse or quantised models, so every worker keeps public copies
``x^_j`` (from 0) of itself and its neighbours, sends the compressed change of its own,

    q_i = Q(x_i - x^_i),    x^_j <- x^_j + q_j  for j in {i-1, i, i+1},
    x_i <- x_i + gamma * sum_j w_ij (x^_j - x^_i) = x_i + gamma (x^_{i-1} + x^_{i+1} - 2 x^_i) / 3

(``algo.gamma``, the consensus step; the public copies carry the compression error, so the
compressor's own memory is not used). ``W`` is symmetric: the workers' mean is kept.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from dlcomm.algorithms.base import Algorithm
from dlcomm.algorithms.registry import register
from dlcomm.algorithms.segments import bind_segments, split_segments
from dlcomm.config.schema import AlgoConfig, domain
from dlcomm.topology.graphs import ring_neighbours

if TYPE_CHECKING:
    import torch


@dataclass
class DPSGDConfig(AlgoConfig):
    """``algo=dpsgd``, D-PSGD: after the local step, x_i <- (x_{i-1} + x_i + x_{i+1}) / 3 on a
    bidirectional ring (section 3)."""

    name: str = "dpsgd"
    segments: int = field(
        default=1,
        metadata=domain(
            low=0,
            means="the number of segments (0: the model's top-level blocks)",
            doc="messages per neighbour: 1: the whole model; k: k runs of layers",
        ),
    )
    gamma: float = field(
        default=1.0,
        metadata=domain(
            above=0,
            high=1,
            means="CHOCO's consensus step",
            doc="compress=<name>: CHOCO-Gossip's step size (docs/compression.md; unused uncompressed)",
        ),
    )


@register
class DPSGD(Algorithm[DPSGDConfig]):
    display_name = "D-PSGD"
    Config = DPSGDConfig
    compression = ("payload",)  # CHOCO-Gossip: compressed changes of public copies

    def setup(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
        import torch

        super().setup(model, optimizer)
        self.buffers = bind_segments(split_segments(model, self.cfg.segments))
        self.received = [[torch.empty_like(b), torch.empty_like(b)] for b in self.buffers]
        if not self.compressor.identity:  # CHOCO: public copies of this worker, its left and its right, from 0
            self.public = [[torch.zeros_like(b) for _ in range(3)] for b in self.buffers]

    def after_step(self, step: int) -> None:
        import torch

        n, rank = self.cluster.world_size, self.cluster.rank
        if n == 1:
            return
        left, right = ring_neighbours(rank, n)
        if not self.compressor.identity:
            self._choco_step(step, left, right)
            return
        sends = [message for buffer in self.buffers for message in ((buffer, right), (buffer, left))]
        recvs = [
            message for from_left, from_right in self.received for message in ((from_left, left), (from_right, right))
        ]
        self.channel.exchange(sends, recvs).wait()
        with torch.no_grad():
            for buffer, (from_left, from_right) in zip(self.buffers, self.received):
                buffer.add_(from_left).add_(from_right).div_(3.0)

    def _choco_step(self, step: int, left: int, right: int) -> None:
        """One CHOCO-Gossip round: every segment's compressed change to both neighbours in one exchange."""
        import torch

        from dlcomm.compress.base import pack, unpack

        rank, codec = self.cluster.rank, self.compressor
        encoded = [
            codec.encode(buffer - own, index, step, rank)
            for index, (buffer, (own, _, _)) in enumerate(zip(self.buffers, self.public))
        ]
        messages = [pack(payload) for payload, _ in encoded]
        inbox = [[torch.empty_like(m), torch.empty_like(m)] for m in messages]
        sends = [message for m in messages for message in ((m, right), (m, left))]
        recvs = [message for from_left, from_right in inbox for message in ((from_left, left), (from_right, right))]
        self.channel.exchange(sends, recvs).wait()
        gamma = self.cfg.gamma
        with torch.no_grad():
            for buffer, (payload, ctx), (from_left, from_right), (own, of_left, of_right) in zip(
                self.buffers, encoded, inbox, self.public
            ):
                own.add_(codec.decompress(payload, ctx).view_as(own))
                of_left.add_(codec.decompress(unpack(from_left, payload), ctx).view_as(own))
                of_right.add_(codec.decompress(unpack(from_right, payload), ctx).view_as(own))
                buffer.add_((of_left + of_right - 2 * own) / 3, alpha=gamma)

    def state_dict(self) -> dict:
        if self.compressor.identity:
            return {}
        return {"public": [[t.clone() for t in copies] for copies in self.public]}

    def load_state_dict(self, state: dict) -> None:
        """The public copies (compressed), every one checked against this run's before any is copied."""
        from dlcomm.saved import StateMismatch, copy_into, entry, tensors

        mine = getattr(self, "public", [])
        if not mine:
            return
        saved = entry(state, "public", "the algorithm's state")
        if not isinstance(saved, list) or len(saved) != len(mine):
            count = len(saved) if isinstance(saved, list) else type(saved).__name__
            raise StateMismatch(f"the algorithm's public copies are of {count} buckets where this run has {len(mine)}")
        checked = [
            tensors(theirs, copies, f"bucket {n}'s public copies")
            for n, (theirs, copies) in enumerate(zip(saved, mine))
        ]
        for copies, theirs in zip(mine, checked):
            copy_into(copies, theirs, "the algorithm's public copies")
