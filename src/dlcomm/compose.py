"""Compose ``configs/`` (shipped inside the package) with command-line overrides.

This is where the pieces meet: the schemas of :mod:`dlcomm.config.schema`, each registered
class's ``Config`` and every registered choice without a YAML file of its own
(:func:`dlcomm.catalog.stored_choices`: ``<group>/<name>``) go into Hydra's ConfigStore, Hydra
composes, and the algorithm checks its config. :mod:`dlcomm.config` itself holds types and
checks only and imports nothing above it.
"""

from __future__ import annotations

import difflib
import re
from typing import TYPE_CHECKING, Any, Optional

from omegaconf import DictConfig, OmegaConf

from dlcomm.catalog import check_knobs, foreign_knob
from dlcomm.config.schema import GROUPS, SCHEMAS
from dlcomm.errors import UserError

if TYPE_CHECKING:
    from dlcomm.config.schema import RunConfig


def all_schemas() -> list[tuple[Optional[str], str, type]]:
    """Every schema as ``(group, name, dataclass)``, under the name the YAML defaults lists use:
    :data:`SCHEMAS` (the run's, the task/model/network/launcher bases, the process launchers'
    family), then each registered class's (:func:`schemas_of`), group by group in the order of
    :data:`~dlcomm.config.schema.GROUPS` (the order their classes load: a plugin's refusal names the first)."""
    from dlcomm.catalog import classes

    found = list(SCHEMAS)
    for group in GROUPS:
        for name, cls in sorted(classes(group).items()):
            found += schemas_of(group, name, cls)
    return found


def schemas_of(group: str, name: str, cls: Any) -> list[tuple[Optional[str], str, type]]:
    """The schema the class ``cls`` of ``<group>=<name>`` brings, by the one rule its group's record
    parameterises (:class:`dlcomm.groups.Group`): its ``Config`` as ``<name><schema_suffix>``
    (``crossover_schema``, ``vit_s_schema``, ``threads_launcher_schema``), for a preset YAML's
    defaults list; none for a class without a ``Config``, nor for one whose ``Config`` is among
    :data:`SCHEMAS` (stored under its own name: ``TaskConfig``, ``ModelConfig``) unless the record
    says ``schema_per_choice`` (``local_launcher_schema``). A name :data:`SCHEMAS` gives another
    class of the group is refused in one line."""
    record = GROUPS[group]
    config: Any = getattr(cls, "Config", None)
    if not isinstance(cls, type) or config is None:
        return []
    if not record.schema_per_choice and any(node is config for _, _, node in SCHEMAS):
        return []
    schema = f"{name}{record.schema_suffix}"
    taken = {called: node for where, called, node in SCHEMAS if where == group}
    if taken.get(schema, config) is not config:
        raise UserError(
            f"{record.what} {name!r} ({cls.__module__}.{cls.__name__}) would register its Config as {schema}, "
            f"which is {taken[schema].__name__}'s; rename the {record.what}"
        )
    return [(group, schema, config)]


_STORED: dict[tuple[Optional[str], str], type] = {}  # what register_schemas last put in the ConfigStore (its class)
_EVERY = False  # whether register_schemas() has stored every schema and choice


