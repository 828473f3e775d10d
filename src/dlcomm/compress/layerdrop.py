"""Layer dropping (the layer-dropping parameter-server paper; docs/algorithms.md,
"Parameter server").

Every layer (parameter tensor) ``l`` gets one score, used both to set the threshold and to
decide: its representative value ``s_l = mean_k |accum_l[k]|`` (the paper scores with the L1
norm for the threshold but compares means when dropping; the mean is used for both, so that
large and small layers compare fairly). A layer is *dropped* (a placeholder goes instead) when
``s_l < threshold``; ``threshold = -1`` is invalid and drops nothing.

Threshold (the paper's Algorithm 1, read as "drop the lowest-scoring layers until a fraction
``R`` of all entries is reached"): sort the layers by ascending score and take the prefix whose
entry count is closest to ``R * total``; the threshold is the score of the first layer after
that prefix, so exactly the prefix scores below it. An empty prefix (``R = 0``, or a first
layer already larger than ``2 R total``) gives ``-1``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Sequence

from dlcomm.compress.base import Compressor
from dlcomm.compress.registry import register
from dlcomm.config.schema import CompressConfig, doc, domain

if TYPE_CHECKING:
    import torch

    from dlcomm.compress.memory import ResidualMemory


INVALID = -1.0


def layer_scores(tensors: Sequence[torch.Tensor]) -> list[float]:
    """``mean |t|`` of every tensor."""
    return [float(t.abs().mean()) for t in tensors]


def drop_threshold(scores: Sequence[float], sizes: Sequence[int], ratio: float) -> float:
    """The threshold that drops the lowest-scoring layers whose entries come closest to ``ratio``
    of all entries (``-1`` when that is no layer)."""
    if ratio <= 0:
        return INVALID
    order = sorted(range(len(scores)), key=lambda layer: scores[layer])
    target = ratio * sum(sizes)
    best_count, best_gap, dropped = 0, target, 0
    for count, layer in enumerate(order, start=1):
        dropped += sizes[layer]
        if abs(dropped - target) < best_gap:
            best_count, best_gap = count, abs(dropped - target)
    if best_count == 0:
        return INVALID
    if best_count == len(order):
        return float("inf")
    return scores[order[best_count]]


class KeepAll:
    """No compression: every layer is sent."""

    def select(self, tensors: Sequence[torch.Tensor], step: int) -> list[bool]:
        return [True] * len(tensors)


class LayerDrop:
    """Send layer ``l`` only when ``s_l >= threshold``; the threshold is recomputed from the
    current (accumulated) gradients every ``recompute_every`` steps, first at step 0."""

    def __init__(self, ratio: float, recompute_every: int) -> None:
        self.ratio = ratio
        self.recompute_every = recompute_every
        self.threshold = INVALID
        self.last_dropped_fraction = 0.0

    def select(self, tensors: Sequence[torch.Tensor], step: int) -> list[bool]:
        scores = layer_scores(tensors)
        if step % self.recompute_every == 0:
            self.threshold = drop_threshold(scores, [t.numel() for t in tensors], self.ratio)
        keep = [self.threshold == INVALID or score >= self.threshold for score in scores]
        total = sum(t.numel() for t in tensors)
        self.last_dropped_fraction = sum(t.numel() for t, k in zip(tensors, keep) if not k) / max(1, total)
        return keep

    def state_dict(self) -> dict:
        return {"threshold": self.threshold}

    def load_state_dict(self, state: dict) -> None:
        self.threshold = state["threshold"]


# The layer-dropping knobs' domains, declared by ``compress=layerdrop`` and ``algo=ps_layerdrop`` alike.
DROP_RATIO = domain(low=0, below=1, means="R, the fraction of gradient entries dropped,")
RECOMPUTE_EVERY = domain(low=1, means="the number of steps between threshold recomputations")


@dataclass
class LayerDropConfig(CompressConfig):
    """``compress=layerdrop``: layer dropping with a residual memory (the layer-dropping parameter-server
    paper), for algo=ps: ``algo=ps compress=layerdrop`` is ``algo=ps_layerdrop``."""

    name: str = "layerdrop"
    ratio: float = field(
        default=0.9,
        metadata=doc("counted over all gradient entries, when the threshold is recomputed", DROP_RATIO),
    )
    recompute_every: int = field(
        default=100,
        metadata=doc("the paper: 100; the first at step 0", RECOMPUTE_EVERY),
    )


@register
class LayerDropping(Compressor[LayerDropConfig]):
    """``compress=layerdrop``: the parameter server's layer dropping with its residual memory
    (:class:`LayerDrop` over :class:`~dlcomm.compress.memory.ResidualMemory`);
    ``algo=ps compress=layerdrop`` is ``algo=ps_layerdrop`` (the same code, the same numbers)."""

    display_name = "layer dropping"
    Config = LayerDropConfig
    kinds = ("layers",)

    def selector(self) -> LayerDrop:
        return LayerDrop(self.cfg.ratio, self.cfg.recompute_every)

    def memory_for(self, shapes: Sequence["torch.Size"], device: "torch.device") -> "ResidualMemory":
        from dlcomm.compress.memory import ResidualMemory

        return ResidualMemory(shapes, device)
