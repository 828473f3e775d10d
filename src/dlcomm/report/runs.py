"""The finished runs of an experiment, read from MLflow into one pandas row per run.

Only runs that finished count (FAILED and KILLED runs have partial metrics) and never a sweep's
parent run (it carries no metrics). Reading never creates a store: a missing SQLite file is
the user's mistake (a wrong ``tracking.uri``, or nothing trained yet), said in one line
(:func:`dlcomm.tracking.mlflow_run.check_store`).
"""

from __future__ import annotations

import pandas as pd

from dlcomm.errors import UserError


def experiment_names(uri: str) -> list[str]:
    """Names of the store's experiments that hold at least one finished run."""
    from dlcomm.tracking.mlflow_run import store_client

    client = store_client(uri)
    names = []
    for experiment in client.search_experiments():
        if client.search_runs([experiment.experiment_id], "attributes.status = 'FINISHED'", max_results=1):
            names.append(experiment.name)
    return sorted(names)


def load_runs(uri: str, experiment: str) -> pd.DataFrame:
    """One row per finished, non-parent run of ``experiment``: ``run_id``, ``start_time`` and
    the ``params.*``, ``metrics.*`` (last values) and ``tags.*`` columns of MLflow."""
    import mlflow

    mlflow.set_tracking_uri(uri)
    if mlflow.get_experiment_by_name(experiment) is None:
        raise UserError(f"the store {uri} has no experiment {experiment!r}: {_where_to_look(uri, experiment)}")
    runs = mlflow.search_runs(experiment_names=[experiment], filter_string="attributes.status = 'FINISHED'")
    if "tags.sweep" in runs.columns:
        runs = runs[runs["tags.sweep"].fillna("") != "true"]
    if runs.empty:
        raise UserError(f"experiment {experiment!r} in {uri} has no finished run: train it first")
    return runs.reset_index(drop=True)


def find_sweep(uri: str, which: str) -> tuple[str, str]:
    """``(parent run id, experiment name)`` of the sweep ``which``: a parent run's id, or ``last``
    (the sweep parent started most recently in the store)."""
    from mlflow.exceptions import MlflowException

    from dlcomm.tracking.mlflow_run import store_client

    client = store_client(uri)
    if which == "last":
        ids = [experiment.experiment_id for experiment in client.search_experiments()]
        parents = (
            client.search_runs(ids, "tags.sweep = 'true'", order_by=["attributes.start_time DESC"], max_results=1)
            if ids
            else []
        )
        if not parents:
            raise UserError(f"the store {uri} holds no sweep: run one with `dlcomm train -m ...` first")
        parent = parents[0]
    else:
        try:
            parent = client.get_run(which)
        except MlflowException:
            raise UserError(
                f"sweep={which} is not a run of {uri}: pass a sweep's parent run id "
                "(printed as 'sweep of N runs: parent mlflow run <id>'), or sweep=last"
            ) from None
        if parent.data.tags.get("sweep") != "true":
            raise UserError(
                f"sweep={which} is a run, not a sweep's parent: pass the id its sweep printed, or sweep=last"
            )
    return parent.info.run_id, client.get_experiment(parent.info.experiment_id).name


def load_sweep_runs(uri: str, parent: str, experiment: str) -> pd.DataFrame:
    """:func:`load_runs` for the finished runs of one sweep (the children of ``parent``)."""
    import mlflow

    mlflow.set_tracking_uri(uri)
    runs = mlflow.search_runs(
        experiment_names=[experiment],
        filter_string=f"attributes.status = 'FINISHED' and tags.mlflow.parentRunId = '{parent}'",
    )
    if runs.empty:
        raise UserError(
            f"the sweep {parent} in {uri} has no finished run yet: wait for its runs, or look with `dlcomm runs`"
        )
    return runs.reset_index(drop=True)


def metric_history(uri: str, run_id: str, key: str) -> pd.Series:
    """``key``'s values by MLflow step (the last value logged at each step)."""
    from dlcomm.tracking.mlflow_run import store_client

    points = store_client(uri).get_metric_history(run_id, key)
    series = pd.Series(
        {point.step: point.value for point in sorted(points, key=lambda p: (p.step, p.timestamp))}, dtype=float
    )
    return series.sort_index()


def _where_to_look(uri: str, experiment: str) -> str:
    """The fix for a missing experiment: its sweep when dlcomm ships one of that name, else the
    experiments the store does hold."""
    from importlib.resources import files

    shipped = files("dlcomm.configs").joinpath("experiment", f"{experiment}.yaml")
    if shipped.is_file():
        commands = [
            line.lstrip("# ").strip()
            for line in shipped.read_text().splitlines()
            if line.lstrip("# ").startswith(f"dlcomm train -m experiment={experiment}")
        ]
        return f"run its sweep first: {commands[0] if commands else f'dlcomm train experiment={experiment}'}"
    held = experiment_names(uri)
    if not held:
        return "it has no finished run yet: train first"
    return f"it holds {', '.join(held)}; pass experiment=<one of them>, or --all for every one"
