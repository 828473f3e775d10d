"""The task interface: what is trained and how its loss is formed (``task=<name>``).

A task gives the train loop everything that depends on what is learned, so the loop and the
algorithms never see a task's name. A task is a :class:`Task` subclass registered by name
(:mod:`dlcomm.tasks.registry`), its knobs a ``Config`` dataclass subclassing
:class:`~dlcomm.config.schema.TaskConfig` (stored as Hydra's ``task/<name>``). Built once per
rank from the run's configuration (``Task(cfg)``), it provides:

* ``build_model(model_cfg, data)``: the ``torch.nn.Module`` every algorithm synchronises (for a
  GAN, one module holding both networks, so every algorithm synchronises both);
* ``param_groups(model, optim_cfg)``: the optimizer's parameter groups, each with its own
  hyper-parameters (a GAN: one group per network, i.e. one optimizer per network);
* ``loss(model, inputs, labels)``: the scalar whose backward pass gives every parameter its
  gradient for this step;
* ``take_epoch_losses()``: named means of the loss's parts since the last call (e.g. both GAN
  losses), logged per epoch as ``epoch/<name>``;
* ``samples(model)``: named image grids to log as artifacts at each evaluation (none by default).

Task modules load without torch (composing imports them for their schemas): torch is imported
inside the methods.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar, Dict, List, Optional, Protocol, Tuple

from dlcomm.config.schema import ModelConfig, OptimConfig, RunConfig, TaskConfig

if TYPE_CHECKING:
    import torch


class DataShape(Protocol):
    """What a model is built from: the data's shape and normalisation (an
    :class:`~dlcomm.data.base.ImageClassificationData`, or a stand-in when no data is loaded)."""

    @property
    def input_shape(self) -> Tuple[int, int, int]: ...

    @property
    def num_classes(self) -> int: ...

    @property
    def pixel_mean(self) -> Optional[Tuple[float, ...]]: ...

    @property
    def pixel_std(self) -> Optional[Tuple[float, ...]]: ...


class Task:
    name: ClassVar[str]
    Config: ClassVar[type] = TaskConfig
    accuracy_label: ClassVar[str] = "test acc"
    """What the evaluation's accuracy measures, as the progress lines name it."""
    batchable: ClassVar[bool] = False
    """Whether a step is one ``loss(model, inputs, labels)`` and its backward, which
    ``launcher.compute=batched`` runs for every rank in one vectorised call
    (:mod:`dlcomm.train.batched`); a task whose step does more (a GAN's two passes) is refused there."""

    @classmethod
    def check(cls, cfg: RunConfig) -> None:
        """Raise a one-line :class:`~dlcomm.errors.UserError` for a run this task cannot train
        (before anything starts, while composing). By default: none."""

    def __init__(self, cfg: RunConfig) -> None:
        self.cfg = cfg

    def build_model(self, model_cfg: ModelConfig, data: DataShape) -> "torch.nn.Module":
        from dlcomm.models import build_model

        return build_model(model_cfg, data.input_shape, data.num_classes)

    def param_groups(self, model: "torch.nn.Module", optim_cfg: OptimConfig) -> List[Dict[str, Any]]:
        """One group of every trainable parameter, with the optimizer's hyper-parameters."""
        return [{"params": [p for p in model.parameters() if p.requires_grad]}]

    def loss(self, model: "torch.nn.Module", inputs: "torch.Tensor", labels: "torch.Tensor") -> "torch.Tensor":
        raise NotImplementedError(f"task {self.name} lacks loss()")

    def take_epoch_losses(self) -> Dict[str, float]:
        return {}

    def samples(self, model: "torch.nn.Module") -> Dict[str, "torch.Tensor"]:
        return {}
