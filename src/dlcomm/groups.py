"""The config groups whose choices are classes: one :class:`Group` record each, in :data:`GROUPS`,
and how a choice of any group is named (:func:`choice_name`).

Everything that differs between groups is written here once; the rest is derived from it:

* the group's Registry (:func:`dlcomm.registry.registry_of`: its words, its ``home``, its
  plugins), which :func:`dlcomm.catalog.registry` lists and composition stores from;
* plugin loading (:mod:`dlcomm.plugins`): the entry-point group, the base class a plugin's class
  must subclass, the schema base its ``Config`` must subclass, the words of its refusals;
* the name each choice's ``Config`` is stored under in Hydra's ConfigStore (``schema_suffix``,
  ``schema_per_choice``; :func:`dlcomm.compose.schemas_of`);
* the groups whose YAML presets share one base schema, so that a knob no choice has is refused
  and one another choice has is named (``family_schema``; :data:`dlcomm.config.choices.BASES`).

A new group is one record here, its base class in its package and its schema base in
:mod:`dlcomm.config.schema` with a :class:`~dlcomm.config.schema.RunConfig` field of that type
(static, for mypy and OmegaConf: docs/architecture.md, "Config groups"; ``tests/test_groups.py``
fails on a record without its field and a field without its record). Classes are named by
``"module:Class"`` strings so that this module imports nothing: composing stays torch-free, and
the packages that hold the classes import this module, not the reverse (the one declared exception
of docs/architecture.md's layering).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Optional

MISSING = "???"  # omegaconf.MISSING: a Config's name left to the classes that share it


@dataclass(frozen=True)
class Group:
    """One config group whose choices are registered classes.

    ``config_group``: the override's key and the YAML folder (``algo``); ``entry_points``: the
    plugins' entry-point group; ``base``: ``"module:Class"`` every choice subclasses (``kind`` names
    one in messages, ``what`` names a choice); ``config_base``: the dataclass of
    :mod:`dlcomm.config.schema` every choice's ``Config`` subclasses, the type of RunConfig's field
    ``config_group`` (``config_optional``: a class may have none, as a launcher without knobs of its
    own); ``home``: the package (or module) whose import registers dlcomm's own choices
    (:meth:`Registry.all <dlcomm.registry.Registry.all>`: a package's modules that decorate a
    class with ``@register``); ``family_schema``: the group's YAML presets share ``config_base`` as
    one schema whose keys every choice has (model, dataset, optim). A choice's ``Config`` is stored
    as ``<name><schema_suffix>`` for a YAML preset's defaults list, unless it is one of the shared
    schemas of :data:`dlcomm.config.schema.SCHEMAS` (stored under their own names) and
    ``schema_per_choice`` is false (launcher=local's ``local_launcher_schema`` is
    ``ProcessLauncherConfig``)."""

    config_group: str
    entry_points: str
    base: str
    kind: str
    config_base: str
    what: str
    home: str
    config_optional: bool = False
    family_schema: bool = False
    schema_suffix: str = "_schema"
    schema_per_choice: bool = False


GROUPS: dict[str, Group] = {
    group.config_group: group
    for group in (
        Group(
            config_group="algo",
            entry_points="dlcomm.algorithms",
            base="dlcomm.algorithms.base:Algorithm",
            kind="an algorithm",
            config_base="AlgoConfig",
            what="algorithm",
            home="dlcomm.algorithms",
        ),
        Group(
            config_group="dataset",
            entry_points="dlcomm.datasets",
            base="dlcomm.data.source:DataSource",
            kind="a data source",
            config_base="DatasetConfig",
            what="data set",
            home="dlcomm.data",
            family_schema=True,
        ),
        Group(
            config_group="optim",
            entry_points="dlcomm.optimizers",
            base="dlcomm.train.optim:Optimizer",
            kind="an optimizer",
            config_base="OptimConfig",
            what="optimizer",
            home="dlcomm.train.optim",
            family_schema=True,
        ),
        Group(
            config_group="model",
            entry_points="dlcomm.models",
            base="dlcomm.models.registry:Model",
            kind="a model",
            config_base="ModelConfig",
            what="model",
            home="dlcomm.models",
            family_schema=True,
        ),
        Group(
            config_group="task",
            entry_points="dlcomm.tasks",
            base="dlcomm.tasks.base:Task",
            kind="a task",
            config_base="TaskConfig",
            what="task",
            home="dlcomm.tasks",
        ),
        Group(
            config_group="compress",
            entry_points="dlcomm.compressors",
            base="dlcomm.compress.base:Compressor",
            kind="a compressor",
            config_base="CompressConfig",
            what="compressor",
            home="dlcomm.compress",
        ),
        Group(
            config_group="launcher",
            entry_points="dlcomm.launchers",
            base="dlcomm.launch.base:Launcher",
            kind="a launcher",
            config_base="LauncherConfig",
            what="launcher",
            home="dlcomm.launch",
            config_optional=True,
            schema_suffix="_launcher_schema",
            schema_per_choice=True,
        ),
    )
}


def config_name(config: object) -> Optional[str]:
    """The ``name`` default of a ``Config`` dataclass, or None (no Config, no ``name`` field, or
    ``name`` left MISSING for the choices that share it to set)."""
    if not (isinstance(config, type) and dataclasses.is_dataclass(config)):
        return None
    field = {item.name: item for item in dataclasses.fields(config)}.get("name")
    default = field.default if field is not None else dataclasses.MISSING
    return default if isinstance(default, str) and default != MISSING else None


def choice_name(cls: type) -> str:
    """The name of choice class ``cls``, written once: its own ``name`` (set in its body), else its
    ``Config``'s ``name`` default. Raises ValueError for a class with neither, and for one whose
    body sets both a ``name`` and a ``Config`` that names another choice (two spellings that
    disagree: the composed section would not name the class)."""
    own = cls.__dict__.get("name")
    config = getattr(cls, "Config", None)
    default = config_name(config)
    if own is None:
        if default is None:
            raise ValueError(
                f"{cls.__module__}.{cls.__qualname__} has no name: give its Config a `name` default "
                "(a Config of its own) or the class a `name` (a Config several choices share)"
            )
        return default
    if "Config" in cls.__dict__ and default is not None and default != own:
        raise ValueError(
            f"{cls.__module__}.{cls.__qualname__} is named {own!r} but its Config "
            f"{getattr(config, '__name__', config)} names {default!r}: write the name once, in the Config "
            "(delete the class's `name`)"
        )
    return str(own)
