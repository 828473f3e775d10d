"""Vision transformers (:mod:`dlcomm.models.vit`, timm's VisionTransformer)."""

from __future__ import annotations

from dataclasses import dataclass, field

from dlcomm.config.schema import ModelConfig, domain
from dlcomm.models.registry import Model, register


@dataclass
class ViTConfig(ModelConfig):
    """vit_s, vit_b (timm VisionTransformer, randomly initialised); the defaults are the node-based
    paper's ViT-B (Table II: width 384, depth 12, 12 heads, patch 16), configs/model/vit_s.yaml
    sets ViT-S's sizes. Note timm's standard ViT-B is embed_dim=768, depth 12, 12 heads (86 M
    parameters at 224x224); the paper's is narrower. Sides not a multiple of the patch are
    zero-padded (28x28 with patch 16 -> a 2x2 grid)."""

    embed_dim: int = field(default=384, metadata=domain(low=1))  # token width D
    depth: int = field(default=12, metadata=domain(low=1))  # transformer blocks
    num_heads: int = field(default=12, metadata=domain(low=1))  # attention heads (embed_dim must be a multiple)
    patch_size: int = field(
        default=16, metadata=domain(low=1)
    )  # p x p patches; sides not a multiple of p are zero-padded up to one
    # block MLP hidden width = int(embed_dim * mlp_ratio)
    mlp_ratio: float = field(default=4.0, metadata=domain(above=0.0))


@register
class ViTS(Model):
    name = "vit_s"
    Config = ViTConfig
    builder = "dlcomm.models.vit:build_vit_s"


@register
class ViTB(Model):
    name = "vit_b"
    Config = ViTConfig
    builder = "dlcomm.models.vit:build_vit_b"
