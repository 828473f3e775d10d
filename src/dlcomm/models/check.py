"""Early check that a model accepts the dataset's images: :func:`check_model_fits`."""

from __future__ import annotations

from typing import Tuple

import torch
import torch.nn as nn

from dlcomm.config.schema import ModelConfig
from dlcomm.errors import UserError
from dlcomm.models.registry import build_model

_HINT = (
    "choose a model for small images (small_cnn, mlp, nin, resnet18 with model.cifar_stem=true) "
    "or a dataset of larger images (dataset=cifar10 or cifar100: 32x32; dataset=imagefolder: dataset.image_size)"
)


def _short(exc: BaseException, limit: int = 160) -> str:
    """The first line of an exception's message, cut to ``limit`` characters."""
    lines = str(exc).strip().splitlines()
    text = lines[0].strip() if lines else type(exc).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."


def check_model_fits(
    cfg: ModelConfig, input_shape: Tuple[int, int, int], num_classes: int, dataset: str = ""
) -> nn.Module:
    """Build ``cfg.name`` and run a zero batch of 2 through it, in eval mode without grad; the model
    built (for the checks of the knobs whose limits depend on it).

    Raises :class:`UserError` (one line naming the model and the shape) when building or the
    forward pass fails, or when the logits are not of shape ``(2, num_classes)``. An unknown
    model name raises the registry's own :class:`UserError`.
    """
    c, h, w = (int(d) for d in input_shape)
    where = f"model={cfg.name} cannot take {f'dataset={dataset} ' if dataset else 'dataset '}input of shape {c}x{h}x{w}"
    try:
        model = build_model(cfg, (c, h, w), num_classes)
        model.eval()
        with torch.no_grad():
            out = model(torch.zeros(2, c, h, w))
    except UserError:
        raise
    except Exception as exc:  # any failure of the architecture on this shape
        raise UserError(f"{where} ({_short(exc)}): {_HINT}") from exc
    expected = (2, int(num_classes))
    if not isinstance(out, torch.Tensor) or tuple(out.shape) != expected:
        got = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
        raise UserError(f"{where} (logits of shape {got}, expected {expected}): {_HINT}")
    return model