def register_schemas(overrides: Optional[list[str]] = None) -> bool:
    """Put the schemas and choices a composition of ``overrides`` may load into the ConfigStore,
    under the names the YAML defaults lists use, and say whether that is every one; ``overrides``
    None: every one. Every one is :func:`all_schemas` and every registered choice without a YAML
    file under its own name (``algo/allreduce``: its ``Config``, its name set;
    :func:`dlcomm.catalog.stored_choices`). For ``overrides``, those of the choices the text names
    (:func:`dlcomm.catalog.named_choices`), each found importing its own module alone where it is
    named after it (:meth:`dlcomm.registry.Registry.own`), and every choice of a group an
    installed plugin adds to (loaded, so that a plugin that fails to load or takes a taken name
    is refused in every composition, as before); every one where the text cannot tell.

    Storing builds a structured config, and finding every choice imports every choice's module:
    together over half of a composition's time when done for all of them. A node already stored
    (the same class under the same name) is not stored again."""
    global _EVERY
    from hydra.core.config_store import ConfigStore

    from dlcomm.catalog import classes, files, named_choices, registry, stored_choice, stored_choices
    from dlcomm.plugins import declares

    named = named_choices(overrides) if overrides is not None else None
    if named is None:
        nodes = [*all_schemas(), *stored_choices()]
    else:
        nodes = [(group, name, node) for group, name, node in SCHEMAS if name in named.get(group or "", ())]
        for group in GROUPS:
            written = files(group)
            own = registry(group)
            choices = sorted(name for name in named.get(group, ()) if not name.endswith("_schema"))
            found = classes(group) if declares(group) else {name: own.own(name) for name in choices if own is not None}
            if any(found.get(name) is None and name not in written for name in choices):
                return register_schemas()  # a name no choice has: Hydra will list every one
            for name, cls in sorted(found.items()):
                if cls is not None:
                    nodes += [*schemas_of(group, name, cls), *stored_choice(group, name, cls, written)]
    store = ConfigStore.instance()
    for where, called, node in nodes:
        kind = node if isinstance(node, type) else type(node)
        if _STORED.get((where, called)) is not kind:
            store.store(group=where, name=called, node=node)
            _STORED[(where, called)] = kind
    _EVERY = _EVERY or named is None
    return _EVERY


def check_overrides(overrides: list[str]) -> None:
    """Refuse what the command line says that dlcomm would silently drop: Hydra's own ``hydra.*``
    settings (dlcomm composes with Hydra's compose API, which has no run directory, logging or
    launcher of its own to set: runs go to results/ and MLflow, the launcher is ``launcher=``), and
    a key given twice when either is a sweep's list (``seed=1,2 seed=3,4`` would drop the first
    list, ``seed=1 seed=2,3`` the first value). A plain key given twice means what it means to
    Hydra, the last one counts (a base command with a setting appended; README, "Every setting"). An
    override Hydra's grammar cannot read is left to :func:`compose` to word."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    try:
        parsed = OverridesParser.create().parse_overrides(list(overrides))
    except HydraException:
        return
    given: dict[str, Any] = {}
    for override in parsed:
        key = override.get_key_element().lstrip("+~")
        if key == "hydra" or key.startswith("hydra.") or key.startswith("hydra/"):
            raise UserError(
                f"{override.input_line} is a setting of Hydra's own that dlcomm does not use (it composes the "
                "configuration itself: runs are recorded in MLflow and results/, processes start with launcher=); "
                "leave it out (see the settings with `dlcomm config`)"
            )
        before = given.get(key)
        if before is not None and (before.is_sweep_override() or override.is_sweep_override()):
            raise UserError(
                f"{key} is given twice ({before.input_line} and {override.input_line}), one of them a sweep's list: "
                "give it once (one key=a,b,c lists all its values)"
            )
        given[key] = override


def compose(overrides: list[str]) -> "RunConfig":
    """The run configuration ``overrides`` describe, checked, as the typed objects every later check,
    the driver and every rank read (:class:`~dlcomm.config.schema.RunConfig`: ``cfg.algo`` is the
    chosen algorithm's own ``Config``). Hydra composes; what only the composition can show (a
    deleted group, an undeclared key) is refused on its ``DictConfig``; interpolations are resolved
    and the result converted once (:func:`dlcomm.config.typed.to_run_config`); then every check that
    needs no torch runs on the typed form: each field's declared domain, the rules across keys
    (:func:`dlcomm.config.validate.validate_run`) and the chosen algorithm's, optimizer's, task's and
    compressor's own. Every refusal is one :class:`UserError` line."""
    from hydra.errors import HydraException, OverrideParseException
    from omegaconf.errors import OmegaConfBaseException

    from dlcomm.config.schema import RunConfig
    from dlcomm.config.typed import to_run_config
    from dlcomm.config.validate import check_groups, check_values, validate_run

    try:
        node = _reusing(overrides)
        check_groups(node, RunConfig)
        check_knobs(node)
        OmegaConf.resolve(node)
        cfg = to_run_config(node)
    except OverrideParseException as error:
        raise UserError(unparsable(error)) from None
    except (HydraException, OmegaConfBaseException) as error:
        raise UserError(
            _closed_choice(error)
            or _foreign_knob(error, overrides)
            or _unknown_key(error, overrides)
            or _one_line(error)
        ) from None
    except ValueError as error:  # Hydra's own for a group set to null (model=null)
        raise UserError(_null_group(overrides) or str(error)) from None
    check_values(cfg)  # every declared domain first: the checks below may divide by a knob
    validate_run(cfg)
    check_algorithm(cfg)
    return cfg


