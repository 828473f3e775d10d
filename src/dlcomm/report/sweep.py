"""A sweep's comparison, kept with the sweep: ``dlcomm report sweep=<parent run id>|last``, and the
end of every ``dlcomm train -m`` run here.

The sweep's finished runs (the children of its parent run) are summarised as an experiment's are
(:func:`dlcomm.report.build.write_report`: the table, its figures, the run data), written to
``results/sweeps/<parent run id>/``, and logged to the parent run: the files as artifacts under
``comparison/``, the table as an MLflow table (``comparison/table.json``, which the UI's artifact
view shows as a table). Every child gets ``summary/*`` metrics the runs list can show beside its
name, on the clock the table's speedup uses (the simulated one when every run of the setting has
it, else the wall clock), chosen so that the UI's group row (Group by a tag such as ``algo``,
aggregate Average) shows the table's figure for the (setting, method):

* the run's own figures, whose mean over the method's runs is the table's cell (the table's are
  means over seeds): ``summary/ms_per_iter``: ``t``, the time per iteration in ms, split as
  ``summary/compute_ms = t (1 - c - w)``, ``summary/peer_wait_ms = t w`` and
  ``summary/comm_exposed_ms = t c`` (``c`` the communication share, ``w`` the share spent waiting
  for peers: on the wall clock of threads only, else 0 and no ``peer_wait_ms``);
  ``summary/test_acc_pct``: the final mean test accuracy in %;
* the method's figures, the same on each of its runs (a ratio's mean over runs is not the ratio
  of the means): with ``T`` the table's time per iteration of the method (the mean of its runs'
  ``t``), ``summary/speedup = T_baseline / T``, the table's speedup (exactly 1.00 on every run of
  ``report.baseline``; absent when the sweep has no such run), and ``summary/samples_per_s = B / T``
  with ``B`` = workers x per-worker batch x micro-batches per step: the throughput at the group
  row's ``summary/ms_per_iter`` (a run's own, ``B / t``, is its ``final/samples_per_s``, on the
  wall clock).

No per-run speedup is logged: the group row would show its mean, not the table's figure (the
baseline's runs' ``T_baseline / t`` average above 1 whenever their times differ), and the table's
``speedup_std`` already gives the spread over seeds.
"""

from __future__ import annotations

import math
import re
import sys
from pathlib import Path
from typing import Any, Sequence

import pandas as pd

from dlcomm.metrics import names
from dlcomm.metrics.batch import step_batch
from dlcomm.report.table import clock_lines, comparisons, presentable
from dlcomm.tracking.ui import (
    DESCRIPTION_TAG,
    experiment_of,
    run_page,
    runs_view,
    share_view,
    sweep_view_state,
    ui_lines,
)

SUMMARY = "summary/"
FOLDER = "comparison"  # the parent run's artifact folder


def _final(run: pd.Series, key: str) -> float:
    value = run.get("metrics." + key)
    return float(value) if value is not None and not pd.isna(value) else math.nan


def child_summary(run: pd.Series, simulated: bool, method_ms: float, speedup: float) -> dict[str, float]:
    """The ``summary/*`` metrics of one child run (see the module docstring): ``method_ms`` is the
    table's mean time per iteration of its method (ms, on the speedup's clock), ``speedup`` the
    table's speedup of its method (nan without a baseline)."""
    t = _final(run, names.FINAL_SIM_TIME_PER_ITER if simulated else names.FINAL_TIME_PER_ITER)
    share = _final(run, names.FINAL_SIM_COMM_SHARE if simulated else names.FINAL_COMM_SHARE)
    per_step = float(run["tags.world_size"]) * step_batch(
        float(run["params.train.batch_size"]), float(run.get("params.train.comm_interval", 1) or 1)
    )
    # waiting for peers, told apart on the wall clock of threads (the table's wall column has it too)
    waiting = math.nan if simulated else _final(run, names.FINAL_PEER_WAIT_SHARE)
    out = {
        "ms_per_iter": 1e3 * t,
        "compute_ms": 1e3 * t * (1 - share - (0.0 if math.isnan(waiting) else waiting)),
        "peer_wait_ms": 1e3 * t * waiting,
        "comm_exposed_ms": 1e3 * t * share,
        "test_acc_pct": 100 * _final(run, names.FINAL_TEST_ACC),
        "samples_per_s": 1e3 * per_step / method_ms if method_ms > 0 else math.nan,
        "speedup": speedup,
    }
    # rounded (the UI shows every digit: 88.88000000000001): the speedup as the table prints it,
    # the rest one digit or more finer than the table, so that the group's mean reads as its cell
    return {
        SUMMARY + key: round(value, 2 if key == "speedup" else 3) for key, value in out.items() if not math.isnan(value)
    }


