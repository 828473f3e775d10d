"""Which choice of a config group has which knob, read from the shipped YAML files.

A file ``configs/<group>/<choice>.yaml`` names its schema first in its defaults list
(``<family>_schema``); :data:`dlcomm.config.schema.SCHEMAS` maps that name to its dataclass. So
``model=vit_s`` has the knobs of :class:`~dlcomm.config.schema.ViTConfig`, and an override of a
knob the chosen model lacks can name the models that have it (:func:`foreign_knob`).
"""

from __future__ import annotations

import dataclasses
import difflib
from importlib import resources
from typing import Any, Dict, List, Mapping, Optional, cast

from omegaconf import DictConfig, OmegaConf

from dlcomm.config.schema import SCHEMAS, DatasetConfig, ModelConfig, OptimConfig
from dlcomm.errors import UserError

PACKAGE = "dlcomm.configs"  # where the YAML files are shipped (package data, not imported)
BASES = {"model": ModelConfig, "dataset": DatasetConfig, "optim": OptimConfig}  # one schema per family of choices
CHOICE_GROUPS = tuple(BASES)


def group_schemas(group: str) -> Dict[str, type]:
    """``{schema name: dataclass}`` of ``group`` in :data:`SCHEMAS`."""
    return {name: node for where, name, node in SCHEMAS if where == group}


def choice_files(group: str) -> Dict[str, Dict[str, Any]]:
    """``{choice: the YAML file's content as a dict}`` of ``configs/<group>/``, sorted by choice."""
    folder = resources.files(PACKAGE).joinpath(group)
    found: Dict[str, Dict[str, Any]] = {}
    for entry in sorted(folder.iterdir(), key=lambda item: item.name):
        if entry.name.endswith(".yaml"):
            content = OmegaConf.to_container(OmegaConf.create(entry.read_text()), resolve=False)
            found[entry.name[: -len(".yaml")]] = cast(Dict[str, Any], content) or {}  # a choice's YAML is a mapping
    return found


def schema_name(content: Mapping[str, Any]) -> Optional[str]:
    """The first entry of a YAML file's defaults list when it names a schema, else None."""
    defaults = content.get("defaults") or []
    first = defaults[0] if defaults else None
    return first if isinstance(first, str) and first.endswith("_schema") else None


def choice_schemas(group: str, schemas: Optional[Mapping[str, type]] = None) -> Dict[str, type]:
    """``{choice: its schema dataclass}`` for the files of ``configs/<group>/``; ``schemas``:
    ``{schema name: dataclass}`` (default: the group's in :data:`SCHEMAS`)."""
    schemas = group_schemas(group) if schemas is None else schemas
    return {
        choice: schemas[name]
        for choice, content in choice_files(group).items()
        if (name := schema_name(content)) is not None and name in schemas
    }


def knobs(schema: type) -> List[str]:
    """The keys of a schema dataclass, ``name`` first."""
    return [item.name for item in dataclasses.fields(schema)]


def owners(group: str, knob: str) -> List[str]:
    """The choices of ``group`` whose schema has ``knob``."""
    return [choice for choice, schema in choice_schemas(group).items() if knob in knobs(schema)]


def foreign_knob(group: str, knob: str, choice: str) -> Optional[str]:
    """One line when ``<group>.<knob>`` is a knob of other choices of ``group`` but not of
    ``choice``, else None (a typo, or a knob of no choice: the caller's usual message stands)."""
    having = owners(group, knob) if group in CHOICE_GROUPS else []
    if not having or choice in having:
        return None
    return (
        f"{group}.{knob} is not a knob of {group}={choice}; it belongs to {group}={', '.join(having)}. "
        f"Choose one of those ({group}=<choice>) or see {group}={choice}'s knobs with `dlcomm config {group}={choice}`"
    )


def schema_of(group: str, choice: str) -> type:
    """The schema of ``configs/<group>/<choice>.yaml``; the group's base schema for a choice with
    no file (an unknown name, left for the builder to refuse)."""
    return choice_schemas(group).get(choice) or BASES[group]


def check_knobs(cfg: DictConfig, prefix: str = "") -> None:
    """Refuse a key that no schema declares, which Hydra lets in when appended (``+model.embed_dim=8``,
    ``+algo.foo=1``, ``+train.foo=1``, ``+foo=1``): dlcomm would carry it and read nothing. One line:
    for ``model``/``dataset``/``optim`` the choices that have the knob, elsewhere the key nearest it."""
    schema = OmegaConf.get_type(cfg)
    if schema is None or not dataclasses.is_dataclass(schema):
        return
    own = knobs(schema)
    for key in map(str, cfg):  # a structured config's keys are strings
        if key not in own:
            raise UserError(_unknown_knob(cfg, prefix, key, own))
        if not (OmegaConf.is_missing(cfg, key) or OmegaConf.is_interpolation(cfg, key)) and OmegaConf.is_dict(cfg[key]):
            check_knobs(cfg[key], f"{prefix}{key}.")


def _unknown_knob(node: Any, prefix: str, key: str, own: List[str]) -> str:
    group = prefix.rstrip(".")
    if "name" in own and not OmegaConf.is_missing(node, "name"):  # a group's choice: algo=..., model=...
        choice = node.name
        return foreign_knob(group, key, str(choice)) or (
            f"{group}.{key} is not a knob of {group}={choice}: see its knobs with `dlcomm config {group}={choice}`"
        )
    near = difflib.get_close_matches(key, own, n=1)
    where = group or "the configuration"
    hint = f"did you mean {prefix}{near[0]}? " if near else ""
    return f"{prefix}{key} is not a dlcomm setting ({where} has no {key}): {hint}see the settings with `dlcomm config`"
