"""Models by name (the one registration pattern: :class:`dlcomm.registry.Registry`):
:func:`build_model` and :func:`model_names`.

A model is a :class:`Model` subclass: ``name`` (``model=<name>``; or its own ``Config``'s default),
``Config`` (a dataclass subclassing :class:`~dlcomm.config.schema.ModelConfig`: its knobs) and
``build(cfg, input_shape, num_classes)``, which returns a freshly, randomly initialised
``torch.nn.Module`` mapping a batch of ``input_shape`` images to logits of shape
``(batch, num_classes)``; ``cfg`` is the ``model`` section (its ``Config``), read by attribute.
dlcomm's own are registered in the family modules of :mod:`dlcomm.models` (``small``, ``vit``,
...: each holds its ``Config`` classes, its choices and their builders, torch imported inside the
builders), each class's ``build`` its builder function; installed packages add theirs through the
``dlcomm.models`` entry points (:mod:`dlcomm.plugins`). Each is stored as Hydra's ``model/<name>``
(its ``Config``, its name set; :mod:`dlcomm.registry`). This module and the family modules load
without torch: composing imports them for the schemas.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar, Generic, List, Tuple, TypeVar

from dlcomm.config.schema import ModelConfig
from dlcomm.registry import Registry, registry_of

if TYPE_CHECKING:
    from torch import nn

C = TypeVar("C", bound=ModelConfig)  # the model's own ``Config``: ``class MLP(Model[MLPConfig])``


class Model(Generic[C]):
    """A model by name; see the module's docstring. Classmethods only: it holds no state."""

    name: ClassVar[str]
    Config: ClassVar[type] = ModelConfig

    @classmethod
    def build(cls, cfg: C, input_shape: Tuple[int, int, int], num_classes: int) -> "nn.Module":
        """A freshly initialised module for inputs of shape ``(C, H, W)`` and ``num_classes`` logits:
        a classmethod, or the builder function itself (``build = staticmethod(build_mlp)``)."""
        raise NotImplementedError(f"model {cls.name} has no build()")


MODELS: Registry[type[Model[Any]]] = registry_of("model")
register = MODELS.register


def model_names() -> List[str]:
    """Every name ``model.name`` may take: dlcomm's, then the plugins'."""
    return list(MODELS.all())


def build_model(cfg: ModelConfig, input_shape: Tuple[int, int, int], num_classes: int) -> "nn.Module":
    """Build the model ``cfg.name`` for inputs of shape ``(C, H, W)`` and ``num_classes`` logits."""
    c, h, w = (int(d) for d in input_shape)
    return MODELS.get(cfg.name).build(cfg, (c, h, w), int(num_classes))