def _on_simulated_clock(row: pd.Series) -> bool:
    """Whether a table row's figures (and so its runs' summary/*) are on the simulated clock."""
    return row.get("speedup_clock", "") == "simulated" or (
        row.get("speedup_clock", "") == "" and not pd.isna(row["sim_ms_per_iter"])
    )


def summary_clock(row: pd.Series) -> str:
    """The clock of a table row's summary/* figures, in words (the tag ``summary_clock`` of its
    runs): ``simulated <network>``, or ``wall clock`` and, where the ranks shared this machine's
    cores, ``; ranks shared cores``."""
    if _on_simulated_clock(row):
        network = str(row.get("network", "") or "")
        return f"simulated {network}" if network and network != "off" and "," not in network else "simulated"
    shared = not pd.isna(row.get("ranks_per_core", math.nan)) and row.get("ranks_per_core", 0) > 1
    return "wall clock; ranks shared cores" if shared else "wall clock"


def children_summaries(table: pd.DataFrame, runs: pd.DataFrame) -> dict[str, dict[str, float]]:
    """``run id -> summary/* metrics`` for every run in ``table`` (rows: (setting, method), with
    their ``runs`` ids, times per iteration, ``speedup`` and ``speedup_clock``)."""
    by_id = runs.set_index("run_id")
    out: dict[str, dict[str, float]] = {}
    for _, row in table.iterrows():
        simulated = _on_simulated_clock(row)
        method_ms = float(row["sim_ms_per_iter" if simulated else "wall_ms_per_iter"])
        speedup = float(row.get("speedup", math.nan))
        for run_id in str(row["runs"]).split():
            out[run_id] = child_summary(by_id.loc[run_id], simulated, method_ms, speedup)
    return out


def _metric_name(text: str) -> str:
    """``text`` in the characters MLflow allows in a metric name (others become ``_``)."""
    return re.sub(r"[^A-Za-z0-9_\-. /:]", "_", text).strip("_")


def spread_decimals(std: float, fallback: int) -> int:
    """The decimals a mean with standard deviation ``std`` is worth: to the spread's first
    significant digit (0 to 4 decimals; further digits are noise over seeds), ``fallback`` when
    there is no spread (one seed, or a clock that repeats exactly). ``round`` to them gives the
    nearest double, which the UI prints short (``79.84``, not ``79.83500000000001``)."""
    if pd.isna(std) or std <= 0:
        return fallback
    return min(4, max(0, -math.floor(math.log10(std))))


def _rounded(value: float, std: float, fallback: int) -> float:
    return round(float(value), spread_decimals(std, fallback))


def clock_key(row: pd.Series) -> str:
    """The clock of a table row's speedup as part of a metric name: ``sim_<network>`` (``sim``
    when the row spans networks), ``wall``; MLflow shows a metric's name beside its value on the
    run's page and as the runs list's column header, where a tag would be out of sight."""
    clock = summary_clock(row)  # "simulated eth_10g", "simulated", "wall clock[; ranks shared cores]"
    if clock.startswith("simulated"):
        return _metric_name(clock.replace("simulated", "sim").replace(" ", "_"))
    return "wall"


def _figures(row: pd.Series) -> dict[str, tuple[float, float, int]]:
    """A table row's headline figures: ``name -> (mean, spread, decimals without a spread)``."""
    on = "sim" if _on_simulated_clock(row) else "wall"
    return {
        "speedup": (row.get("speedup", math.nan), row.get("speedup_std", math.nan), 2),
        "ms_per_iter": (row[f"{on}_ms_per_iter"], row.get(f"{on}_ms_per_iter_std", math.nan), 2),
        "test_acc_pct": (row["final_acc_mean"], row.get("final_acc_std", math.nan), 2),
    }


def parent_metrics(table: pd.DataFrame) -> dict[str, float]:
    """The table's headline figures as the parent run's metrics (its page lists them):
    ``<method>/speedup_<clock>``, ``<method>/ms_per_iter_<clock>`` (the speedup's clock,
    :func:`clock_key`: ``sim_eth_10g``, ``wall``) and ``<method>/test_acc_pct``, prefixed by
    ``<setting>/`` when the sweep has several settings, and by ``comparison <n>/`` when it has
    several comparisons (clocks or compute profiles). Each is rounded to the first significant
    digit of its spread over seeds (:func:`spread_decimals`)."""
    several = table["setting"].nunique() > 1
    numbers = {heading: number for number, (heading, _) in enumerate(comparisons(table), 1)}
    out: dict[str, float] = {}
    for _, row in table.iterrows():
        prefix = _metric_name(f"{row['setting']}/{row['method']}" if several else str(row["method"])) + "/"
        if len(numbers) > 1:  # the same setting and method in two comparisons: apart, as in the table
            prefix = f"comparison {numbers[row['comparison']]}/{prefix}"
        clock = clock_key(row)
        for key, (mean, std, fallback) in _figures(row).items():
            if not pd.isna(mean):
                name = key if key == "test_acc_pct" else f"{key}_{clock}"
                out[prefix + name] = _rounded(mean, std, fallback)
    return out


