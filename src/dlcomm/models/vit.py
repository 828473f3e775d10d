"""Vision Transformers from timm (Dosovitskiy et al., ICLR 2021), sized by the config: ``vit_s``, ``vit_b``.

Both builders make a randomly initialised ``timm.models.vision_transformer.VisionTransformer``
(timm's own init; no weights are ever requested, so nothing is downloaded) with a class token,
learned position embeddings, pre-norm blocks and the class token's final state as the
classifier input. A ``(B, C, H, W)`` batch is cut into ``p x p`` patches, ``p = cfg.patch_size``;
an image whose side is not a multiple of ``p`` is zero-padded at the bottom and right to
``H' = p * ceil(H / p)``, ``W' = p * ceil(W / p)`` (timm's ``dynamic_img_pad``), so 1x28x28 with
``p = 16`` gives a 2x2 grid. With ``N = (H'/p) (W'/p)`` patches, ``D = cfg.embed_dim``:

    tokens z_0 = [cls; x_1 E; ...; x_N E] + pos      (B, N+1, D), E: a (C p^2) x D linear map
    z_l = z'_l + MLP(LN(z'_l)),  z'_l = z_{l-1} + MSA(LN(z_{l-1}))   for l = 1 .. cfg.depth
    logits = LN(z_L)[:, 0] W_head + b_head            (B, num_classes)

MSA has ``cfg.num_heads`` heads of ``D / num_heads`` features (qkv with bias); the MLP is
``D -> int(D * cfg.mlp_ratio) -> D`` with GELU. Parameter count (see :func:`vit_param_count`):
``C p^2 D + D`` (patch embedding) ``+ D`` (class token) ``+ (N+1) D`` (positions)
``+ depth (4 D^2 + 2 D h + 9 D + h)`` with ``h = int(D * mlp_ratio)`` ``+ 2 D`` (final norm)
``+ D K + K`` (head, ``K`` classes).

``vit_s`` and ``vit_b`` differ only in their configs/model/*.yaml defaults (the node-based
paper's Table II sizes). The ``Config``, the classes and the builders are here; torch and timm are
imported inside the builder, so composing a configuration imports this module without them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Tuple

from dlcomm.config.schema import ModelConfig, domain
from dlcomm.models.registry import Model, register

if TYPE_CHECKING:
    from torch import nn


@dataclass
class ViTConfig(ModelConfig):
    """vit_s, vit_b (timm VisionTransformer, randomly initialised); the defaults are the node-based
    paper's ViT-B (Table II: width 384, depth 12, 12 heads, patch 16), configs/model/vit_s.yaml
    sets ViT-S's sizes. Note timm's standard ViT-B is embed_dim=768, depth 12, 12 heads (86 M
    parameters at 224x224); the paper's is narrower. Sides not a multiple of the patch are
    zero-padded (28x28 with patch 16 -> a 2x2 grid)."""

    embed_dim: int = field(default=384, metadata=domain(low=1, doc="token width D"))
    depth: int = field(default=12, metadata=domain(low=1, doc="transformer blocks"))
    num_heads: int = field(default=12, metadata=domain(low=1, doc="attention heads (embed_dim must be a multiple)"))
    patch_size: int = field(
        default=16, metadata=domain(low=1, doc="p x p patches; sides not a multiple of p are zero-padded up to one")
    )
    mlp_ratio: float = field(
        default=4.0, metadata=domain(above=0.0, doc="block MLP hidden width = int(embed_dim * mlp_ratio)")
    )


def _padded(side: int, patch: int) -> int:
    """``side`` rounded up to a multiple of ``patch``."""
    return patch * math.ceil(side / patch)


def vit_param_count(
    input_shape: Tuple[int, int, int],
    num_classes: int,
    embed_dim: int,
    depth: int,
    patch_size: int,
    mlp_ratio: float = 4.0,
) -> int:
    """The number of parameters of :func:`build_vit` for these sizes (the formula in the module doc)."""
    c, h, w = input_shape
    d, p, k = embed_dim, patch_size, num_classes
    hidden = int(d * mlp_ratio)
    patches = (_padded(h, p) // p) * (_padded(w, p) // p)
    block = 4 * d * d + 2 * d * hidden + 9 * d + hidden
    return (c * p * p * d + d) + d + (patches + 1) * d + depth * block + 2 * d + (d * k + k)


def build_vit(cfg: ViTConfig, input_shape: Tuple[int, int, int], num_classes: int) -> nn.Module:
    """A timm VisionTransformer for ``(C, H, W)`` images and ``num_classes`` logits, sized by
    ``cfg.embed_dim``, ``cfg.depth``, ``cfg.num_heads``, ``cfg.patch_size``, ``cfg.mlp_ratio``."""
    from functools import partial

    from timm.layers import PatchEmbed
    from timm.models.vision_transformer import VisionTransformer

    c, h, w = input_shape
    embed_dim, depth = int(cfg.embed_dim), int(cfg.depth)
    heads, patch = int(cfg.num_heads), int(cfg.patch_size)
    mlp_ratio = float(cfg.mlp_ratio)
    if min(embed_dim, depth, heads, patch) < 1:
        raise ValueError(
            f"ViT sizes must be positive: embed_dim={embed_dim} depth={depth} num_heads={heads} patch_size={patch}"
        )
    if embed_dim % heads:
        raise ValueError(f"embed_dim={embed_dim} is not a multiple of num_heads={heads}")
    return VisionTransformer(
        # the padded size fixes the number of position embeddings; the patch embedding pads
        # every input to it (strict_img_size=False lets the unpadded H x W through to the pad)
        img_size=(_padded(h, patch), _padded(w, patch)),
        patch_size=patch,
        in_chans=c,
        num_classes=num_classes,
        embed_dim=embed_dim,
        depth=depth,
        num_heads=heads,
        mlp_ratio=mlp_ratio,
        dynamic_img_pad=True,
        embed_layer=partial(PatchEmbed, strict_img_size=False),
    )


def build_vit_s(cfg: ViTConfig, input_shape: Tuple[int, int, int], num_classes: int) -> nn.Module:
    """ViT-S; the paper's Table II sizes (width 224, depth 6, 8 heads, patch 8) are in vit_s.yaml."""
    return build_vit(cfg, input_shape, num_classes)


def build_vit_b(cfg: ViTConfig, input_shape: Tuple[int, int, int], num_classes: int) -> nn.Module:
    """ViT-B; the paper's Table II sizes (width 384, depth 12, 12 heads, patch 16) are in vit_b.yaml."""
    return build_vit(cfg, input_shape, num_classes)


@register
class ViTS(Model[ViTConfig]):
    name = "vit_s"
    Config = ViTConfig
    build = staticmethod(build_vit_s)


@register
class ViTB(Model[ViTConfig]):
    name = "vit_b"
    Config = ViTConfig
    build = staticmethod(build_vit_b)
