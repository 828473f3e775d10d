"""A sweep's comparison, kept with the sweep: ``dlcomm report sweep=<parent run id>|last``, and the
end of every ``dlcomm train -m`` run here.

The sweep's finished runs (the children of its parent run) are summarised as an experiment's are
(:func:`dlcomm.report.build.write_report`: the table, its figures, the run data), written to
``results/sweeps/<parent run id>/``, and logged to the parent run: the files as artifacts under
``comparison/``, the table as an MLflow table (``comparison/table.json``, which the UI's artifact
view shows as a table). Every child gets its own figures as metrics the runs list can show beside
its name, on the clock the table's speedup uses (the simulated one when every run of the setting
has it, else the wall clock):

* ``summary/ms_per_iter``: ``t``, the time per iteration in ms, split as ``summary/compute_ms``
  ``= t (1 - c)`` and ``summary/comm_exposed_ms = t c`` (``c`` the communication share);
* ``summary/samples_per_s = B / t`` with ``B`` = workers x per-worker batch x micro-batches per step;
* ``summary/test_acc_pct``: the final mean test accuracy in %;
* ``summary/speedup = t_baseline / t``, ``t_baseline`` the mean over seeds of ``report.baseline``'s
  runs in the same setting (absent when the sweep has no such run).
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pandas as pd

from dlcomm.metrics import names

SUMMARY = "summary/"
FOLDER = "comparison"  # the parent run's artifact folder


def _final(run: pd.Series, key: str) -> float:
    value = run.get("metrics." + key)
    return float(value) if value is not None and not pd.isna(value) else math.nan


def child_summary(run: pd.Series, simulated: bool, baseline_ms: float) -> dict[str, float]:
    """The ``summary/*`` metrics of one child run (see the module docstring)."""
    t = _final(run, names.FINAL_SIM_TIME_PER_ITER if simulated else names.FINAL_TIME_PER_ITER)
    share = _final(run, names.FINAL_SIM_COMM_SHARE if simulated else names.FINAL_COMM_SHARE)
    per_step = (
        float(run["tags.world_size"])
        * float(run["params.train.batch_size"])
        * float(run.get("params.train.comm_interval", 1) or 1)
    )
    out = {
        "ms_per_iter": 1e3 * t,
        "compute_ms": 1e3 * t * (1 - share),
        "comm_exposed_ms": 1e3 * t * share,
        "samples_per_s": per_step / t if t > 0 else math.nan,
        "test_acc_pct": 100 * _final(run, names.FINAL_TEST_ACC),
    }
    if not math.isnan(baseline_ms) and t > 0:
        out["speedup"] = baseline_ms / (1e3 * t)
    # rounded as the table prints them (the UI shows every digit: 88.88000000000001)
    return {
        SUMMARY + key: round(value, 2 if key == "test_acc_pct" else 3)
        for key, value in out.items()
        if not math.isnan(value)
    }


def children_summaries(table: pd.DataFrame, runs: pd.DataFrame) -> dict[str, dict[str, float]]:
    """``run id -> summary/* metrics`` for every run in ``table`` (rows: (setting, method), with
    their ``runs`` ids, ``baseline`` and ``speedup_clock``)."""
    by_id = runs.set_index("run_id")
    out: dict[str, dict[str, float]] = {}
    for _, row in table.iterrows():
        simulated = row.get("speedup_clock", "") == "simulated" or (
            row.get("speedup_clock", "") == "" and not pd.isna(row["sim_ms_per_iter"])
        )
        base = table[(table["setting"] == row["setting"]) & (table["method"] == row["baseline"])]
        column = "sim_ms_per_iter" if simulated else "wall_ms_per_iter"
        baseline_ms = float(base[column].iloc[0]) if row["baseline"] and not base.empty else math.nan
        for run_id in str(row["runs"]).split():
            out[run_id] = child_summary(by_id.loc[run_id], simulated, baseline_ms)
    return out


def log_comparison(uri: str, parent: str, table: pd.DataFrame, runs: pd.DataFrame, files: list[Path]) -> None:
    """The comparison onto the parent run (artifacts, the MLflow table) and each child's summary metrics."""
    from mlflow.entities import Metric
    from mlflow.tracking import MlflowClient

    from dlcomm.report.table import presentable
    from dlcomm.tracking.mlflow_run import retrying

    client = MlflowClient(tracking_uri=uri)
    # children first, the parent's files last: whoever sees the comparison on the parent (a user, a
    # test polling for comparison/table.md) finds every child's summary already there
    now = int(pd.Timestamp.now().timestamp() * 1000)
    for run_id, metrics in children_summaries(table, runs).items():
        retrying(client.log_batch, run_id, metrics=[Metric(key, value, now, 0) for key, value in metrics.items()])
    # log_table appends to an existing file: a sweep reported again keeps its one table
    if not any(item.path == f"{FOLDER}/table.json" for item in client.list_artifacts(parent, FOLDER)):
        retrying(client.log_table, parent, presentable(table), f"{FOLDER}/table.json")
    for path in files:
        retrying(client.log_artifact, parent, str(path), FOLDER)


def report_sweep(uri: str, which: str, root: Path) -> tuple[str, list[Path]]:
    """Summarise the sweep ``which`` (a parent run id or ``last``) into ``root/sweeps/<parent>/``
    and log it to the parent run; its parent run id and the files written."""
    from dlcomm.report.build import write_report
    from dlcomm.report.groups import assign
    from dlcomm.report.runs import find_sweep, load_sweep_runs

    parent, experiment = find_sweep(uri, which)
    runs = load_sweep_runs(uri, parent, experiment)
    table, files = write_report(
        experiment,
        uri,
        root / "sweeps" / parent,
        runs=runs,
        command=f"dlcomm report sweep={parent}",
        title=f"sweep {parent[:8]} ({experiment})",
    )
    log_comparison(uri, parent, table, assign(runs)[0], files)
    return parent, files


def compare_sweep(uri: str, parent: str) -> None:
    """The sweep's comparison (:mod:`dlcomm.report.sweep`) at its end; a failure to write it is
    one line on stderr and leaves the sweep's outcome as it is (``dlcomm report sweep=<parent>``
    tries again)."""
    from dlcomm.paths import results_dir

    try:
        _, written = report_sweep(uri, parent, results_dir())
    except Exception as error:  # noqa: BLE001 - the runs are recorded; only their summary is missing
        first = (str(error).strip().splitlines() or [type(error).__name__])[0]
        print(
            f"dlcomm: the sweep's comparison was not written ({first}); retry with `dlcomm report sweep={parent}`",
            file=sys.stderr,
            flush=True,
        )
        return
    print(f"sweep comparison: {written[0].parent}/table.md (also artifacts of the parent run, comparison/)", flush=True)