def _clock_words(rows: pd.DataFrame) -> str:
    """The clock of a comparison's speedup in words: ``the simulated eth_10g clock``, ``the wall clock``."""
    clock = summary_clock(rows.iloc[0]).split(";")[0]
    return f"the {clock} clock" if clock.startswith("simulated") else "the wall clock"


def _compute_words(heading: str, rows: pd.DataFrame) -> str:
    """What the simulated clock charged as compute, short (the heading's ``compute ...`` part, less
    its provenance in parentheses); on the wall clock, whether the ranks shared cores."""
    if not _on_simulated_clock(rows.iloc[0]):
        return summary_clock(rows.iloc[0]).partition("; ")[2]  # "ranks shared cores" or ''
    part = next((p for p in heading.split("; ") if p.startswith("compute ")), "")
    return part.split(" (")[0]


def headline_lines(table: pd.DataFrame) -> list[str]:
    """The comparison in a line per comparison (clock and compute profile): each method's speedup
    over the baseline on the clock named (its time per iteration when the sweep has no baseline)
    and its final test accuracy, rounded as the parent's metrics are (:func:`spread_decimals`)."""
    lines = []
    for heading, rows in comparisons(table):
        parts = []
        for _, row in rows.iterrows():
            figures = {
                key: f"{float(m):.{spread_decimals(s, d)}f}"
                for key, (m, s, d) in _figures(row).items()
                if not pd.isna(m)
            }
            label = f"{row['setting']} {row['method']}" if table["setting"].nunique() > 1 else str(row["method"])
            time = f"{figures['speedup']}x" if "speedup" in figures else f"{figures['ms_per_iter']} ms/iter"
            parts.append(f"**{label} {time}**, {figures['test_acc_pct']}%")
        first = rows.iloc[0]
        what = (
            f"speedup over {first['baseline']}" if not pd.isna(first.get("speedup", math.nan)) else "time per iteration"
        )
        compute = _compute_words(heading, rows)
        seeds = f"mean of {int(rows['seeds'].max())} seeds" if rows["seeds"].max() > 1 else "one seed"
        lines.append(
            f"{what[:1].upper() + what[1:]} on {_clock_words(rows)}"
            + (f" ({compute})" if compute else "")
            + f", and final test accuracy ({seeds}): "
            + "; ".join(parts)
        )
    return lines


def parent_description(
    parent: Any, table: pd.DataFrame, figures: list[Path], view: str, notes: Sequence[str] = ()
) -> str:
    """The sweep's comparison as its parent run's description (markdown on the run's page): the
    table with every column (a table per comparison, headed by its clock and compute profile:
    :func:`~dlcomm.report.table.comparisons`), the clock it is on, its figures as images (from the parent's
    artifacts), why a figure is missing (``notes``: the lines of table.md), and a link to the runs
    list ``view`` (its children grouped by method)."""
    from dlcomm.report.build import clock_sentence, comparison_lines
    from dlcomm.tracking.ui import artifact_image, fit_description

    # the UI folds a description after two lines: those are the comparison's headline, a line each
    # (a markdown hard break, two trailing spaces, keeps them apart without a paragraph's margin)
    headline = headline_lines(table)
    lines = [
        *(line + "  " for line in headline),
        f"**{parent.data.tags.get('mlflow.runName', 'sweep')}**: its runs [grouped by method]({view}); "
        f"the files under Artifacts, `{FOLDER}/`.",
        "",
        clock_sentence(table),
        "",
    ]
    sections = comparisons(table)  # a table per clock and compute profile, each headed by them
    lines += [line for number, (_, rows) in enumerate(sections, 1) for line in comparison_lines(sections, number, rows)]
    lines += [artifact_image(parent.info.run_id, f"{FOLDER}/{figure.name}", figure.stem) for figure in figures]
    lines += [line for line in notes if line.startswith("No accuracy figure")]  # why a figure is missing
    return fit_description("\n".join(lines))


