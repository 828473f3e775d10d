"""``dlcomm config --explain <group>``: every knob of a configuration group with its type, its
value in the composed configuration, its default and what it means.

The meaning is written once, in the field's own metadata (a dataclass of
:mod:`dlcomm.config.schema`, an algorithm's or a launcher's ``Config``): its ``means`` (the
phrase a refusal of a bad value puts before its rule: :func:`~dlcomm.config.schema.domain`) and
its ``doc`` (what else it is: :func:`~dlcomm.config.schema.doc`), read here from the dataclass,
nothing from the source. Nested sections (``network.intra``) are listed under their parent,
indented. Imports nothing heavy (no torch).
"""

from __future__ import annotations

import dataclasses
import inspect
import textwrap
from enum import Enum
from typing import TYPE_CHECKING, Any

from dlcomm.config.schema import meaning
from dlcomm.errors import UserError

if TYPE_CHECKING:
    from dlcomm.config.schema import RunConfig


def doc_of(cls: type, name: str) -> str:
    """What field ``name`` of the dataclass ``cls`` is: its ``means`` and its ``doc``
    (:func:`~dlcomm.config.schema.meaning`), each from the nearest class of ``cls``'s MRO that
    declares the field with one (a subclass that redeclares ``lr`` for its default keeps its base's
    words), joined by ``; ``."""
    means = words = ""
    for klass in cls.__mro__:
        declared = getattr(klass, "__dataclass_fields__", {}).get(name)
        if declared is None or name not in vars(klass).get("__annotations__", {}):
            continue
        own_means, own_words = meaning(declared)
        means, words = means or own_means, words or own_words
    return "; ".join(text for text in (means.rstrip(","), words) if text)


def _default(field: dataclasses.Field) -> Any:
    if field.default is not dataclasses.MISSING:
        return field.default
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return "(required)"


def _shown(value: Any) -> str:
    if isinstance(value, Enum):  # a closed knob (dlcomm.config.schema.Choice): its word
        return str(value.value)
    if dataclasses.is_dataclass(value):
        return "(section)"
    if isinstance(value, str):
        return repr(value)
    return str(value)


def _wrap(text: str, width: int) -> str:
    return "\n".join(textwrap.wrap(text, width)) if len(text) > width else text


def _section(value: Any) -> bool:
    return dataclasses.is_dataclass(value) and not isinstance(value, type)


def rows(section: Any, prefix: str, defaults: object = None) -> list[tuple[str, str, str, str, str]]:
    """``(key, type, value, default, doc)`` for every knob of ``section`` (a schema dataclass;
    nested sections after their parent's line, their keys dotted). ``defaults``: the parent's
    default of this section (a nested section's defaults are what its parent builds it with, not
    its class's)."""
    cls = type(section)
    out = []
    for field in dataclasses.fields(section):
        value = getattr(section, field.name)
        key = f"{prefix}.{field.name}"
        kind = field.type if isinstance(field.type, str) else getattr(field.type, "__name__", str(field.type))
        default = getattr(defaults, field.name) if defaults is not None else _default(field)
        if isinstance(default, Enum):  # a closed knob: its words are its type
            kind = " | ".join(str(member.value) for member in type(default))
        if _section(value):
            out.append((key, kind, "(section)", "", doc_of(cls, field.name)))
            out.extend(rows(value, key, default if _section(default) else None))
            continue
        out.append((key, kind, _shown(value), _shown(default), doc_of(cls, field.name)))
    return out


def explain(cfg: "RunConfig", group: str) -> str:
    """The table of ``group``'s knobs in ``cfg`` (a composed run configuration)."""
    sections = [item.name for item in dataclasses.fields(cfg) if _section(getattr(cfg, item.name))]
    if group not in sections:
        import shlex

        raise UserError(
            f"--explain {shlex.quote(group)} is invalid: not a section of the configuration; "
            f"pass one of {', '.join(sections)}"
        )
    from tabulate import tabulate

    section = getattr(cfg, group)
    cls = type(section)
    written = cls.__doc__ and not cls.__doc__.startswith(f"{cls.__name__}(")  # not dataclass's own
    head = (inspect.getdoc(cls) or "").split("\n\n")[0].replace("\n", " ") if written else ""
    name = getattr(section, "name", None)
    title = f"{group}" + (f"={name}" if name else "") + f" ({cls.__name__})"
    # cells wrapped here: tabulate's own wrapping (maxcolwidths) turns the text "False" into True
    wrapped = [
        (key, kind, _wrap(value, 24), _wrap(default, 16), _wrap(doc, 70))
        for key, kind, value, default, doc in rows(section, group)
    ]
    table = tabulate(
        wrapped, headers=["key", "type", "value", "default", "what it is"], tablefmt="simple", disable_numparse=True
    )
    return "\n".join([title, *([head] if head else []), "", table, *_appendix(group)])


def _appendix(group: str) -> list[str]:
    """What a section's table cannot show: for ``network``, the compute profiles shipped with dlcomm."""
    if group != "network":
        return []
    from dlcomm.profiles import library_lines

    shipped = library_lines()
    return [
        "",
        "network.compute_profile=<device>/<workload> picks a profile shipped with dlcomm "
        "(docs/network.md, 'Profiles measured on real devices'):",
        *(shipped or ["  none shipped yet: measure your own with `dlcomm profile <overrides> --out <file>`"]),
    ]
