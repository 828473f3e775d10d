"""CHOCO-Gossip's public copies (Koloskova, Stich, Jaggi, ICML 2019, Alg. 2), kept per directed
pair, for gossip whose peers change from one iteration to the next (``crossover``, ``sgp``,
``sesgd``): CHOCO's copy ``x^_j`` of a worker is up to date on its neighbours because every
neighbour receives every ``q_j``; with changing peers a worker hears from another only when they
meet, so the copy is the pair's.

For a tensor named ``key`` (a segment, a bucket) and a pair ``i -> r``, ``c_{i->r}`` is held by
``i`` (:meth:`PairCopies.push`) and by ``r`` (:meth:`PairCopies.pull`), from 0:

    q = Q(v - c_{i->r})              v: what i means to send r
    c_{i->r} <- c_{i->r} + D(q)      on both ends, the same D(q): the copies agree bit for bit

so ``c_{i->r}`` is what ``r`` knows of ``v``; the algorithm decides what to do with the copies
(each keeps the workers' sum its own way). The compressor's own memory is not used: the
copies carry the error (``v - c`` is sent again the next time the pair meets).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Hashable

if TYPE_CHECKING:
    import torch

    from dlcomm.compress.base import Compressor


class PairCopies:
    """This rank's copies: ``sent[(key, r)] = c_{i->r}``, ``heard[(key, s)] = c_{s->i}``."""

    def __init__(self, codec: Compressor, rank: int) -> None:
        self.codec, self.rank = codec, rank
        self.sent: dict[tuple[Hashable, int], torch.Tensor] = {}
        self.heard: dict[tuple[Hashable, int], torch.Tensor] = {}

    def push(self, key: Hashable, peer: int, value: torch.Tensor, step: int) -> tuple[torch.Tensor, Any]:
        """``(message, decoder)``: the packed ``Q(value - c_{i->peer})`` to send ``peer``, with
        ``c_{i->peer}`` updated (read it with :meth:`sent_copy`); ``decoder`` reads what a peer
        sent for the same ``key`` at the same ``step`` (payload sizes never depend on the data,
        and each rank decompresses with its own context, as GRACE does)."""
        import torch

        from dlcomm.compress.base import pack

        copy = self.sent.setdefault((key, peer), torch.zeros_like(value))
        payload, ctx = self.codec.encode(value - copy, key, step, self.rank)
        copy.add_(self.codec.decompress(payload, ctx).view_as(copy))
        return pack(payload), (payload, ctx)

    def pull(self, key: Hashable, peer: int, message: torch.Tensor, decoder: Any) -> torch.Tensor:
        """``c_{peer->i}`` after adding the decompressed ``message`` that ``peer`` sent."""
        import torch

        from dlcomm.compress.base import unpack

        payload, ctx = decoder
        decoded = self.codec.decompress(unpack(message, payload), ctx)
        decoded = decoded.reshape(-1)
        copy = self.heard.setdefault((key, peer), torch.zeros_like(decoded))
        return copy.add_(decoded)

    def sent_copy(self, key: Hashable, peer: int) -> torch.Tensor:
        return self.sent[(key, peer)]

    def state_dict(self) -> dict:
        clone = lambda copies: [(key, peer, t.clone()) for (key, peer), t in copies.items()]  # noqa: E731
        return {"sent": clone(self.sent), "heard": clone(self.heard)}

    def load_state_dict(self, state: dict) -> None:
        self.sent = {(key, peer): t.clone() for key, peer, t in state["sent"]}
        self.heard = {(key, peer): t.clone() for key, peer, t in state["heard"]}
