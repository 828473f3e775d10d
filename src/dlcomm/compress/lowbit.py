"""Low-bit floats: each entry rounded to the nearest value of a float format of ``e`` exponent and
``m`` mantissa bits (and a sign bit), after dividing its block of ``B`` entries by a scale that maps
the block's largest magnitude to the format's largest value. Streaming DiLoCo (Douillard et al.
2025, arXiv 2501.18512) sends its outer gradients as 4-bit floats, E3M0; ``bits=8`` is E4M3 as
``torch.float8_e4m3fn`` (OCP FP8). For a flat tensor ``x``::

    s_b   = max_{j in b} |x_j| / max_format          # per block b of B entries (the last may be short); 0 -> 0
    code  = nearest(|x| / s_b), ties to the even code  # saturating: no inf, no NaN
    payload = (sign bit + code, packed: two to a byte at 4 bits, one at 8;  s_b as float32)
    decompress: sign * value(code) * s_b

The formats (``bias = 2**(e-1) - 1``; a code ``c`` has exponent field ``c >> m`` and mantissa field
``c & (2**m - 1)``; exponent field 0 is subnormal ``mant * 2**(1 - bias - m)``, else ``(1 + mant /
2**m) * 2**(exp - bias)``):

- ``bits=4``, E3M0: bias 3, the magnitudes 0, 0.25, 0.5, 1, 2, 4, 8, 16 (every code finite);
- ``bits=8``, E4M3: bias 7, 0 to 448 (the top code, S.1111.111, is NaN in E4M3FN: never produced).

Ties to the even code are IEEE's round-to-nearest-even wherever there is a mantissa bit (E4M3:
bit for bit ``tensor.clamp(-448, 448).to(torch.float8_e4m3fn)``, tested); at E3M0 it sends a value
halfway between two powers of two to the one with the even exponent field. Rounding is
deterministic (no draws) and biased; the payloads are not summable (each block's scale is its
own), so they are all-gathered and the decompressed tensors averaged in full precision. No error
feedback by default (``error_feedback=true`` adds GRACE's residual memory).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from dlcomm.compress.base import Compressor, check_block
from dlcomm.compress.registry import register
from dlcomm.config.schema import CompressConfig, doc, domain
from dlcomm.config.validate import require

#: bits -> (exponent bits, mantissa bits, whether the top code is NaN and left out)
FORMATS = {4: (3, 0, False), 8: (4, 3, True)}


@dataclass
class LowBitConfig(CompressConfig):
    """``compress=lowbit``: low-bit floats (Streaming DiLoCo's 4-bit outer gradients): each block of
    entries scaled so that its largest magnitude is the format's largest, rounded to the nearest value
    of the format (ties to the even code), all-gathered."""

    name: str = "lowbit"
    bits: int = field(
        default=4,
        metadata=domain(
            one_of=tuple(FORMATS),
            means="the bits per entry (4: E3M0, 8: E4M3),",
            doc="E3M0: 0, 0.25, ..., 16, Streaming DiLoCo's; E4M3: torch.float8_e4m3fn",
        ),
    )
    block_size: int = field(
        default=128,
        metadata=domain(
            low=1,
            means="B, the number of entries sharing one scale,",
            doc="one float32 scale: the largest magnitude of the block maps to the format's largest",
        ),
    )
    error_feedback: bool = field(
        default=False, metadata=doc("memory of the rounding error; off: the paper's rule names none")
    )


def magnitudes(bits: int):
    """The format's non-negative values in code order (ascending), float64."""
    import torch

    exponent_bits, mantissa_bits, nan_top = FORMATS[bits]
    bias = 2 ** (exponent_bits - 1) - 1
    values = []
    for code in range(2 ** (exponent_bits + mantissa_bits) - (1 if nan_top else 0)):
        exp, mant = code >> mantissa_bits, code & (2**mantissa_bits - 1)
        if exp == 0:
            values.append(mant * 2.0 ** (1 - bias - mantissa_bits))
        else:
            values.append((1 + mant / 2**mantissa_bits) * 2.0 ** (exp - bias))
    return torch.tensor(values, dtype=torch.float64)


def nearest_codes(scaled, grid):
    """The code of the value of ``grid`` nearest each of ``scaled`` (magnitudes, >= 0), ties to
    the even code; beyond the largest value, the largest (saturation)."""
    import torch

    a = scaled.to(torch.float64)
    upper = torch.searchsorted(grid, a).clamp(max=len(grid) - 1)  # first value >= a (or the largest)
    lower = (upper - 1).clamp(min=0)
    below, above = a - grid[lower], grid[upper] - a
    take_lower = (below < above) | ((below == above) & (lower % 2 == 0))
    return torch.where(take_lower, lower, upper)


def _blocks(flat, block_size: int):
    """``flat`` zero-padded to whole blocks, as ``(blocks, B)``."""
    import torch

    pad = (-flat.numel()) % block_size
    return (torch.cat([flat, flat.new_zeros(pad)]) if pad else flat).view(-1, block_size)


@register
class LowBit(Compressor[LowBitConfig]):
    display_name = "low-bit float"
    Config = LowBitConfig

    @classmethod
    def check(cls, cfg: LowBitConfig) -> None:
        require(cfg.bits in FORMATS, "compress.bits", cfg.bits, "pass 4 (E3M0) or 8 (E4M3)")

    @classmethod
    def check_model(cls, cfg: LowBitConfig, model) -> None:
        check_block("compress.block_size", cfg.block_size, model, LowBitConfig.block_size)

    def __init__(self, cfg: LowBitConfig, seed: int = 0) -> None:
        super().__init__(cfg, seed)
        self.grid = magnitudes(cfg.bits)

    def compress(self, tensor, key):
        import torch

        flat = tensor.reshape(-1)
        blocks = _blocks(flat, self.cfg.block_size)
        scales = blocks.abs().amax(dim=1) / float(self.grid[-1])
        divisor = torch.where(scales > 0, scales, torch.ones_like(scales)).unsqueeze(1)
        codes = nearest_codes((blocks.abs() / divisor).reshape(-1)[: flat.numel()], self.grid.to(flat.device))
        signed = codes.to(torch.uint8) | (torch.signbit(flat).to(torch.uint8) << (self.cfg.bits - 1))
        if self.cfg.bits == 4:  # two codes a byte, the first in the high nibble
            if signed.numel() % 2:
                signed = torch.cat([signed, signed.new_zeros(1)])
            signed = (signed[0::2] << 4) | signed[1::2]
        return [signed, scales.to(torch.float32)], tensor.shape

    def decompress(self, payload, ctx):
        import torch

        packed, scales = payload
        numel = ctx.numel()
        if self.cfg.bits == 4:
            packed = torch.stack([packed >> 4, packed & 0xF], dim=1).reshape(-1)
        codes = packed[:numel].to(torch.int64)
        sign_bit = 1 << (self.cfg.bits - 1)
        grid = self.grid.to(device=scales.device, dtype=torch.float32)
        values = grid[codes & (sign_bit - 1)]
        values = torch.where(codes & sign_bit > 0, -values, values)
        per_entry = scales.repeat_interleave(self.cfg.block_size)[:numel]
        return (values * per_entry).view(ctx)
