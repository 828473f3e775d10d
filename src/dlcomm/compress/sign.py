"""signSGD and EF-SignSGD as GRACE implements them (``grace_dl/dist/compressor/signsgd.py``,
``efsignsgd.py`` and ``memory/efsignsgd.py``).

``error_feedback=false``: signSGD with majority vote (Bernstein et al., ICML 2018): every member
sends the signs of its tensor (``x >= 0`` counts as +), the result is the sign of their sum
(a tie counts as +)::

    x <- sign*( sum_j sign*(x_j) )          sign*(v) = +1 if v >= 0 else -1

``error_feedback=true``: EF-SignSGD (Karimireddy et al., ICML 2019): a member compresses
``p = lr * x + e`` (``p = x`` at the first step, as GRACE's memory does) to the scaled sign
``(|p|_1 / d) sign*(p)``, keeps ``e <- p - (|p|_1 / d) sign*(p)``, and the result is GRACE's
aggregate, the *sum* of the members' scaled signs divided by ``lr`` (``compress.lr``; GRACE does
not average: scale the optimizer's step by 1/W for a mean).

The signs travel packed, eight to a byte (GRACE sends one byte per sign: the same values, 1/8
of its bytes), with the scale as one float32.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Hashable

from dlcomm.compress.base import Compressor, ErrorFeedback
from dlcomm.compress.registry import register
from dlcomm.config.schema import CompressConfig, doc, domain


@dataclass
class SignConfig(CompressConfig):
    """``compress=sign``: signSGD with majority vote, or EF-SignSGD (scaled sign + memory) with
    error_feedback=true, as GRACE implements them."""

    name: str = "sign"
    error_feedback: bool = field(
        default=False, metadata=doc("false: signSGD with majority vote; true: EF-SignSGD (scaled sign + memory)")
    )
    lr: float = field(
        default=0.1,
        metadata=domain(
            above=0,
            means="EF-SignSGD's step",
            doc="folded into its memory, p = lr * x + e (the result is the sum of scaled signs / lr; GRACE's default 0.1)",
        ),
    )


def pack_bits(positive):
    """A bool tensor as uint8, eight entries a byte (the first entry in the high bit), zero-padded."""
    import torch

    pad = (-positive.numel()) % 8
    bits = (
        torch.cat([positive.to(torch.uint8), positive.new_zeros(pad, dtype=torch.uint8)])
        if pad
        else positive.to(torch.uint8)
    )
    weights = torch.tensor([128, 64, 32, 16, 8, 4, 2, 1], dtype=torch.uint8, device=positive.device)
    return (bits.view(-1, 8) * weights).sum(dim=1).to(torch.uint8)


def unpack_bits(packed, numel: int):
    """±1.0 (float32) of the first ``numel`` bits of :func:`pack_bits`' output."""
    import torch

    shifts = torch.tensor([7, 6, 5, 4, 3, 2, 1, 0], dtype=torch.uint8, device=packed.device)
    bits = (packed.view(-1, 1) >> shifts) & 1
    return bits.reshape(-1)[:numel].to(torch.float32) * 2 - 1


class _ScaledMemory(ErrorFeedback):
    """GRACE's ``EFSignSGDMemory``: ``compensate(x) = e + lr * x`` (``x`` before the first update)."""

    def __init__(self, lr: float) -> None:
        super().__init__(enabled=True)
        self.lr = lr

    def compensate(self, tensor, key: Hashable):
        if key not in self.residuals:
            return tensor
        return self.residuals[key] + self.lr * tensor


@register
class Sign(Compressor):
    display_name = "signSGD"
    Config = SignConfig

    def __init__(self, cfg: SignConfig, seed: int = 0) -> None:
        super().__init__(cfg, seed)
        if cfg.error_feedback:
            self.memory = _ScaledMemory(cfg.lr)

    def compress(self, tensor, key):
        flat = tensor.reshape(-1)
        signs = pack_bits(flat >= 0)
        if not self.cfg.error_feedback:
            return [signs], tensor.shape
        return [flat.abs().mean().to(flat.dtype).reshape(1), signs], tensor.shape

    def decompress(self, payload, ctx):
        if not self.cfg.error_feedback:
            return unpack_bits(payload[0], ctx.numel()).view(ctx)
        scale, signs = payload
        return (scale * unpack_bits(signs, ctx.numel())).view(ctx)

    def aggregate(self, tensors):
        total = tensors[0].clone()
        for tensor in tensors[1:]:
            total.add_(tensor)
        if self.cfg.error_feedback:
            return total.div_(self.cfg.lr)
        return (total >= 0).to(total.dtype) * 2.0 - 1.0
