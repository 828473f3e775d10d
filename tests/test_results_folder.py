"""The results folder stays dlcomm's and stays a copy's own (issue 57 items 6 and 7): a copied
results folder writes its new runs' files into itself, never into the folder it was copied from;
every path dlcomm keeps there being of the wrong kind, an experiment named after one of them, and
a tracking URI with a query are each one line before anything is recorded."""

from __future__ import annotations

import http.server
import shutil
import sqlite3
import threading
from pathlib import Path

import pytest

TRAIN = ["train", "dataset=synthetic", "model=mlp", "train.max_steps=2", "launcher=threads"]


def _files(folder: Path) -> dict[str, int]:
    """Every path under ``folder`` and its modification time (ns): what a run may have added or changed."""
    return {str(path.relative_to(folder)): path.stat().st_mtime_ns for path in folder.rglob("*")}


def _locations(home: Path) -> tuple[list[str], dict[str, str]]:
    """The store's experiments' artifact locations, and its runs' (by run id)."""
    connection = sqlite3.connect(home / "results" / "mlflow.db")
    try:
        experiments = [row[0] for row in connection.execute("SELECT artifact_location FROM experiments")]
        return experiments, dict(connection.execute("SELECT run_uuid, artifact_uri FROM runs").fetchall())
    finally:
        connection.close()


@pytest.mark.slow  # three short trainings (threads, in this process)
@pytest.mark.parametrize("with_artifacts", [True, False], ids=["whole-folder", "store-only"])
def test_a_copied_results_folder_writes_nothing_into_the_original(tmp_path, cli_here, with_artifacts) -> None:
    """Before: MLflow kept the first folder's absolute artifact location, and the copy's new runs
    sent their artifacts into ``first/results/mlartifacts/``."""
    first, copy = tmp_path / "first", tmp_path / "copy"
    first.mkdir()
    copy.mkdir()
    earlier = cli_here(first, *TRAIN)
    assert earlier.returncode == 0, earlier.stderr
    if with_artifacts:
        shutil.copytree(first / "results", copy / "results")
    else:
        (copy / "results").mkdir()
        shutil.copy2(first / "results" / "mlflow.db", copy / "results" / "mlflow.db")
    before = _files(first / "results")
    trained = cli_here(copy, *TRAIN)
    assert trained.returncode == 0, trained.stderr
    assert _files(first / "results") == before  # nothing added, nothing changed under the original
    assert f"was copied from {first / 'results'}" in trained.stdout
    experiments, runs = _locations(copy)
    assert all(location.startswith(f"file://{copy}/results/") for location in experiments), experiments
    assert runs[trained.run_id].startswith(f"file://{copy}/results/mlartifacts/")
    assert (copy / "results" / "mlartifacts" / trained.run_id).is_dir()
    # the earlier run points where its files are: the copy's when they were copied along, else the original's
    assert runs[earlier.run_id].startswith(f"file://{copy if with_artifacts else first}/results/mlartifacts/")
    again = cli_here(copy, *TRAIN)  # re-rooted once: said once
    assert again.returncode == 0 and "was copied from" not in again.stdout


@pytest.mark.parametrize(
    ("name", "folder"),
    [
        ("runs", True),
        ("mlartifacts", True),
        ("profiles", True),
        ("sweeps", True),
        ("mlflow.db.lock", False),
        ("mlflow.db-journal", False),
    ],
)
def test_a_path_of_the_wrong_kind_under_results_is_one_line_before_anything_is_recorded(
    tmp_path, cli_here, monkeypatch, name, folder
) -> None:
    """Before: ``results/runs`` a file ended in NotADirectoryError (run KILLED), ``results/mlflow.db.lock``
    a folder in IsADirectoryError, both tracebacks."""
    monkeypatch.delenv("DLCOMM_PROFILES", raising=False)  # results/profiles, not the test session's cache
    odd = tmp_path / "results" / name
    odd.parent.mkdir()
    if folder:
        odd.write_text("not a folder")
    else:
        odd.mkdir()
    result = cli_here(tmp_path, *TRAIN)
    assert result.returncode == 2, result.stderr
    [line] = [line for line in result.stderr.splitlines() if line.startswith("dlcomm: error")]
    kind = "a regular file" if folder else "a folder"
    assert f"{odd} is {kind}, where dlcomm keeps" in line and f"mv {odd} {odd}.moved" in line
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "results" / "mlflow.db").exists()  # nothing recorded


