"""What ``dlcomm config`` prints, pinned: one snapshot file per choice of every config group.

``tests/snapshots/config/<group>/<choice>.txt`` holds the output of ``dlcomm config <group>=<choice>``,
``tests/snapshots/config/default.txt`` that of ``dlcomm config`` alone; the ``experiment`` group holds
every shipped experiment. Issue 52 turns the composed configuration into typed dataclasses and changes
how choices are found: what a user sees must not change with it, and this test says where it did.

The choices are the ones ``dlcomm --help`` lists (``cli._groups_epilog``, :func:`dlcomm.catalog.choices`:
the registered classes, dlcomm's and installed plugins', and the YAML files of ``dlcomm.configs`` and of
installed plugins' config packages), plus every snapshot already on disk, so a choice that stops being
listed fails too. Of the plugins' choices only examples/plugin's (``dlcomm_choco``, installed by
``.ci/run``) count; its snapshots are skipped where it is not installed.

Each output is made in this process through ``cli.main(["config", ...])`` with stdout and stderr
captured (no process per choice: the whole file takes ~15 s here), one test per group. A choice that
``dlcomm config`` refuses alone has the refusal pinned (stderr and exit code appended to the file) and,
from :data:`COMPANIONS`, also its composition with the choice it needs.

Regenerating after a deliberate change of the output: ``DLCOMM_UPDATE_SNAPSHOTS=1 .venv/bin/pytest
tests/test_config_snapshots.py`` rewrites the files that differ, writes missing ones and removes those
of choices no longer listed; review ``git diff tests/snapshots/config`` and commit it with the change.
"""

from __future__ import annotations

import contextlib
import difflib
import io
import os
import re
from importlib.resources import files
from pathlib import Path

import pytest

SNAPSHOTS = Path(__file__).parent / "snapshots" / "config"
UPDATE = os.environ.get("DLCOMM_UPDATE_SNAPSHOTS", "") not in ("", "0")
REGENERATE = (
    "if the change is deliberate, regenerate with `DLCOMM_UPDATE_SNAPSHOTS=1 .venv/bin/pytest "
    "tests/test_config_snapshots.py` and review `git diff tests/snapshots/config`"
)
DEFAULT = "default"  # the parameter of `dlcomm config` alone (tests/snapshots/config/default.txt)
# Plugins whose choices are snapshotted: examples/plugin, which .ci/run installs (pip install -e examples/plugin).
# Another installed plugin's choices are left out: CI would not have them.
CI_PLUGIN = "dlcomm_choco"
EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "plugin"
# Choices `dlcomm config` refuses alone, with what they need: their refusal is pinned, and their knobs
# through a second snapshot with the companion (<choice>+<override>.txt).
COMPANIONS = {
    ("compress", "layerdrop"): ("algo=ps",),  # layer dropping is carried by the parameter server
    ("model", "acgan"): ("task=gan",),  # the GAN's generator and discriminator
}
DIFF_LINES = 30  # of each choice's diff in a failure
SHOWN = 4  # choices of a group whose diffs a failure shows; the rest are named (one changed default touches many)


def _listed() -> dict[str, set[str]]:
    """``{group: choices}`` as ``dlcomm --help`` lists them (its epilog's ``  <group>  a, b, c`` lines)."""
    from dlcomm.cli import _groups_epilog

    lines = _groups_epilog().splitlines()
    assert lines[0] == "config groups (group=choice):", f"the help's listing of choices changed form: {lines[:3]}"
    found: dict[str, set[str]] = {}
    for line in lines[1 : lines.index("")]:
        group, choices = line.split(maxsplit=1)
        found[group] = {choice.strip() for choice in choices.split(",")}
    assert found, "dlcomm --help lists no config groups"
    return found


def _plugin_choices() -> dict[str, dict[str, str]]:
    """``{group: {choice: the plugin's top-level package}}`` of installed plugins' choices: their
    registered classes and their config packages' YAML files."""
    from dlcomm.catalog import classes
    from dlcomm.config.schema import GROUPS as RECORDS
    from dlcomm.plugins import config_search_path

    found: dict[str, dict[str, str]] = {}
    for group in RECORDS:
        for name, cls in classes(group).items():
            if not cls.__module__.startswith("dlcomm."):
                found.setdefault(group, {})[name] = cls.__module__.split(".")[0]
    for path in config_search_path():
        package = path.removeprefix("pkg://")
        for group in (entry for entry in files(package).iterdir() if entry.is_dir()):
            for entry in group.iterdir():
                if entry.name.endswith(".yaml"):
                    found.setdefault(group.name, {})[entry.name[: -len(".yaml")]] = package.split(".")[0]
    return found


def _example_plugin_choices() -> set[tuple[str, str]]:
    """``{(group, choice)}`` of examples/plugin, read from the checkout (installed or not): its entry
    points' classes and its YAML files."""
    from dlcomm.config.schema import GROUPS

    groups = {group.entry_points: name for name, group in GROUPS.items()}
    found, section = set(), None  # pyproject.toml's [project.entry-points."<group>"] tables (tomllib: Python 3.11)
    for line in (EXAMPLE / "pyproject.toml").read_text().splitlines():
        header = re.fullmatch(r'\[project\.entry-points\."([\w.]+)"\]\s*', line)
        if header or line.startswith("["):
            section = groups.get(header.group(1)) if header else None
        elif section and (key := re.match(r"(\w+)\s*=", line)):
            found.add((section, key.group(1)))
    root = EXAMPLE / "src" / "dlcomm_choco" / "configs"
    return found | {(path.parent.name, path.stem) for path in root.glob("*/*.yaml")}