def unparsable(error: Exception) -> str:
    """One line for an override Hydra's grammar cannot read: the override, Hydra's reason, and
    the fix (quote the value, e.g. ``'tracking.uri="http://[::1]"'``); ``frob``: say key=value."""
    override = str(getattr(error, "override", "") or "")
    said = str(error).split("See https://")[0].strip().splitlines()
    reason = " ".join(line.strip() for line in said if line.strip() and line.strip() != "^")
    key, equals, value = override.partition("=")
    if not equals or not key.strip():
        return f"Error parsing override '{override}': overrides are key=value, e.g. nodes=8 (see the keys with `dlcomm config`)"
    quote = '"' if '"' not in value else "'"
    return (
        f"Error parsing override '{override}': Hydra's override grammar cannot read the value ({reason}); "
        f"quote it: '{key}={quote}{value}{quote}'"
    )


def _null_group(overrides: list[str]) -> Optional[str]:
    """``model=null is invalid: ...`` when an override sets a config group to null."""
    from dlcomm.catalog import choices as listed
    from dlcomm.catalog import groups

    known = set(groups())
    for item in overrides:
        key, _, value = item.partition("=")
        if value.strip() == "null" and key.strip() in known:
            group = key.strip()
            choices = listed(group)
            return f"{group}=null is invalid: a run needs a {group}; pass {group}=<choice>, one of {', '.join(choices)}"
    return None


def _reusing(overrides: list[str]) -> DictConfig:
    """:func:`_hydra_compose`'s result; inside :func:`dlcomm.checked.remembering` (a sweep being
    checked), Hydra composes once per distinct set of the overrides that choose files (``model=vgg16``,
    ``experiment=...``), and each element's plain values (``seed=7``, ``optim.lr=0.1``) are set on a
    copy of it by the function Hydra's own composition ends with, in their order: what Hydra would
    have returned, for about a tenth of its time. Anything the short way cannot place composes in
    full, so every refusal keeps Hydra's own words."""
    import copy

    from dlcomm.checked import memo

    kept = memo()
    if kept is None:
        return _hydra_compose(overrides)
    try:
        from hydra._internal.config_loader_impl import ConfigLoaderImpl  # the composition's own last step
        from hydra.core.override_parser.overrides_parser import OverridesParser
        from hydra.core.override_parser.types import OverrideType

        from dlcomm.catalog import groups

        named = kept.get("groups")
        if named is None:
            named = kept["groups"] = set(groups())
        parsed = OverridesParser.create().parse_overrides(list(overrides))
        plain = [
            item.type == OverrideType.CHANGE
            and item.package is None
            and not item.is_hydra_override()
            and not item.is_sweep_override()
            and "/" not in item.key_or_group
            and item.key_or_group not in named
            and not isinstance(item.value(), dict)
            for item in parsed
        ]
        files = tuple(line for line, value in zip(overrides, plain) if not value)  # one parsed item per line
        base = kept.get(("composed", files))
        if base is None:
            base = kept[("composed", files)] = _hydra_compose(list(files))
        values = [item for item, value in zip(parsed, plain) if value]
        if not all(item.key_or_group.split(".")[0] in base for item in values):
            return _hydra_compose(overrides)  # a key the composition lacks: Hydra's words for it
        node = copy.deepcopy(base)
        OmegaConf.set_struct(node, True)
        ConfigLoaderImpl._apply_overrides_to_config(values, node)
        return node
    except Exception:  # noqa: BLE001 - whatever the short way cannot do, Hydra's full composition says in its words
        return _hydra_compose(overrides)


