"""The node-based paper's AC-GAN (:mod:`dlcomm.models.gan`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from dlcomm.config.schema import ModelConfig, domain
from dlcomm.models.registry import Model, register


@dataclass
class ACGANConfig(ModelConfig):
    """acgan: the node-based paper's GAN (Table II), the generator and discriminator of task=gan
    (which selects this model): generator (latent 128, FC + BN, 2x [upsample, 3x3 conv 128/64], 3x3
    conv 32, image) and discriminator (3x3 stride-2 convs 16/32/64/128; validity and label heads)."""

    latent_dim: int = field(default=128, metadata=domain(low=1))  # the generator's noise dimension


@register
class ACGAN(Model):
    """task=gan's generator + discriminator; as a model, the discriminator's label logits."""

    name = "acgan"
    Config = ACGANConfig
    builder = "dlcomm.models.gan:build_acgan"
