"""Optimizers and models as plugins: a package on the path with a ``*.dist-info/entry_points.txt``
(what ``pip install`` writes) brings an optimizer and a model (one Python file each) and their
``optim/<name>.yaml`` and ``model/<name>.yaml``; they compose, train, and what goes wrong is one
line naming the package, exit 2."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from fake_plugins import plugin_env, run_dlcomm, write_plugin

OPTIMIZER = """
from dataclasses import dataclass, field

from dlcomm.config.schema import OptimConfig, doc
from dlcomm.errors import UserError
from dlcomm.train.optim import Optimizer


@dataclass
class FakeSGDConfig(OptimConfig):
    name: str = "{name}"
    lr: float = 0.1
    dampening: float = field(default=0.0, metadata=doc("torch's SGD dampening (no momentum: unused, a knob of its own)"))


class {cls}(Optimizer):
    name = "{name}"
    Config = FakeSGDConfig

    @classmethod
    def check(cls, cfg):
        if cfg.dampening < 0:
            raise UserError(f"optim.dampening={{cfg.dampening}} is invalid: use 0 or more")

    @classmethod
    def build(cls, cfg, groups):
        import torch  # inside: composing a configuration imports this module

        return torch.optim.SGD(groups, lr=cfg.lr, momentum=0.0, weight_decay=cfg.weight_decay)
"""

MODEL = """
from dataclasses import dataclass

from dlcomm.config.schema import ModelConfig
from dlcomm.models.registry import Model


@dataclass
class FakeLinearConfig(ModelConfig):
    name: str = "{name}"
    bias: bool = True


class {cls}(Model):
    name = "{name}"
    Config = FakeLinearConfig

    @classmethod
    def build(cls, cfg, input_shape, num_classes):
        from torch import nn  # inside: composing a configuration imports this module

        c, h, w = input_shape
        return nn.Sequential(nn.Flatten(), nn.Linear(c * h * w, num_classes, bias=bool(cfg.bias)))
"""

GOOD = """
    [dlcomm.optimizers]
    fake_sgd = fake_om.optimizer:FakeSGD

    [dlcomm.models]
    fake_linear = fake_om.model:FakeLinear

    [dlcomm.configs]
    fake_om = fake_om.configs
