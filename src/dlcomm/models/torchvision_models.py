"""Standard ImageNet architectures from ``torchvision.models``, adapted to the dataset.

Each is built with ``num_classes`` from the dataset and random initialisation (torchvision's
own scheme; no ``weights`` are ever requested, so nothing is downloaded). When the images do
not have 3 channels, the first convolution is replaced by one of the same hyper-parameters
with the dataset's channel count, initialised as torchvision initialises that model.
``cfg.cifar_stem`` is a knob of the ResNets only (their schema: ``ResNetConfig``).

The ``Config``, the classes and the builders are here; torch and torchvision are imported inside
the builders, so composing a configuration (and using only the small models) does not pay for
importing them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Optional, Tuple, cast

from dlcomm.config.schema import ModelConfig, doc
from dlcomm.models.registry import Model, register

if TYPE_CHECKING:
    from torch import nn

Init = Callable[["nn.Conv2d"], None]


@dataclass
class ResNetConfig(ModelConfig):
    """resnet18, resnet34, resnet50, resnet101 (torchvision, randomly initialised); cifar_stem=true
    for 32x32 inputs."""

    cifar_stem: bool = field(
        default=False, metadata=doc("true: 3x3 stride-1 first conv (conv1) and no max-pool (32x32 inputs)")
    )


def _kaiming_fan_out(conv: nn.Conv2d) -> None:
    """ResNet's and VGG's conv init: He normal on fan-out, zero bias."""
    from torch import nn

    nn.init.kaiming_normal_(conv.weight, mode="fan_out", nonlinearity="relu")
    if conv.bias is not None:
        nn.init.zeros_(conv.bias)


def _kaiming_fan_in(conv: nn.Conv2d) -> None:
    """DenseNet's conv init: He normal on fan-in."""
    from torch import nn

    nn.init.kaiming_normal_(conv.weight)


def _2d(size: tuple[int, ...]) -> tuple[int, int]:
    """A 2-d conv's size (torch annotates it ``tuple[int, ...]``; a Conv2d's has two entries)."""
    return cast("tuple[int, int]", size)


def _with_in_channels(conv: nn.Conv2d, in_channels: int, init: Optional[Init]) -> nn.Conv2d:
    """A new conv like ``conv`` (kernel, stride, padding, ..., bias) but taking ``in_channels``."""
    from torch import nn

    new = nn.Conv2d(
        in_channels,
        conv.out_channels,
        kernel_size=_2d(conv.kernel_size),
        stride=_2d(conv.stride),
        padding=conv.padding if isinstance(conv.padding, str) else _2d(conv.padding),
        dilation=_2d(conv.dilation),
        groups=conv.groups,
        bias=conv.bias is not None,
        padding_mode=conv.padding_mode,
    )
    if init is not None:
        init(new)
    return new


def _resnet(arch: str, cfg: ResNetConfig, input_shape: Tuple[int, int, int], num_classes: int) -> nn.Module:
    """ResNet (He et al., "Deep Residual Learning for Image Recognition", CVPR 2016).

    With ``cfg.cifar_stem`` the 7x7 stride-2 first conv becomes 3x3 stride 1 padding 1 and
    the stem max-pool is removed, the usual adaptation to 32x32 images.
    """
    from torch import nn
    from torchvision import models

    c = input_shape[0]
    model = getattr(models, arch)(num_classes=num_classes)
    if bool(cfg.cifar_stem):
        model.conv1 = nn.Conv2d(c, 64, kernel_size=3, stride=1, padding=1, bias=False)
        _kaiming_fan_out(model.conv1)
        model.maxpool = nn.Identity()
    elif c != 3:
        model.conv1 = _with_in_channels(model.conv1, c, _kaiming_fan_out)
    return model


def build_resnet18(cfg: ResNetConfig, input_shape: Tuple[int, int, int], num_classes: int) -> nn.Module:
    """torchvision ResNet-18 (11 M parameters at 1000 classes); see :func:`_resnet`."""
    return _resnet("resnet18", cfg, input_shape, num_classes)


def build_resnet34(cfg: ResNetConfig, input_shape: Tuple[int, int, int], num_classes: int) -> nn.Module:
    """torchvision ResNet-34 (22 M parameters); see :func:`_resnet`."""
    return _resnet("resnet34", cfg, input_shape, num_classes)


def build_resnet50(cfg: ResNetConfig, input_shape: Tuple[int, int, int], num_classes: int) -> nn.Module:
    """torchvision ResNet-50, bottleneck blocks (26 M parameters); see :func:`_resnet`."""
    return _resnet("resnet50", cfg, input_shape, num_classes)


def build_resnet101(cfg: ResNetConfig, input_shape: Tuple[int, int, int], num_classes: int) -> nn.Module:
    """torchvision ResNet-101, bottleneck blocks (45 M parameters); see :func:`_resnet`."""
    return _resnet("resnet101", cfg, input_shape, num_classes)


def build_vgg16(cfg: ModelConfig, input_shape: Tuple[int, int, int], num_classes: int) -> nn.Module:
    """torchvision VGG-16 without BatchNorm (Simonyan & Zisserman, ICLR 2015; 138 M parameters).

    Five 2x2 max-pools need images of at least 32x32.
    """
    from torchvision import models

    c = input_shape[0]
    model = models.vgg16(num_classes=num_classes)
    if c != 3:
        model.features[0] = _with_in_channels(model.features[0], c, _kaiming_fan_out)
    return model


def build_densenet121(cfg: ModelConfig, input_shape: Tuple[int, int, int], num_classes: int) -> nn.Module:
    """torchvision DenseNet-121 (Huang et al., "Densely Connected Convolutional Networks", CVPR 2017).

    8 M parameters; its ImageNet stem and three transitions need images of at least 32x32.
    """
    from torchvision import models

    c = input_shape[0]
    model = models.densenet121(num_classes=num_classes)
    if c != 3:
        model.features.conv0 = _with_in_channels(model.features.conv0, c, _kaiming_fan_in)
    return model


def build_shufflenet_v2(cfg: ModelConfig, input_shape: Tuple[int, int, int], num_classes: int) -> nn.Module:
    """torchvision ShuffleNet V2 x1.0 (Ma et al., ECCV 2018; 2.3 M parameters at 1000 classes)."""
    from torchvision import models

    c = input_shape[0]
    model = models.shufflenet_v2_x1_0(num_classes=num_classes)
    if c != 3:
        # torchvision leaves ShuffleNet V2's convs at PyTorch's default init.
        model.conv1[0] = _with_in_channels(model.conv1[0], c, None)
    return model


@register
class ResNet18(Model[ResNetConfig]):
    name = "resnet18"
    Config = ResNetConfig
    build = staticmethod(build_resnet18)


@register
class ResNet34(Model[ResNetConfig]):
    name = "resnet34"
    Config = ResNetConfig
    build = staticmethod(build_resnet34)


@register
class ResNet50(Model[ResNetConfig]):
    name = "resnet50"
    Config = ResNetConfig
    build = staticmethod(build_resnet50)


@register
class ResNet101(Model[ResNetConfig]):
    name = "resnet101"
    Config = ResNetConfig
    build = staticmethod(build_resnet101)


@register
class VGG16(Model[ModelConfig]):
    name = "vgg16"
    build = staticmethod(build_vgg16)


@register
class DenseNet121(Model[ModelConfig]):
    name = "densenet121"
    build = staticmethod(build_densenet121)


@register
class ShuffleNetV2(Model[ModelConfig]):
    name = "shufflenet_v2"
    build = staticmethod(build_shufflenet_v2)
