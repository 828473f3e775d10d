"""Models by name (the one registration pattern: :class:`dlcomm.registry.Registry`):
:func:`build_model` and :func:`model_names`.

A model is a :class:`Model` subclass: ``name`` (``model=<name>``; or its own ``Config``'s default),
``Config`` (a dataclass subclassing :class:`~dlcomm.config.schema.ModelConfig`: its knobs) and
``build(cfg, input_shape, num_classes)``, which returns a freshly, randomly initialised
``torch.nn.Module`` mapping a batch of ``input_shape`` images to logits of shape
``(batch, num_classes)``; ``cfg`` is the ``model`` section (its ``Config``), read by attribute.
dlcomm's own are registered in :mod:`dlcomm.models.zoo` (one module a family, each class naming
its ``builder``); installed packages add theirs through the ``dlcomm.models`` entry points
(:mod:`dlcomm.plugins`). Each is stored as Hydra's ``model/<name>`` (its ``Config``, its name set;
:mod:`dlcomm.registry`). This module and the zoo load without torch: composing imports them for
the schemas.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, ClassVar, List, Tuple

from dlcomm.config.schema import ModelConfig
from dlcomm.groups import GROUPS
from dlcomm.registry import Registry

if TYPE_CHECKING:
    from torch import nn


class Model:
    """A model by name; see the module's docstring. Classmethods only: it holds no state."""

    name: ClassVar[str]
    Config: ClassVar[type] = ModelConfig
    builder: ClassVar[str] = ""
    """``"module:function"`` of a function ``(cfg, input_shape, num_classes) -> nn.Module``,
    imported when first built (the default :meth:`build`); or override :meth:`build`."""

    @classmethod
    def build(cls, cfg: ModelConfig, input_shape: Tuple[int, int, int], num_classes: int) -> "nn.Module":
        """A freshly initialised module for inputs of shape ``(C, H, W)`` and ``num_classes`` logits."""
        if not cls.builder:
            raise NotImplementedError(f"model {cls.name} has neither a builder nor build()")
        module, function = cls.builder.split(":")
        return getattr(importlib.import_module(module), function)(cfg, input_shape, num_classes)


def _plugins(classes: dict) -> None:
    from dlcomm.plugins import register_plugins

    register_plugins("model", classes)  # installed packages' models (entry points dlcomm.models)


MODELS: Registry[type[Model]] = Registry(GROUPS["model"], _plugins)
register = MODELS.register


def model_names() -> List[str]:
    """Every name ``model.name`` may take: dlcomm's, then the plugins'."""
    return list(MODELS.all())


def build_model(cfg: ModelConfig, input_shape: Tuple[int, int, int], num_classes: int) -> "nn.Module":
    """Build the model ``cfg.name`` for inputs of shape ``(C, H, W)`` and ``num_classes`` logits."""
    c, h, w = (int(d) for d in input_shape)
    return MODELS.get(cfg.name).build(cfg, (c, h, w), int(num_classes))
