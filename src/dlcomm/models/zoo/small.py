"""The small models written here for MNIST/CIFAR-sized inputs (:mod:`dlcomm.models.small`)."""

from dlcomm.config.schema import MLPConfig, NiNConfig
from dlcomm.models.registry import Model, register


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
