"""The MLflow side of a run. Imported only by the driver and rank 0 (``import mlflow`` is slow).

Lifecycle: the driver (the process that launched the ranks) calls :func:`open_run`, which
creates the run with its tags and the flattened resolved config as params, and
:func:`close_run` with the truthful terminal status (FINISHED, FAILED or KILLED), so the
status is right even when rank 0 itself dies. In between, rank 0 writes metrics and
artifacts through :class:`RunLogger`. A sweep is a parent run (:func:`open_parent_run`) whose
children carry ``mlflow.parentRunId``; the parent ends when its last child does
(:func:`close_parent_if_done`).

Concurrency: many jobs may write one SQLite store at once. Its schema is created once under a
file lock, and every write is retried while SQLite reports the database locked (beyond the
20 s busy timeout MLflow already sets), so no run and no metric is lost. On shared
filesystems whose locking is unreliable, point ``tracking.uri`` at an ``mlflow server``.
"""

from __future__ import annotations

import logging
import socket
import time
from pathlib import Path
from typing import Any, Iterable

from dlcomm.errors import UserError, first_line
from dlcomm.paths import results_dir, sqlite_path
from dlcomm.secrets import mask
from dlcomm.spec import RunSpec

_PARAMS_PER_BATCH = 100
_METRICS_PER_BATCH = 1000
# how long a call waits while another process holds the SQLite store locked (DLCOMM_STORE_WAIT_S)
_RETRY_FOR_S = 300
TERMINAL = ("FINISHED", "FAILED", "KILLED")


_TAG_LIMIT = 8000  # MLflow's longest tag value


def _locked(error: BaseException) -> bool:
    text = str(error).lower()
    return "database is locked" in text or "database table is locked" in text


#: What SQLite (through SQLAlchemy and MLflow) says when the store's file cannot grow: a full disk
#: (SQLITE_FULL), or a write the kernel refused (SQLITE_IOERR: ENOSPC, EFBIG past a file size limit, EDQUOT).
_CANNOT_GROW = (
    "database or disk is full",
    "disk i/o error",
    "no space left on device",
    "file too large",
    "quota exceeded",
)


# MLflow logs a database error with its whole traceback before it raises it; dlcomm words the raised
# error in one line (retrying: a full disk, a locked store; the rank's failure otherwise)
logging.getLogger("mlflow.store.db.utils").setLevel(logging.CRITICAL)


def _cannot_grow(error: BaseException) -> bool:
    text = str(error).lower()
    return any(words in text for words in _CANNOT_GROW)


def store_full_line(uri: str, error: BaseException) -> str:
    """One line for a store that could not be written because its disk (or a limit) is full."""
    from dlcomm.paths import sqlite_path

    database = sqlite_path(uri)
    reason = first_line(error)
    reason = reason.split(") ", 1)[-1] if reason.startswith("(sqlite3.") else reason
    where = f"the disk of {database.parent}" if database is not None else "the server's disk"
    check = f" (df -h {database.parent})" if database is not None else ""
    return (
        f"the MLflow store {uri} could not be written ({reason}): {where} is full, or a file size or quota limit "
        f"was reached; free space there{check} and run again, or pass tracking.uri= a store on another disk"
    )


def _store_wait_s() -> float:
    import os

    try:
        return float(os.environ.get("DLCOMM_STORE_WAIT_S", _RETRY_FOR_S))
    except ValueError:
        return _RETRY_FOR_S


def retrying(call: Any, *args: Any, **kwargs: Any) -> Any:
    """``call(*args, **kwargs)``, retried with jittered backoff while SQLite says it is locked;
    still locked after ``_RETRY_FOR_S`` seconds (another process holds the store), one line that
    says how long it waited in all: the bound is checked between calls, and each call first waits
    out SQLite's own busy timeout, so the wait is longer than the bound."""
    import time

    from tenacity import Retrying, retry_if_exception, stop_after_delay, wait_random_exponential

    began = time.monotonic()
    try:
        for attempt in Retrying(
            retry=retry_if_exception(_locked),
            stop=stop_after_delay(_store_wait_s()),
            wait=wait_random_exponential(multiplier=0.05, max=5),
            reraise=True,
        ):
            with attempt:
                return call(*args, **kwargs)
    except Exception as error:
        if _cannot_grow(error):
            client = getattr(call, "__self__", None)
            uri = getattr(getattr(client, "_tracking_client", None), "tracking_uri", "") or "in use"
            raise UserError(store_full_line(str(uri), error)) from None
        if not _locked(error):
            raise
        raise UserError(
            f"the MLflow store stayed locked for {time.monotonic() - began:.0f} s: another process holds its SQLite file "
            "(a long transaction, an open sqlite3 shell); end it and run again, or use a server store "
            "(tracking.uri=http://...)"
        ) from None


