"""Name -> builder table: :func:`build_model` and :func:`model_names`.

A builder takes ``(cfg, input_shape, num_classes)`` and returns a freshly, randomly
initialised ``torch.nn.Module`` mapping a batch of ``input_shape`` images to logits of
shape ``(batch, num_classes)``. ``cfg`` is the ``model`` config group (an omegaconf
``DictConfig`` or the choice's schema in :mod:`dlcomm.config.schema`, e.g. ``ResNetConfig``), read
by attribute only; a builder reads only the knobs of its own schema.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Tuple

from torch import nn

from dlcomm.errors import UserError
from dlcomm.models import gan, recurrent, small, torchvision_models, vit

Builder = Callable[[Any, Tuple[int, int, int], int], nn.Module]

_BUILDERS: Dict[str, Builder] = {
    "small_cnn": small.build_small_cnn,
    "mlp": small.build_mlp,
    "nin": small.build_nin,
    "resnet18": torchvision_models.build_resnet18,
    "resnet34": torchvision_models.build_resnet34,
    "resnet50": torchvision_models.build_resnet50,
    "resnet101": torchvision_models.build_resnet101,
    "vgg16": torchvision_models.build_vgg16,
    "densenet121": torchvision_models.build_densenet121,
    "shufflenet_v2": torchvision_models.build_shufflenet_v2,
    "vit_s": vit.build_vit_s,
    "vit_b": vit.build_vit_b,
    "rnn": recurrent.build_rnn,
    "lstm": recurrent.build_lstm,
    "gru": recurrent.build_gru,
    "acgan": gan.build_acgan,  # task=gan's generator + discriminator; as a model, the discriminator's label logits
}


def model_names() -> List[str]:
    """Every name ``model.name`` may take, small models first."""
    return list(_BUILDERS)


def build_model(cfg: Any, input_shape: Tuple[int, int, int], num_classes: int) -> nn.Module:
    """Build the model ``cfg.name`` for inputs of shape ``(C, H, W)`` and ``num_classes`` logits."""
    name = cfg.name
    builder = _BUILDERS.get(name)
    if builder is None:
        raise UserError(f"unknown model={name}: choose one of {', '.join(model_names())}")
    c, h, w = (int(d) for d in input_shape)
    return builder(cfg, (c, h, w), int(num_classes))
