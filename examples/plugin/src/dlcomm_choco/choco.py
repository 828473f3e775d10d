"""CHOCO-SGD: decentralized SGD with compressed gossip (Koloskova, Stich, Jaggi, "Decentralized
Stochastic Optimization and Gossip Algorithms with Compressed Communication", ICML 2019,
Algorithm 2), on D-PSGD's bidirectional ring.

The mixing weights are the ring's (:mod:`dlcomm.algorithms.dpsgd`): ``w_ij = 1/3`` for ``j`` in
``{i-1, i, i+1}``, 0 otherwise. Every worker ``i`` keeps its parameters ``x_i`` and *public
copies* ``x̂_j`` of itself and of its two neighbours, which every worker holding them updates
alike, so they agree across the ring. The copies start at ``x̂^(0) = 0`` (the paper's
initialisation). The train loop's optimizer has already taken the local step
``x_i^(t+1/2) = x_i^(t) - eta g_i``; :meth:`ChocoSGD.after_step` then does::

    q_i = Q(x_i^(t+1/2) - x̂_i)                              compress the change to the public copy
    send q_i to i-1 and i+1, receive q_{i-1} and q_{i+1}      one Channel exchange
    x̂_j <- x̂_j + q_j            for j in {i-1, i, i+1}       the copies follow (this worker's too)
    x_i^(t+1) = x_i^(t+1/2) + gamma * sum_j w_ij (x̂_j - x̂_i)    the modified gossip step

``Q`` keeps the ``k = ceil(ratio * n)`` entries of largest magnitude of each ``n``-entry segment
and zeroes the rest (top-k, a biased compressor with ``delta = k / n`` in the paper's terms);
``ratio = 1`` is the identity. The kept values travel as a dense tensor with zeros, so the Channel
counts a full segment per message whatever ``ratio`` is: sparse payloads (indices and values) come
with dlcomm's compression work (issue 38), which will let the message shrink to ``k`` entries.

``gamma`` in ``(0, 1]`` is the consensus step size. With ``ratio = 1``, ``x̂_j`` equals
``x_j^(t+1/2)`` after every exchange, and ``gamma = 1`` gives ``x_i <- (x_{i-1} + x_i + x_{i+1}) / 3``:
D-PSGD exactly. Stronger compression needs a smaller ``gamma``: the paper's theorem takes
``gamma`` proportional to ``delta`` (times the graph's spectral gap squared, a conservative bound),
and its experiments tune it, e.g. ``gamma = 0.04`` for top-1% on a ring of 9 workers (the
defaults here: ``ratio = 0.01``, ``gamma = 0.04``). Whatever ``gamma`` and ``Q``, the mean of ``x``
over the workers is kept by the gossip step (``W`` is symmetric).

Since ``sum_j w_ij = 1``, the gossip step is ``x_i += gamma * (s_i - x̂_i)`` with
``s_i = sum_j w_ij x̂_j``; this worker stores ``x̂_i`` and the sum of its neighbours' copies
``x̂_{i-1} + x̂_{i+1}`` (what it needs; on a ring of 2 the one neighbour counts twice, as in
D-PSGD). Both are saved in checkpoints (:meth:`ChocoSGD.state_dict`).

The parameters live in flat segment buffers (``segments``: see
:mod:`dlcomm.algorithms.segments`); each segment is compressed on its own, and all segments'
sends and receives to and from both neighbours are one exchange.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from dlcomm.algorithms.base import Algorithm
from dlcomm.algorithms.segments import bind_segments, split_segments
from dlcomm.config.schema import AlgoConfig, domain
from dlcomm.topology.graphs import ring_neighbours

if TYPE_CHECKING:  # composing a config imports this module: torch only inside the methods
    import torch


@dataclass
class ChocoConfig(AlgoConfig):
    """``algo=choco``, CHOCO-SGD (Koloskova, Stich, Jaggi, ICML 2019, Algorithm 2): D-PSGD's ring with
    compressed gossip. After the local step every worker sends q_i = top-k(x_i - x̂_i) to its two
    neighbours, adds what it sent and received to the public copies x̂, and moves
    x_i += gamma * sum_j w_ij (x̂_j - x̂_i), w_ij = 1/3.

    ``name`` is the choice's name, written once: dlcomm registers :class:`ChocoSGD` under it, and
    stores this dataclass as Hydra's ``algo/choco`` (no YAML file needed)."""

    name: str = "choco"
    gamma: float = field(
        default=0.04,
        metadata=domain(
            above=0,
            high=1,
            means="the consensus step size",
            doc="in (0, 1]; shrink it with ratio (the paper tuned 0.04 for top-1% on a ring of 9); 1 with ratio 1 is D-PSGD",
        ),
    )
    ratio: float = field(
        default=0.01,
        metadata=domain(
            above=0,
            high=1,
            means="the fraction of entries a message keeps",
            doc="of each segment, the largest by magnitude (top-k); 1: no compression",
        ),
    )
    segments: int = field(
        default=1,
        metadata=domain(
            low=0,
            means="the number of segments (0: the model's top-level blocks)",
            doc="messages per neighbour: 1: the whole model; k: k runs of layers",
        ),
    )


