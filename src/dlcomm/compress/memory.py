"""Residual memory (error feedback): ``accum_l <- accum_l + g_l`` for every layer ``l``; a layer
that is sent is reset, ``accum_l <- 0``; one that is dropped keeps accumulating."""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

if TYPE_CHECKING:
    import torch


class ResidualMemory:
    def __init__(self, shapes: Sequence[torch.Size], device: torch.device, dtype: torch.dtype | None = None) -> None:
        """``dtype`` None: float32."""
        import torch

        self.accum = [torch.zeros(shape, device=device, dtype=dtype or torch.float32) for shape in shapes]

    def compensate(self, grads: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        """``accum += g``; the accumulated gradients (the memory's own tensors)."""
        for accum, grad in zip(self.accum, grads):
            accum.add_(grad)
        return self.accum

    def update(self, sent: Sequence[bool]) -> None:
        """Reset the layers that were sent."""
        for accum, was_sent in zip(self.accum, sent):
            if was_sent:
                accum.zero_()

    def state_dict(self) -> dict:
        return {"accum": [t.clone() for t in self.accum]}

    def load_state_dict(self, state: dict) -> None:
        from dlcomm.saved import copy_into, entry

        copy_into(self.accum, entry(state, "accum", "the residual memory's state"), "the residual memory")
