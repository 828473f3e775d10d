"""Data sets as plugins: a package on the path with a ``*.dist-info/entry_points.txt`` (what ``pip
install`` writes) brings a data source (one Python file) and its ``dataset/<name>.yaml``; it
composes, trains, and what goes wrong is one line naming the package, exit 2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from fake_plugins import plugin_env, run_dlcomm, write_plugin

SOURCE = """
from dataclasses import dataclass, field

from dlcomm.config.schema import DatasetConfig, doc
from dlcomm.data.source import DataSource
from dlcomm.errors import UserError


@dataclass
class {cls}Config(DatasetConfig):
    name: str = "{name}"
    train_size: int = field(default=512, metadata=doc("images in the training split"))
    test_size: int = 64
    classes: int = 3


class {cls}(DataSource):
    name = "{name}"
    Config = {cls}Config

    @classmethod
    def check(cls, cfg):
        if int(cfg.train_size) < 1 or int(cfg.test_size) < 1:
            raise UserError(f"dataset.train_size={{cfg.train_size}} and dataset.test_size={{cfg.test_size}} must be >= 1")

    @classmethod
    def shape(cls, cfg):
        return (1, 8, 8), int(cfg.classes)

    @classmethod
    def sizes(cls, cfg):
        return int(cfg.train_size), int(cfg.test_size)

    @classmethod
    def build(cls, cfg):
        import torch  # inside: composing a configuration imports this module

        from dlcomm.data.base import InMemoryImageData

        generator = torch.Generator().manual_seed(0)

        def split(size):
            images = torch.randint(0, 256, (size, 1, 8, 8), dtype=torch.uint8, generator=generator)
            return images, torch.randint(0, int(cfg.classes), (size,), generator=generator)

        return InMemoryImageData(
            split(int(cfg.train_size)), split(int(cfg.test_size)), int(cfg.classes), mean=[0.5], std=[0.25]
        )
"""

GOOD = """
    [dlcomm.datasets]
    fake_set = fake_data.source:FakeSet

    [dlcomm.configs]
    fake_data = fake_data.configs
"""


def _plugin(root: Path, entry_points: str, name: str = "fake_set", cls: str = "FakeSet") -> None:
    """A package ``fake_data`` under ``root`` with a data source module and
    configs/dataset/<name>.yaml, and its installed metadata declaring ``entry_points``."""
    yaml = f"# random 8x8 images (a test's plugin)\ndefaults:\n  - {name}_schema\n  - _self_\n\ntest_size: 32\n"
    write_plugin(
        root,
        "fake_data",
        {"source.py": SOURCE.format(name=name, cls=cls)},
        {f"dataset/{name}.yaml": yaml},
        entry_points,
    )


def _env(root: Path) -> dict:
    return plugin_env(root)


def _dlcomm(root: Path, *args: str, timeout: int = 120) -> subprocess.CompletedProcess:
    return run_dlcomm(root, *args, timeout=timeout)


def test_an_installed_plugin_s_data_set_composes_with_its_yaml_and_schema(tmp_path) -> None:
    _plugin(tmp_path, GOOD)
    shown = _dlcomm(tmp_path, "config", "dataset=fake_set", "dataset.classes=4")
    assert shown.returncode == 0, shown.stderr
    assert "dataset:\n  name: fake_set\n  train_size: 512\n  test_size: 32\n  classes: 4\n" in shown.stdout
    typo = _dlcomm(tmp_path, "config", "dataset=fake_set", "dataset.clases=4")
    assert typo.returncode == 2 and len(typo.stderr.strip().splitlines()) == 1, typo.stderr


def test_composing_with_a_plugin_data_set_imports_no_torch(tmp_path) -> None:
    _plugin(tmp_path, GOOD)
    probe = (
        "import sys\n"
        "from dlcomm.compose import compose\n"
        "from dlcomm.data.registry import SOURCES\n"
        "compose(['dataset=fake_set'])\n"
        "print(sorted(SOURCES.all()), 'torch' in sys.modules)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], env=_env(tmp_path), capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert "'fake_set'" in done.stdout and done.stdout.split()[-1] == "False", done.stdout


@pytest.mark.slow  # real processes / a real run
def test_a_plugin_data_set_trains(tmp_path) -> None:
    _plugin(tmp_path, GOOD)
    args = ["dataset=fake_set", "launcher=threads", "train.max_steps=2", "train.epochs=1", "model=mlp"]
    result = _dlcomm(tmp_path, "train", *args, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "(fake_set, mlp, launcher=threads)" in result.stdout
    assert "done: test accuracy" in result.stdout and "train.max_steps=2 ended the run" in result.stdout


def test_the_registry_answers_for_a_plugin_data_set(tmp_path) -> None:
    _plugin(tmp_path, GOOD)
    probe = (
        "import json\n"
        "from dlcomm.compose import compose\n"
        "from dlcomm.data import build_dataset, dataset_shape, dataset_sizes\n"
        "cfg = compose(['dataset=fake_set']).dataset\n"
        "data = build_dataset(cfg)\n"
        "print(json.dumps([dataset_shape(cfg), dataset_sizes(cfg), list(data.input_shape), data.train_size]))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], env=_env(tmp_path), capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1]) == [[[1, 8, 8], 3], [512, 32], [1, 8, 8], 512]


def _refused(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 2 and result.stdout == "", (result.stdout, result.stderr)
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    return result.stderr


def test_a_data_set_plugin_that_fails_to_import_is_one_line_naming_its_package(tmp_path) -> None:
    _plugin(tmp_path, GOOD.replace("fake_data.source:FakeSet", "fake_data.missing:FakeSet"))
    line = _refused(_dlcomm(tmp_path, "config"))
    assert line.startswith("dlcomm: error: plugin fake_data 1.0 failed to load its dlcomm.datasets entry point")
    assert "ModuleNotFoundError" in line and "pip uninstall fake_data" in line


def test_a_data_set_plugin_may_not_take_a_built_in_name(tmp_path) -> None:
    _plugin(
        tmp_path,
        GOOD.replace("fake_set = fake_data.source:FakeSet", "mnist = fake_data.source:FakeMNIST"),
        "mnist",
        "FakeMNIST",
    )
    line = _refused(_dlcomm(tmp_path, "config"))
    assert "plugin fake_data 1.0's data set 'mnist' clashes with dlcomm's own data set of that name; rename it" in line


@pytest.mark.parametrize(
    ("entry", "says"),
    [
        ("fake_set = fake_data.source:FakeSetConfig", "is not a data source class"),
        ("renamed = fake_data.source:FakeSet", "whose name is 'fake_set'"),
    ],
)
def test_an_entry_point_must_name_a_data_source_of_its_own_name(tmp_path, entry, says) -> None:
    _plugin(tmp_path, GOOD.replace("fake_set = fake_data.source:FakeSet", entry))
    assert says in _refused(_dlcomm(tmp_path, "config"))


def test_every_listed_data_set_has_its_registered_source_and_schema() -> None:
    """Each ``dataset=<name>`` that ``dlcomm --help`` lists (a preset YAML or a stored choice) is a
    registered source's, composed to its ``Config``."""
    from dlcomm.catalog import choice_schemas, choices
    from dlcomm.data.registry import SOURCES

    assert set(choices("dataset")) == set(choice_schemas("dataset")) == set(SOURCES.all())
    assert {name: source.Config for name, source in SOURCES.all().items()} == choice_schemas("dataset")
