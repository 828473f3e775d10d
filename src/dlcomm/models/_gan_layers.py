"""model=acgan's networks (torch's ``nn.Module`` subclasses, so torch at import: :mod:`dlcomm.models.gan`
imports this module inside its builder). The node-based paper's GAN (its Table II): an
auxiliary-classifier GAN (Odena et al., 2017).

* Generator ``G(z, c)``: the noise ``z`` (``latent_dim``) times an embedding of the class ``c``,
  a linear layer to ``128 x (H/4) x (W/4)`` + BatchNorm, then [upsample x2, 3x3 conv 128, BN,
  LeakyReLU(0.2)], [upsample x2, 3x3 conv 64, BN, LeakyReLU], [3x3 conv 32, BN, LeakyReLU] and a
  3x3 conv to the image's channels with ``tanh`` (cropped to ``H x W`` when a side is not a
  multiple of 4), mapped to the data's normalised pixel range.
* Discriminator ``D(x)``: four blocks [3x3 conv stride 2 (16, 32, 64, 128 channels),
  LeakyReLU(0.2), Dropout2d(0.25), BN (not after the first)], then two heads on the flattened
  features: validity (one logit: real or generated) and label (``num_classes`` logits).

:class:`AcGan` holds both. Its ``forward(x)`` is the discriminator's label logits, so the pair is
also an image classifier: the run's test accuracy is the auxiliary classifier's, and every
algorithm, evaluation and check that sees "a model" sees both networks' parameters.
"""

from __future__ import annotations

from typing import Sequence, Tuple

import torch
from torch import nn


class Generator(nn.Module):
    pixel_mean: torch.Tensor  # buffers (register_buffer in __init__)
    pixel_std: torch.Tensor

    def __init__(
        self,
        latent_dim: int,
        num_classes: int,
        image_shape: Tuple[int, int, int],
        pixel_mean: Sequence[float],
        pixel_std: Sequence[float],
    ) -> None:
        super().__init__()
        channels, height, width = image_shape
        self.latent_dim = latent_dim
        self.size = (height, width)
        self.start = (-(-height // 4), -(-width // 4))  # ceil: two doublings reach at least (H, W)
        self.label_embedding = nn.Embedding(num_classes, latent_dim)
        self.project = nn.Linear(latent_dim, 128 * self.start[0] * self.start[1])
        self.body = nn.Sequential(
            nn.BatchNorm2d(128),
            nn.Upsample(scale_factor=2),
            nn.Conv2d(128, 128, 3, padding=1),
            nn.BatchNorm2d(128),
            nn.LeakyReLU(0.2),
            nn.Upsample(scale_factor=2),
            nn.Conv2d(128, 64, 3, padding=1),
            nn.BatchNorm2d(64),
            nn.LeakyReLU(0.2),
            nn.Conv2d(64, 32, 3, padding=1),
            nn.BatchNorm2d(32),
            nn.LeakyReLU(0.2),
            nn.Conv2d(32, channels, 3, padding=1),
            nn.Tanh(),
        )
        # not state: fixed by the data, never averaged or saved
        self.register_buffer(
            "pixel_mean", torch.tensor(pixel_mean, dtype=torch.float32).view(-1, 1, 1), persistent=False
        )
        self.register_buffer("pixel_std", torch.tensor(pixel_std, dtype=torch.float32).view(-1, 1, 1), persistent=False)

    def pixels(self, noise: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """Images of classes ``labels`` from ``noise`` (B, latent_dim), pixels in [0, 1]."""
        features = self.project(noise * self.label_embedding(labels))
        image = self.body(features.view(noise.shape[0], 128, *self.start))[..., : self.size[0], : self.size[1]]
        return 0.5 * (image + 1.0)

    def forward(self, noise: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """The same images normalised as the data's: ``(pixels - mean) / std``."""
        return (self.pixels(noise, labels) - self.pixel_mean) / self.pixel_std


class Discriminator(nn.Module):
    def __init__(self, num_classes: int, image_shape: Tuple[int, int, int]) -> None:
        super().__init__()
        channels, height, width = image_shape
        layers: list[nn.Module] = []
        widths = (16, 32, 64, 128)
        for index, out_channels in enumerate(widths):
            layers += [
                nn.Conv2d(channels if index == 0 else widths[index - 1], out_channels, 3, stride=2, padding=1),
                nn.LeakyReLU(0.2),
                nn.Dropout2d(0.25),
            ]
            if index > 0:
                layers.append(nn.BatchNorm2d(out_channels))
        self.features = nn.Sequential(*layers, nn.Flatten())
        size = 128 * _after_four_halvings(height) * _after_four_halvings(width)
        self.validity = nn.Linear(size, 1)
        self.label = nn.Linear(size, num_classes)

    def forward(self, images: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """``(validity logits (B,), label logits (B, num_classes))``."""
        features = self.features(images)
        return self.validity(features).squeeze(1), self.label(features)


def _after_four_halvings(size: int) -> int:
    """The side after four 3x3 stride-2 convolutions with padding 1: ``ceil`` four times."""
    for _ in range(4):
        size = (size + 1) // 2
    return size


class AcGan(nn.Module):
    """A generator and a discriminator; ``forward(x)`` = the discriminator's label logits."""

    def __init__(self, generator: Generator, discriminator: Discriminator) -> None:
        super().__init__()
        self.generator = generator
        self.discriminator = discriminator

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.discriminator(images)[1]