def kept_entries(n: int, ratio: float) -> int:
    """How many of ``n`` entries top-k keeps: ``ceil(ratio * n)``, at least 1 (rounded first, so
    that ``0.07 * 100`` keeps 7, not 8)."""
    return max(1, min(n, math.ceil(round(ratio * n, 9))))


class ChocoSGD(Algorithm):
    display_name = "CHOCO-SGD"  # its name (algo=choco) is ChocoConfig's
    Config = ChocoConfig

    def setup(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
        import torch

        super().setup(model, optimizer)
        self.buffers = bind_segments(split_segments(model, self.cfg.segments))
        self.hat_self = [torch.zeros_like(b) for b in self.buffers]  # x̂_i, starting at 0
        self.hat_neighbours = [torch.zeros_like(b) for b in self.buffers]  # x̂_{i-1} + x̂_{i+1}
        self.outgoing = [torch.empty_like(b) for b in self.buffers]  # q_i
        self.received = [[torch.empty_like(b), torch.empty_like(b)] for b in self.buffers]  # q_{i-1}, q_{i+1}

    def _compress(self, difference: torch.Tensor, out: torch.Tensor) -> None:
        """``out = Q(difference)``: its top-k entries by magnitude, zeros elsewhere."""
        n = difference.numel()
        k = kept_entries(n, self.cfg.ratio)
        if k == n:
            out.copy_(difference)
            return
        kept = difference.abs().topk(k, sorted=False).indices
        out.zero_()
        out[kept] = difference[kept]

    def after_step(self, step: int) -> None:
        import torch

        n, rank = self.cluster.world_size, self.cluster.rank
        if n == 1:
            return
        left, right = ring_neighbours(rank, n)
        with torch.no_grad():
            for buffer, hat, outgoing in zip(self.buffers, self.hat_self, self.outgoing):
                self._compress(buffer - hat, outgoing)
        sends = [message for outgoing in self.outgoing for message in ((outgoing, right), (outgoing, left))]
        recvs = [
            message for from_left, from_right in self.received for message in ((from_left, left), (from_right, right))
        ]
        self.channel.exchange(sends, recvs).wait()
        with torch.no_grad():
            for buffer, hat, neighbours, outgoing, (from_left, from_right) in zip(
                self.buffers, self.hat_self, self.hat_neighbours, self.outgoing, self.received
            ):
                hat.add_(outgoing)
                neighbours.add_(from_left).add_(from_right)
                # x_i += gamma * (sum_j w_ij x̂_j - x̂_i) = gamma * ((x̂_i + neighbours) / 3 - x̂_i)
                buffer.add_((hat + neighbours).div_(3.0).sub_(hat), alpha=self.cfg.gamma)

    def state_dict(self) -> dict:
        return {
            "hat_self": [hat.detach().clone() for hat in self.hat_self],
            "hat_neighbours": [hat.detach().clone() for hat in self.hat_neighbours],
        }

    def load_state_dict(self, state: dict) -> None:
        import torch

        saved_self, saved_neighbours = state["hat_self"], state["hat_neighbours"]
        if len(saved_self) != len(self.hat_self) or any(a.shape != b.shape for a, b in zip(saved_self, self.hat_self)):
            raise ValueError(
                "the checkpoint's CHOCO-SGD copies do not fit this model's segments "
                f"({[tuple(t.shape) for t in saved_self]} vs {[tuple(t.shape) for t in self.hat_self]})"
            )
        with torch.no_grad():
            for hat, saved in zip(self.hat_self + self.hat_neighbours, list(saved_self) + list(saved_neighbours)):
                hat.copy_(saved)
