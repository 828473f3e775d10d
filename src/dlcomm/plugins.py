"""Plugins: installed packages that bring their own choices to dlcomm through entry points.

A package declares, in its ``pyproject.toml``::

    [project.entry-points."dlcomm.algorithms"]
    choco = "dlcomm_choco.choco:ChocoSGD"      # the name is the algorithm's (algo=choco)

    [project.entry-points."dlcomm.configs"]
    dlcomm_choco = "dlcomm_choco.configs"      # a package of preset YAML files (network/, ...), if any

    [project.entry-points."dlcomm.datasets"]  # a data set, likewise
    my_set = "dlcomm_choco.my_set:MySet"       # the name is the data set's (dataset=my_set)

    [project.entry-points."dlcomm.optimizers"]  # an optimizer, likewise
    my_opt = "dlcomm_choco.my_opt:MyOpt"

    [project.entry-points."dlcomm.models"]      # a model, likewise
    my_net = "dlcomm_choco.my_net:MyNet"

    [project.entry-points."dlcomm.tasks"]       # a task, likewise
    [project.entry-points."dlcomm.launchers"]   # a launcher, likewise
    [project.entry-points."dlcomm.compressors"] # a compressor, likewise

Each group's entry points name registered classes of that group (:data:`dlcomm.config.schema.GROUPS`: an
``Algorithm``, ``DataSource``, ``Optimizer``, ``Model``, ``Task``, ``Launcher`` or ``Compressor``
subclass) whose name (:func:`dlcomm.groups.choice_name`: its ``Config``'s ``name`` default, or
the class's ``name``) is the entry point's and whose ``Config`` is a dataclass subclassing the
group's schema base (``AlgoConfig``, ...; a launcher may have none). Each such class is a choice of its own,
stored as Hydra's ``<group>/<name>`` (:func:`dlcomm.catalog.stored_choices`): it needs no YAML.
Every ``dlcomm.configs`` entry point names a package of preset YAML files laid out as
``dlcomm/configs`` (``network/`` presets, which are YAML alone, and ``algo/<name>.yaml``, ...
for a choice whose values a file changes, or whose class has no ``Config``), which joins Hydra's
search path after dlcomm's own. So after ``pip install my-scheme``,
``dlcomm train algo=my_scheme`` works, in sweeps and under SLURM too (the job's processes load the
same entry points from the same environment).

A plugin that fails to import, names a class that is not of its group, or takes a name dlcomm or
another plugin already has is refused in one line naming the package. Composing a configuration
imports every plugin's modules (for their schemas): a plugin that imports torch inside its
methods keeps ``dlcomm config`` fast. See docs/extending.md.
"""

from __future__ import annotations

import importlib
from functools import lru_cache
from importlib import metadata
from importlib.util import find_spec
from typing import Any

from dlcomm.config.schema import GROUPS
from dlcomm.errors import UserError
from dlcomm.groups import Group, choice_name

CONFIGS = "dlcomm.configs"  # packages of YAML that join Hydra's search path


@lru_cache(maxsize=None)
def _installed() -> dict[str, tuple[metadata.EntryPoint, ...]]:
    """The installed entry points of dlcomm's groups (each record's of :data:`GROUPS`, and
    :data:`CONFIGS`), each group's sorted, read at once: every read walks every installed
    package's metadata."""
    every = metadata.entry_points()
    wanted = [*(group.entry_points for group in GROUPS.values()), CONFIGS]
    return {
        group: tuple(sorted(every.select(group=group), key=lambda point: (point.name, point.value))) for group in wanted
    }


def _entry_points(group: str) -> list[metadata.EntryPoint]:
    return list(_installed().get(group, ()))


def declares(config_group: str) -> bool:
    """Whether an installed plugin declares a choice of ``config_group`` (``algo``, ...): read from
    the metadata, nothing imported."""
    return bool(_entry_points(GROUPS[config_group].entry_points))


def _package_of(point: metadata.EntryPoint) -> str:
    """The distribution that declared ``point`` (its pip name), for messages."""
    dist = getattr(point, "dist", None)
    return f"{dist.name} {dist.version}" if dist is not None else point.value.split(":")[0].split(".")[0]


def _load(point: metadata.EntryPoint, group: str) -> object:
    try:
        return point.load()
    except Exception as error:  # noqa: BLE001 - whatever a plugin raises on import, one line names it
        reason = " ".join(f"{type(error).__name__}: {error}".split())
        raise UserError(
            f"plugin {_package_of(point)} failed to load its {group} entry point {point.name} = {point.value} "
            f"({reason}); fix or reinstall it, or `pip uninstall {_package_of(point).split()[0]}`"
        ) from None


