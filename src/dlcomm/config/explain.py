"""``dlcomm config --explain <group>``: every knob of a configuration group with its type, its
value in the composed configuration, its default and what it means.

The meaning is written once, beside the field in its schema (a dataclass of
:mod:`dlcomm.config.schema`, an algorithm's or a launcher's ``Config``): the field's trailing
``# comment``, or the comment lines right above it. This module reads them from the source with
:mod:`tokenize`, so a knob's documentation lives where its default does. Nested sections
(``network.intra``) are listed under their parent, indented. Imports nothing heavy (no torch).
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import io
import textwrap
import tokenize
from enum import Enum
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from dlcomm.errors import UserError

if TYPE_CHECKING:
    from dlcomm.config.schema import RunConfig


@lru_cache(maxsize=None)
def field_docs(cls: type) -> dict[str, str]:
    """``field name -> its comment`` for the fields ``cls`` itself declares (not its bases')."""
    try:
        source = textwrap.dedent(inspect.getsource(cls))
    except (OSError, TypeError):
        return {}
    comments: dict[int, str] = {}  # line -> the comment on it
    code_lines: set[int] = set()
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            comments[token.start[0]] = token.string.lstrip("#").strip()
        elif token.type not in (tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER):
            code_lines.add(token.start[0])
    body = ast.parse(source).body[0]
    docs: dict[str, str] = {}
    for node in getattr(body, "body", []):
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
            continue
        trailing = [
            comments[line] for line in range(node.lineno, (node.end_lineno or node.lineno) + 1) if line in comments
        ]
        above: list[str] = []
        line = node.lineno - 1
        while line in comments and line not in code_lines:  # a block of comment lines right above the field
            above.insert(0, comments[line])
            line -= 1
        docs[node.target.id] = " ".join(above + trailing)
    return docs


def doc_of(cls: type, name: str) -> str:
    """The comment of field ``name`` where it is declared: ``cls`` or the nearest base that has it."""
    for klass in cls.__mro__:
        if dataclasses.is_dataclass(klass) and name in field_docs(klass):
            text = field_docs(klass)[name]
            if text:
                return text
    return ""


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
