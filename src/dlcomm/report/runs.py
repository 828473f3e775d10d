"""The finished runs of an experiment, read from MLflow into one pandas row per run.

Only runs that finished count (FAILED and KILLED runs have partial metrics) and never a sweep's
parent run (it carries no metrics). Reading never creates a store: a missing SQLite file is
the user's mistake (a wrong ``tracking.uri``, or nothing trained yet), said in one line
(:func:`dlcomm.tracking.mlflow_run.check_store`).

A store holds what others put there too: runs of other tools beside dlcomm's in the same
experiment, runs of older dlcomm versions, values changed by hand. A run the report cannot read
as dlcomm records it (:func:`unreportable`: no ``algo.name`` or ``seed``, a count that is no
integer) is left out of the table, and the report says which and why in one line; an experiment
that has none left is refused in one line. A deleted experiment is refused with its fixes
(:mod:`dlcomm.tracking.lifecycle`).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import pandas as pd

from dlcomm.errors import UserError

if TYPE_CHECKING:
    from dlcomm.config.schema import ReportConfig

# the values a report reads as integers, where a run has them: dlcomm records them so
INTEGERS = (
    "params.seed",
    "params.nodes",
    "params.workers_per_node",
    "params.train.batch_size",
    "params.train.comm_interval",
    "params.train.eval_replicas",
    "tags.world_size",
)
_INTEGER = re.compile(r"-?[0-9]+")


def _given(value: object) -> bool:
    return value is not None and not (isinstance(value, float) and pd.isna(value)) and str(value).strip() != ""


def unreportable(run: pd.Series) -> str:
    """Why a report cannot read ``run`` (a row of :func:`load_runs`) as a run of dlcomm; '' when it can."""
    if not _given(run.get("params.algo.name")):
        return "no param algo.name, another tool's"
    if not _given(run.get("params.seed")):
        return "no param seed"
    for column in INTEGERS:
        value = run.get(column)
        if _given(value) and not _INTEGER.fullmatch(str(value).strip()):
            kind, key = column.split(".", 1)
            return f"{kind[:-1]} {key} is {str(value)[:24]!r}, not an integer"
    return ""


def skipped_line(experiment: str, skipped: dict[str, list[str]]) -> str:
    """One line naming the finished runs of ``experiment`` left out of its table, by reason."""
    count = sum(len(ids) for ids in skipped.values())
    parts = [
        f"{reason}: {' '.join(ids[:5])}{f' and {len(ids) - 5} more' if len(ids) > 5 else ''}"
        for reason, ids in skipped.items()
    ]
    return (
        f"{experiment}: {count} finished run(s) left out of the table, not recorded by dlcomm or not readable "
        f"as its runs ({'; '.join(parts)})"
    )


def experiment_names(uri: str) -> list[str]:
    """Names of the store's experiments that hold at least one finished run."""
    from dlcomm.tracking.mlflow_run import store_client

    client = store_client(uri)
    names = []
    for experiment in client.search_experiments():
        if client.search_runs([experiment.experiment_id], "attributes.status = 'FINISHED'", max_results=1):
            names.append(experiment.name)
    return sorted(names)