def test_dlcomm_profile_over_a_file_where_the_profiles_go_is_one_line(tmp_path, cli_here, monkeypatch) -> None:
    """Before: FileExistsError (traceback) after the replica was built."""
    monkeypatch.delenv("DLCOMM_PROFILES", raising=False)
    odd = tmp_path / "results" / "profiles"
    odd.parent.mkdir()
    odd.write_text("not a folder")
    result = cli_here(tmp_path, "profile", "dataset=synthetic", "model=mlp")
    assert result.returncode == 2, result.stderr
    assert (
        result.stderr.strip().splitlines()[-1].startswith(f"dlcomm: error: {odd} is a regular file, where dlcomm keeps")
    )


@pytest.mark.parametrize("name", ["runs", "mlflow.db", "MLArtifacts", "sweeps", "0"])
def test_an_experiment_named_as_dlcomm_s_own_files_is_refused_at_composition(tmp_path, cli_here, name) -> None:
    """Before: ``tracking.experiment=runs`` trained, and its report went into results/runs/ among
    the run folders; ``mlflow.db``'s report ended in FileExistsError."""
    result = cli_here(tmp_path, *TRAIN, f"tracking.experiment={name}")
    assert result.returncode == 2, result.stderr
    from dlcomm.paths import OWN_NAMES

    assert result.stderr.strip().splitlines()[-1] == (
        f"dlcomm: error: tracking.experiment={name} is invalid: that name is dlcomm's own under results/ "
        f"({', '.join(OWN_NAMES)}), where the experiment's report would go; pick another name"
    )
    assert not (tmp_path / "results" / "mlflow.db").exists()


@pytest.mark.slow  # one short training (threads, in this process)
def test_a_report_never_writes_among_dlcomm_s_own_files(tmp_path, cli_here) -> None:
    """A store whose experiment another tool (or an older dlcomm) named ``runs``: ``dlcomm report``
    refuses its default folder in one line and writes where ``out=`` says."""
    from mlflow.tracking import MlflowClient

    assert cli_here(tmp_path, *TRAIN).returncode == 0
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path}/results/mlflow.db")
    client.rename_experiment(client.get_experiment_by_name("dlcomm").experiment_id, "runs")
    runs_before = sorted(path.name for path in (tmp_path / "results" / "runs").iterdir())
    refused = cli_here(tmp_path, "report", "experiment=runs")
    assert refused.returncode == 2, refused.stderr
    assert f"its report would go to {tmp_path / 'results' / 'runs'}, a name dlcomm keeps" in refused.stderr
    assert "pass out=<another folder>" in refused.stderr.splitlines()[-1]
    assert sorted(path.name for path in (tmp_path / "results" / "runs").iterdir()) == runs_before
    elsewhere = cli_here(tmp_path, "report", "experiment=runs", f"out={tmp_path / 'reports'}")
    assert elsewhere.returncode == 0, elsewhere.stderr
    assert (tmp_path / "reports" / "runs" / "table.md").is_file()


class _AnyMlflow(http.server.BaseHTTPRequestHandler):
    """Answers every request as MLflow's experiments search would: the store's check passes."""

    def _answer(self) -> None:
        body = b'{"experiments": []}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _answer  # noqa: N815 - http.server's names

    def log_message(self, *args) -> None:
        pass


@pytest.mark.parametrize("tail", ["/?x=1", "?token=abc", "/#frag"])
def test_a_tracking_uri_with_a_query_is_one_line(tmp_path, cli_here, tail) -> None:
    """Before: the store's check passed (it asks the server without the query) and MLflow's client
    then failed on ``http://host:port/?x=1/api/2.0/...``: a 68-line traceback."""
    with http.server.ThreadingHTTPServer(("127.0.0.1", 0), _AnyMlflow) as server:
        threading.Thread(target=server.serve_forever, daemon=True).start()
        base = f"http://127.0.0.1:{server.server_address[1]}"
        result = cli_here(tmp_path, *TRAIN, f'tracking.uri="{base}{tail}"')
        server.shutdown()
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    line = result.stderr.strip().splitlines()[-1]
    assert line.startswith(f"dlcomm: error: tracking.uri={base}") and "which MLflow cannot use" in line
    assert f"pass tracking.uri={base}" in line


def test_a_sqlite_uri_with_a_query_is_one_line(tmp_path, cli_here) -> None:
    result = cli_here(tmp_path, *TRAIN, f'tracking.uri="sqlite:///{tmp_path}/s.db?mode=ro"')
    assert result.returncode == 2, result.stderr
    assert f"pass tracking.uri=sqlite:///{tmp_path}/s.db" in result.stderr.splitlines()[-1]
    assert not list(tmp_path.glob("s.db*"))
