"""SparseLoCo (Sarfi et al., "Communication Efficient LLM Pre-training with SparseLoCo", arXiv
2508.15706), as Templar's code computes it: the CCLoco optimizer (``src/tplr/ccloco.py``,
``CCLoco.step``, ``TopKCompressor``, ``ChunkingTransform``) stepping DiLoCo's outer gradient
(``src/tplr/strategies.py``, ``Diloco.outer_step``), tplr-y/CCLoco; docs/algorithms.md.

Every worker runs the inner optimizer (``optim=``, AdamW by default as DiLoCo's) for ``period``
steps, then, for every parameter tensor, with ``lr = outer_lr``::

    delta = theta - x_i                                   # DiLoCo's outer gradient (pseudo-gradient)
    e     <- beta e + lr delta                            # error feedback, beta = algo.error_decay (e from 0)
    q     = top-k per chunk of e (no DCT), values quantised to 2^bits levels (below)
    e     <- e - unchunk(scatter(dequantise(q)))          # what is sent, as this worker decodes it
    Q     = all-gather(q)
    g     = unchunk(scatter-mean(dequantise(Q)))          # an entry several workers sent: their mean
    theta <- outer SGD step with g (torch SGD: momentum outer_momentum, default 0), x_i <- theta

The quantiser (``TopKCompressor._quantize``, ``bits=2``: 4 bins) works on one tensor's ``k x
chunks`` values ``v``: ``shift = mean(v)``, ``c = v - shift``, ``sigma = |c| / sqrt(n - 1)``,
``scale = quant_range sigma / 2^bits`` (1 where it is 0 or not finite), ``code = clamp(round(c /
scale + 2^(bits-1)), 0, 2^bits - 1)`` (in float32, as the reference's ``.float()``), and the
lookup table ``L[b]`` = the float32 mean of the ``c`` that fell in bin ``b`` (0 for an empty bin);
decoded ``L[code] + shift``. The reference's own reconstruction adds in float32 (``L`` float32,
``shift`` a 0-d tensor), the gathered ones in the parameter's dtype (the all-gathered ``[shift, L]``
is one tensor of that dtype): both kept. The outer learning rate enters twice (inside ``e`` and in
the outer step), as the reference's ``error_buffer.add_(grad, alpha=lr)`` then ``SGD.step``.

On the wire, per tensor: the codes packed ``8 / bits`` to a byte, the indices in the narrowest
integer type (:mod:`dlcomm.algorithms.chunks`), the shift in the parameter's dtype and the
``2^bits`` float32 lookup values; one all-gather per bucket of every tensor's payload. The error
buffers are the algorithm's state (in the checkpoint), beside DiLoCo's ``theta`` and momentum.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, cast

from dlcomm.algorithms.buckets import BUCKET_MB
from dlcomm.algorithms.chunks import Chunks, check_knobs, scatter_mean, top_k
from dlcomm.algorithms.diloco import DiLoCo, DiLoCoConfig
from dlcomm.algorithms.registry import register
from dlcomm.compress.base import pack, unpack
from dlcomm.config.schema import doc, domain

if TYPE_CHECKING:
    import torch

BITS = (2, 4, 8)


@dataclass
class SparseLoCoConfig(DiLoCoConfig):
    """``algo=sparseloco``, SparseLoCo (Sarfi et al. 2025, arXiv 2508.15706; Templar's CCLoco code):
    DiLoCo's outer gradient with decaying error feedback, top-k per chunk, values quantised to 2 bits,
    all-gathered and averaged entry by entry, then an outer SGD step (no momentum by default)."""

    name: str = "sparseloco"
    overlap: str = field(
        default="none",
        metadata=domain(
            one_of=("none",),
            means="how the outer step overlaps the averaging",
            doc="none only: SparseLoCo's outer step waits for its all-gather, as the reference code does "
            "(DiLoCo's delayed and eager overlap its all-reduce)",
        ),
    )
    period: int = field(
        default=20,
        metadata=domain(
            low=1,
            means="H, the number of inner steps between outer steps,",
            doc="the reference's sweeps use H = 15 (of ~160 outer steps); 20 as algo=diloco's, for dlcomm's short runs",
        ),
    )
    outer_lr: float = field(
        default=1.0,
        metadata=domain(
            above=0,
            means="the outer SGD's learning rate",
            doc="the reference's sweeps use 1 (it also scales what enters the error buffer)",
        ),
    )
    outer_momentum: float = field(
        default=0.0,
        metadata=domain(
            low=0,
            below=1,
            means="the outer SGD's momentum",
            doc="the reference's default 0: the error feedback takes momentum's place",
        ),
    )
    nesterov: bool = field(default=False, metadata=doc("the reference's outer SGD is torch's without Nesterov"))
    bucket_mb: float = field(
        default=25.0,
        metadata=doc("size in MiB of the flat buffers whose tensors' payloads travel in one all-gather", BUCKET_MB),
    )
    error_decay: float = field(
        default=0.95,
        metadata=domain(
            low=0,
            high=1,
            means="beta, the error buffer's decay,",
            doc="the reference's sweeps use 0.95 (its default is 0.999)",
        ),
    )
    topk: int = field(default=32, metadata=domain(low=1, means="the entries sent per chunk", doc="the reference's 32"))
    chunk: int = field(
        default=64,
        metadata=domain(
            low=1,
            means="the target chunk edge",
            doc="a dimension n is cut into its largest divisor <= chunk (the reference's 64: 64 x 64 blocks)",
        ),
    )
    bits: int = field(
        default=2,
        metadata=domain(
            one_of=BITS, means="the bits per value", doc="2: SparseLoCo's 4 levels; 4 and 8 (CCLoco's 256 bins) as well"
        ),
    )
    quant_range: float = field(
        default=6.0,
        metadata=domain(
            above=0, means="the quantiser's range in standard deviations", doc="the reference's quantization_range (6)"
        ),
    )


def quantise(values: torch.Tensor, bits: int, sigmas: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(codes uint8, shift, lookup float32)`` of ``values`` (the rule in the module's docstring)."""
    import torch

    bins = 2**bits
    shift = values.mean()
    centered = values - shift
    if centered.numel() <= 1:
        sigma = torch.zeros((), dtype=values.dtype, device=values.device)
    else:
        sigma = centered.norm() / math.sqrt(centered.numel() - 1)
    scale = sigmas * sigma / bins
    if scale == 0 or not torch.isfinite(scale):
        scale = torch.ones((), dtype=centered.dtype, device=values.device)
    codes = (centered.float() / scale + bins // 2).round().clamp(0, bins - 1).to(torch.uint8)
    flat = codes.long().reshape(-1)
    sums = torch.zeros(bins, dtype=torch.float32, device=values.device).scatter_add_(
        0, flat, centered.float().reshape(-1)
    )
    counts = torch.zeros_like(sums).scatter_add_(0, flat, torch.ones_like(sums[flat]))
    lookup = torch.where(counts > 0, sums / counts, torch.zeros_like(sums))
    return codes, shift, lookup


def pack_codes(codes: torch.Tensor, bits: int) -> torch.Tensor:
    """``8 / bits`` codes a byte, the first in the lowest bits (zero-padded to whole bytes)."""
    import torch

    per_byte = 8 // bits
    flat = codes.reshape(-1)
    pad = (-flat.numel()) % per_byte
    if pad:
        flat = torch.cat([flat, flat.new_zeros(pad)])
    groups = flat.view(-1, per_byte)
    packed = torch.zeros(groups.shape[0], dtype=torch.uint8, device=codes.device)
    for slot in range(per_byte):
        packed |= groups[:, slot] << (bits * slot)
    return packed


def unpack_codes(packed: torch.Tensor, bits: int, shape) -> torch.Tensor:
    import torch

    per_byte, mask = 8 // bits, (1 << bits) - 1
    slots = [(packed >> (bits * slot)) & mask for slot in range(per_byte)]
    return torch.stack(slots, dim=1).reshape(-1)[: math.prod(shape)].view(shape)


@register
class SparseLoCo(DiLoCo):
    display_name = "SparseLoCo"
    Config = SparseLoCoConfig
    cfg: SparseLoCoConfig
    compression = ()  # its own codec (chunked top-k, 2-bit values)

    @classmethod
    def check_model(cls, cfg: DiLoCoConfig, model: torch.nn.Module) -> None:
        own = cast(SparseLoCoConfig, cfg)  # this class's Config (above)
        check_knobs(own.chunk, own.topk, model)

    def setup(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
        import torch

        super().setup(model, optimizer)
        self.errors = [torch.zeros_like(buffer) for buffer in self.buffers]
        self.layout = [
            [
                (offset, p.shape, Chunks(p.shape, self.cfg.chunk, False, p.dtype, p.device))
                for offset, p in zip(bucket.offsets, bucket.params)
            ]
            for bucket in self.buckets
        ]

    @staticmethod
    def _view(flat: torch.Tensor, offset: int, shape) -> torch.Tensor:
        return flat[offset : offset + math.prod(shape)].view(shape)

    def after_step(self, step: int) -> None:
        import torch

        if (step + 1) % self.cfg.period != 0:
            return
        cfg, lr = self.cfg, self.cfg.outer_lr
        with torch.no_grad():
            pending = []
            for index, buffer in enumerate(self.buffers):
                delta = self.outer.gradient(index, out=buffer)  # theta - x_i, in place of x_i
                error = self.errors[index]
                if cfg.error_decay != 1.0:
                    error.mul_(cfg.error_decay)
                error.add_(delta, alpha=lr)
                payload, sent = [], []
                for offset, shape, chunks in self.layout[index]:
                    part = self._view(error, offset, shape)
                    encoded = chunks.encode(part)
                    indices, values = top_k(encoded, chunks.kept(cfg.topk))
                    codes, shift, lookup = quantise(values, cfg.bits, cfg.quant_range)
                    own = (lookup[codes.long()] + shift).to(encoded.dtype)  # float32 sum, as the reference's
                    part.sub_(chunks.decode(scatter_mean(encoded, [indices], [own])))
                    payload += [pack_codes(codes, cfg.bits), indices.to(chunks.index_dtype()), shift.reshape(1), lookup]
                    sent.append((encoded, codes.shape))
                pending.append((payload, sent, self.channel.allgather(pack(payload), async_op=True)))
            for index, (payload, sent, handle) in enumerate(pending):
                messages = [unpack(message, payload) for message in handle.wait()]
                delta = self.buffers[index]
                for number, ((offset, shape, chunks), (encoded, code_shape)) in enumerate(
                    zip(self.layout[index], sent)
                ):
                    parts = [message[4 * number : 4 * number + 4] for message in messages]
                    every_indices = [part[1] for part in parts]
                    every_values = [
                        lookup.to(encoded.dtype)[unpack_codes(packed, cfg.bits, code_shape).long()] + shift
                        for packed, _, shift, lookup in parts
                    ]
                    mean = scatter_mean(encoded, every_indices, every_values)
                    self._view(delta, offset, shape).copy_(chunks.decode(mean))
                delta.copy_(self.outer.step(index, delta))  # x_i <- theta

    def state_dict(self) -> dict:
        return {**super().state_dict(), "errors": [e.clone() for e in self.errors]}

    def load_state_dict(self, state: dict) -> None:
        from dlcomm.saved import copy_into, entry, tensors

        errors = tensors(entry(state, "errors", "the algorithm's state"), self.errors, "SparseLoCo's error buffers")
        super().load_state_dict(state)  # checked whole before anything is copied
        copy_into(self.errors, errors, "SparseLoCo's error buffers")