"""


def _plugin(root: Path, entry_points: str, optim: str = "fake_sgd", model: str = "fake_linear") -> None:
    """A package ``fake_om`` under ``root`` with an optimizer, a model and their YAML files, and its
    installed metadata declaring ``entry_points``."""
    write_plugin(
        root,
        "fake_om",
        {
            "optimizer.py": OPTIMIZER.format(name=optim, cls="FakeSGD"),
            "model.py": MODEL.format(name=model, cls="FakeLinear"),
        },
        {
            f"optim/{optim}.yaml": f"# plain SGD (a test's plugin)\ndefaults:\n  - {optim}_schema\n  - _self_\n\nlr: 0.05\n",
            f"model/{model}.yaml": f"# a linear classifier (a test's plugin)\ndefaults:\n  - {model}_schema\n  - _self_\n",
        },
        entry_points,
    )


def _env(root: Path) -> dict:
    return plugin_env(root)


def _dlcomm(root: Path, *args: str, timeout: int = 120) -> subprocess.CompletedProcess:
    return run_dlcomm(root, *args, timeout=timeout)


def _refused(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 2 and result.stdout == "", (result.stdout, result.stderr)
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    return result.stderr


def test_a_plugin_optimizer_and_model_compose_with_their_yaml_and_schemas(tmp_path) -> None:
    _plugin(tmp_path, GOOD)
    shown = _dlcomm(tmp_path, "config", "optim=fake_sgd", "model=fake_linear", "model.bias=false")
    assert shown.returncode == 0, shown.stderr
    assert "model:\n  name: fake_linear\n  bias: false\n" in shown.stdout
    assert "optim:\n  name: fake_sgd\n  lr: 0.05\n" in shown.stdout and "  dampening: 0.0\n" in shown.stdout
    typo = _dlcomm(tmp_path, "config", "optim=fake_sgd", "optim.dampenin=1")
    assert typo.returncode == 2 and len(typo.stderr.strip().splitlines()) == 1, typo.stderr


def test_a_plugin_optimizer_s_own_check_refuses_a_run_in_one_line(tmp_path) -> None:
    _plugin(tmp_path, GOOD)
    refused = _dlcomm(tmp_path, "train", "optim=fake_sgd", "optim.dampening=-1", "launcher=threads")
    assert refused.returncode == 2 and len(refused.stderr.strip().splitlines()) == 1, refused.stderr
    assert "optim.dampening=-1.0 is invalid: use 0 or more" in refused.stderr


def test_composing_with_a_plugin_optimizer_and_model_imports_no_torch(tmp_path) -> None:
    _plugin(tmp_path, GOOD)
    probe = (
        "import sys\n"
        "from dlcomm.compose import compose\n"
        "from dlcomm.models import model_names\n"
        "from dlcomm.train.optim import OPTIMIZERS\n"
        "compose(['optim=fake_sgd', 'model=fake_linear'])\n"
        "print('fake_sgd' in OPTIMIZERS.all(), model_names()[-1], 'torch' in sys.modules)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], env=_env(tmp_path), capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "fake_linear", "False"], done.stdout


@pytest.mark.slow  # real processes / a real run
def test_a_plugin_optimizer_and_model_train(tmp_path) -> None:
    _plugin(tmp_path, GOOD)
    args = [
        "optim=fake_sgd",
        "model=fake_linear",
        "dataset=synthetic",
        "dataset.train_size=512",
        "dataset.test_size=128",
        "launcher=threads",
        "train.max_steps=2",
        "train.epochs=1",
    ]
    result = _dlcomm(tmp_path, "train", *args, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "fake_linear" in result.stdout
    assert "done: test accuracy" in result.stdout and "train.max_steps=2 ended the run" in result.stdout


def test_the_registries_build_a_plugin_optimizer_and_model(tmp_path) -> None:
    _plugin(tmp_path, GOOD)
    probe = (
        "from dlcomm.compose import compose\n"
        "from dlcomm.models import build_model\n"
        "from dlcomm.train.optim import build_optimizer\n"
        "cfg = compose(['optim=fake_sgd', 'model=fake_linear', 'model.bias=false'])\n"
        "model = build_model(cfg.model, (1, 4, 4), 3)\n"
        "optimizer = build_optimizer(cfg.optim, [{'params': list(model.parameters())}])\n"
        "print(type(optimizer).__name__, optimizer.defaults['lr'], [tuple(p.shape) for p in model.parameters()])\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], env=_env(tmp_path), capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "SGD 0.05 [(3, 16)]", done.stdout


@pytest.mark.parametrize(
    ("entry", "optim", "model", "says"),
    [
        (
            "sgd = fake_om.optimizer:FakeSGD",
            "sgd",
            "fake_linear",
            "plugin fake_om 1.0's optimizer 'sgd' clashes with dlcomm's own optimizer of that name; rename it",
        ),
        (
            "mlp = fake_om.model:FakeLinear",
            "fake_sgd",
            "mlp",
            "plugin fake_om 1.0's model 'mlp' clashes with dlcomm's own model of that name; rename it",
        ),
    ],
)
def test_a_plugin_may_not_take_a_built_in_optimizer_or_model_name(tmp_path, entry, optim, model, says) -> None:
    old = "fake_sgd = fake_om.optimizer:FakeSGD" if optim == "sgd" else "fake_linear = fake_om.model:FakeLinear"
    _plugin(tmp_path, GOOD.replace(old, entry), optim=optim, model=model)
    assert says in _refused(_dlcomm(tmp_path, "config"))


@pytest.mark.parametrize(
    ("old", "new", "says"),
    [
        (
            "fake_om.optimizer:FakeSGD",
            "fake_om.missing:FakeSGD",
            "failed to load its dlcomm.optimizers entry point fake_sgd",
        ),
        ("fake_om.model:FakeLinear", "fake_om.model:FakeLinearConfig", "is not a model class"),
        ("fake_om.optimizer:FakeSGD", "fake_om.optimizer:FakeSGDConfig", "is not an optimizer class"),
        ("fake_linear = fake_om.model", "linear = fake_om.model", "whose name is 'fake_linear'"),
    ],
)
def test_a_broken_optimizer_or_model_plugin_is_one_line_naming_its_package(tmp_path, old, new, says) -> None:
    _plugin(tmp_path, GOOD.replace(old, new))
    line = _refused(_dlcomm(tmp_path, "config"))
    assert line.startswith("dlcomm: error: plugin fake_om 1.0") and says in line, line


def test_every_listed_optimizer_has_its_registered_optimizer_and_schema() -> None:
    """Each ``optim=<name>`` that ``dlcomm --help`` lists (a preset YAML or a stored choice) is a
    registered optimizer's, composed to its ``Config``."""
    from dlcomm.catalog import choice_schemas, choices
    from dlcomm.train.optim import OPTIMIZERS

    assert set(choices("optim")) == set(choice_schemas("optim")) == set(OPTIMIZERS.all())
    assert {name: optimizer.Config for name, optimizer in OPTIMIZERS.all().items()} == choice_schemas("optim")


def test_build_optimizer_refuses_an_unknown_name_in_one_line() -> None:
    from dlcomm.errors import UserError
    from dlcomm.train.optim import SGDConfig, build_optimizer

    with pytest.raises(UserError, match=r"^optim.name=nope is unknown: choose one of adabelief, adam, adamw, "):
        build_optimizer(SGDConfig(name="nope"), [])


def test_angulargrad_s_own_check_still_refuses_a_run_in_one_line(tmp_path) -> None:
    refused = _dlcomm(tmp_path, "train", "optim=angulargrad", "optim.method=sin", "launcher=threads")
    assert refused.returncode == 2 and len(refused.stderr.strip().splitlines()) == 1, refused.stderr
    assert "optim.method=sin is invalid: angulargrad's coefficient must be cos or tan" in refused.stderr
