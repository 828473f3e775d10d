"""The MLflow side of a run. Imported only by the driver and rank 0 (``import mlflow`` is slow).

Lifecycle: the driver (the process that launched the ranks) calls :func:`open_run`, which
creates the run with its tags and the flattened resolved config as params, and
:func:`close_run` with the truthful terminal status (FINISHED, FAILED or KILLED), so the
status is right even when rank 0 itself dies. In between, rank 0 writes metrics and
artifacts through :class:`RunLogger`.
"""

from __future__ import annotations

import socket
import time
from pathlib import Path
from typing import Any, Iterable

from dlcomm.errors import UserError
from dlcomm.paths import results_dir
from dlcomm.spec import RunSpec

_PARAMS_PER_BATCH = 100
_METRICS_PER_BATCH = 1000


def default_tracking_uri() -> str:
    path = results_dir() / "mlflow.db"
    return f"sqlite:///{path}"


def resolve_tracking_uri(uri: str) -> str:
    return uri or default_tracking_uri()


def _client(uri: str):
    """A client whose store exists. A new SQLite store gets its schema under a file lock:
    MLflow's table creation is not safe when two processes open a new database at once."""
    from filelock import FileLock
    from mlflow.tracking import MlflowClient

    if not uri.startswith("sqlite:///"):
        return MlflowClient(tracking_uri=uri)
    database = Path(uri[len("sqlite:///") :])
    database.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(database) + ".lock"):
        client = MlflowClient(tracking_uri=uri)
        client.search_experiments(max_results=1)
    return client


def _artifact_location(uri: str) -> str | None:
    """Artifacts beside a SQLite store (never in the current directory); servers choose their own."""
    if uri.startswith("sqlite:///"):
        return (Path(uri[len("sqlite:///") :]).parent / "mlartifacts").resolve().as_uri()
    return None


def _experiment_id(client: Any, name: str, uri: str) -> str:
    from mlflow.exceptions import MlflowException

    experiment = client.get_experiment_by_name(name)
    if experiment is not None:
        return experiment.experiment_id
    try:
        return client.create_experiment(name, artifact_location=_artifact_location(uri))
    except MlflowException:  # created meanwhile by a concurrent run
        return client.get_experiment_by_name(name).experiment_id


def flatten(config: dict[str, Any], prefix: str = "") -> dict[str, str]:
    flat: dict[str, str] = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(flatten(value, f"{name}."))
        else:
            flat[name] = str(value)[:6000]
    return flat


def open_run(spec: RunSpec) -> str:
    """Create the run (status RUNNING) with its tags and params; return its id."""
    from mlflow.entities import Param
    from mlflow.exceptions import MlflowException

    cfg = spec.config
    try:
        client = _client(spec.tracking_uri)
    except MlflowException as error:
        first_line = str(error).strip().splitlines()[0]
        raise UserError(
            f"tracking.uri={spec.tracking_uri} cannot be used ({first_line}): pass a sqlite:///path/to/file.db "
            "URI or the http:// address of an mlflow server"
        ) from None
    experiment_id = _experiment_id(client, cfg["tracking"]["experiment"], spec.tracking_uri)
    world = cfg["nodes"] * cfg["workers_per_node"]
    tags = {
        "algo": cfg["algo"]["name"],
        "model": cfg["model"]["name"],
        "dataset": cfg["dataset"]["name"],
        "world_size": str(world),
        "nodes": str(cfg["nodes"]),
        "workers_per_node": str(cfg["workers_per_node"]),
        "git_commit": spec.git_commit,
        "mlflow.source.git.commit": spec.git_commit,
        "config_hash": spec.config_hash,
        "hostname": socket.gethostname(),
        "launcher": cfg["launcher"]["name"],
        "network": cfg["network"]["name"],
        "network_mode": cfg["network"]["mode"],
    }
    run_name = cfg["tracking"]["run_name"] or f"{cfg['algo']['name']}-{cfg['model']['name']}-{cfg['dataset']['name']}-n{world}"
    run = client.create_run(experiment_id, run_name=run_name, tags=tags)
    params = [Param(k, v) for k, v in flatten(cfg).items()]
    for start in range(0, len(params), _PARAMS_PER_BATCH):
        client.log_batch(run.info.run_id, params=params[start : start + _PARAMS_PER_BATCH])
    return run.info.run_id


def close_run(uri: str, run_id: str, status: str) -> None:
    _client(uri).set_terminated(run_id, status=status)


def run_status(uri: str, run_id: str) -> str:
    return _client(uri).get_run(run_id).info.status


class RunLogger:
    """Rank 0's writer: metrics in batches, files as artifacts."""

    def __init__(self, uri: str, run_id: str) -> None:
        self.client = _client(uri)
        self.run_id = run_id

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        self.log_series((key, value, step) for key, value in metrics.items())

    def log_series(self, points: Iterable[tuple[str, float, int]]) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        batch = [Metric(key, float(value), now, int(step)) for key, value, step in points]
        for start in range(0, len(batch), _METRICS_PER_BATCH):
            self.client.log_batch(self.run_id, metrics=batch[start : start + _METRICS_PER_BATCH])

    def log_artifact(self, path: Path) -> None:
        self.client.log_artifact(self.run_id, str(path))
