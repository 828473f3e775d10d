"""Vision transformers (:mod:`dlcomm.models.vit`, timm's VisionTransformer)."""

from dlcomm.config.schema import ViTConfig
from dlcomm.models.registry import Model, register


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
