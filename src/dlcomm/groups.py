"""What a config group whose choices are classes is (:class:`Group`), how its records are read
from the run's schema (:func:`records`), and how a choice of any group is named (:func:`choice_name`).

A group is declared once: its field of :class:`~dlcomm.config.schema.RunConfig`, whose metadata
holds the group's record (``algo: AlgoConfig = chosen_from(Group(...), ...)``); the field's name is
the group's key and its type the group's schema base. :data:`dlcomm.config.schema.GROUPS` is read
from those fields, and everything that differs between groups is derived from it:

* the group's Registry (:func:`dlcomm.registry.registry_of`: its words, its ``home``, its
  plugins), which :func:`dlcomm.catalog.registry` lists and composition stores from;
* plugin loading (:mod:`dlcomm.plugins`): the entry-point group, the base class a plugin's class
  must subclass, the schema base its ``Config`` must subclass, the words of its refusals;
* the name each choice's ``Config`` is stored under in Hydra's ConfigStore (``schema_suffix``,
  ``schema_per_choice``; :func:`dlcomm.compose.schemas_of`);
* the groups whose YAML presets share one base schema, so that a knob no choice has is refused
  and one another choice has is named (``family_schema``; :data:`dlcomm.config.choices.BASES`).

The field is static on purpose: mypy types ``cfg.algo`` from its annotation at every call site,
and OmegaConf builds the run's schema from it (docs/architecture.md, "Config groups"). A record
names its classes by ``"module:Class"`` strings, so that :mod:`dlcomm.config` imports no choice
package: composing stays torch-free, and the packages that hold the classes import the records'
derived views, not the reverse (the declared exception ``config/`` -> the choice packages of
docs/architecture.md's layering). This module imports nothing of dlcomm.
"""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass
from typing import Optional

MISSING = "???"  # omegaconf.MISSING: a Config's name left to the classes that share it
RECORD = "group"  # the key of a RunConfig field's metadata that holds its group's record


@dataclass(frozen=True)
class Group:
    """One config group whose choices are registered classes, written as the metadata of its
    :class:`~dlcomm.config.schema.RunConfig` field.

    ``entry_points``: the plugins' entry-point group; ``base``: ``"module:Class"`` every choice
    subclasses (``kind`` names one in messages, ``what`` names a choice); ``home``: the package
    (or module) whose import registers dlcomm's own choices (:meth:`Registry.all
    <dlcomm.registry.Registry.all>`: a package's modules that decorate a class with
    ``@register``); ``config_optional``: a class may have no ``Config`` (a launcher without knobs
    of its own); ``family_schema``: the group's YAML presets share the schema base as one schema
    whose keys every choice has (model, dataset, optim). A choice's ``Config`` is stored as
    ``<name><schema_suffix>`` for a YAML preset's defaults list, unless it is one of the shared
    schemas of :data:`dlcomm.config.schema.SCHEMAS` (stored under their own names) and
    ``schema_per_choice`` is false (launcher=local's ``local_launcher_schema`` is
    ``ProcessLauncherConfig``).

    ``config_group`` (the override's key and the YAML folder: ``algo``) and ``config_base`` (the
    dataclass every choice's ``Config`` subclasses: ``AlgoConfig``) are the field's name and type,
    filled in by :func:`records`; a record as written leaves them empty."""

    entry_points: str
    base: str
    kind: str
    what: str
    home: str
    config_optional: bool = False
    family_schema: bool = False
    schema_suffix: str = "_schema"
    schema_per_choice: bool = False
    config_group: str = ""
    config_base: type = object


def records(run: type) -> dict[str, Group]:
    """``{key: record}`` of every field of the run's schema ``run`` (a dataclass) whose metadata
    holds a :class:`Group`, in field order, each completed with its field's name and type. Raises
    TypeError for a record's field whose type is not a dataclass or whose default is not MISSING
    (a group's section is chosen, never defaulted in the schema)."""
    hints = typing.get_type_hints(run)
    found: dict[str, Group] = {}
    for item in dataclasses.fields(run):
        record = item.metadata.get(RECORD)
        if record is None:
            continue
        base = hints[item.name]
        if not (isinstance(base, type) and dataclasses.is_dataclass(base)) or item.default != MISSING:
            raise TypeError(
                f"{run.__name__}.{item.name} holds a group's record: type it with the group's schema base "
                "(a dataclass) and leave its default MISSING"
            )
        found[item.name] = dataclasses.replace(record, config_group=item.name, config_base=base)
    return found


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