def store_client(uri: str) -> Any:
    """MLflow's client of ``uri``. Making one reads the store (its tables), so it waits like any
    other call while SQLite is locked (:func:`retrying`)."""
    from mlflow.tracking import MlflowClient

    return retrying(MlflowClient, tracking_uri=uri)


def default_tracking_uri() -> str:
    path = results_dir() / "mlflow.db"
    return f"sqlite:///{path}"


def resolve_tracking_uri(uri: str) -> str:
    return uri or default_tracking_uri()


def check_store(uri: str) -> None:
    """Raise a one-line UserError when ``uri`` is a store that cannot be read: a SQLite file that
    does not exist, a server that does not answer (for readers: ``dlcomm report``, ``dlcomm runs
    reap``; writers create the store, see :func:`dlcomm.tracking.store.probe`)."""
    from dlcomm.tracking.store import probe

    probe(uri, writer=False)


def _client(uri: str, opening: bool = False):
    """A client whose store exists. A new SQLite store gets its schema under a file lock
    (MLflow's table creation is not safe when two processes open a new database at once), built
    beside the store and renamed into place (:func:`dlcomm.tracking.store.create_sqlite_store`):
    a run killed meanwhile leaves no half-created store. ``opening`` (runs are about to be opened
    in it): a store copied from another results folder is re-rooted first
    (:mod:`dlcomm.tracking.copied`), so that no run's files go into the folder it was copied from."""
    from filelock import FileLock

    from dlcomm.tracking.store import create_sqlite_store, needs_schema

    database = sqlite_path(uri)
    if database is None:
        return store_client(uri)
    database.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(database) + ".lock"):
        if needs_schema(database):
            create_sqlite_store(uri, database)
        elif opening:
            from dlcomm.tracking.copied import reroot

            said = retrying(reroot, uri)
            if said:
                from dlcomm import progress

                progress.say(said)
        client = store_client(uri)
        retrying(client.search_experiments, max_results=1)
    return client


def _artifact_location(uri: str) -> str | None:
    """Artifacts beside a SQLite store (never in the current directory); servers choose their own."""
    database = sqlite_path(uri)
    return (database.parent / "mlartifacts").resolve().as_uri() if database is not None else None


def _experiment_id(client: Any, name: str, uri: str) -> str:
    """The experiment's id, created if need be; it is marked a model-training experiment, which
    the MLflow UI opens on its runs, not on its GenAI side (:mod:`dlcomm.tracking.ui`)."""
    from mlflow.exceptions import MlflowException

    from dlcomm.tracking.lifecycle import active, check_artifacts
    from dlcomm.tracking.ui import KIND_TAG, MODEL_TRAINING

    experiment = active(client, uri, name, "tracking.experiment")  # a deleted one is refused with its fixes
    if experiment is None:
        try:
            return retrying(
                client.create_experiment,
                name,
                artifact_location=_artifact_location(uri),
                tags={KIND_TAG: MODEL_TRAINING},
            )
        except MlflowException as error:  # created meanwhile by a concurrent run, or a name MLflow refuses
            experiment = active(client, uri, name, "tracking.experiment")
            if experiment is None:
                reason = (str(error.message).strip().splitlines() or [type(error).__name__])[0][:300]
                raise UserError(
                    f"tracking.experiment={name} cannot be created in the store {uri} ({reason}); "
                    "pass another tracking.experiment"
                ) from None
    check_artifacts(experiment, "tracking.experiment")  # another tool's may keep its files where none can go
    if KIND_TAG not in experiment.tags:  # made by an older dlcomm, by hand or by another tool
        retrying(client.set_experiment_tag, experiment.experiment_id, KIND_TAG, MODEL_TRAINING)
    return experiment.experiment_id


def flatten(config: dict[str, Any], prefix: str = "") -> dict[str, str]:
    flat: dict[str, str] = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(flatten(value, f"{name}."))
        else:
            flat[name] = str(value)[:6000]
    return flat


def _user_client(uri: str):
    """The client, or a one-line UserError when the URI cannot be opened."""
    from mlflow.exceptions import MlflowException
    from sqlalchemy.exc import SQLAlchemyError

    try:
        return _client(uri, opening=True)
    except (MlflowException, SQLAlchemyError) as error:
        first_line = str(error).strip().splitlines()[0]
        raise UserError(
            f"tracking.uri={uri} cannot be used ({first_line}): pass a sqlite:///path/to/file.db "
            "URI or the http:// address of an mlflow server"
        ) from None