def _hydra_compose(overrides: list[str]) -> DictConfig:
    """Hydra's composition of ``overrides`` with the choices they name stored
    (:func:`register_schemas`); where that fails (a choice the text did not show, or bad input),
    again with every choice stored, so that what succeeds or is refused is what it would be with
    every choice stored from the start: a missing node fails a composition, never changes one."""
    if register_schemas(overrides):
        return _hydra_run(overrides)
    try:
        return _hydra_run(overrides)
    except Exception:  # noqa: BLE001 - whatever it was, the full store's composition says it in Hydra's words
        pass
    register_schemas()
    return _hydra_run(overrides)


def _hydra_run(overrides: list[str]) -> DictConfig:
    from hydra import compose as hydra_compose
    from hydra import initialize_config_module
    from hydra.core.global_hydra import GlobalHydra

    from dlcomm.plugins import config_search_path

    plugins = config_search_path()  # installed plugins' YAML (entry points dlcomm.configs), after dlcomm's own
    extra = [f"hydra.searchpath=[{','.join(plugins)}]"] if plugins else []
    GlobalHydra.instance().clear()
    with initialize_config_module(config_module="dlcomm.configs", version_base="1.3"):
        return hydra_compose(config_name="config", overrides=list(overrides) + extra)


def check_algorithm(cfg: "RunConfig") -> None:
    """The chosen algorithm's, optimizer's, task's and compressor's own checks (one line each)."""
    from dlcomm.algorithms.registry import ALGORITHMS
    from dlcomm.compress.registry import COMPRESSORS
    from dlcomm.tasks import check_task
    from dlcomm.train.optim import check_optimizer  # torch-free: the optimizers import torch in build()

    algorithm = ALGORITHMS.get(cfg.algo.name)
    algorithm.check_config(cfg.algo)
    algorithm.check_world(cfg.algo, cfg.nodes, cfg.workers_per_node)
    check_optimizer(cfg.optim)  # its own knobs (angulargrad's method)
    algorithm.check_optimizer(cfg.algo, cfg.optim)
    check_task(cfg)  # its knobs, and the model it trains
    compressor = COMPRESSORS.get(cfg.compress.name)
    compressor.check(cfg.compress)
    if not compressor.identity and not set(compressor.kinds) & set(algorithm.compression):
        able = sorted(name for name, cls in ALGORITHMS.all().items() if set(compressor.kinds) & set(cls.compression))
        raise UserError(
            f"compress={cfg.compress.name} is not supported with algo={cfg.algo.name}: it is carried by "
            f"{', '.join(f'algo={name}' for name in able) or 'no algorithm'}; pass compress=none or one of those"
        )
    algorithm.check_compressor(cfg.algo, compressor)


def _closed_choice(error: Exception) -> Optional[str]:
    """``train.device=tpu is invalid: use cpu, cuda or auto`` for a value outside the words of a
    :class:`~dlcomm.config.schema.Choice` knob (OmegaConf's "Invalid value 'tpu', expected one of
    [cpu, cuda, auto]")."""
    key = str(getattr(error.__cause__, "full_key", None) or getattr(error, "full_key", None) or "")
    found = re.search(r"Invalid value '(.*?)', expected one of \[(.*?)\]", f"{error} {error.__cause__}")
    if not key or not found:
        return None
    value, words = found.group(1), [word.strip() for word in found.group(2).split(",")]
    listed = f"{', '.join(words[:-1])} or {words[-1]}" if len(words) > 1 else words[0]
    # a YAML file's bare off/on/yes/no (YAML 1.1) and an override's true/false are booleans
    quote = f" (a bare word was read as the boolean {value.lower()}: quote it)" if value in ("True", "False") else ""
    return f"{key}={value} is invalid: use {listed}{quote}"


