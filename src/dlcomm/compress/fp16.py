"""Half-precision compression, torch's ``fp16_compress_hook`` / ``bf16_compress_hook``
(``torch/distributed/algorithms/ddp_comm_hooks/default_hooks.py``): the tensor is cast to
half precision and divided by the group's size there, summed by an allreduce in half precision,
and the sum cast back into the tensor::

    x <- float( sum_j half(x_j) / W )        (the division in half precision, before the sum)

Half the bytes of fp32 on the wire. No memory (the rounding error is not fed back).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Hashable

from dlcomm.compress.base import Compressor
from dlcomm.compress.registry import register
from dlcomm.config.schema import CompressConfig

if TYPE_CHECKING:
    import torch

    from dlcomm.comm.channel import Channel


@dataclass
class FP16Config(CompressConfig):
    """``compress=fp16``: half precision on the wire, torch's fp16_compress_hook: cast, divide by W, sum
    in fp16, cast back. No knobs."""

    name: str = "fp16"


@dataclass
class BF16Config(CompressConfig):
    """``compress=bf16``: bfloat16 on the wire, torch's bf16_compress_hook: cast, divide by W, sum in
    bf16, cast back. No knobs."""

    name: str = "bf16"


class _HalfPrecision(Compressor):
    summable = True
    dtype_name = "float16"

    def start(self, tensor: "torch.Tensor", key: Hashable, step: int, channel: "Channel", group: str, shapes=None):
        import torch

        compressed = tensor.to(getattr(torch, self.dtype_name)).div_(channel.group_size(group))
        return _CastBack(tensor, channel.allreduce(compressed, group=group, average=False, async_op=True))

    def compress(self, tensor, key):
        import torch

        return [tensor.to(getattr(torch, self.dtype_name))], tensor.dtype

    def decompress(self, payload, ctx):
        return payload[0].to(ctx)


class _CastBack:
    def __init__(self, tensor: "torch.Tensor", handle) -> None:
        self.tensor, self.handle = tensor, handle

    def wait(self) -> "torch.Tensor":
        return self.tensor.copy_(self.handle.wait())


@register
class FP16(_HalfPrecision):
    display_name = "fp16"
    Config = FP16Config
    dtype_name = "float16"


@register
class BF16(_HalfPrecision):
    display_name = "bf16"
    Config = BF16Config
    dtype_name = "bfloat16"