def load_runs(uri: str, experiment: str, skipped: dict[str, list[str]] | None = None) -> pd.DataFrame:
    """One row per finished, non-parent run of ``experiment`` that dlcomm can read
    (:func:`unreportable`): ``run_id``, ``start_time`` and the ``params.*``, ``metrics.*`` (last
    values) and ``tags.*`` columns of MLflow. ``skipped`` receives the ids of the runs left out, by reason."""
    import mlflow

    from dlcomm.tracking.lifecycle import active
    from dlcomm.tracking.mlflow_run import store_client

    found = active(store_client(uri), uri, experiment, "experiment")  # a deleted one: refused with its fixes
    if found is None:
        raise UserError(f"the store {uri} has no experiment {experiment!r}: {_where_to_look(uri, experiment)}")
    mlflow.set_tracking_uri(uri)
    runs = mlflow.search_runs(experiment_ids=[found.experiment_id], filter_string="attributes.status = 'FINISHED'")
    if "tags.sweep" in runs.columns:
        runs = runs[runs["tags.sweep"].fillna("") != "true"]
    if runs.empty:
        raise UserError(f"experiment {experiment!r} in {uri} has no finished run: train it first")
    runs, left_out = _readable(runs)
    if runs.empty:
        reasons = "; ".join(f"{reason}: {len(ids)} run(s)" for reason, ids in left_out.items())
        raise UserError(
            f"experiment {experiment!r} in {uri} has no finished run that dlcomm recorded or can read ({reasons}): "
            "train into it with dlcomm (tracking.experiment=<name>), or pass another experiment"
        )
    if skipped is not None:
        skipped.update(left_out)
    return runs


def _readable(runs: pd.DataFrame) -> tuple[pd.DataFrame, dict[str, list[str]]]:
    """``runs`` split: those dlcomm can read (:func:`unreportable`), and the others' ids by reason."""
    reasons = [unreportable(run) for _, run in runs.iterrows()]
    left_out: dict[str, list[str]] = {}
    for run_id, reason in zip(runs["run_id"], reasons):
        if reason:
            left_out.setdefault(reason, []).append(run_id)
    kept = runs[[not reason for reason in reasons]]
    if left_out:  # the columns only the runs left out had (another tool's params and metrics) go with them
        kept = kept.drop(columns=[c for c in kept.columns if kept[c].isna().all() and runs[c].notna().any()])
    return kept.reset_index(drop=True), left_out


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
    runs, _ = _readable(runs)
    if runs.empty:
        raise UserError(f"the sweep {parent} in {uri} has no finished run that dlcomm can read")
    return runs


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
    shipped = shipped_experiment(experiment)
    if shipped is not None:
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


def plain_name(name: str) -> bool:
    """Whether ``name`` could name a config file dlcomm ships (``configs/experiment/<name>.yaml``):
    letters, digits, ``_``, ``.``, ``-``; a name from a store may be anything (a path, 500 characters)."""
    return re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.\-]{0,127}", name) is not None


def shipped_experiment(name: str, plugins: bool = False):
    """``configs/experiment/<name>.yaml`` as dlcomm ships it, or None; with ``plugins``, else an
    installed plugin's (its config package: entry points ``dlcomm.configs``), in the order Hydra
    searches them."""
    from importlib.resources import files

    if not plain_name(name):
        return None
    packages = ["dlcomm.configs"]
    if plugins:
        from dlcomm.plugins import config_search_path

        try:
            packages += [path.removeprefix("pkg://") for path in config_search_path()]
        except UserError:  # a plugin whose config package is gone: composing would refuse it too
            pass
    for package in packages:
        shipped = files(package).joinpath("experiment").joinpath(f"{name}.yaml")  # one name a call on 3.10
        if shipped.is_file():
            return shipped
    return None


def experiment_report(name: str) -> "ReportConfig | None":
    """The ``report`` section of the experiment ``name``'s config file (:func:`shipped_experiment`,
    plugins' included) over the schema's defaults: what ``compose(["experiment=<name>"]).report``
    holds, read from that one file, without composing and checking a whole run (an experiment's
    ``report.*`` keys read no other key, and no other config file sets them:
    tests/test_report_settings.py holds the two equal for every shipped experiment). None when no
    such file is shipped, or its ``report`` section does not read as one."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    from dlcomm.config.schema import ReportConfig

    shipped = shipped_experiment(name, plugins=True)
    if shipped is None:
        return None
    try:
        section = OmegaConf.create(shipped.read_text()).get("report") or {}
        found = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(ReportConfig), section))
    except (
        OmegaConfBaseException,
        ValueError,
        TypeError,
    ):  # composing would refuse it: the runs' value, then the default
        return None
    return found if isinstance(found, ReportConfig) else None