def ui_table(table: pd.DataFrame) -> pd.DataFrame:
    """The table for the MLflow UI's table view (one table): each comparison's presentable rows,
    under a first column naming the comparison when there are several; a speedup column's header
    names its clock, so one column never holds two clocks' figures."""
    sections = comparisons(table)
    if len(sections) == 1:
        return presentable(table)
    return pd.concat(
        [presentable(rows).assign(comparison=heading) for heading, rows in sections], ignore_index=True
    ).pipe(lambda shown: shown[["comparison", *(c for c in shown.columns if c != "comparison")]])


def log_comparison(uri: str, parent: str, table: pd.DataFrame, runs: pd.DataFrame, files: list[Path]) -> str:
    """The comparison onto the parent run (artifacts, the MLflow table, its description) and each
    child's summary metrics; the experiment's id."""
    from mlflow.entities import Metric, RunTag

    from dlcomm.tracking.mlflow_run import retrying, store_client

    client = store_client(uri)
    # children first, the parent's files last: whoever sees the comparison on the parent (a user, a
    # test polling for comparison/table.md) finds every child's summary already there
    now = int(pd.Timestamp.now().timestamp() * 1000)
    clocks = {run_id: summary_clock(row) for _, row in table.iterrows() for run_id in str(row["runs"]).split()}
    for run_id, metrics in children_summaries(table, runs).items():
        retrying(
            client.log_batch,
            run_id,
            metrics=[Metric(key, value, now, 0) for key, value in metrics.items()],
            tags=[RunTag("summary_clock", clocks[run_id])],  # which clock the summary/* figures are on
        )
    # log_table appends to an existing file: a sweep reported again keeps its one table
    if not any(item.path == f"{FOLDER}/table.json" for item in client.list_artifacts(parent, FOLDER)):
        retrying(client.log_table, parent, ui_table(table), f"{FOLDER}/table.json")
    for path in files:
        retrying(client.log_artifact, parent, str(path), FOLDER)
    run = retrying(client.get_run, parent)
    experiment_id = run.info.experiment_id
    key = share_view(client, experiment_id, sweep_view_state(parent))
    view = runs_view(experiment_id, key)
    retrying(
        client.log_batch, parent, metrics=[Metric(key, value, now, 0) for key, value in parent_metrics(table).items()]
    )
    # the time per iteration first: what a sweep of communication schemes is about
    figures = sorted(
        (path for path in files if path.suffix == ".png"), key=lambda path: path.stem != "time_per_iteration"
    )
    notes = next((path.read_text().splitlines() for path in files if path.name == "table.md"), [])
    retrying(client.set_tag, parent, DESCRIPTION_TAG, parent_description(run, table, figures, view, notes))
    return experiment_id


def report_sweep(uri: str, which: str, root: Path) -> tuple[str, list[Path], pd.DataFrame]:
    """Summarise the sweep ``which`` (a parent run id or ``last``) into ``root/sweeps/<parent>/``
    and log it to the parent run; its parent run id, the files written and the table."""
    from dlcomm.paths import entry_name
    from dlcomm.report.build import method_groups_of, sweep_title, write_report
    from dlcomm.report.groups import assign
    from dlcomm.report.runs import find_sweep, load_sweep_runs

    parent, experiment = find_sweep(uri, which)
    runs = load_sweep_runs(uri, parent, experiment)
    table, files = write_report(
        experiment,
        uri,
        root / "sweeps" / entry_name(parent),
        runs=runs,
        command=f"dlcomm report sweep={parent}",
        title=sweep_title(experiment, runs),  # the experiment and its setting: no run id in a figure
    )
    log_comparison(uri, parent, table, assign(runs, method_groups_of(experiment, runs))[0], files)
    return parent, files, table


def compare_sweep(uri: str, parent: str) -> None:
    """The sweep's comparison (:mod:`dlcomm.report.sweep`) at its end, with the clock and compute
    profile its simulated figures rest on (:func:`~dlcomm.report.table.clock_lines`: each, when its
    runs differ); a failure to write it is one line on stderr and leaves the sweep's outcome as it
    is (``dlcomm report sweep=<parent>`` tries again)."""
    from dlcomm.paths import results_dir

    try:
        _, written, table = report_sweep(uri, parent, results_dir())
    except Exception as error:  # noqa: BLE001 - the runs are recorded; only their summary is missing
        first = (str(error).strip().splitlines() or [type(error).__name__])[0]
        print(
            f"dlcomm: the sweep's comparison was not written ({first}); retry with `dlcomm report sweep={parent}`",
            file=sys.stderr,
            flush=True,
        )
        return
    print(f"sweep comparison: {written[0].parent}/table.md (also artifacts of the parent run, comparison/)", flush=True)
    for line in clock_lines(table):
        print(f"sweep comparison: {line}", flush=True)
    print(ui_lines(run_page(uri, experiment_of(uri, parent), parent), uri), flush=True)
