"""model=acgan: the node-based paper's AC-GAN, the generator and discriminator of task=gan.

Its ``Config``, its class and its builder; the networks are ``nn.Module`` subclasses, so they live
in :mod:`dlcomm.models._gan_layers` (torch at import), imported inside :func:`build_acgan`:
composing a configuration imports this module without torch."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Sequence, Tuple

from dlcomm.config.schema import ModelConfig, domain
from dlcomm.errors import UserError
from dlcomm.models.registry import Model, register

if TYPE_CHECKING:
    from dlcomm.models._gan_layers import AcGan


@dataclass
class ACGANConfig(ModelConfig):
    """acgan: the node-based paper's GAN (Table II), the generator and discriminator of task=gan
    (which selects this model): generator (latent 128, FC + BN, 2x [upsample, 3x3 conv 128/64], 3x3
    conv 32, image) and discriminator (3x3 stride-2 convs 16/32/64/128; validity and label heads)."""

    latent_dim: int = field(default=128, metadata=domain(low=1, doc="the generator's noise dimension"))


def build_acgan(
    cfg: ACGANConfig,
    input_shape: Tuple[int, int, int],
    num_classes: int,
    pixel_mean: Sequence[float] | None = None,
    pixel_std: Sequence[float] | None = None,
) -> AcGan:
    """The pair for images of ``input_shape``; ``pixel_mean``/``pixel_std`` (per channel) are the
    data's normalisation, so generated images lie in the same range as real ones (default: mean
    and std 0.5, i.e. the generator's ``tanh`` output as it is)."""
    from dlcomm.models._gan_layers import AcGan, Discriminator, Generator

    channels, height, width = input_shape
    if height < 4 or width < 4:
        raise UserError(
            f"model=acgan needs images of at least 4x4 pixels, got {height}x{width}: use a larger dataset.shape"
        )
    mean = list(pixel_mean) if pixel_mean is not None else [0.5] * channels
    std = list(pixel_std) if pixel_std is not None else [0.5] * channels
    generator = Generator(int(cfg.latent_dim), num_classes, input_shape, mean, std)
    return AcGan(generator, Discriminator(num_classes, input_shape))


@register
class ACGAN(Model[ACGANConfig]):
    """task=gan's generator + discriminator; as a model, the discriminator's label logits."""

    name = "acgan"
    Config = ACGANConfig
    build = staticmethod(build_acgan)
