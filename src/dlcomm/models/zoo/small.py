"""The small models written here for MNIST/CIFAR-sized inputs (:mod:`dlcomm.models.small`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import List

from dlcomm.config.schema import ModelConfig, domain
from dlcomm.models.registry import Model, register


@dataclass
class MLPConfig(ModelConfig):
    """mlp: a multi-layer perceptron over the flattened input: hidden widths with ReLU, logits."""

    hidden: List[int] = field(
        default_factory=lambda: [512, 256], metadata=domain(low=1)
    )  # hidden widths, input to output
    dropout: float = field(
        default=0.0, metadata=domain(low=0.0, high=1.0, means="the dropout probability")
    )  # after each hidden ReLU; 0: none


@dataclass
class NiNConfig(ModelConfig):
    """nin: Network-in-Network (Lin et al. 2014): three mlpconv blocks and global average pooling."""

    # multiplier of every hidden width (1.0: the paper's); a width never drops below 1 (dlcomm.models.small.build_nin)
    width: float = field(default=1.0, metadata=domain(low=0.0, means="the multiplier of every hidden width"))
    dropout: float = field(
        default=0.5, metadata=domain(low=0.0, high=1.0, means="the dropout probability")
    )  # between mlpconv blocks, as in the paper


@register
class SmallCNN(Model):
    """Two conv and two FC layers (0.42 M parameters on 28x28): the default job's model."""

    name = "small_cnn"
    builder = "dlcomm.models.small:build_small_cnn"


@register
class MLP(Model):
    name = "mlp"
    Config = MLPConfig
    builder = "dlcomm.models.small:build_mlp"


@register
class NiN(Model):
    """Network-in-Network (Lin et al. 2014)."""

    name = "nin"
    Config = NiNConfig
    builder = "dlcomm.models.small:build_nin"
