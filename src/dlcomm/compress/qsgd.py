"""QSGD (Alistarh et al., NeurIPS 2017) as GRACE implements it (``QSGDCompressor``,
``grace_dl/dist/compressor/qsgd.py``, bucketed): the flat tensor is cut into buckets of ``B``
entries (the last zero-padded), each with its L2 norm ``n_b``, and every entry is rounded
stochastically to one of ``s`` levels of its bucket's norm:

    l = s |x| / n_b,   level = floor(l) + [u < l - floor(l)],  u ~ U[0, 1)
    payload = (sign(x) * level as int8 (s < 128) or float16, n_b as float32)
    decompress: n_b / s * level

unbiased (``E[decompress] = x``). Payloads are all-gathered and averaged. A bucket whose norm
is 0 sends level 0 (GRACE divides 0 by 0 there). The uniform draws come from a generator seeded
by the run's seed, the rank, the bucket and the step (each rank its own rounding, as GRACE's
per-process global generator gives).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from dlcomm.compress.base import Compressor, check_block
from dlcomm.compress.randomk import draw_seed
from dlcomm.compress.registry import register
from dlcomm.config.schema import CompressConfig, doc, domain


@dataclass
class QSGDConfig(CompressConfig):
    """``compress=qsgd``: QSGD (Alistarh et al. 2017) as GRACE buckets it: stochastic rounding to s
    levels of each bucket's norm, all-gathered."""

    name: str = "qsgd"
    levels: int = field(
        default=127,
        metadata=domain(
            low=1,
            high=32767,
            means="s, the quantisation levels per sign,",
            doc="GRACE's quantum_num; < 128 sends int8, more float16",
        ),
    )
    bucket_size: int = field(
        default=128,
        metadata=domain(low=1, means="B, the number of entries sharing one norm,"),
    )
    error_feedback: bool = field(
        default=False, metadata=doc("memory of the rounding error; QSGD is unbiased: none unless asked for")
    )


@register
class QSGD(Compressor):
    display_name = "QSGD"
    Config = QSGDConfig

    @classmethod
    def check_model(cls, cfg: QSGDConfig, model) -> None:
        check_block("compress.bucket_size", cfg.bucket_size, model, QSGDConfig.bucket_size)

    def prepare(self, key, step, rank):
        import torch

        self.generator = torch.Generator(device="cpu").manual_seed(draw_seed(self.seed, (key, rank), step))

    def compress(self, tensor, key):
        import torch

        uniform = torch.rand(tensor.numel(), generator=self.generator, dtype=tensor.dtype).to(tensor.device)
        return quantise(tensor.reshape(-1), self.cfg.levels, self.cfg.bucket_size, uniform), tensor.shape

    def decompress(self, payload, ctx):
        return dequantise(payload, self.cfg.levels, self.cfg.bucket_size, ctx.numel()).view(ctx)


def bucket_norms(flat, bucket_size: int):
    """``(norm of each bucket, each entry's bucket norm)`` of a flat tensor (the last bucket zero-padded)."""
    import torch

    pad = (-flat.numel()) % bucket_size
    padded = torch.cat([flat, flat.new_zeros(pad)]) if pad else flat
    norms = torch.sqrt(torch.sum(padded.view(-1, bucket_size) ** 2, dim=1))
    return norms, _expand(norms, bucket_size, flat.numel())


def _expand(norms, bucket_size: int, numel: int):
    import torch

    return torch.matmul(
        norms.view(-1, 1), torch.ones(1, bucket_size, dtype=norms.dtype, device=norms.device)
    ).flatten()[:numel]


def quantise(flat, levels: int, bucket_size: int, uniform) -> list:
    """``[signed levels (int8 or float16), bucket norms (float32)]`` of ``flat`` with draws ``uniform``."""
    import torch

    norms, norm = bucket_norms(flat, bucket_size)
    scaled = torch.where(norm > 0, levels / norm * flat.abs(), torch.zeros_like(flat))
    floor = scaled.floor()
    level = floor + (uniform < scaled - floor).to(flat.dtype)
    signed = (level * flat.sign()).to(torch.int16).to(torch.int8 if levels < 128 else torch.float16)
    return [signed, norms.to(torch.float32)]


def dequantise(payload, levels: int, bucket_size: int, numel: int):
    signed, norms = payload
    import torch

    return _expand(norms, bucket_size, numel) / levels * signed.to(torch.float32)
