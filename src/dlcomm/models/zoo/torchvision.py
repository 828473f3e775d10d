"""torchvision's architectures, randomly initialised (:mod:`dlcomm.models.torchvision_models`)."""

from __future__ import annotations

from dataclasses import dataclass

from dlcomm.config.schema import ModelConfig
from dlcomm.models.registry import Model, register


@dataclass
class ResNetConfig(ModelConfig):
    """resnet18, resnet34, resnet50, resnet101 (torchvision, randomly initialised); cifar_stem=true
    for 32x32 inputs."""

    cifar_stem: bool = False  # true: 3x3 stride-1 first conv (conv1) and no max-pool (32x32 inputs)


_MODULE = "dlcomm.models.torchvision_models"


@register
class ResNet18(Model):
    name = "resnet18"
    Config = ResNetConfig
    builder = f"{_MODULE}:build_resnet18"


@register
class ResNet34(Model):
    name = "resnet34"
    Config = ResNetConfig
    builder = f"{_MODULE}:build_resnet34"


@register
class ResNet50(Model):
    name = "resnet50"
    Config = ResNetConfig
    builder = f"{_MODULE}:build_resnet50"


@register
class ResNet101(Model):
    name = "resnet101"
    Config = ResNetConfig
    builder = f"{_MODULE}:build_resnet101"


@register
class VGG16(Model):
    name = "vgg16"
    builder = f"{_MODULE}:build_vgg16"


@register
class DenseNet121(Model):
    name = "densenet121"
    builder = f"{_MODULE}:build_densenet121"


@register
class ShuffleNetV2(Model):
    name = "shufflenet_v2"
    builder = f"{_MODULE}:build_shufflenet_v2"