def _log_params(client: Any, run_id: str, params: dict[str, str]) -> None:
    from mlflow.entities import Param

    items = [Param(k, mask(v)) for k, v in params.items()]
    for start in range(0, len(items), _PARAMS_PER_BATCH):
        retrying(client.log_batch, run_id, params=items[start : start + _PARAMS_PER_BATCH])


def dlcomm_version() -> str:
    """The installed distribution's version (what a ``pip install``ed dlcomm has instead of a commit)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("dlcomm")
    except PackageNotFoundError:  # run from a source tree that was never installed
        import dlcomm

        return dlcomm.__version__


def cpu_model() -> str:
    """The CPU this process runs on, as ``/proc/cpuinfo`` names it (else ``platform.processor()``).

    Recorded with every run: CPU kernels (oneDNN's convolutions, max-pool's argmax) round in a
    machine's own order, so a run that amplifies rounding (a diverging model, many steps) gives
    other low digits on another CPU for the same code, config and seed."""
    import platform

    try:
        with open("/proc/cpuinfo", encoding="utf-8") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def open_run(spec: RunSpec, extra_tags: dict[str, str] | None = None) -> str:
    """Create the run (status RUNNING) with its tags and params; return its id.
    ``extra_tags`` adds, e.g., ``mlflow.parentRunId`` for a sweep's element, ``driver_pid``
    for a local run, ``slurm_job_id`` for a run opened inside its SLURM job."""
    cfg = spec.cfg()
    client = _user_client(spec.tracking_uri)
    experiment_id = _experiment_id(client, cfg.tracking.experiment, spec.tracking_uri)
    tags = {
        "algo": cfg.algo.name,
        "model": cfg.model.name,
        "dataset": cfg.dataset.name,
        "world_size": str(cfg.nodes * cfg.workers_per_node),
        "nodes": str(cfg.nodes),
        "workers_per_node": str(cfg.workers_per_node),
        **({"git_commit": spec.git_commit, "mlflow.source.git.commit": spec.git_commit} if spec.git_commit else {}),
        "dlcomm_version": dlcomm_version(),
        "config_hash": spec.config_hash,
        "hostname": socket.gethostname(),
        "cpu": cpu_model(),
        "launcher": cfg.launcher.name,
        "network": spec.network_label(),  # the preset and the link values the command line changed
        "network_mode": str(cfg.network.mode),
        **(extra_tags or {}),
    }
    run = retrying(
        client.create_run, experiment_id, run_name=mask(spec.run_name()), tags={k: mask(v) for k, v in tags.items()}
    )
    try:
        _log_params(client, run.info.run_id, flatten(spec.config))  # params: the plain data
        retrying(client.log_inputs, run.info.run_id, [dataset_input(spec.config)])
    except UserError as error:  # a full disk, a locked store: the run just made must not stay RUNNING
        _end_unfinished(client, run.info.run_id, str(error))
        raise
    return run.info.run_id


def _end_unfinished(client: Any, run_id: str, error: str) -> None:
    """Mark a run whose opening failed FAILED with ``error`` (an update, which a full disk usually
    still allows), else delete it: no RUNNING run is left behind for nothing."""
    try:
        client.set_tag(run_id, "error", mask(error)[:5000])
        client.set_terminated(run_id, status="FAILED")
    except Exception:  # noqa: BLE001 - the store refuses even that: the run goes
        try:
            client.delete_run(run_id)
        except Exception:  # noqa: BLE001 - nothing more to do here; `dlcomm runs reap` closes it later
            pass


def dataset_input(cfg: dict[str, Any]) -> Any:
    """The run's data set as an MLflow input (the UI's Datasets column): its name, where it is
    read from, and a digest of its ``dataset`` settings (runs on the same data share it)."""
    import hashlib
    import json

    from mlflow.entities import Dataset, DatasetInput, InputTag

    settings = cfg["dataset"]
    root = str(settings.get("root", "") or "")
    dataset = Dataset(
        name=str(settings["name"]),
        digest=hashlib.sha256(json.dumps(settings, sort_keys=True, default=str).encode()).hexdigest()[:16],
        source_type="local" if root else "code",
        source=json.dumps({"uri": root or f"dlcomm:{settings['name']}"}),
        profile=json.dumps({key: value for key, value in settings.items() if key not in ("name", "root")}, default=str),
    )
    return DatasetInput(dataset, tags=[InputTag("mlflow.data.context", "training")])


def open_parent_run(
    uri: str, experiment: str, overrides: list[str], size: int, launcher: str, extra_tags: dict[str, str] | None = None
) -> str:
    """The sweep's parent run (RUNNING): its overrides and element count as params; ``extra_tags``
    from the launcher (a sweep run here records its driver's pid, tag ``driver_pid``)."""
    client = _user_client(uri)
    experiment_id = _experiment_id(client, experiment, uri)
    tags = {
        "sweep": "true",
        "launcher": launcher,
        **({"git_commit": commit} if (commit := _git_commit()) else {}),
        "dlcomm_version": dlcomm_version(),
        "hostname": socket.gethostname(),
        **(extra_tags or {}),
    }
    run = retrying(
        client.create_run, experiment_id, run_name=mask(f"sweep of {size}: {' '.join(overrides)}")[:250], tags=tags
    )
    _log_params(client, run.info.run_id, {"sweep.overrides": " ".join(overrides)[:6000], "sweep.size": str(size)})
    return run.info.run_id


def set_tags(uri: str, run_id: str, tags: dict[str, str]) -> None:
    client = _client(uri)
    for key, value in tags.items():
        retrying(client.set_tag, run_id, key, mask(value)[:_TAG_LIMIT])


def close_run(uri: str, run_id: str, status: str, error: str = "") -> None:
    """End the run with ``status``; a failure's one-line reason goes into the ``error`` tag."""
    client = _client(uri)
    if error:
        retrying(client.set_tag, run_id, "error", mask(error)[:5000])
    retrying(client.set_terminated, run_id, status=status)


def run_status(uri: str, run_id: str) -> str:
    return retrying(_client(uri).get_run, run_id).info.status


def recorded_run(uri: str, run_id: str) -> Any:
    """The MLflow run ``run_id`` (its info, params and tags), or None when the store has no such run."""
    from mlflow.exceptions import MlflowException

    try:
        return retrying(_client(uri).get_run, run_id)
    except MlflowException:
        return None


def children(uri: str, parent_id: str) -> list[Any]:
    """The runs whose ``mlflow.parentRunId`` is ``parent_id``."""
    client = _client(uri)
    parent = retrying(client.get_run, parent_id)
    return retrying(
        client.search_runs,
        [parent.info.experiment_id],
        filter_string=f"tags.mlflow.parentRunId = '{parent_id}'",
        max_results=10_000,
    )


def close_parent_if_done(uri: str, parent_id: str) -> str | None:
    """End the parent once every child has ended: FINISHED when all finished, FAILED otherwise.
    Each child calls this after ending itself, so whichever ends last sees them all ended;
    two children ending together both write the same status. Returns the status set, if any. A
    ``parent_id`` that is no run, or no sweep's parent run (``mlflow.parentRunId`` another tool
    wrote), is left alone."""
    from mlflow.exceptions import MlflowException

    client = _client(uri)
    try:
        parent = retrying(client.get_run, parent_id)
    except MlflowException:  # no such run: a parent run id another tool (or a hand) wrote
        return None
    size = parent.data.params.get("sweep.size", "")
    if parent.data.tags.get("sweep") != "true" or not (size.isascii() and size.isdigit()):
        return None  # not a sweep's parent run of dlcomm: another tool's run, left as it is
    size = int(size)
    statuses = [run.info.status for run in children(uri, parent_id)]
    if len(statuses) < size or any(status not in TERMINAL for status in statuses):
        return None
    status = "FINISHED" if all(status == "FINISHED" for status in statuses) else "FAILED"
    retrying(client.set_terminated, parent_id, status=status)
    return status


def _git_commit() -> str:
    from dlcomm.spec import git_commit

    return git_commit()


class RunLogger:
    """Rank 0's writer: metrics in batches, files as artifacts."""

    def __init__(self, uri: str, run_id: str) -> None:
        self.client = _client(uri)
        self.uri = uri
        self.run_id = run_id

    def page(self) -> str:
        """The run's page in the MLflow UI (:func:`dlcomm.tracking.ui.run_page`)."""
        from dlcomm.tracking.ui import run_page

        return run_page(self.uri, retrying(self.client.get_run, self.run_id).info.experiment_id, self.run_id)

    def set_tags(self, tags: dict[str, str]) -> None:
        for key, value in tags.items():
            retrying(self.client.set_tag, self.run_id, key, mask(value)[:_TAG_LIMIT])

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        self.log_series((key, value, step) for key, value in metrics.items())

    def log_series(self, points: Iterable[tuple[str, float, int]]) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        batch = [Metric(key, float(value), now, int(step)) for key, value, step in points]
        for start in range(0, len(batch), _METRICS_PER_BATCH):
            retrying(self.client.log_batch, self.run_id, metrics=batch[start : start + _METRICS_PER_BATCH])

    def log_artifact(self, path: Path, folder: str | None = None) -> None:
        """Upload ``path`` into the run's artifacts (under ``folder`` when given)."""
        retrying(self.client.log_artifact, self.run_id, str(path), folder)
