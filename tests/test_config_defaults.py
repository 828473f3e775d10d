"""One source for each default: a YAML file under configs/model|optim|dataset|network (a preset)
never repeats a value of its schema (inside nested sections too: a network preset's ``inter`` link),
and sets none at all (``name`` aside) where its schema serves it alone. A choice that would set
nothing has no file: it is stored from its class (:func:`dlcomm.catalog.stored_choices`), and every
knob is documented once, in its field's metadata in the dataclass (``means``, ``doc``), where
``dlcomm config --explain`` and the refusals read it: neither a comment beside the field nor a
preset file's comments say it again.

A schema shared by several choices (``ViTConfig``: vit_s and vit_b; ``AdamConfig``: adam and
adamw; ``IdxDatasetConfig``: mnist and fashion_mnist; ``SlurmLauncherConfig``: slurm and srun;
``NetworkConfig``: every network preset) holds the family's values; a file holds only what its
choice changes (vit_s's sizes, adamw's weight decay, a data set's root, a preset's links). So the
dataclass that code builds (``cls.Config(**knobs)``, ``ResNetConfig(name=...)``) and ``dlcomm
train`` agree, and the dataclass's fields document every knob.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import io
import sys
import textwrap
import tokenize
from collections import Counter

import pytest
from omegaconf import MISSING, OmegaConf

from dlcomm.algorithms.registry import ALGORITHMS
from dlcomm.catalog import choice_schemas
from dlcomm.compose import all_schemas, compose
from dlcomm.config.choices import CHOICE_GROUPS, choice_files, schema_name
from dlcomm.config.schema import GROUPS as RECORDS
from dlcomm.config.schema import meaning
from dlcomm.config.typed import plain

GROUPS = ("algo", *CHOICE_GROUPS, "launcher", "network")
DOCUMENTED_IN_FILE = ("algo", *CHOICE_GROUPS)  # groups whose files also name every knob in a comment


def _schemas(group: str) -> dict:
    """``{schema name: dataclass}`` of ``group``, as :func:`dlcomm.compose.register_schemas` stores them."""
    return {name: node for where, name, node in all_schemas() if where == group}


def _file_schemas(group: str) -> dict:
    """``{choice: the schema its file names first}`` of dlcomm's ``configs/<group>/`` files."""
    schemas = _schemas(group)
    return {
        choice: schemas[name]
        for choice, content in choice_files(group).items()
        if (name := schema_name(content)) is not None and name in schemas
    }


def _cases():
    for group in GROUPS:
        files = choice_files(group)
        schemas = _file_schemas(group)
        # the choices of each schema: its classes' (a registered group), else its files' (network presets, data)
        shared = Counter(choice_schemas(group).values() if group in RECORDS else schemas.values())
        for choice, content in files.items():
            schema = schemas.get(choice)
            yield pytest.param(group, choice, content, schema, shared[schema] > 1, id=f"{group}={choice}")


def _defaults(schema: type) -> dict:
    return OmegaConf.to_container(OmegaConf.structured(schema), resolve=False)


def _compare(values: dict, defaults: dict, prefix: str = "") -> tuple[dict, list]:
    """``({dotted key: value} the file repeats, [dotted keys the schema lacks])``, section by section."""
    repeated, unknown = {}, []
    for key, value in values.items():
        where = f"{prefix}{key}"
        if key not in defaults:
            unknown.append(where)
        elif isinstance(value, dict) and value and isinstance(defaults[key], dict) and defaults[key]:
            inner_repeated, inner_unknown = _compare(value, defaults[key], f"{where}.")
            repeated.update(inner_repeated)
            unknown += inner_unknown
        elif defaults[key] == value:
            repeated[where] = value
    return repeated, sorted(unknown)


@pytest.mark.parametrize("group,choice,content,schema,shared", list(_cases()))
def test_a_choice_file_never_repeats_its_schema(group, choice, content, schema, shared) -> None:
    assert schema is not None, f"configs/{group}/{choice}.yaml names no registered schema first in its defaults"
    defaults = _defaults(schema)
    values = {key: value for key, value in content.items() if key != "defaults"}
    repeated, unknown = _compare(values, defaults)
    assert not repeated, f"configs/{group}/{choice}.yaml repeats {schema.__name__}'s defaults {repeated}: delete them"
    assert not unknown, f"configs/{group}/{choice}.yaml sets {unknown}, not knobs of {schema.__name__}"
    own = {key for key in values if not (key == "name" and defaults.get("name") == MISSING)}
    if not shared:
        assert not own, (
            f"configs/{group}/{choice}.yaml sets {sorted(own)}, but {schema.__name__} serves "
            f"{group}={choice} alone: put the values in the dataclass, the one source"
        )


