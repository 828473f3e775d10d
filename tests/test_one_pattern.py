"""The one registration pattern, held for every group of choices: each of dlcomm's own YAML files
``configs/<group>/<name>.yaml`` has a registered class of that name and each registered class its
file (so adding a choice is its .py and its .yaml, nothing else), and the composed section is that
class's ``Config`` dataclass (typed at run time). A network preset is data: a YAML file alone."""

from __future__ import annotations

import dataclasses

import pytest

from dlcomm.algorithms.registry import ALGORITHMS
from dlcomm.compose import compose
from dlcomm.compress.registry import COMPRESSORS
from dlcomm.config.choices import choice_files
from dlcomm.data.registry import SOURCES
from dlcomm.launch.registry import LAUNCHERS
from dlcomm.models.registry import MODELS
from dlcomm.plugins import GROUPS
from dlcomm.tasks.registry import TASKS
from dlcomm.train.optim import OPTIMIZERS

REGISTRIES = {
    "compress": COMPRESSORS,
    "algo": ALGORITHMS,
    "dataset": SOURCES,
    "optim": OPTIMIZERS,
    "model": MODELS,
    "task": TASKS,
    "launcher": LAUNCHERS,
}


def _own(group: str) -> dict[str, type]:
    """dlcomm's own classes of ``group`` (an installed plugin's, such as CI's CHOCO-SGD, ship their YAML)."""
    return {name: cls for name, cls in REGISTRIES[group].all().items() if cls.__module__.startswith("dlcomm.")}


def test_every_plugin_group_has_its_registry() -> None:
    assert set(GROUPS) == set(REGISTRIES)


@pytest.mark.parametrize("group", sorted(REGISTRIES))
def test_each_yaml_file_has_its_registered_class_and_each_class_its_file(group: str) -> None:
    files = set(choice_files(group))
    classes = _own(group)
    assert files == set(classes), (sorted(files - set(classes)), sorted(set(classes) - files))
    for name, cls in classes.items():
        assert cls.name == name


def _cases():
    for group in sorted(REGISTRIES):
        for name in choice_files(group):
            yield pytest.param(group, name, id=f"{group}={name}")


@pytest.mark.parametrize(("group", "name"), list(_cases()))
def test_the_composed_section_is_the_class_s_config(group: str, name: str) -> None:
    cls = REGISTRIES[group].get(name)
    extra = {
        ("task", "gan"): ["model=acgan"],
        ("model", "acgan"): ["task=gan"],
        ("compress", "layerdrop"): ["algo=ps"],
    }.get((group, name), [])
    section = getattr(compose([f"{group}={name}", *extra]), group)
    expected = cls.Config
    if expected is None:  # a launcher without knobs of its own: the schema its YAML names
        return
    assert type(section) is expected, (type(section), expected)
    assert dataclasses.is_dataclass(expected) and section.name == name