LISTED = _listed()
PLUGINS = _plugin_choices()
EXAMPLE_PLUGIN = _example_plugin_choices()  # skipped, not failed, where examples/plugin is not installed
EXAMPLE_PLUGIN_INSTALLED = any(CI_PLUGIN in choices.values() for choices in PLUGINS.values())


def _cases(group: str) -> dict[str, list[str]]:
    """``{snapshot name: overrides}`` of ``group``: its listed choices (a plugin's only when a CI
    plugin's), its companions' pairs, and every snapshot on disk."""
    plugins = PLUGINS.get(group, {})  # choice -> the plugin package that brings it (dlcomm's own are absent)
    choices = {choice for choice in LISTED.get(group, set()) if plugins.get(choice) in (None, CI_PLUGIN)}
    cases = {choice: [f"{group}={choice}"] for choice in choices}
    for (where, choice), extra in COMPANIONS.items():
        if where == group:
            cases["+".join((choice, *extra))] = [f"{group}={choice}", *extra]
    folder = SNAPSHOTS / group
    for path in sorted(folder.glob("*.txt")) if folder.is_dir() else []:
        choice, *extra = path.stem.split("+")
        cases.setdefault(path.stem, [f"{group}={choice}", *extra])
    return dict(sorted(cases.items()))


GROUPS = sorted({*LISTED, *(path.name for path in SNAPSHOTS.glob("*") if path.is_dir())})


def _config_output(overrides: list[str], workdir: Path) -> str:
    """What ``dlcomm config <overrides>`` prints, made machine-independent: stdout, then stderr and the
    exit code when there are any."""
    from dlcomm import cli

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(["config", *overrides])
    text = out.getvalue()
    if err.getvalue():
        text += f"[stderr]\n{err.getvalue()}"
    if code:
        text += f"[exit {code}]\n"
    # Normalised: the closing comment names the default store, an absolute path under the working
    # directory (``# tracking.uri '' is the default store: sqlite:///<cwd>/results/mlflow.db (results/
    # under the working directory <cwd>)``). The test runs in a temporary folder with DLCOMM_HOME unset
    # (a user's first call), and that folder reads <cwd>. The only other input from the machine,
    # DLCOMM_DATA in the data sets' roots, is unset by the fixture. No hostnames or dates are printed.
    for form in {str(workdir.resolve()), str(workdir)}:
        text = text.replace(form, "<cwd>")
    return text


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A neutral environment for ``dlcomm config``: the working directory a temporary folder, no
    DLCOMM_HOME (the tracking comment's default store), no DLCOMM_DATA (the data sets' roots
    ``${oc.env:DLCOMM_DATA,/data}/...`` are resolved in the output: they read ``/data/...``)."""
    monkeypatch.delenv("DLCOMM_HOME", raising=False)
    monkeypatch.delenv("DLCOMM_DATA", raising=False)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _compare(label: str, overrides: list[str], snapshot: Path, workdir: Path) -> str | None:
    """None when ``dlcomm config <overrides>`` prints what ``snapshot`` holds (or it was rewritten,
    under DLCOMM_UPDATE_SNAPSHOTS), else the failure's paragraph naming ``label``."""
    actual = _config_output(overrides, workdir)
    expected = snapshot.read_text() if snapshot.exists() else None
    if actual == expected:
        return None
    if UPDATE:
        snapshot.parent.mkdir(parents=True, exist_ok=True)
        snapshot.write_text(actual)
        return None
    command = " ".join(["dlcomm config", *overrides])
    where = snapshot.relative_to(SNAPSHOTS.parents[2])  # tests/snapshots/config/...
    if expected is None:
        return f"{label}: no snapshot {where} (a new choice?)"
    diff = list(difflib.unified_diff(expected.splitlines(), actual.splitlines(), str(where), command, n=1, lineterm=""))
    shown = diff[:DIFF_LINES] + ([f"... {len(diff) - DIFF_LINES} more diff lines"] if len(diff) > DIFF_LINES else [])
    return f"{label}: `{command}` differs from its snapshot:\n" + "\n".join(shown)


def test_default_composition(workdir: Path) -> None:
    """``dlcomm config`` alone."""
    problem = _compare(DEFAULT, [], SNAPSHOTS / f"{DEFAULT}.txt", workdir)
    if problem:
        pytest.fail(f"{problem}\n\n{REGENERATE}", pytrace=False)


@pytest.mark.parametrize("group", GROUPS)
def test_every_choice(group: str, workdir: Path) -> None:
    """``dlcomm config <group>=<choice>`` for every choice of ``group``, each against its snapshot;
    one failure lists every choice that differs."""
    problems, skipped = [], []
    listed = LISTED.get(group, set())
    for name, overrides in _cases(group).items():
        choice = overrides[0].partition("=")[2]
        snapshot = SNAPSHOTS / group / f"{name}.txt"
        if choice not in listed:
            if (group, choice) in EXAMPLE_PLUGIN and not EXAMPLE_PLUGIN_INSTALLED:
                skipped.append(name)  # examples/plugin not installed here
            elif UPDATE:
                snapshot.unlink(missing_ok=True)
            else:
                problems.append(f"{group}={choice}: has a snapshot ({name}.txt) but `dlcomm --help` no longer lists it")
            continue
        problem = _compare(f"{group}={name}", overrides, snapshot, workdir)
        if problem:
            problems.append(problem)
    if problems:
        rest = [problem.split(":", 1)[0] for problem in problems[SHOWN:]]
        more = [f"and {len(rest)} more: {', '.join(rest)}"] if rest else []
        pytest.fail(
            f"{len(problems)} of group {group} changed:\n\n" + "\n\n".join([*problems[:SHOWN], *more, REGENERATE]),
            pytrace=False,
        )
    if skipped:
        pytest.skip(
            f"{group}: {', '.join(skipped)} not checked: examples/plugin is not installed (pip install -e examples/plugin)"
        )
