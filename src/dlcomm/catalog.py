"""Every choice of every config group, listed one way.

A group with a registry (:data:`dlcomm.config.schema.GROUPS`: algorithms, compressors, data sets, optimizers,
models, tasks, launchers) finds its choices as :class:`dlcomm.registry.Registry` says: its
classes, dlcomm's own and the installed plugins'. Each is stored in Hydra's ConfigStore as
``<group>/<name>`` (:func:`stored_choices`: its ``Config`` with ``name`` set), unless a YAML file
``configs/<group>/<name>.yaml`` (dlcomm's, or an installed plugin's config package) exists: such a
file is a preset that sets values its schema does not (vit_s's sizes, a data set's root, task=gan's
settings) and names its schema itself. A group without a registry (``network``, ``experiment``)
is its YAML files: data.

:func:`choices` is the one listing of a group's choices (the union of the two): ``dlcomm --help``,
the refusals that name the options, ``dlcomm config``'s "belongs to" hints and the tests read it.
:func:`choice_schemas` says which dataclass each choice composes to, so an override of a knob
the chosen model lacks can name the models that have it (:func:`foreign_knob`).

This module sits above the groups' packages (it imports their registries, which import the choice
modules: no torch) and below :mod:`dlcomm.compose` and :mod:`dlcomm.cli`.
"""

from __future__ import annotations

import dataclasses
import difflib
from importlib.resources import files as resource_files
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Set, Tuple

from omegaconf import OmegaConf

from dlcomm.config.choices import BASES, CHOICE_GROUPS, PACKAGE, knobs
from dlcomm.config.schema import GROUPS
from dlcomm.errors import UserError
from dlcomm.registry import registry_of

if TYPE_CHECKING:
    from importlib.abc import Traversable

    from omegaconf import DictConfig

    from dlcomm.registry import Registry

__all__ = [
    "CHOICE_GROUPS",
    "choices",
    "groups",
    "stored_choices",
    "stored_choice",
    "named_choices",
    "foreign_knob",
    "check_knobs",
]


def registry(group: str) -> Optional["Registry[Any]"]:
    """The Registry of ``group`` (:func:`dlcomm.registry.registry_of`: made from its record); None
    for a group of YAML files alone (network presets, experiments)."""
    return registry_of(group) if group in GROUPS else None


def classes(group: str) -> Dict[str, type]:
    """``{name: class}`` of ``group``: dlcomm's own and the installed plugins' ({} without a registry)."""
    found = registry(group)
    return found.all() if found is not None else {}


def config_roots() -> List["Traversable"]:
    """The folders of YAML files, in Hydra's search order: dlcomm's ``configs``, then each installed
    plugin's config package (entry points ``dlcomm.configs``)."""
    from dlcomm.plugins import config_search_path

    return [resource_files(PACKAGE)] + [resource_files(path.removeprefix("pkg://")) for path in config_search_path()]


def files(group: str) -> Dict[str, "Traversable"]:
    """``{choice: its YAML file}`` of ``group`` across :func:`config_roots` (the first of a name wins, as in Hydra)."""
    found: Dict[str, Traversable] = {}
    for root in config_roots():
        folder = root.joinpath(group)
        if not folder.is_dir():
            continue
        for entry in sorted(folder.iterdir(), key=lambda item: item.name):
            if entry.name.endswith(".yaml"):
                found.setdefault(entry.name[: -len(".yaml")], entry)
    return found


def groups() -> List[str]:
    """Every config group: those with a registry and every folder of :func:`config_roots`."""
    folders = {
        entry.name
        for root in config_roots()
        for entry in root.iterdir()
        if entry.is_dir() and not entry.name.startswith(("_", "."))
    }
    return sorted(set(GROUPS) | folders)


def choices(group: str) -> List[str]:
    """Every choice of ``group``, sorted: its YAML files' and its registered classes' (the one listing)."""
    return sorted(set(files(group)) | set(classes(group)))


def stored_choices() -> List[Tuple[str, str, Any]]:
    """``(group, name, node)`` of every registered choice without a YAML file of its name, for
    Hydra's ConfigStore: ``node`` is its ``Config`` with ``name`` set (a Config several choices
    share leaves it MISSING). A class without a ``Config`` (a plugin launcher's) is its YAML's."""
    found = []
    for group in GROUPS:
        written = files(group)
        for name, cls in sorted(classes(group).items()):
            found += stored_choice(group, name, cls, written)
    return found


def stored_choice(group: str, name: str, cls: Any, written: Dict[str, Any]) -> List[Tuple[str, str, Any]]:
    """:func:`stored_choices`' entry of the class ``cls`` of ``<group>=<name>`` ([] where a YAML
    file of ``written``, :func:`files` of the group, has its name, or the class has no ``Config``)."""
    config: Any = getattr(cls, "Config", None)
    if name in written or not (isinstance(config, type) and dataclasses.is_dataclass(config)):
        return []
    return [(group, name, _named(config, name))]


def _named(config: Any, name: str) -> Any:
    """An instance of the dataclass ``config`` (its defaults) named ``name``."""
    return config(name=name)