@pytest.mark.parametrize("name", sorted(ALGORITHMS.all()))
def test_the_composed_algorithm_is_its_dataclass(name) -> None:
    """What `dlcomm train algo=<name>` runs with is what `cls.Config()` builds."""
    composed = plain(compose([f"algo={name}"]).algo)
    assert composed == dataclasses.asdict(ALGORITHMS.all()[name].Config())


def test_a_choice_file_does_not_say_again_what_its_knobs_mean() -> None:
    """A knob's meaning is written once, in its field (``dlcomm config --explain`` reads it there): a
    preset file's comments say why it picks its values, never ``# <knob>: what it is`` again."""
    from importlib import resources

    restated = []
    for group in (*DOCUMENTED_IN_FILE, "network"):
        for choice, schema in _file_schemas(group).items():
            knobs = {item.name for item in dataclasses.fields(schema)}
            text = resources.files("dlcomm.configs").joinpath(group, f"{choice}.yaml").read_text()
            for line in text.splitlines():
                head = line.lstrip("#").strip().split(":", 1)[0] if line.startswith("#") and ":" in line else ""
                named = [word.strip() for word in head.split(",")]
                if head and all(word in knobs for word in named):
                    restated.append(f"configs/{group}/{choice}.yaml: {line.strip()}")
    assert not restated, restated


def _field_comments(cls: type) -> dict:
    """``{field: its comment}`` for the fields ``cls`` itself declares: the ``# comment`` on the
    field's lines, else the comment lines right above it."""
    source = textwrap.dedent(inspect.getsource(cls))
    comments = {token.start[0]: token.string for token in _tokens(source) if token.type == tokenize.COMMENT}
    (body,) = ast.parse(source).body
    found = {}
    for node in body.body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            text = [comments[line] for line in range(node.lineno, node.end_lineno + 1) if line in comments]
            line = node.lineno - 1
            while not text and line in comments and source.splitlines()[line - 1].lstrip().startswith("#"):
                text, line = [comments[line]], line - 1
            found[node.target.id] = " ".join(text)
    return found


def _tokens(source: str) -> list:
    return list(tokenize.generate_tokens(io.StringIO(source).readline))


def _undocumented(schema: type, prefix: str = "") -> list:
    """The knobs of ``schema`` without words where ``dlcomm config --explain`` looks: the field's
    metadata (``means``, ``doc``) in the schema or, failing that, in the nearest base that declares it."""
    missing = []
    for item in dataclasses.fields(schema):
        if item.name == "name":
            continue
        declared = [klass for klass in schema.__mro__ if item.name in vars(klass).get("__annotations__", {})]
        if not any(any(meaning(klass.__dataclass_fields__[item.name])) for klass in declared):
            missing.append(f"{prefix}{item.name} ({declared[0].__name__})")
        owner = declared[0]
        kind = (
            item.type if isinstance(item.type, type) else getattr(sys.modules[owner.__module__], str(item.type), None)
        )
        if dataclasses.is_dataclass(kind):
            missing += _undocumented(kind, f"{prefix}{item.name}.")
    return missing


@pytest.mark.parametrize("group", [*sorted(RECORDS), "network"])
def test_every_knob_is_documented_in_its_dataclass(group) -> None:
    """A choice's file sets (almost) nothing, or there is none; `dlcomm config --explain` prints
    each knob's words from its field's metadata, so every knob (nested link sections too) has
    some, none is described again in a comment beside its field (which nothing reads), and every
    choice's dataclass says what the choice is (its docstring, the table's head)."""
    schemas = {*_schemas(group).values(), *choice_schemas(group).values()}
    missing = sorted({knob for schema in schemas for knob in _undocumented(schema)})
    assert not missing, f"{group} knobs without words (means= or doc= in their field's metadata): {missing}"
    commented = sorted(
        f"{klass.__name__}.{knob}: # {text}"
        for schema in schemas
        for klass in schema.__mro__
        if dataclasses.is_dataclass(klass) and klass.__module__.startswith("dlcomm.")
        for knob, text in _field_comments(klass).items()
        if text
    )
    assert not commented, f"{group} knobs described in a comment, not in their field's doc=: {commented}"
    own = [schema for schema in schemas if schema.__module__.startswith("dlcomm.")]  # a plugin's are its own business
    generated = sorted(schema.__name__ for schema in own if (schema.__doc__ or "").startswith(f"{schema.__name__}("))
    assert not generated, f"{group} dataclasses without a docstring of their own: {generated}"
