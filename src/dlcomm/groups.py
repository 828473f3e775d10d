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
    group's :class:`~dlcomm.registry.Registry`; ``family_schema``: the group's YAML presets share
    ``config_base`` as one schema whose keys every choice has (model, dataset, optim)."""

    config_group: str
    entry_points: str
    base: str
    kind: str
    config_base: str
    what: str
    registry: str
    config_optional: bool = False
    family_schema: bool = False


GROUPS: dict[str, Group] = {
    group.config_group: group
    for group in (
        Group(
            "algo",
            "dlcomm.algorithms",
            "dlcomm.algorithms.base:Algorithm",
            "an algorithm",
            "AlgoConfig",
            "algorithm",
            "dlcomm.algorithms.registry:ALGORITHMS",
        ),
        Group(
            "dataset",
            "dlcomm.datasets",
            "dlcomm.data.source:DataSource",
            "a data source",
            "DatasetConfig",
            "data set",
            "dlcomm.data.registry:SOURCES",
            family_schema=True,
        ),
        Group(
            "optim",
            "dlcomm.optimizers",
            "dlcomm.train.optim:Optimizer",
            "an optimizer",
            "OptimConfig",
            "optimizer",
            "dlcomm.train.optim:OPTIMIZERS",
            family_schema=True,
        ),
        Group(
            "model",
            "dlcomm.models",
            "dlcomm.models.registry:Model",
            "a model",
            "ModelConfig",
            "model",
            "dlcomm.models.registry:MODELS",
            family_schema=True,
        ),
        Group(
            "task",
            "dlcomm.tasks",
            "dlcomm.tasks.base:Task",
            "a task",
            "TaskConfig",
            "task",
            "dlcomm.tasks.registry:TASKS",
        ),
        Group(
            "compress",
            "dlcomm.compressors",
            "dlcomm.compress.base:Compressor",
            "a compressor",
            "CompressConfig",
            "compressor",
            "dlcomm.compress.registry:COMPRESSORS",
        ),
        Group(
            "launcher",
            "dlcomm.launchers",
            "dlcomm.launch.base:Launcher",
            "a launcher",
            "LauncherConfig",
            "launcher",
            "dlcomm.launch.registry:LAUNCHERS",
            config_optional=True,
        ),
    )
}
