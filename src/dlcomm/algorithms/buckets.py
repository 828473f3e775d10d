"""Tensor fusion: parameters grouped into flat buffers ("buckets") of a bounded size.

Buckets hold parameters in reverse registration order, the order in which backward
produces their gradients (as DDP does), so that the first bucket is ready first. A size of
0 gives one bucket per parameter tensor (the papers' layer-wise regime).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from dlcomm.config.schema import domain

if TYPE_CHECKING:
    import torch

# The domain of ``algo.bucket_mb``, declared by every algorithm that fuses with :func:`make_buckets`
# (``field(default=..., metadata=BUCKET_MB)``), so that each refuses a negative size in the same words.
BUCKET_MB = domain(low=0, means="the bucket size in MiB (0: one bucket per parameter tensor)")


@dataclass
class Bucket:
    params: list[torch.nn.Parameter]
    buffer: torch.Tensor
    offsets: list[int] = field(default_factory=list)

    _views: list[torch.Tensor] | None = field(default=None, init=False, repr=False, compare=False)

    def views(self) -> list[torch.Tensor]:
        """Slices of the flat buffer shaped like each parameter (made once: the buffer and the
        parameters' shapes never change, and slicing anew costs host time every step)."""
        if self._views is None:
            self._views = [self.buffer[o : o + p.numel()].view_as(p) for o, p in zip(self.offsets, self.params)]
        return self._views

    def _grads(self) -> list[torch.Tensor] | None:
        """Every parameter's gradient, or None when one has none (a loop: no generator frame
        on the per-step path)."""
        grads = [p.grad for p in self.params]
        for grad in grads:
            if grad is None:
                return None
        return grads  # type: ignore[return-value]  # none is None (the loop above; typing.cast is a call per step)

    def pack_grads(self) -> torch.Tensor:
        import torch

        grads = self._grads()
        if grads is not None:  # one multi-tensor copy (on CUDA a few kernel launches, not one per tensor)
            torch._foreach_copy_(self.views(), grads)
            return self.buffer
        for view, p in zip(self.views(), self.params):
            if p.grad is None:
                view.zero_()
            else:
                view.copy_(p.grad)
        return self.buffer

    def unpack_grads(self) -> None:
        import torch

        grads = self._grads()
        if grads is not None:
            torch._foreach_copy_(grads, self.views())
            return
        for view, p in zip(self.views(), self.params):
            if p.grad is None:
                p.grad = view.clone()
            else:
                p.grad.copy_(view)

    def pack_params(self) -> torch.Tensor:
        for view, p in zip(self.views(), self.params):
            view.copy_(p.detach())
        return self.buffer

    def unpack_params(self) -> None:
        import torch

        with torch.no_grad():
            for view, p in zip(self.views(), self.params):
                p.copy_(view)

    def bind_params(self) -> torch.Tensor:
        """Move the parameters into the buffer: each parameter's data becomes its view of the
        flat buffer, so an in-place operation on the buffer (an allreduce) changes the
        parameters with no packing or unpacking. The parameter objects stay the same, so an
        optimizer built on them keeps working. Call after the model is on its device."""
        import torch

        with torch.no_grad():
            for view, p in zip(self.views(), self.params):
                view.copy_(p)
                p.data = view
        return self.buffer


def make_buckets(params: list[torch.nn.Parameter], bucket_bytes: int) -> list[Bucket]:
    """Split ``params`` (taken in reverse order) into buckets of at most ``bucket_bytes``
    (a single larger tensor gets a bucket of its own; 0 = one tensor per bucket). Tensors
    of different dtype or device never share a bucket."""
    buckets: list[Bucket] = []
    current: list[torch.nn.Parameter] = []
    current_bytes = 0

    def close() -> None:
        if current:
            buckets.append(flat_bucket(list(current)))
            current.clear()

    for p in reversed(list(params)):
        size = p.numel() * p.element_size()
        compatible = not current or (current[0].dtype == p.dtype and current[0].device == p.device)
        if current and (bucket_bytes <= 0 or current_bytes + size > bucket_bytes or not compatible):
            close()
            current_bytes = 0
        current.append(p)
        current_bytes += size
    close()
    return buckets


def flat_bucket(params: list[torch.nn.Parameter], extra: int = 0) -> Bucket:
    """One bucket holding ``params`` in the given order, plus ``extra`` trailing slots (e.g. a
    push-sum weight that travels in the same message as the parameters)."""
    import torch

    offsets, total = [], 0
    for p in params:
        offsets.append(total)
        total += p.numel()
    buffer = torch.zeros(total + extra, dtype=params[0].dtype, device=params[0].device)
    return Bucket(params=params, buffer=buffer, offsets=offsets)
