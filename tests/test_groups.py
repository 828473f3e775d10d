"""A config group whose choices are classes is one record in ``dlcomm/groups.py``: a throwaway
group, added as a record (and the schema field every group needs, see below), gets a Registry, a
listing, plugin entry points, stored schemas and composition with no other edit; and every record
has its ``RunConfig`` field, every choice field of ``RunConfig`` its record (or YAML files alone)."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import textwrap
import typing
from pathlib import Path

from dlcomm.catalog import files
from dlcomm.config.schema import RunConfig
from dlcomm.groups import GROUPS

from fake_plugins import plugin_env, write_plugin


def test_every_record_has_its_run_config_field_and_every_choice_field_its_record() -> None:
    """RunConfig's fields stay static (mypy types ``cfg.algo`` from them; OmegaConf builds its
    schema from the annotations): a record without its field, or a field typed otherwise than the
    record's ``config_base``, fails here, as does a choice field (MISSING until a defaults list
    picks one) that is neither a record's nor a group of YAML files alone (``network``)."""
    hints = typing.get_type_hints(RunConfig)
    fields = {item.name: item for item in dataclasses.fields(RunConfig)}
    for key, group in GROUPS.items():
        assert key in fields, f"RunConfig has no field {key}: add `{key}: {group.config_base} = MISSING`"
        assert hints[key].__name__ == group.config_base, (key, hints[key], group.config_base)
        assert fields[key].default == "???", f"RunConfig.{key} is a choice: its default is MISSING"
    choices = {name for name, item in fields.items() if item.default == "???"}
    yaml_only = {name for name in choices - set(GROUPS) if files(name)}
    assert choices - set(GROUPS) == yaml_only == {"network"}, sorted(choices - set(GROUPS))


BASE = """
from dataclasses import dataclass
from typing import ClassVar

from omegaconf import MISSING


@dataclass
class GadgetConfig:
    name: str = MISSING


class Gadget:
    '''The throwaway group's base class.'''

    name: ClassVar[str]
    Config: ClassVar[type] = GadgetConfig
"""

SHINY = """
from dataclasses import dataclass, field

from dlcomm.config.schema import domain
from dlcomm.registry import registry_of
from gadgets.base import Gadget, GadgetConfig

register = registry_of("gadget").register


@dataclass
class ShinyConfig(GadgetConfig):
    name: str = "shiny"
    shine: int = field(default=1, metadata=domain(low=0, means="the shine"))


@register
class Shiny(Gadget):
    Config = ShinyConfig
"""

SPARKLY = """
from dataclasses import dataclass

from gadgets.base import Gadget, GadgetConfig


@dataclass
class SparklyConfig(GadgetConfig):
    name: str = "sparkly"
    sparks: int = 2


class Sparkly(Gadget):
    Config = SparklyConfig
"""

# A preset of shiny's (a plugin's config package): it names the schema its record's rule stores.
PRESET = "defaults:\n  - shiny_schema\n  - _self_\n\nshine: 7\n"

# What the process does: the record, then the schema base and RunConfig's field (the one edit a
# group needs beside its record: both are static, for OmegaConf and mypy), then only dlcomm's own calls.
SCRIPT = """
import dataclasses, json

from dlcomm.groups import GROUPS, Group

GROUPS["gadget"] = Group(
    config_group="gadget", entry_points="dlcomm.gadgets", base="gadgets.base:Gadget", kind="a gadget",
    config_base="GadgetConfig", what="gadget", home="gadgets",
)

import dlcomm.config.schema as schema
from gadgets.base import GadgetConfig

schema.GadgetConfig = GadgetConfig


@dataclasses.dataclass
class GadgetRun(schema.RunConfig):
    gadget: GadgetConfig = schema.MISSING


schema.SCHEMAS = ((None, "run_schema", GadgetRun), *schema.SCHEMAS[1:])

from dlcomm.catalog import choices, groups
from dlcomm.compose import compose
from dlcomm.errors import UserError
from dlcomm.registry import registry_of

shown = {}
shown["registry"] = {name: cls.__module__ for name, cls in sorted(registry_of("gadget").all().items())}
shown["listed"] = [choices("gadget"), "gadget" in groups()]
for overrides in (["+gadget=shiny"], ["+gadget=shiny", "gadget.shine=3"], ["+gadget=sparkly"]):
    section = compose(overrides).gadget
    shown[" ".join(overrides)] = [type(section).__name__, dataclasses.asdict(section)]
for overrides in (["+gadget=dull"], ["+gadget=shiny", "gadget.shine=-1"]):
    try:
        compose(overrides)
    except UserError as error:
        shown[overrides[-1]] = str(error)
print(json.dumps(shown))
"""


def test_a_group_added_as_one_record_has_a_registry_plugins_a_listing_and_composes(tmp_path: Path) -> None:
    (tmp_path / "gadgets").mkdir()
    (tmp_path / "gadgets" / "__init__.py").write_text("")
    (tmp_path / "gadgets" / "base.py").write_text(BASE)
    (tmp_path / "gadgets" / "shiny.py").write_text(SHINY)
    write_plugin(
        tmp_path,
        "gadget_plugin",
        {"sparkly.py": SPARKLY},
        {"gadget/shiny.yaml": PRESET},
        "[dlcomm.gadgets]\nsparkly = gadget_plugin.sparkly:Sparkly\n[dlcomm.configs]\ngadget_plugin = gadget_plugin.configs\n",
    )
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(SCRIPT)],
        cwd=tmp_path,
        env=plugin_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    shown = json.loads(result.stdout.strip().splitlines()[-1])
    assert shown["registry"] == {"shiny": "gadgets.shiny", "sparkly": "gadget_plugin.sparkly"}
    assert shown["listed"] == [["shiny", "sparkly"], True]
    assert shown["+gadget=shiny"] == ["ShinyConfig", {"name": "shiny", "shine": 7}]  # the preset's value
    assert shown["+gadget=shiny gadget.shine=3"] == ["ShinyConfig", {"name": "shiny", "shine": 3}]
    assert shown["+gadget=sparkly"] == ["SparklyConfig", {"name": "sparkly", "sparks": 2}]
    assert "gadget/dull" in shown["+gadget=dull"] and "shiny, sparkly" in shown["+gadget=dull"]
    assert shown["gadget.shine=-1"].startswith("gadget.shine=-1 is invalid: the shine must be 0 or more")