def named_choices(overrides: List[str]) -> Optional[Dict[str, Set[str]]]:
    """``{group: names}`` that a composition of ``overrides`` may load, read from text alone (no
    choice's module imported): the choices the primary config's defaults list and the overrides
    name, and, for each that is a YAML file (:func:`config_roots`, the first of a name as in
    Hydra), what its defaults list names (a preset's ``<name>_schema``, an experiment's
    ``override /algo: crossover``), a schema ``<name>_schema`` or ``<name>_launcher_schema`` also
    as ``<name>``. A superset of what Hydra loads: every default a file names, chosen or
    overridden later, except the primary config's default of a group an override changes
    (``algo=x``: ``allreduce`` is not loaded). A file's own name is named too, so that a node of
    that name (which Hydra would merge into the file as its schema) is stored if one exists. None
    where the text cannot tell (an override Hydra's grammar cannot read, an ``optional`` or
    interpolated defaults entry, a value that is not a word): the caller then stores every choice."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.core.override_parser.types import OverrideType
    from hydra.errors import HydraException

    try:
        parsed = OverridesParser.create().parse_overrides(list(overrides))
    except HydraException:
        return None
    pending: List[Tuple[str, Any]] = [("", "config")]
    replaced = set()  # groups whose primary default an override changes (algo=x: allreduce is never loaded)
    for item in parsed:
        if not item.is_delete() and "." not in item.key_or_group:  # optim.lr=0.1 sets a value, not a choice
            pending.append((item.key_or_group.strip("/"), item.value()))
        if item.type == OverrideType.CHANGE and item.package is None:
            replaced.add(item.key_or_group.strip("/"))
    roots = config_roots()
    found: Dict[str, Set[str]] = {}
    read: Set[Tuple[str, str]] = set()
    while pending:
        group, value = pending.pop()
        names = _words(value)
        if names is None:
            return None
        for name in names:
            found.setdefault(group, set()).update({name, _schema_of(name)})
            if (group, name) in read:
                continue
            read.add((group, name))
            try:
                defaults = _defaults(roots, group, name)
            except Exception:  # noqa: BLE001 - a file this cannot read (YAML's error): Hydra's composition says what is wrong
                return None
            if defaults is None:
                return None
            pending += [(where, value) for where, value in defaults if group or where not in replaced]
    return found


def _words(value: Any) -> Optional[List[str]]:
    """The choice names an override's or a defaults entry's value gives (a list or a sweep's
    choices: each); None for anything else (a glob, a range, a mapping)."""
    from hydra.core.override_parser.types import ChoiceSweep

    if value is None:
        return []
    if isinstance(value, (str, int, float, bool)):
        return [str(value)]
    items = value.list if isinstance(value, ChoiceSweep) else value if isinstance(value, list) else None
    if items is None:
        return None
    listed = [_words(item) for item in items]
    return None if any(words is None for words in listed) else [word for words in listed if words for word in words]


def _schema_of(name: str) -> str:
    """The choice whose schema ``name`` is (``vit_s_schema``: ``vit_s``; ``srun_launcher_schema``:
    ``srun``), by the groups' schema suffixes (:class:`dlcomm.groups.Group`), the longest first."""
    suffixes = sorted({group.schema_suffix for group in GROUPS.values()}, key=len, reverse=True)
    for suffix in suffixes:
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def _defaults(roots: List["Traversable"], group: str, name: str) -> Optional[List[Tuple[str, Any]]]:
    """``(group, value)`` of each entry of the defaults list of ``<group>/<name>.yaml`` (the first
    root's that has it; the primary config for group ""), [] without one; None for an entry whose
    choice the text cannot tell (``optional``, an interpolation, not a word or a mapping)."""
    import yaml

    paths = [(root.joinpath(group) if group else root).joinpath(f"{name}.yaml") for root in roots]
    file = next((path for path in paths if path.is_file()), None)
    content = yaml.safe_load(file.read_text()) if file is not None else None
    entries = (content.get("defaults") if isinstance(content, dict) else None) or []
    found: List[Tuple[str, Any]] = []
    for entry in entries if isinstance(entries, list) else [None]:
        if isinstance(entry, str):  # a config of this group, e.g. a schema: "diloco_schema", "gan_schema@task"
            path, _, value = entry.split("@")[0].rpartition("/")
        elif isinstance(entry, dict) and len(entry) == 1 and isinstance(next(iter(entry)), str):
            key, value = next(iter(entry.items()))
            if key.split()[:1] == ["optional"]:
                return None
            path = key.split()[-1].split("@")[0]  # "override /optim@_global_.optim": "/optim"
        else:
            return None
        if "${" in path or "${" in str(value):
            return None
        if value == "_self_":  # the file's own content: no other file
            continue
        where = path.strip("/") if path.startswith("/") else "/".join(part for part in (group, path) if part)
        found.append((where, value))
    return found


def choice_schemas(group: str) -> Dict[str, type]:
    """``{choice: the dataclass it composes to}`` of ``group``: each registered class's ``Config``."""
    found = {name: getattr(cls, "Config", None) for name, cls in classes(group).items()}
    return {
        name: config for name, config in found.items() if isinstance(config, type) and dataclasses.is_dataclass(config)
    }


def schema_of(group: str, choice: str) -> type:
    """The dataclass of ``<group>=<choice>``; the group's base schema for an unknown name (left for
    the builder to refuse)."""
    return choice_schemas(group).get(choice) or BASES[group]


def owners(group: str, knob: str) -> List[str]:
    """The choices of ``group`` whose schema has ``knob``."""
    return [choice for choice, schema in sorted(choice_schemas(group).items()) if knob in knobs(schema)]


def foreign_knob(group: str, knob: str, choice: str) -> Optional[str]:
    """One line when ``<group>.<knob>`` is a knob of other choices of ``group`` but not of
    ``choice``, else None (a typo, or a knob of no choice: the caller's usual message stands)."""
    having = owners(group, knob) if group in GROUPS else []
    if not having or choice in having:
        return None
    return (
        f"{group}.{knob} is not a knob of {group}={choice}; it belongs to {group}={', '.join(having)}. "
        f"Choose one of those ({group}=<choice>) or see {group}={choice}'s knobs with `dlcomm config {group}={choice}`"
    )


def check_knobs(cfg: "DictConfig", prefix: str = "") -> None:
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
