"""The node-based paper's AC-GAN (:mod:`dlcomm.models.gan`)."""

from dlcomm.config.schema import ACGANConfig
from dlcomm.models.registry import Model, register


@register
class ACGAN(Model):
    """task=gan's generator + discriminator; as a model, the discriminator's label logits."""

    name = "acgan"
    Config = ACGANConfig
    builder = "dlcomm.models.gan:build_acgan"
