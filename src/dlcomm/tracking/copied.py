"""A SQLite store copied from another results folder writes its new runs' files into its own.

MLflow keeps each experiment's artifact location as an absolute path (``file:///<home>/results/
mlartifacts``), and each run's under it. A results folder copied to another clone (``cp -r
results ../other/``) keeps the paths of the first: the runs trained in the copy would send their
artifacts into the first clone's ``results/mlartifacts/``, silently, or fail when it is gone.

So before a run is opened in a store that lies inside the results folder (:func:`dlcomm.paths.
results_dir`, ``DLCOMM_HOME``'s), every experiment whose location lies outside the store's folder
and follows the layout dlcomm and MLflow give a new store (``<store's folder>/mlartifacts``, and
``<store's folder>/<experiment id>`` for MLflow's default experiment) is re-rooted into this
store's folder: its location, and each of its runs whose files were copied along (the run's folder
is under the new location), so that a copy made with its artifacts is whole by itself. A run whose
files were not copied keeps pointing where they are. A location of any other shape was chosen by
someone (an object store, a shared folder) and is left as it is. The change is one transaction on
the store's ``experiments`` and ``runs`` tables (MLflow has no call that moves an experiment),
made under the store's file lock by the process that opens runs, and said in one line.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from urllib.parse import urlsplit
from urllib.request import url2pathname

from dlcomm.paths import results_dir, sqlite_path

ARTIFACTS = "mlartifacts"  # dlcomm's folder of a SQLite store's artifacts (mlflow_run._artifact_location)


def _local(location: str) -> tuple[Path, bool] | None:
    """The folder a local artifact location names and whether it was written as a ``file:`` URI;
    None for any other store (``s3://``, a server's ``mlflow-artifacts:``)."""
    parts = urlsplit(location)
    scheme = parts.scheme.lower() if len(parts.scheme) > 1 else ""  # c:\... is a path
    if scheme == "file":
        return Path(url2pathname(parts.path)), True
    if not scheme and location.startswith("/"):
        return Path(location), False
    return None


def _written(path: Path, as_uri: bool) -> str:
    return path.as_uri() if as_uri else str(path)


def _inside(path: Path, folder: Path) -> bool:
    """Whether ``path`` is in ``folder`` as written or once its links are followed."""
    return path.is_relative_to(folder) or path.resolve().is_relative_to(folder)


def reroot(uri: str) -> str:
    """Re-root the experiments of the SQLite store ``uri`` that were copied with it (see the
    module docstring); the line that says what moved, "" when nothing did or the store is not
    one inside the results folder. The caller holds the store's file lock."""
    database = sqlite_path(uri)
    if database is None or not database.is_file():
        return ""
    folder = database.resolve().parent
    if not folder.is_relative_to(results_dir()):
        return ""
    connection = sqlite3.connect(database, timeout=20)
    try:
        if not _move(connection, folder, dry=True):  # the usual case, read without taking the write lock
            return ""
        with connection:  # one transaction: every location moves, or none
            connection.execute("BEGIN IMMEDIATE")
            moved = _move(connection, folder)
    finally:
        connection.close()
    if not moved:
        return ""
    olds = sorted({str(old) for old, _, _, _ in moved})
    copied = sum(runs for _, _, runs, _ in moved)
    left = sum(kept for _, _, _, kept in moved)
    names = ", ".join(name for _, name, _, _ in moved)
    kept = f"; {left} whose files were not copied still point to them there" if left else ""
    return (
        f"dlcomm: the store {uri} was copied from {', '.join(olds)}: experiment(s) {names} now keep their new runs' "
        f"files in {folder} ({copied} earlier run(s) whose files were copied along point to the copies{kept})"
    )


def _move(connection: sqlite3.Connection, folder: Path, dry: bool = False) -> list[tuple[Path, str, int, int]]:
    """Re-root what :func:`reroot` describes; per experiment moved: (its old folder, its name,
    runs re-rooted, runs left). ``dry``: only the experiments that would move, nothing written."""
    moved = []
    rows = connection.execute("SELECT experiment_id, name, artifact_location FROM experiments").fetchall()
    for experiment_id, name, location in rows:
        local = _local(str(location or ""))
        if local is None:
            continue
        old, as_uri = local
        if _inside(old, folder) or old.name not in (ARTIFACTS, str(experiment_id)):
            continue
        new = folder / old.name
        if dry:
            moved.append((old.parent, str(name), 0, 0))
            continue
        connection.execute(
            "UPDATE experiments SET artifact_location = ? WHERE experiment_id = ?",
            (_written(new, as_uri), experiment_id),
        )
        rerooted = left = 0
        runs = connection.execute("SELECT run_uuid, artifact_uri FROM runs WHERE experiment_id = ?", (experiment_id,))
        for run_id, artifact_uri in runs.fetchall():
            run_local = _local(str(artifact_uri or ""))
            if run_local is None or not run_local[0].is_relative_to(old):
                continue
            below = run_local[0].relative_to(old)
            if below.parts and (new / below.parts[0]).exists():  # the run's folder was copied along
                connection.execute(
                    "UPDATE runs SET artifact_uri = ? WHERE run_uuid = ?",
                    (_written(new / below, run_local[1]), run_id),
                )
                rerooted += 1
            else:
                left += 1
        moved.append((old.parent, str(name), rerooted, left))
    return moved