def _attribute(path: str) -> type:
    module, name = path.split(":")
    return getattr(importlib.import_module(module), name)


@lru_cache(maxsize=None)
def plugin_classes(group: Group) -> tuple[tuple[str, type, str], ...]:
    """``(name, class, package)`` of every class the plugins declare for ``group`` (a record of
    :data:`GROUPS`), loaded and checked once by the one rule for every group: each entry point
    names a subclass of the group's base whose ``name`` is the entry point's and whose ``Config``
    is a dataclass subclassing the group's schema base."""
    found = []
    for point, cls, package in _plugin_classes(group.entry_points, _attribute(group.base), group.kind):
        if not (group.config_optional and getattr(cls, "Config", None) is None):
            _schema_class(cls, group.config_base, group.what, point, package)
        found.append((point.name, cls, package))
    return tuple(found)


def register_plugins(group: Group, registry: dict[str, Any]) -> None:
    """Add the plugins' classes of ``group`` to ``registry`` (name -> class), refusing a taken
    name: what every group's :meth:`Registry.all <dlcomm.registry.Registry.all>` does."""
    _register(registry, plugin_classes(group), group.what)


def _schema_class(cls: type, base: type, what: str, point: metadata.EntryPoint, package: str) -> None:
    """Refuse a plugin class whose ``Config`` is not a dataclass subclassing ``base``."""
    import dataclasses

    config = getattr(cls, "Config", None)
    if not (isinstance(config, type) and dataclasses.is_dataclass(config) and issubclass(config, base)):
        raise UserError(
            f"plugin {package}'s {what} {point.name!r} has Config = {config!r}, not a dataclass subclassing "
            f"dlcomm.config.schema.{base.__name__}; give it one"
        )


def _plugin_classes(group: str, base: type, kind: str) -> list[tuple[metadata.EntryPoint, type, str]]:
    """The loaded ``(entry point, class, package)`` of ``group``, each a subclass of ``base`` whose
    ``name`` is the entry point's; ``kind`` names the class in messages."""
    found = []
    for point in _entry_points(group):
        cls = _load(point, group)
        package = _package_of(point)
        if not (isinstance(cls, type) and issubclass(cls, base)):
            raise UserError(
                f"plugin {package}'s {group} entry point {point.name} = {point.value} is not {kind} class "
                f"(a subclass of {base.__module__}.{base.__name__}); point it at the class"
            )
        try:
            name: str | None = choice_name(cls)  # written once: the class's `name` or its Config's
        except ValueError as error:
            raise UserError(f"plugin {package}'s {group} entry point {point.name}: {error}") from None
        if name != point.name:
            raise UserError(
                f"plugin {package}'s {group} entry point {point.name} names {cls.__name__}, whose name is "
                f"{name!r}; make the entry point's name the class's name (its Config's `name` default, or its `name`)"
            )
        cls.name = point.name  # type: ignore[attr-defined]
        found.append((point, cls, package))
    return found


def _register(registry: dict[str, Any], plugins: tuple[tuple[str, type, str], ...], what: str) -> None:
    """Add ``plugins`` to ``registry`` (name -> class), refusing a taken name."""
    owners: dict[str, str] = {}
    for name, cls, package in plugins:
        if name in registry and registry[name] is not cls:
            other = owners.get(name, f"dlcomm's own {what}")
            raise UserError(
                f"plugin {package}'s {what} {name!r} clashes with {other} of that name; rename it (its class's "
                f"or its Config's `name`, and its entry point)"
            )
        registry[name] = cls
        owners[name] = f"plugin {package}'s"


@lru_cache(maxsize=None)
def config_search_path() -> tuple[str, ...]:
    """``pkg://`` paths of the plugins' config packages, for Hydra's search path."""
    paths = []
    for point in _entry_points(CONFIGS):
        module = point.value.split(":")[0]
        try:
            spec = find_spec(module)
        except (ImportError, ValueError):
            spec = None
        if spec is None:
            raise UserError(
                f"plugin {_package_of(point)}'s {CONFIGS} entry point {point.name} = {point.value} names no importable "
                "package; point it at the package that holds algo/<name>.yaml (dataset/, optim/, model/), or reinstall the plugin"
            )
        paths.append(f"pkg://{module}")
    return tuple(paths)
