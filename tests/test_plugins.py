"""Plugins through entry points: a package on the path with a ``*.dist-info/entry_points.txt``
(what ``pip install`` writes) brings an algorithm and its YAML; what goes wrong is one line naming
the package, exit 2."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from fake_plugins import plugin_env, run_dlcomm, write_plugin

ALGORITHM = """
from dataclasses import dataclass, field

from dlcomm.algorithms.base import Algorithm
from dlcomm.config.schema import AlgoConfig, doc


@dataclass
class {cls}Config(AlgoConfig):
    name: str = "{name}"
    strength: float = field(default=0.5, metadata=doc("how much it does"))


class {cls}(Algorithm):
    name = "{name}"
    display_name = "{cls} (a plugin)"
    Config = {cls}Config
"""


def _plugin(root: Path, package: str, entry_points: str, name: str = "fake_algo", cls: str = "FakeAlgo") -> None:
    """A package ``package`` under ``root`` with an algorithm module and configs/algo/<name>.yaml,
    and its installed metadata (``<package>-1.0.dist-info``) declaring ``entry_points``."""
    write_plugin(
        root,
        package,
        {"algo.py": ALGORITHM.format(name=name, cls=cls)},
        {f"algo/{name}.yaml": f"defaults:\n  - {name}_schema\n  - _self_\n"},
        entry_points,
    )


def _dlcomm(root: Path, *args: str) -> subprocess.CompletedProcess:
    return run_dlcomm(root, *args)


GOOD = """
    [dlcomm.algorithms]
    fake_algo = fake_plugin.algo:FakeAlgo

    [dlcomm.configs]
    fake_plugin = fake_plugin.configs
"""


def test_an_installed_plugin_s_algorithm_composes_with_its_yaml_and_display_name(tmp_path) -> None:
    _plugin(tmp_path, "fake_plugin", GOOD)
    shown = _dlcomm(tmp_path, "config", "algo=fake_algo", "algo.strength=0.75")
    assert shown.returncode == 0, shown.stderr
    assert "algo:\n  name: fake_algo\n  strength: 0.75\n" in shown.stdout
    explained = _dlcomm(tmp_path, "config", "--explain", "algo", "algo=fake_algo")
    assert "how much it does" in explained.stdout  # its own field's doc
    probe = subprocess.run(
        [sys.executable, "-c", "from dlcomm.report.plots import display_name; print(display_name('fake_algo'))"],
        env=plugin_env(tmp_path),  # the code under test beside the plugin
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert probe.stdout.strip() == "FakeAlgo (a plugin)", probe.stderr


def test_a_plugin_that_fails_to_import_is_one_line_naming_its_package(tmp_path) -> None:
    _plugin(tmp_path, "fake_plugin", GOOD.replace("fake_plugin.algo:FakeAlgo", "fake_plugin.missing:FakeAlgo"))
    result = _dlcomm(tmp_path, "config")
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.startswith("dlcomm: error: plugin fake_plugin 1.0 failed to load its dlcomm.algorithms entry")
    assert "ModuleNotFoundError" in result.stderr and "pip uninstall fake_plugin" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_a_plugin_may_not_take_a_built_in_name(tmp_path) -> None:
    _plugin(
        tmp_path,
        "fake_plugin",
        GOOD.replace("fake_algo = fake_plugin.algo:FakeAlgo", "dpsgd = fake_plugin.algo:FakeDPSGD"),
        name="dpsgd",
        cls="FakeDPSGD",
    )
    result = _dlcomm(tmp_path, "config")
    assert result.returncode == 2
    assert (
        "plugin fake_plugin 1.0's algorithm 'dpsgd' clashes with dlcomm's own algorithm of that name; rename it"
        in result.stderr
    )


def test_an_entry_point_must_name_an_algorithm_class_of_its_own_name(tmp_path) -> None:
    _plugin(tmp_path, "fake_plugin", GOOD.replace("fake_plugin.algo:FakeAlgo", "fake_plugin.algo:FakeAlgoConfig"))
    result = _dlcomm(tmp_path, "config")
    assert result.returncode == 2 and "is not an algorithm class" in result.stderr
    _plugin(tmp_path / "other", "fake_plugin", GOOD.replace("fake_algo =", "renamed ="))
    result = _dlcomm(tmp_path / "other", "config")
    assert result.returncode == 2 and "whose name is 'fake_algo'" in result.stderr
