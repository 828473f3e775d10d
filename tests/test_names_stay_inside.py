"""Names are never paths (issue 50): every user-given name that becomes part of a path either is
refused in one line or is mapped to one entry of its folder, and what dlcomm writes stays under
the folder it belongs to."""

from __future__ import annotations

from pathlib import Path

import pytest

from dlcomm.errors import UserError
from dlcomm.paths import entry_name, inside

ESCAPING = ["../../escaped", "..", ".", "/etc/passwd", "a/b", "a\\b", "line\nbreak", "", ".hidden", "tab\there"]
J = ["dataset=synthetic", "model=mlp", "nodes=2", "train.max_steps=2", "launcher=threads"]


@pytest.mark.parametrize("name", ESCAPING)
def test_an_entry_name_is_one_entry_of_its_folder(tmp_path: Path, name: str) -> None:
    mapped = entry_name(name)
    assert "/" not in mapped and "\\" not in mapped and not mapped.startswith(".") and mapped
    assert all(ord(character) >= 32 for character in mapped)
    assert (tmp_path / mapped).resolve().parent == tmp_path.resolve()


def test_a_safe_name_is_kept_as_it_is() -> None:
    assert entry_name("crossover 16 nodes (v2)") == "crossover 16 nodes (v2)"


def test_a_link_that_leads_out_of_the_folder_is_refused(tmp_path: Path) -> None:
    (tmp_path / "root").mkdir()
    (tmp_path / "root" / "out").symlink_to(tmp_path)
    with pytest.raises(UserError, match=r"^experiment=out would write to .*, outside .*root"):
        inside(tmp_path / "root", tmp_path / "root" / "out" / "x", "experiment=out")


@pytest.mark.slow  # one short training (threads), then reports
def test_report_of_an_experiment_named_like_a_path_writes_under_results(tmp_path, cli_here) -> None:
    """The store can hold any name (MLflow's client renames to it); the report's folder is one entry
    of results/ and nothing appears outside the home."""
    from mlflow.tracking import MlflowClient

    home = tmp_path / "home"
    home.mkdir()
    trained = cli_here(home, "train", *J, "tracking.experiment=plain")
    assert trained.returncode == 0, trained.stderr
    client = MlflowClient(tracking_uri=f"sqlite:///{home}/results/mlflow.db")
    experiment = client.get_experiment_by_name("plain").experiment_id
    before = sorted(str(path) for path in tmp_path.rglob("*") if not path.is_relative_to(home))
    for name, args in (
        ("../../escaped", ["experiment=../../escaped"]),
        ("a/b\\c", ["experiment=a/b\\c"]),
        ("/abs", ["--all"]),
    ):
        client.rename_experiment(experiment, name)
        result = cli_here(home, "report", *args)
        assert result.returncode == 0, result.stderr
        assert (home / "results" / entry_name(name) / "table.md").is_file()
    assert sorted(str(path) for path in tmp_path.rglob("*") if not path.is_relative_to(home)) == before


def test_a_run_cannot_be_recorded_under_an_experiment_named_like_a_path(tmp_path, cli_here) -> None:
    result = cli_here(tmp_path, "train", *J, "tracking.experiment=../../escaped")
    assert result.returncode == 2
    assert result.stderr.startswith("dlcomm: error: tracking.experiment=../../escaped is invalid"), result.stderr
    assert not (tmp_path / "results" / "mlflow.db").exists()


ESCAPES = ["../../escaped", "/abs/olute", "a/b", "a\\b", ".."]
WRITERS = [  # every subcommand that writes under a name the user gives: (argv with {name}, what refuses it)
    (["train", *J, "tracking.experiment={name}"], "tracking.experiment="),
    (["calibrate", "--name", "{name}", "--repeats", "1"], "--name "),
    (["report", "sweep={name}"], "sweep="),
    (["report", "experiment={name}"], "experiment="),
]


@pytest.mark.parametrize("name", ESCAPES)
@pytest.mark.parametrize("argv,refuser", WRITERS, ids=[argv[0] + " " + refuser for argv, refuser in WRITERS])
def test_every_writing_subcommand_refuses_or_contains_an_escaping_name(tmp_path, cli_here, argv, refuser, name) -> None:
    """Refused in one line (no store with such a run, or a name that cannot be a folder), and nothing
    written outside the home whatever the answer."""
    home = tmp_path / "home"
    home.mkdir()
    result = cli_here(home, *[token.replace("{name}", name) for token in argv])
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("dlcomm: error: "), result.stderr
    assert [path for path in tmp_path.rglob("*") if not path.is_relative_to(home)] == []
