"""The one registration pattern, held for every group of choices: every choice is a registered
class, found the one way (:mod:`dlcomm.registry`), and stored as ``<group>/<name>`` unless a preset
YAML of its name sets values (so adding a choice is its .py, nothing else); each of dlcomm's own
YAML files ``configs/<group>/<name>.yaml`` is a registered class's preset and sets something; its
name is written once (its Config's ``name`` default or its class's ``name``, never both); and the
composed section is that class's ``Config`` dataclass (typed at run time), named as the class is.
A network preset is data: a YAML file alone."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import textwrap
from dataclasses import dataclass

import pytest
from omegaconf import MISSING

from dlcomm.algorithms.registry import ALGORITHMS
from dlcomm.catalog import choices, registry, stored_choices
from dlcomm.compose import compose
from dlcomm.compress.registry import COMPRESSORS
from dlcomm.config.choices import choice_files, schema_name
from dlcomm.config.schema import GROUPS, AlgoConfig, ModelConfig
from dlcomm.data.registry import SOURCES
from dlcomm.groups import Group
from dlcomm.launch.registry import LAUNCHERS
from dlcomm.models.registry import MODELS
from dlcomm.registry import Registry, choice_name, config_name
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
    """dlcomm's own classes of ``group`` (an installed plugin's, such as CI's CHOCO-SGD, are held by :mod:`dlcomm.plugins`)."""
    return {name: cls for name, cls in REGISTRIES[group].all().items() if cls.__module__.startswith("dlcomm.")}


def test_every_group_record_names_its_registry() -> None:
    assert set(GROUPS) == set(REGISTRIES)
    assert all(registry(group) is REGISTRIES[group] for group in GROUPS)


@pytest.mark.parametrize("group", sorted(REGISTRIES))
def test_each_yaml_file_is_a_registered_class_s_preset_and_each_class_a_choice(group: str) -> None:
    files = choice_files(group)
    classes = _own(group)
    assert set(files) <= set(classes), sorted(set(files) - set(classes))
    stored = {name for where, name, _ in stored_choices() if where == group}
    assert set(classes) <= set(files) | stored, sorted(set(classes) - set(files) - stored)
    assert not set(files) & stored, sorted(set(files) & stored)  # a preset YAML wins: its choice is not stored
    assert set(choices(group)) == set(REGISTRIES[group].all()), "dlcomm --help lists a choice no class has"
    for name, content in files.items():
        values = {key for key in content if key not in ("defaults", "name")}
        # a default it sets for another group (diloco's inner optimizer) is content too
        values |= {str(next(iter(item))) for item in content.get("defaults") or [] if isinstance(item, dict)}
        assert values or schema_name(content) is None, (
            f"configs/{group}/{name}.yaml only links {schema_name(content)}: delete it, the choice is stored from its class"
        )
    for name, cls in classes.items():
        assert cls.name == name


@pytest.mark.parametrize("group", sorted(REGISTRIES))
def test_a_group_finds_its_choices_in_the_modules_that_register_them(group: str) -> None:
    """The one way to find a choice: the modules the registry imports (those of its home package that
    decorate a class with ``@register``) are exactly the modules of dlcomm's own classes; for a
    module home (train/optim.py), that module."""
    registry = REGISTRIES[group]
    modules = {cls.__module__ for cls in _own(group).values()}
    expected = {f"{registry.home}.{name}" for name in registry.choice_modules()} or {registry.home}
    assert modules == expected, (sorted(modules), sorted(expected))


def _sets_name(cls: type) -> bool:
    """Whether the body of ``cls`` assigns ``name`` (read from its source: registering sets ``cls.name``)."""
    (body,) = ast.parse(textwrap.dedent(inspect.getsource(cls))).body
    return any(
        isinstance(node, (ast.Assign, ast.AnnAssign))
        and any(
            isinstance(target, ast.Name) and target.id == "name"
            for target in getattr(node, "targets", [getattr(node, "target", None)])
        )
        for node in getattr(body, "body", [])
    )


def _cases_of_classes():
    for group in sorted(REGISTRIES):
        for name, cls in sorted(_own(group).items()):
            yield pytest.param(cls, id=f"{group}={name}")


@pytest.mark.parametrize("cls", list(_cases_of_classes()))
def test_a_choice_s_name_is_written_once(cls: type) -> None:
    """Either the class sets ``name`` (its Config, shared, leaves it MISSING) or its Config's
    ``name`` default names it (the class sets none): never both."""
    spelled = _sets_name(cls)
    assert spelled != (config_name(cls.Config) is not None), (
        f"{cls.__module__}.{cls.__qualname__}: name in the class body: {spelled}, Config {cls.Config.__name__}'s "
        f"name default: {config_name(cls.Config)!r}; write it once"
    )


def _registry() -> Registry:
    thing = Group("things", "module:Thing", "a thing", "thing", __name__, config_group="thing", config_base=AlgoConfig)
    return Registry(thing)


def test_register_takes_the_name_from_the_config_and_refuses_a_mismatch() -> None:
    @dataclass
    class OwnConfig(AlgoConfig):
        name: str = "own"

    class Own:
        Config = OwnConfig

    class Shared:
        name = "shared"
        Config = ModelConfig  # name MISSING: the classes that share it name themselves

    class Renamed(Own):  # a subclass that keeps its parent's Config may take a name of its own
        name = "renamed"

    things = _registry()
    assert things.register(Own).name == "own" and choice_name(Own) == "own"
    assert things.register(Shared).name == "shared"
    assert things.register(Renamed).name == "renamed"

    class Both:
        name = "other"
        Config = OwnConfig

    with pytest.raises(ValueError, match="is named 'other' but its Config OwnConfig names 'own'"):
        things.register(Both)

    class Nameless:
        Config = ModelConfig

    with pytest.raises(ValueError, match="has no name"):
        things.register(Nameless)
    assert config_name(ModelConfig) is None and ModelConfig.name == MISSING


def test_a_stored_choice_is_named_as_its_class() -> None:
    for group, name, node in stored_choices():
        assert node.name == name, (group, name, node)


def _cases():
    for group in sorted(REGISTRIES):
        for name in _own(group):
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
    assert expected is not None, f"{group}={name} has no Config"
    assert type(section) is expected, (type(section), expected)
    assert dataclasses.is_dataclass(expected) and section.name == name
