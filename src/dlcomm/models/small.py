"""The small models written here, for MNIST/CIFAR-sized inputs: ``small_cnn``, ``mlp``, ``nin``.

Each choice's ``Config`` and registered :class:`~dlcomm.models.registry.Model` class sit beside its
builder; torch is imported inside the builders, so composing a configuration (which imports this
module for the schemas) loads none of it. None of these models uses BatchNorm, so their state is
parameters only (no running statistics).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, List, Tuple

from dlcomm.config.schema import ModelConfig, domain
from dlcomm.models.registry import Model, register

if TYPE_CHECKING:
    from torch import nn


@dataclass
class MLPConfig(ModelConfig):
    """mlp: a multi-layer perceptron over the flattened input: hidden widths with ReLU, logits."""

    hidden: List[int] = field(
        default_factory=lambda: [512, 256], metadata=domain(low=1, doc="hidden widths, input to output")
    )
    dropout: float = field(
        default=0.0,
        metadata=domain(low=0.0, high=1.0, means="the dropout probability", doc="after each hidden ReLU; 0: none"),
    )


@dataclass
class NiNConfig(ModelConfig):
    """nin: Network-in-Network (Lin et al. 2014): three mlpconv blocks and global average pooling."""

    width: float = field(
        default=1.0,
        metadata=domain(
            low=0.0,
            means="the multiplier of every hidden width",
            doc="1.0: the paper's; a width never drops below 1 (dlcomm.models.small.build_nin)",
        ),
    )
    dropout: float = field(
        default=0.5,
        metadata=domain(
            low=0.0, high=1.0, means="the dropout probability", doc="between mlpconv blocks, as in the paper"
        ),
    )


def build_small_cnn(cfg: ModelConfig, input_shape: Tuple[int, int, int], num_classes: int) -> nn.Module:
    """The default model: the classic two-conv MNIST network (as in PyTorch's MNIST example).

    conv(C->32, 3x3, pad 1)-ReLU-maxpool2, conv(32->64, 3x3, pad 1)-ReLU-maxpool2, flatten,
    fc(64*(H/4)*(W/4) -> 128)-ReLU, fc(128 -> classes). About 0.42 M parameters on 1x28x28.
    """
    from torch import nn

    c, h, w = input_shape
    if h < 4 or w < 4:
        raise ValueError(f"small_cnn needs images of at least 4x4, got {h}x{w}")
    flat = 64 * ((h // 2) // 2) * ((w // 2) // 2)
    return nn.Sequential(
        nn.Conv2d(c, 32, kernel_size=3, padding=1),
        nn.ReLU(inplace=True),
        nn.MaxPool2d(2),
        nn.Conv2d(32, 64, kernel_size=3, padding=1),
        nn.ReLU(inplace=True),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(flat, 128),
        nn.ReLU(inplace=True),
        nn.Linear(128, num_classes),
    )


def build_mlp(cfg: MLPConfig, input_shape: Tuple[int, int, int], num_classes: int) -> nn.Module:
    """A multi-layer perceptron: flatten, then ``cfg.hidden`` widths with ReLU, then logits.

    Dropout of ``cfg.dropout`` follows each hidden ReLU when it is above 0.
    """
    from torch import nn

    c, h, w = input_shape
    hidden = [int(x) for x in cfg.hidden]
    dropout = float(cfg.dropout)
    layers: List[nn.Module] = [nn.Flatten()]
    width = c * h * w
    for out in hidden:
        layers += [nn.Linear(width, out), nn.ReLU(inplace=True)]
        if dropout > 0:
            layers.append(nn.Dropout(dropout))
        width = out
    layers.append(nn.Linear(width, num_classes))
    return nn.Sequential(*layers)


def _mlpconv(c_in: int, widths: Tuple[int, ...], kernel: int) -> List[nn.Module]:
    """One NIN mlpconv block: a kxk conv then two 1x1 convs, ReLU after each (three ``widths``)."""
    from torch import nn

    a, b, d = widths
    return [
        nn.Conv2d(c_in, a, kernel_size=kernel, padding=kernel // 2),
        nn.ReLU(inplace=True),
        nn.Conv2d(a, b, kernel_size=1),
        nn.ReLU(inplace=True),
        nn.Conv2d(b, d, kernel_size=1),
        nn.ReLU(inplace=True),
    ]


def build_nin(cfg: NiNConfig, input_shape: Tuple[int, int, int], num_classes: int) -> nn.Module:
    """Network-in-Network (Lin, Chen, Yan, "Network In Network", ICLR 2014), CIFAR widths.

    Three mlpconv blocks (192/160/96 with 5x5, 192/192/192 with 5x5, 192/192/classes with
    3x3), each conv "same"-padded; between blocks a 3x3 stride-2 max-pool (padding 1, so
    32 -> 16 -> 8 and 28 -> 14 -> 7) followed by dropout ``cfg.dropout`` (the paper uses
    0.5; none when 0). Global average pooling of the last block's ``num_classes`` maps
    gives the logits, so any image of at least 1x1 fits. ``cfg.width`` scales every hidden
    width (1.0: the paper's; 0.25 for CPU-scale reproductions, 16x less compute).
    """
    from torch import nn

    c, _, _ = input_shape
    dropout = float(cfg.dropout)
    scale = float(cfg.width)

    def w(*widths: int) -> Tuple[int, ...]:
        return tuple(max(1, round(scale * width)) for width in widths)

    def between() -> List[nn.Module]:
        pool: List[nn.Module] = [nn.MaxPool2d(kernel_size=3, stride=2, padding=1)]
        return pool + ([nn.Dropout(dropout)] if dropout > 0 else [])

    model = nn.Sequential(
        *_mlpconv(c, w(192, 160, 96), 5),
        *between(),
        *_mlpconv(w(96)[0], w(192, 192, 192), 5),
        *between(),
        *_mlpconv(w(192)[0], (*w(192, 192), num_classes), 3),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
    )
    # He initialisation: with PyTorch's default the signal fades through the nine convolutions
    # and the final ReLU then zeroes every logit (training stays at chance).
    for module in model.modules():
        if isinstance(module, nn.Conv2d):
            nn.init.kaiming_normal_(module.weight, nonlinearity="relu")
            assert module.bias is not None  # nn.Conv2d's default, bias=True
            nn.init.zeros_(module.bias)
    return model


@register
class SmallCNN(Model[ModelConfig]):
    """Two conv and two FC layers (0.42 M parameters on 28x28): the default job's model."""

    name = "small_cnn"
    build = staticmethod(build_small_cnn)


@register
class MLP(Model[MLPConfig]):
    name = "mlp"
    Config = MLPConfig
    build = staticmethod(build_mlp)


@register
class NiN(Model[NiNConfig]):
    """Network-in-Network (Lin et al. 2014)."""

    name = "nin"
    Config = NiNConfig
    build = staticmethod(build_nin)
