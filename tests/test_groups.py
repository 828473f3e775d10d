"""A config group whose choices are classes is one field of ``RunConfig`` whose metadata holds the
group's record (``dlcomm/groups.py``: ``Group``): a throwaway group, added as such a field, gets a
Registry, a listing, plugin entry points, stored schemas and composition with no other edit; the
records are read from the fields (key and schema base from the field's name and type), and every
choice field of ``RunConfig`` is a record's (or a group of YAML files alone)."""

from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from dlcomm.catalog import files
from dlcomm.config.schema import GROUPS, AlgoConfig, RunConfig, chosen_from
from dlcomm.groups import RECORD, Group, records

from fake_plugins import plugin_env, write_plugin


def test_each_record_is_read_from_its_run_config_field_and_every_choice_field_has_one() -> None:
    """A record takes its key and its schema base from its field (``algo``, ``AlgoConfig``), so
    the two cannot disagree; a choice field (MISSING until a defaults list picks one) without a
    record fails here, unless its group is YAML files alone (``network``)."""
    fields = {item.name: item for item in dataclasses.fields(RunConfig)}
    assert GROUPS["algo"].config_group == "algo" and GROUPS["algo"].config_base is AlgoConfig
    for key, group in GROUPS.items():
        assert group.config_group == key and fields[key].type == group.config_base.__name__, (key, group)
    choices = {name for name, item in fields.items() if item.default == "???"}
    yaml_only = {name for name in choices - set(GROUPS) if files(name)}
    assert choices - set(GROUPS) == yaml_only == {"network"}, sorted(choices - set(GROUPS))


def test_a_record_on_a_field_that_is_not_a_chosen_section_is_refused() -> None:
    record = Group(entry_points="dlcomm.things", base="m:Thing", kind="a thing", what="thing", home="m")

    @dataclasses.dataclass
    class Untyped:
        thing: int = chosen_from(record)

    @dataclasses.dataclass
    class Defaulted:
        thing: AlgoConfig = dataclasses.field(default_factory=AlgoConfig, metadata={RECORD: record})

    for run in (Untyped, Defaulted):
        with pytest.raises(TypeError, match=f"{run.__name__}.thing holds a group's record"):
            records(run)
    assert records(RunConfig) == GROUPS


BASE = """
from typing import ClassVar

from dlcomm.config.schema import GadgetConfig


class Gadget:
    '''The throwaway group's base class.'''

    name: ClassVar[str]
    Config: ClassVar[type] = GadgetConfig
"""

SHINY = """
from dataclasses import dataclass, field

from dlcomm.config.schema import domain
from dlcomm.config.schema import GadgetConfig
from dlcomm.registry import registry_of
from gadgets.base import Gadget

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

from dlcomm.config.schema import GadgetConfig
from gadgets.base import Gadget


@dataclass
class SparklyConfig(GadgetConfig):
    name: str = "sparkly"
    sparks: int = 2


class Sparkly(Gadget):
    Config = SparklyConfig
"""

# A preset of shiny's (a plugin's config package): it names the schema its record's rule stores.
PRESET = "defaults:\n  - shiny_schema\n  - _self_\n\nshine: 7\n"

# The group, as docs/extending.md section 13 adds one, written into a copy of dlcomm's own
# config/schema.py: its schema base, and RunConfig's field holding its record. Nothing else is edited.
SCHEMA_BASE = """@dataclass
class GadgetConfig:
    name: str = MISSING


"""
FIELD = """    gadget: GadgetConfig = chosen_from(
        Group(entry_points="dlcomm.gadgets", base="gadgets.base:Gadget", kind="a gadget", what="gadget", home="gadgets")
    )
"""

# What the process does: only dlcomm's calls, on the edited copy.
SCRIPT = """
import dataclasses, json, os

import dlcomm
assert dlcomm.__file__.startswith(os.getcwd()), dlcomm.__file__  # the edited copy, not the installed dlcomm

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


def _dlcomm_with_a_gadget_group(root: Path) -> None:
    """A copy of dlcomm's source under ``root`` whose config/schema.py declares the ``gadget`` group."""
    import dlcomm

    source = Path(dlcomm.__file__).parent
    shutil.copytree(source, root / "dlcomm", ignore=shutil.ignore_patterns("__pycache__"))
    schema = root / "dlcomm" / "config" / "schema.py"
    text = schema.read_text()
    run_class, fixed_sections = "@dataclass\nclass RunConfig:", "    train: TrainConfig = field("
    assert text.count(run_class) == 1 and text.count(fixed_sections) == 1
    schema.write_text(text.replace(run_class, SCHEMA_BASE + run_class).replace(fixed_sections, FIELD + fixed_sections))


def test_a_group_added_as_one_field_has_a_registry_plugins_a_listing_and_composes(tmp_path: Path) -> None:
    _dlcomm_with_a_gadget_group(tmp_path)
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
