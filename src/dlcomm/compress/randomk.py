"""Random-k sparsification (GRACE's ``RandomKCompressor``, ``grace_dl/dist/compressor/randomk.py``):
``k = max(1, floor(d * ratio))`` indices drawn uniformly *with replacement*
(``randint(d, [k])``, repeats possible) from a seed every rank shares, so that the members send
the same coordinates and the payloads sum:

    I = randint(d, k; seed h)      payload = x[I]      x <- scatter(zeros(d), I, sum_j x_j[I] / W)

GRACE seeds torch's global generator with ``h = (byte sum of the tensor's name) + (a counter of
compress calls)``; here ``h`` comes from the run's seed, the bucket and the step
(:func:`draw_seed`) through a generator of its own, so the training's random stream is
untouched and a resumed run draws the same indices. With ``error_feedback`` the unsent entries
are kept and added to the next step's tensor (GRACE's ``ResidualMemory``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from dlcomm.compress.base import Compressor
from dlcomm.compress.registry import register
from dlcomm.compress.topk import SENT_RATIO, kept
from dlcomm.config.schema import CompressConfig, doc


@dataclass
class RandomKConfig(CompressConfig):
    """``compress=randomk``: random-k sparsification (GRACE's RandomKCompressor): k entries drawn with
    replacement from a seed every rank shares; summed by an allreduce."""

    name: str = "randomk"
    ratio: float = field(
        default=0.01,
        metadata=doc("k = max(1, floor(d * ratio)) per bucket, drawn with replacement", SENT_RATIO),
    )
    error_feedback: bool = field(
        default=True, metadata=doc("add what was not sent to the next step's tensor (GRACE's ResidualMemory)")
    )


def draw_seed(seed: int, key: object, step: int) -> int:
    """The indices' seed of bucket ``key`` at ``step``: the same on every rank (a stable hash of the key,
    not Python's per-process one), new every step."""
    import zlib

    return (seed * 1_000_003 + zlib.crc32(str(key).encode()) * 7_919 + step) % (2**62)


@register
class RandomK(Compressor):
    display_name = "random-k"
    Config = RandomKConfig
    summable = True

    def prepare(self, key, step, rank):
        self.next_seed = draw_seed(self.seed, key, step)  # every rank the same indices

    def compress(self, tensor, key):
        import torch

        flat = tensor.reshape(-1)
        generator = torch.Generator(device="cpu").manual_seed(self.next_seed)
        indices = torch.randint(flat.numel(), [kept(flat.numel(), self.cfg.ratio)], generator=generator).to(flat.device)
        return [flat[indices]], (indices, tensor.shape)

    def decompress(self, payload, ctx):
        import torch

        (values,), (indices, shape) = payload, ctx
        out = torch.zeros(shape.numel(), dtype=values.dtype, device=values.device)
        return out.scatter_(0, indices, values).view(shape)
