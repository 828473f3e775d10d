"""The parameter server with layer dropping (the layer-dropping paper; docs/algorithms.md,
"Parameter server"), the same as ``algo=ps compress=layerdrop`` (kept as an alias):
the ``ps`` communicator with a residual memory and the layer-drop compressor
(:mod:`dlcomm.compress`). A worker adds each gradient to its per-layer cache, sends the cached
layers whose mean absolute value reaches the threshold (and resets them), and a placeholder for
the rest; the threshold drops about a fraction ``R`` of all entries when it is recomputed,
every ``recompute_every`` steps. ``R = 0`` sends everything: exactly ``ps``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from dlcomm.algorithms.ps import ParameterServer
from dlcomm.algorithms.registry import register
from dlcomm.compress import LayerDrop, ResidualMemory
from dlcomm.compress.layerdrop import DROP_RATIO, RECOMPUTE_EVERY
from dlcomm.config.schema import AlgoConfig, doc

if TYPE_CHECKING:
    import torch


@dataclass
class PSLayerDropConfig(AlgoConfig):
    """``algo=ps_layerdrop``, the parameter server with layer dropping: per-layer gradient caches; a
    layer whose mean |cache| is below the threshold sends a placeholder and keeps accumulating
    (docs/algorithms.md, "Parameter server")."""

    name: str = "ps_layerdrop"
    ratio: float = field(
        default=0.9,
        metadata=doc("counted over all gradient entries, when the threshold is recomputed (0: plain ps)", DROP_RATIO),
    )
    recompute_every: int = field(
        default=100,
        metadata=doc("the paper: 100; the first at step 0", RECOMPUTE_EVERY),
    )


@register
class PSLayerDrop(ParameterServer[PSLayerDropConfig]):
    display_name = "parameter server with layer dropping"
    Config = PSLayerDropConfig

    compression = ()  # its own layer dropping: the alias of algo=ps compress=layerdrop

    def layer_selector(self) -> LayerDrop:
        return LayerDrop(self.cfg.ratio, self.cfg.recompute_every)

    def layer_memory(self, params: list[torch.Tensor]) -> ResidualMemory:
        return ResidualMemory([p.shape for p in params], self.cluster.device)

    def state_dict(self) -> dict:
        return {**super().state_dict(), "compressor": self.compress.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        if "compressor" in state:
            self.compress.load_state_dict(state["compressor"])
