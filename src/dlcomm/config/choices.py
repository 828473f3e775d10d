"""The config groups whose choices have knobs of their own, and what a choice's YAML file says.

``model``, ``dataset`` and ``optim`` (``family_schema`` in :data:`dlcomm.config.schema.GROUPS`) have a base
schema (:data:`BASES`: the keys all share) and a
subclass per family of choices beside their classes, so a choice has only its own knobs. Which choice has
which knob, the refusal of a key no choice has and the listing of every choice are
:mod:`dlcomm.catalog`'s (it reads the registries, which sit above this package). A file
``configs/<group>/<choice>.yaml`` is a preset: it names its schema first in its defaults list
(``<choice>_schema``) and sets what its choice changes (:func:`choice_files`, :func:`schema_name`).
"""

from __future__ import annotations

import dataclasses
from importlib import resources
from typing import Any, Dict, List, Mapping, Optional, cast

from omegaconf import OmegaConf

from dlcomm.config import schema

PACKAGE = "dlcomm.configs"  # where the YAML files are shipped (package data, not imported)
# one schema per family of choices: the groups whose record says so (RunConfig's fields)
BASES: Dict[str, type] = {key: group.config_base for key, group in schema.GROUPS.items() if group.family_schema}
CHOICE_GROUPS = tuple(BASES)


def choice_files(group: str) -> Dict[str, Dict[str, Any]]:
    """``{choice: the YAML file's content as a dict}`` of dlcomm's ``configs/<group>/``, sorted by
    choice ({} for a group without files: its choices are all stored from its registry)."""
    folder = resources.files(PACKAGE).joinpath(group)
    found: Dict[str, Dict[str, Any]] = {}
    if not folder.is_dir():
        return found
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


def knobs(schema: type) -> List[str]:
    """The keys of a schema dataclass, ``name`` first."""
    return [item.name for item in dataclasses.fields(schema)]
