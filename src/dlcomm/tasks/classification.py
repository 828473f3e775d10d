"""Image classification: the model maps images to logits; the loss is the cross-entropy
``-(1/B) sum_b log softmax(f(x_b))[y_b]`` (with label smoothing ``s = train.label_smoothing``: the
target puts ``1 - s`` on ``y_b`` and ``s / K`` on each of the ``K`` classes)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from dlcomm.config.schema import RunConfig, TaskConfig
from dlcomm.errors import UserError
from dlcomm.tasks.base import Task
from dlcomm.tasks.registry import register

if TYPE_CHECKING:
    import torch


@register
class Classification(Task):
    """``task=classification`` (the default): its name is :class:`TaskConfig`'s ``name`` default."""

    Config = TaskConfig
    batchable = True  # one loss of (model, inputs, labels): launcher.compute=batched can vectorise it

    @classmethod
    def check(cls, cfg: RunConfig) -> None:
        if cfg.model.name == "acgan":
            raise UserError("model=acgan is the GAN's generator and discriminator: pass task=gan to train it")

    def __init__(self, cfg: RunConfig) -> None:
        import torch

        super().__init__(cfg)
        self.criterion = torch.nn.CrossEntropyLoss(label_smoothing=cfg.train.label_smoothing)

    def loss(self, model: "torch.nn.Module", inputs: "torch.Tensor", labels: "torch.Tensor") -> "torch.Tensor":
        return self.criterion(model(inputs), labels)
