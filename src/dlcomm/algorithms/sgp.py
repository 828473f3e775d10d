"""SGP, Stochastic Gradient Push (the Crossover-SGD paper's main competitor), one out-peer per
iteration on the time-varying directed exponential graph.

Push-sum: worker ``i`` keeps a numerator ``x_i`` and a weight ``w_i`` (1 at the start); the
de-biased parameters ``z_i = x_i / w_i`` are what the gradient is computed at and what is
evaluated. At iteration ``t``, with ``hop = hops[t mod len(hops)]`` from SGP's phone book as its
reference code runs it, duplicate hops included (:func:`dlcomm.topology.graphs.exponential_hops`;
``cycle=unique`` drops the duplicates, ``cycle=power2`` uses ``2^(t mod log2 n)``):

    x_i <- x_i - eta * g_i(z_i)                      the optimizer steps the numerator
    (x_i, w_i) <- (x_i, w_i) / 2;  send the other half to  i + hop
    (x_i, w_i) <- (x_i, w_i) + what arrived from  i - hop
    z_i <- x_i / w_i

Sums over workers of ``x`` and ``w`` are kept, so the average of the de-biased parameters is
``sum x / sum w``. Between steps the model holds ``z`` (forward, backward, evaluation); just
before the optimizer step it is re-biased to ``x = w z``. The weight travels in the same
message as the parameters (one trailing slot of the flat buffer).

``overlap=true``: the one-step-stale variant. The half sent at iteration ``t`` is added by its
receiver at iteration ``t + 1`` (the messages of ``t`` travel while ``t + 1`` computes); the sums
then include what is in flight.

With ``compress=<name>`` (:mod:`dlcomm.compress`) the pushed half of the numerator travels
compressed against a public copy per directed pair (CHOCO-Gossip's copies, Koloskova, Stich,
Jaggi, ICML 2019, kept per pair because the out-peer changes every iteration; quantised
push-sum with copies is Taheri et al., ICML 2020, on a fixed graph). With ``r`` this iteration's
out-peer and ``c_{i->r}`` the copy that ``i`` and ``r`` both hold (from 0):

    q = Q(x_i / 2 - c_{i->r});   c_{i->r} += D(q)  on both ends
    x_i <- x_i - c_{i->r} + c_{s->i}     (s: the in-peer; what it transferred)
    w_i <- w_i / 2 + w_s / 2             (the weight travels exact, 4 bytes beside the payload)

The sender keeps exactly what it did not transfer (its half plus the compression error), so the
sums of ``x`` and ``w`` over workers are kept as push-sum needs; the error is sent the next time
the pair meets. A lossless ``Q`` gives the uncompressed step. The compressor's own memory is not
used. ``overlap=true`` adds the copy when the message is consumed, one iteration later.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable

from dlcomm.algorithms.base import Algorithm
from dlcomm.algorithms.pair_copies import PairCopies
from dlcomm.algorithms.registry import register
from dlcomm.algorithms.segments import bind_segments, split_segments
from dlcomm.config.schema import AlgoConfig, doc, domain
from dlcomm.topology.graphs import EXPONENTIAL_CYCLES, exponential_hop

if TYPE_CHECKING:
    import torch


@dataclass
class SGPConfig(AlgoConfig):
    """``algo=sgp``, SGP: push-sum gossip to one out-peer per iteration on the time-varying directed
    exponential graph (section 4)."""

    name: str = "sgp"
    overlap: bool = field(default=False, metadata=doc("consume messages one iteration late (staleness 1)"))
    cycle: str = field(
        default="sgp",
        metadata=domain(
            one_of=EXPONENTIAL_CYCLES,
            means="the cycle of peers (sgp: the reference code's schedule, unique: its hops once each)",
            doc="sgp: SGP's phone book +1 -1 +2 -2 ... as its code runs it (duplicates kept); unique; power2",
        ),
    )


@register
class SGP(Algorithm[SGPConfig]):
    display_name = "SGP"
    Config = SGPConfig
    compression = ("payload",)  # the pushed half against a public copy per directed pair

    def setup(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
        import torch

        super().setup(model, optimizer)
        (self.buffer,) = bind_segments(split_segments(model, 1), extra=1)
        self.buffer[-1] = 1.0  # w
        self.params = self.buffer[:-1]
        self.outgoing = torch.empty_like(self.buffer)
        self.incoming = torch.empty_like(self.buffer)
        self.pending: list = []  # overlap: this step's handles, completed at the next
        # compressed: what the pending exchange adds to (x, w) once it completes
        self.arrival: Callable[[], torch.Tensor] | None = None
        self.compressed = not self.compressor.identity
        self.copies = PairCopies(self.compressor, self.cluster.rank) if self.compressed else None

    @property
    def weight(self) -> float:
        return float(self.buffer[-1])

    def reduce_gradients(self, step: int) -> None:
        import torch

        with torch.no_grad():
            self.params.mul_(self.buffer[-1])  # z -> x: the optimizer steps the numerator

    def after_step(self, step: int) -> None:
        import torch

        n, rank = self.cluster.world_size, self.cluster.rank
        with torch.no_grad():
            if n > 1:
                if self.pending:  # overlap: add what was sent to us last step
                    self._receive(holds_numerator=True)
                hop = exponential_hop(step, n, self.cfg.cycle)
                if self.compressed:
                    self._push_compressed(step, (rank + hop) % n, (rank - hop) % n)
                else:
                    self.buffer.mul_(0.5)
                    self.outgoing.copy_(self.buffer)
                    self.pending = [
                        self.channel.exchange([(self.outgoing, (rank + hop) % n)], [(self.incoming, (rank - hop) % n)])
                    ]
                if not self.cfg.overlap:
                    self._receive(holds_numerator=True)
            self.params.div_(self.buffer[-1])  # x -> z

    def _push_compressed(self, step: int, out_peer: int, in_peer: int) -> None:
        """Send ``Q(x/2 - c_{i->r})`` and ``w/2``, keep ``x - c_{i->r}`` and ``w/2`` (module docstring)."""
        import torch

        copies = self.copies
        assert copies is not None  # compressed
        message, decoder = copies.push(0, out_peer, self.params * 0.5, step)
        self.params.sub_(copies.sent_copy(0, out_peer))
        self.buffer[-1] *= 0.5
        weight = self.buffer[-1:].clone()
        inbox, weight_in = torch.empty_like(message), torch.empty_like(weight)
        self.pending = [
            self.channel.exchange([(message, out_peer), (weight, out_peer)], [(inbox, in_peer), (weight_in, in_peer)])
        ]
        # (c_{s->i} after its update, w_s / 2), once the exchange has completed
        self.arrival = lambda: torch.cat([copies.pull(0, in_peer, inbox, decoder), weight_in])

    def _receive(self, holds_numerator: bool) -> None:
        """Wait for the pending exchange and add the arrival to ``(x, w)``; when the model
        holds ``z`` (between steps), go through ``x`` and back."""
        for handle in self.pending:
            handle.wait()
        self.pending = []
        if not holds_numerator:
            self.params.mul_(self.buffer[-1])
        if self.compressed:
            assert self.arrival is not None  # set with the pending exchange
            self.buffer.add_(self.arrival())
        else:
            self.buffer.add_(self.incoming)
        if not holds_numerator:
            self.params.div_(self.buffer[-1])

    def end_epoch(self, epoch: int) -> None:
        import torch

        if self.pending:  # nothing in flight across epochs (evaluation, checkpoints)
            with torch.no_grad():
                self._receive(holds_numerator=False)

    def state_dict(self) -> dict:
        self.end_epoch(-1)
        if not self.compressed:
            return {"weight": self.weight}
        assert self.copies is not None  # compressed
        return {"weight": self.weight, "copies": self.copies.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.buffer[-1] = state["weight"]
        if self.compressed:
            assert self.copies is not None  # compressed
            self.copies.load_state_dict(state["copies"])
