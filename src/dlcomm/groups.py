"""The config groups whose choices are classes: one :class:`Group` record each, in :data:`GROUPS`.

Everything that differs between groups is written here once; the rest is derived from it:

* the Registry of a group (``registry``: where it lives, ``"module:ATTR"``; :func:`dlcomm.catalog.registry`),
  and the composition's list of groups with schemas (:data:`dlcomm.compose.SCHEMA_GROUPS`);
* plugin loading (:mod:`dlcomm.plugins`): the entry-point group, the base class a plugin's class
  must subclass, the schema base its ``Config`` must subclass, the words of its refusals;
* the groups whose YAML presets share one base schema, so that a knob no choice has is refused
  and one another choice has is named (``family_schema``; :data:`dlcomm.config.choices.BASES`).

Adding a group is one record here, a Registry where ``registry`` says, and a schema base in
:mod:`dlcomm.config.schema`. Classes are named by ``"module:Class"`` strings so that this module
imports nothing: composing stays torch-free, and the packages that hold the classes import this
module, not the reverse (the one declared exception of docs/architecture.md's layering).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Group:
    """One config group whose choices are registered classes.

    ``config_group``: the override's key and the YAML folder (``algo``); ``entry_points``: the
    plugins' entry-point group; ``base``: ``"module:Class"`` every choice subclasses (``kind`` names
    one in messages, ``what`` names a choice); ``config_base``: the dataclass of
    :mod:`dlcomm.config.schema` every choice's ``Config`` subclasses (``config_optional``: a class may
    have none, as a launcher without knobs of its own); ``registry``: ``"module:ATTR"`` of the
    group's :class:`~dlcomm.registry.Registry`; ``home``: the package (or module) whose import
    registers dlcomm's own choices (:meth:`Registry.all <dlcomm.registry.Registry.all>`); ``family_schema``: the group's YAML presets share
    ``config_base`` as one schema whose keys every choice has (model, dataset, optim)."""

    config_group: str
    entry_points: str
    base: str
    kind: str
    config_base: str
    what: str
    registry: str
    home: str
    config_optional: bool = False
    family_schema: bool = False


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
            registry="dlcomm.algorithms.registry:ALGORITHMS",
            home="dlcomm.algorithms",
        ),
        Group(
            config_group="dataset",
            entry_points="dlcomm.datasets",
            base="dlcomm.data.source:DataSource",
            kind="a data source",
            config_base="DatasetConfig",
            what="data set",
            registry="dlcomm.data.registry:SOURCES",
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
            registry="dlcomm.train.optim:OPTIMIZERS",
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
            registry="dlcomm.models.registry:MODELS",
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
            registry="dlcomm.tasks.registry:TASKS",
            home="dlcomm.tasks",
        ),
        Group(
            config_group="compress",
            entry_points="dlcomm.compressors",
            base="dlcomm.compress.base:Compressor",
            kind="a compressor",
            config_base="CompressConfig",
            what="compressor",
            registry="dlcomm.compress.registry:COMPRESSORS",
            home="dlcomm.compress",
        ),
        Group(
            config_group="launcher",
            entry_points="dlcomm.launchers",
            base="dlcomm.launch.base:Launcher",
            kind="a launcher",
            config_base="LauncherConfig",
            what="launcher",
            registry="dlcomm.launch.registry:LAUNCHERS",
            home="dlcomm.launch",
            config_optional=True,
        ),
    )
}