def _foreign_knob(error: Exception, overrides: list[str]) -> Optional[str]:
    """``model.embed_dim is not a knob of model=small_cnn; it belongs to model=vit_b, vit_s``
    when ``error`` is about a key of a group of classes (``model``, ``launcher``, ...) that another
    choice has (``launcher.compute`` under ``launcher=local``: a knob of ``launcher=threads``)."""
    key = str(getattr(error.__cause__, "full_key", None) or getattr(error, "full_key", None) or "")
    group, _, knob = key.partition(".")
    if group not in GROUPS or not knob or "." in knob:
        return None
    # The choice in force: compose again without the overrides of that key.
    rest = [item for item in overrides if item.lstrip("+~").split("=")[0] != key]
    try:
        choice = str(_hydra_compose(rest)[group].name)
    except Exception:  # noqa: BLE001 - the key comes from a file, not an override: the usual message
        return None
    return foreign_knob(group, knob, choice)


def _unknown_key(error: Exception, overrides: list[str]) -> Optional[str]:
    """``no key train.max_stepz: did you mean train.max_steps?`` for an override of a key the
    config lacks, with the closest keys of the same section (Hydra's own advice, to append the key
    with ``+``, would only fail later: every section is typed)."""
    key = str(getattr(error.__cause__, "full_key", None) or getattr(error, "full_key", None) or "")
    if not key or not ("Could not override" in str(error) or "not in struct" in str(error)):
        return None
    rest = [item for item in overrides if item.lstrip("+~").split("=")[0] != key]
    try:
        config = _hydra_compose(rest)
    except Exception:  # noqa: BLE001 - the key comes from a file, not an override: the usual message
        return None
    parent, _, _ = key.rpartition(".")
    section = OmegaConf.select(config, parent) if parent else config
    if not isinstance(section, DictConfig):
        return None
    known = [f"{parent}.{name!s}" if parent else str(name) for name in section.keys()]
    close = difflib.get_close_matches(key, known, n=3, cutoff=0.6)
    hint = (
        f"did you mean {' or '.join(close)}?" if close else f"the keys of {parent or 'the config'}: {', '.join(known)}"
    )
    return f"no key {key} in the config: {hint} (every key with `dlcomm config`)"


def _one_line(error: Exception) -> str:
    """Hydra's and OmegaConf's messages without the search path and the object dump."""
    text = str(error).split("Config search path")[0]
    text = re.split(r"\n\s*full_key:|\n\s*object_type=", text)[0]
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    if any(line.startswith("Available options in") for line in lines):
        head = [line for line in lines if not line.startswith("Available options in")][0]
        at = next(i for i, line in enumerate(lines) if line.startswith("Available options in"))
        head = head.replace("In 'config': ", "")
        choices = [line for line in lines[at + 1 :] if not line.endswith("_schema")]
        return f"{head}. {lines[at].rstrip(':')}: {', '.join(choices)}"
    message = " ".join(lines)
    cause = error.__cause__
    if cause is not None and str(cause).strip():
        message += ": " + str(cause).strip().splitlines()[0]
    if "Error parsing override" in message:
        message = (
            message.split(" See https://")[0]
            + ": overrides are key=value, e.g. nodes=8 (see the keys with `dlcomm config`)"
        )
    if "not in struct" in message or "Could not override" in message:
        message += ". See the keys with `dlcomm config`; a typo in the key is the usual cause"
    return message
