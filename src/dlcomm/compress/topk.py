"""Top-k sparsification (GRACE's ``TopKCompressor``, ``grace_dl/dist/compressor/topk.py``):
of a flat tensor ``x`` of ``d`` entries keep the ``k = max(1, floor(d * ratio))`` of largest
magnitude,

    payload = (x[I], I)  with  I = argtopk_k |x|      (values in x's dtype, indices int32)
    decompress: zeros(d) with x[I] scattered at I

all-gathered (the members' indices differ) and averaged: ``(1/W) sum_j decompress(payload_j)``.
With ``error_feedback`` (GRACE's ``ResidualMemory``) what was not sent is added to the next
step's tensor: ``e <- (x + e) - decompress(payload)``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from dlcomm.compress.base import Compressor
from dlcomm.compress.registry import register
from dlcomm.config.schema import CompressConfig, doc, domain

# ``compress.ratio`` of topk and randomk: (0, 1].
SENT_RATIO = domain(above=0, high=1, means="the fraction of entries sent")


@dataclass
class TopKConfig(CompressConfig):
    """``compress=topk``: top-k sparsification (GRACE's TopKCompressor): the k largest magnitudes of
    each bucket, values + int32 indices, all-gathered."""

    name: str = "topk"
    ratio: float = field(default=0.01, metadata=doc("k = max(1, floor(d * ratio)) per bucket", SENT_RATIO))
    error_feedback: bool = field(
        default=True, metadata=doc("add what was not sent to the next step's tensor (GRACE's ResidualMemory)")
    )


def kept(numel: int, ratio: float) -> int:
    """``k = max(1, floor(numel * ratio))``, as GRACE counts it."""
    return max(1, int(numel * ratio))


@register
class TopK(Compressor):
    display_name = "top-k"
    Config = TopKConfig

    def compress(self, tensor, key):
        import torch

        flat = tensor.reshape(-1)
        _, indices = torch.topk(flat.abs(), kept(flat.numel(), self.cfg.ratio), sorted=False)
        return [torch.gather(flat, 0, indices), indices.to(torch.int32)], tensor.shape

    def decompress(self, payload, ctx):
        import torch

        values, indices = payload
        out = torch.zeros(ctx.numel(), dtype=values.dtype, device=values.device)
        return out.scatter_(0, indices.long(), values).view(ctx)
