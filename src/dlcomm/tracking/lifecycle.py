"""Experiments as a store holds them, which dlcomm did not necessarily make them.

MLflow has no archive: a deleted experiment keeps its runs and its name (``lifecycle_stage``
``deleted``, restorable with ``mlflow experiments restore``) until ``mlflow gc`` purges it, and
no new experiment may take that name meanwhile. An experiment renamed (in the UI, by another
tool) frees its old name, and another experiment may have been renamed onto it. So a name a
command is given is one of: an active experiment (whoever made it: dlcomm uses it), a deleted
one (refused in one line with the ways out: restore, purge, or another name), or none.
"""

from __future__ import annotations

from typing import Any, NoReturn

from dlcomm.errors import UserError

DELETED = "deleted"
# artifact stores MLflow writes through a library of its own: (module, pip package)
_LIBRARIES = {
    "s3": ("boto3", "boto3"),
    "gs": ("google.cloud.storage", "google-cloud-storage"),
    "wasbs": ("azure.storage.blob", "azure-storage-blob"),
    "abfss": ("azure.storage.filedatalake", "azure-storage-file-datalake"),
    "hdfs": ("pyarrow", "pyarrow"),
    "viewfs": ("pyarrow", "pyarrow"),
}


def lookup(client: Any, name: str) -> Any | None:
    """The experiment named ``name`` in any lifecycle stage, or None (also for a name MLflow refuses
    to look up: no experiment can have it)."""
    from mlflow.exceptions import MlflowException

    from dlcomm.tracking.mlflow_run import retrying

    try:
        return retrying(client.get_experiment_by_name, name)
    except MlflowException:
        return None


def refuse_deleted(uri: str, experiment: Any, setting: str) -> NoReturn:
    """One line: ``setting`` names the deleted ``experiment`` of ``uri``, and the ways out."""
    number = experiment.experiment_id
    raise UserError(
        f"{setting}={experiment.name}: that experiment was deleted in the store {uri} (experiment id {number}; "
        "MLflow keeps a deleted experiment, its runs and its name until it is purged): restore it with "
        f"`MLFLOW_TRACKING_URI={uri} mlflow experiments restore --experiment-id {number}`, free its name for good "
        f"with `mlflow gc --backend-store-uri {uri} --experiment-ids {number}` (its runs are lost), "
        f"or pass another {setting}"
    )


def active(client: Any, uri: str, name: str, setting: str) -> Any | None:
    """The active experiment named ``name`` (made by dlcomm or not), None when the store has no
    experiment of that name; a deleted one is refused (:func:`refuse_deleted`)."""
    experiment = lookup(client, name)
    if experiment is not None and experiment.lifecycle_stage == DELETED:
        refuse_deleted(uri, experiment, setting)
    return experiment


def check_artifacts(experiment: Any, setting: str) -> None:
    """Refuse, before a run is opened in ``experiment``, an artifact location this machine cannot
    write (an experiment another tool made, a store moved from another machine): MLflow would
    fail at the run's first file, after training. A local folder must accept a file; an object
    store needs its library. Other locations (a server's ``mlflow-artifacts:``) are the server's."""
    import importlib
    from pathlib import Path
    from urllib.parse import urlsplit
    from urllib.request import url2pathname

    from dlcomm.paths import write_probe

    location = str(experiment.artifact_location or "")
    parts = urlsplit(location)
    scheme = parts.scheme.lower() if len(parts.scheme) > 1 else ""  # c:\... is a path
    where = f"{setting}={experiment.name}: the experiment keeps its runs' files in {location}"
    if scheme in ("", "file"):
        folder = Path(url2pathname(parts.path)) if scheme == "file" else Path(location)
        try:
            write_probe(folder)
        except OSError as error:
            raise UserError(
                f"{where}, which cannot be written here ({error.strerror or error}): make it writable, or pass "
                f"another {setting} (a new experiment keeps its files beside the store)"
            ) from None
    elif scheme in _LIBRARIES:
        module, package = _LIBRARIES[scheme]
        try:
            importlib.import_module(module)
        except ImportError:
            raise UserError(
                f"{where}, which MLflow writes with {package}, not installed: pip install {package}, or pass "
                f"another {setting} (a new experiment keeps its files beside the store)"
            ) from None
