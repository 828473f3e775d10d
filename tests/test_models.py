"""Tests of dlcomm.models: the registry, the small models, torchvision adapters, fit check."""

from __future__ import annotations

import pytest
import torch
from omegaconf import OmegaConf
from torch import nn

from dlcomm.catalog import schema_of
from dlcomm.config.schema import ModelConfig
from dlcomm.errors import UserError
from dlcomm.models import build_model, check_model_fits, model_names


def _cfg(name: str, **kw):
    return OmegaConf.structured(schema_of("model", name)(name=name, **kw))


def _logits(model: nn.Module, shape, batch: int = 2) -> torch.Tensor:
    model.eval()
    with torch.no_grad():
        return model(torch.randn(batch, *shape))


def _n_params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def test_model_names_lists_every_model():
    assert set(model_names()) == {
        "small_cnn",
        "mlp",
        "nin",
        "resnet18",
        "resnet34",
        "resnet50",
        "resnet101",
        "vgg16",
        "densenet121",
        "shufflenet_v2",
        "vit_s",
        "vit_b",
        "rnn",
        "lstm",
        "gru",
        "acgan",
    }


def test_small_cnn_size_and_no_batchnorm():
    model = build_model(_cfg("small_cnn"), (1, 28, 28), 10)
    assert 400_000 <= _n_params(model) <= 440_000
    assert not any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in model.modules())
    assert _logits(model, (1, 28, 28)).shape == (2, 10)


@pytest.mark.parametrize("shape", [(3, 32, 32), (1, 4, 4), (3, 30, 17)])
def test_small_cnn_any_size(shape):
    assert _logits(build_model(_cfg("small_cnn"), shape, 7), shape).shape == (2, 7)


def test_mlp_hidden_and_dropout():
    cfg = _cfg("mlp", hidden=[64, 32], dropout=0.5)
    model = build_model(cfg, (1, 28, 28), 10)
    linears = [m for m in model.modules() if isinstance(m, nn.Linear)]
    assert [(m.in_features, m.out_features) for m in linears] == [(784, 64), (64, 32), (32, 10)]
    assert sum(isinstance(m, nn.Dropout) for m in model.modules()) == 2
    assert not any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in model.modules())
    assert _logits(model, (1, 28, 28)).shape == (2, 10)
    no_drop = build_model(_cfg("mlp", hidden=[16]), (3, 8, 8), 4)
    assert not any(isinstance(m, nn.Dropout) for m in no_drop.modules())


@pytest.mark.parametrize("shape", [(3, 32, 32), (1, 28, 28)])
def test_nin(shape):
    model = build_model(_cfg("nin", dropout=0.5), shape, 10)
    convs = [m for m in model.modules() if isinstance(m, nn.Conv2d)]
    assert len(convs) == 9 and convs[-1].out_channels == 10
    assert sum(isinstance(m, nn.Dropout) for m in model.modules()) == 2
    assert _logits(model, shape).shape == (2, 10)


# Every torchvision model on 3x32x32, resnets with the CIFAR stem; one forward each.
@pytest.mark.parametrize(
    "name", ["resnet18", "resnet34", "resnet50", "resnet101", "vgg16", "densenet121", "shufflenet_v2"]
)
def test_torchvision_models_forward(name):
    stem = {"cifar_stem": True} if name.startswith("resnet") else {}  # a knob of the ResNets only
    model = build_model(_cfg(name, **stem), (3, 32, 32), 10)
    assert _logits(model, (3, 32, 32)).shape == (2, 10)


def test_resnet_cifar_stem():
    model = build_model(_cfg("resnet18", cifar_stem=True), (3, 32, 32), 10)
    assert model.conv1.kernel_size == (3, 3) and model.conv1.stride == (1, 1)
    assert isinstance(model.maxpool, nn.Identity)
    plain = build_model(_cfg("resnet18"), (3, 32, 32), 10)
    assert plain.conv1.kernel_size == (7, 7) and isinstance(plain.maxpool, nn.MaxPool2d)


@pytest.mark.parametrize("name", ["resnet18", "densenet121"])
def test_one_input_channel(name):
    model = build_model(_cfg(name), (1, 32, 32), 10)
    assert _logits(model, (1, 32, 32)).shape == (2, 10)


def test_first_conv_replacement_keeps_hyperparameters():
    model = build_model(_cfg("resnet18"), (1, 64, 64), 5)
    assert model.conv1.in_channels == 1
    assert (model.conv1.kernel_size, model.conv1.stride, model.conv1.padding) == ((7, 7), (2, 2), (3, 3))
    assert model.conv1.bias is None and model.fc.out_features == 5
    shuffle = build_model(_cfg("shufflenet_v2"), (1, 28, 28), 10)
    assert shuffle.conv1[0].in_channels == 1
    assert _logits(shuffle, (1, 28, 28)).shape == (2, 10)


def test_check_model_fits_rejects_vgg16_on_mnist():
    with pytest.raises(UserError) as info:
        check_model_fits(_cfg("vgg16"), (1, 28, 28), 10)
    message = str(info.value)
    assert "vgg16" in message and "1x28x28" in message and "small_cnn" in message
    assert "\n" not in message


def test_check_model_fits_passes_small_cnn():
    check_model_fits(_cfg("small_cnn"), (1, 28, 28), 10)
    check_model_fits(ModelConfig(name="small_cnn"), (3, 32, 32), 100)


def test_unknown_model_name():
    with pytest.raises(UserError, match="small_cnn") as info:
        build_model(_cfg("alexnet"), (1, 28, 28), 10)
    assert "alexnet" in str(info.value)
    with pytest.raises(UserError, match="small_cnn"):
        check_model_fits(_cfg("alexnet"), (1, 28, 28), 10)
