"""``dlcomm report``: an experiment's finished runs -> ``results/<experiment>/`` (table.md,
table.csv, table.tex, PNG figures, and the run data they were drawn from: runs.json,
histories.csv). Grouping: :mod:`dlcomm.report.groups`; numbers: :mod:`dlcomm.report.table`;
figures: :mod:`dlcomm.report.plots`; where runs are read from (an MLflow store, or the run data of
a report's folder: ``dlcomm report --from``): :mod:`dlcomm.report.rundata`."""

from __future__ import annotations

import re
import textwrap
from functools import lru_cache
from pathlib import Path
from typing import Iterator

import pandas as pd

from dlcomm.errors import UserError
from dlcomm.metrics import names
from dlcomm.metrics.batch import step_batch
from dlcomm.report import plots
from dlcomm.report.clocks import clock_words, runs_clock, table_clock
from dlcomm.report.groups import assign
from dlcomm.report.papers import marks
from dlcomm.report.rundata import RUNS_FILE, FolderRunData, RunData, StoreRunData, save_run_data
from dlcomm.report.table import clock_lines, comparisons, presentable, summarise
from dlcomm.runs.lost import Census, survey

DEFAULT_BASELINE = "allreduce"


def seed_curves(per_seed: list[pd.Series]) -> pd.DataFrame:
    """Columns ``mean`` and ``std`` (sample standard deviation, ddof=1: nan for one seed) over
    seeds of curves ``y`` against ``x`` (their index), one per seed. Seeds evaluated at
    different ``x`` (clock times) are interpolated linearly onto the union of their points
    within the range they all cover. Where they cover no common range (e.g. each seed evaluated
    once, at its own end time) but have as many points each, the ``k``-th points are paired:
    ``x`` is the mean of the seeds' ``k``-th ``x``."""
    aligned = pd.concat(per_seed, axis=1, ignore_index=True).sort_index()
    aligned = aligned.interpolate(method="index", limit_area="inside").dropna()
    if aligned.empty and len(per_seed) > 1 and len({len(curve) for curve in per_seed}) == 1:
        values = pd.concat([curve.reset_index(drop=True) for curve in per_seed], axis=1, ignore_index=True)
        x = pd.concat([curve.index.to_series().reset_index(drop=True) for curve in per_seed], axis=1).mean(axis=1)
        aligned = values.set_axis(x.to_numpy())
    return pd.DataFrame({"mean": aligned.mean(axis=1), "std": aligned.std(axis=1, ddof=1)})


def time_axis(clock: str) -> str:
    """A training-time axis' label naming its clock (:mod:`dlcomm.report.clocks`): ``training
    time, s (simulated clock on wan_hetero)``."""
    return f"training time, s ({clock})"


def run_data(source: str | RunData) -> RunData:
    """``source`` as :class:`~dlcomm.report.rundata.RunData`: a tracking URI is its store."""
    return StoreRunData(source) if isinstance(source, str) else source


class Histories:
    """Accuracy curves over seeds of a method's runs, read once per run and metric (only the
    :data:`dlcomm.report.rundata.HISTORY_KEYS`: what a report's folder keeps)."""

    def __init__(self, source: str | RunData) -> None:
        self.data = run_data(source)
        self._read = lru_cache(maxsize=None)(self.data.history)

    def _seed_curves(self, frame: pd.DataFrame, y_key: str, x_key: str | None) -> pd.DataFrame:
        """:func:`seed_curves` of ``y`` against ``x`` (the MLflow step when ``x_key`` is None)
        over ``frame``'s runs; empty when some run lacks them."""
        per_run = []
        for run_id in frame["run_id"]:
            y = self._read(run_id, y_key)
            if x_key is not None:
                x = self._read(run_id, x_key)
                y = pd.Series(y.values, index=x.reindex(y.index).values).dropna()
            if y.empty or pd.isna(y.index).any():
                return pd.DataFrame(columns=["mean", "std"], dtype=float)
            per_run.append(y[~y.index.duplicated(keep="last")].sort_index())
        return seed_curves(per_run)

    def curves(self, frame: pd.DataFrame, kind: str) -> tuple[str, pd.DataFrame] | None:
        """The axis name and :func:`seed_curves` of the accuracy. ``kind`` "epoch": by epoch;
        "time": by training time (the clock evaluations when the runs have them, else the
        epochs' simulated or wall time); "ma": the axis the MA-acceleration uses (the clock for
        runs evaluated on it, else epochs)."""
        by_epoch = self._seed_curves(frame, names.EPOCH_TEST_ACC_MEAN, None)
        clock = self._seed_curves(frame, names.CLOCK_TEST_ACC_MEAN, names.CLOCK_TIME)
        if kind == "epoch":
            return ("epoch", by_epoch)
        if kind == "ma":
            return ("epoch", by_epoch) if clock.empty else ("training clock s", clock)
        if not clock.empty:  # the training clock: simulated under a network model, else wall
            return (time_axis(runs_clock(frame)), clock)
        for x_key, simulated in ((names.EPOCH_SIM_TIME, True), (names.EPOCH_TRAIN_TIME, False)):
            curves = self._seed_curves(frame, names.EPOCH_TEST_ACC_MEAN, x_key)
            if not curves.empty and not pd.isna(curves.index).any():
                clock = runs_clock(frame)
                if clock.startswith("simulated") != simulated:  # the epochs' times of the other clock
                    clock = clock_words(simulated, set())
                return (time_axis(clock), curves)
        return None

    def curve(self, frame: pd.DataFrame, kind: str) -> tuple[str, pd.Series] | None:
        """The axis name and the seed-mean accuracy of :meth:`curves` (what the table uses)."""
        found = self.curves(frame, kind)
        return None if found is None else (found[0], found[1]["mean"])


def report_setting(experiment: str, runs: pd.DataFrame, key: str, default: str) -> str:
    """``report.<key>`` of the experiment's config (configs/experiment/<name>.yaml, read alone:
    :func:`~dlcomm.report.runs.experiment_report`) when there is one, else of its latest run (as
    recorded: the run's params), else ``default``; as text (MLflow keeps params as text)."""
    from dlcomm.report.runs import experiment_report

    shipped = experiment_report(experiment)  # None: a tracking.experiment of the user's own
    if shipped is not None:
        return str(getattr(shipped, key))
    column = f"params.report.{key}"
    if column in runs.columns and runs[column].notna().any():
        return str(runs.sort_values("start_time")[column].dropna().iloc[-1])
    return default


def method_groups_of(experiment: str, runs: pd.DataFrame) -> tuple[str, ...]:
    """``report.method_groups``: the config groups whose choice is part of the method's label."""
    return tuple(report_setting(experiment, runs, "method_groups", "").split())


def baseline_of(experiment: str, runs: pd.DataFrame) -> str:
    """``report.baseline``: the method speedups are measured against (allreduce by default)."""
    return report_setting(experiment, runs, "baseline", DEFAULT_BASELINE)


def traffic_of(experiment: str, runs: pd.DataFrame) -> bool:
    """``report.traffic``: whether the table shows the MB sent (over the run and at the peak)."""
    return report_setting(experiment, runs, "traffic", "false").lower() == "true"


def clock_sentence(table: pd.DataFrame) -> str:
    """Which columns repeat: the wall clock's never; the simulated clock's where compute was charged
    from a profile (``sim_clock``)."""
    clocks = set(table.get("sim_clock", pd.Series(dtype=str)).fillna("")) - {""}
    if clocks == {"profile"}:
        sentence = (
            "Wall-clock columns change between repetitions; the simulated ones (compute charged from the "
            "compute profile) and the others repeat for the same configuration and seed."
        )
    else:
        sentence = (
            "Columns measured by a clock (wall and simulated ms/iter, speedup) change between repetitions; "
            "the others repeat for the same configuration and seed."
        )
    return sentence + _shared_sentence(table)


def _shared_sentence(table: pd.DataFrame) -> str:
    """Why the speedup is on the clock it is on, when the runs' ranks shared this machine's cores."""
    if not ("ranks_per_core" in table and bool((table["ranks_per_core"] > 1).any())):
        return ""
    speedup_clocks = set(table.get("speedup_clock", pd.Series(dtype=str)).fillna("")) - {""}
    if speedup_clocks == {"simulated"}:
        return (
            " The ranks shared this machine's cores, so its wall clock times their turns, not a cluster's "
            "compute and communication: the speedup is on the simulated clock (each rank's compute profiled "
            "alone, the network modelled), which answers how the methods compare on that cluster."
        )
    return (
        " The ranks shared this machine's cores, so the wall clock counts waiting for each other's turns as "
        "communication, and a method that communicates less need not look faster here: rerun with "
        "network=eth_10g (or another preset) for the speedup on a cluster's simulated clock."
    )


def _markdown(
    experiment: str,
    table: pd.DataFrame,
    baseline: str,
    figures: list[Path],
    command: str,
    histories: str,
    notes: tuple[str, ...] = (),
) -> str:
    """The table in markdown, its figures, and ``notes``: why a figure is not drawn (a line each,
    where it would be). It names no store: a report's folder keeps the run data it was drawn
    from, and the same runs give the same text whether read from the store or from the folder."""
    sections = comparisons(table)
    several = len(sections) > 1
    lines = [
        f"# {experiment}",
        "",
        f"Generated by `{command}` from the run data kept beside it (`{RUNS_FILE}`: each run's parameters, "
        f"tags and last metric values; `{histories}`: the curves the figures draw), as exported from MLflow; "
        "`dlcomm report --from <this folder>` redraws it without the store. Mean ± standard deviation over "
        f"seeds (n/a for a single seed); speedup and MA-acceleration against `{baseline}` in the same setting"
        + (SEVERAL if several else ". ")
        + clock_sentence(table),
        "",
    ]
    lines += [line for number, (_, rows) in enumerate(sections, 1) for line in comparison_lines(sections, number, rows)]
    lines += [f"![{figure.stem}]({figure.name})" for figure in figures]
    lines += [line for note in notes for line in ("", note)]
    lines += ["", "## Source runs", ""]
    for number, (_, rows) in enumerate(sections, 1):
        for _, row in rows.iterrows():
            where = (f"comparison {number} | " if several else "") + (
                f"{row['setting']} | " if row["setting"] != "all" else ""
            )
            lines.append(f"- {where}{row['method']}: MLflow runs {row['runs']} (git {row['commits']})")
    return "\n".join(lines) + "\n"


SEVERAL = (
    ", and on the same clock and compute profile: one table per comparison, never a wall-clock speedup beside "
    "a simulated one, nor simulated ones charged from different profiles. "
)


def comparison_lines(sections: list[tuple[str, pd.DataFrame]], number: int, rows: pd.DataFrame) -> list[str]:
    """The markdown of the ``number``-th of the table's comparisons (:func:`~dlcomm.report.table.comparisons`):
    its heading (when it has one: the clock, network and compute profile) and its table."""
    heading = sections[number - 1][0]
    named = heading[:1].upper() + heading[1:]
    head = [f"### Comparison {number}: {named}" if len(sections) > 1 else f"### {named}", ""] if heading else []
    return [*head, presentable(rows).to_markdown(index=False), ""]


def _latex(table: pd.DataFrame) -> str:
    """A tabular per comparison, each after a comment line naming it (when it has a heading)."""
    parts = [
        (f"% {heading}\n" if heading else "") + presentable(rows).to_latex(index=False, escape=True)
        for heading, rows in comparisons(table)
    ]
    return "\n".join(parts).replace("±", r"$\pm$")


def _description(line: str) -> str:
    """The title part of a description's first line: up to its first ':' outside parentheses.
    Without one the line runs on into the next, and its unfinished end is left out: from a
    '(' it does not close, else after its last ',' outside parentheses."""
    depth, opened, last_comma = 0, -1, -1
    for at, char in enumerate(line):
        if char == "(":
            opened, depth = (at if depth == 0 else opened), depth + 1
        elif char == ")":
            depth -= 1
        elif depth == 0 and char == ":":
            return line[:at].strip(" ,")
        elif depth == 0 and char == ",":
            last_comma = at
    if depth > 0:
        return line[:opened].strip(" ,")
    if line.endswith("."):
        return line.rstrip(".")
    return (line[:last_comma] if last_comma > 0 else line).strip(" ,")


# "(issue 51)", "(issue 38; docs/compression.md)": where a description came from, not what it shows
_ISSUE_NOTE = re.compile(r"\s*\([^()]*\bissues? \d+[^()]*\)|\s*\bissues? \d+\b", re.IGNORECASE)


def figure_title(experiment: str, width: int = 80) -> str:
    """The shipped experiment's description, for figure titles: the first line of the comment
    that opens configs/experiment/<name>.yaml (it names the paper and the figure or table; see
    :func:`_description`) less its issue references ("(issue 51)": a figure is read without
    the tracker), wrapped at ``width`` characters; ``experiment`` itself when dlcomm ships no such
    file or it has no comment."""
    from dlcomm.report.runs import shipped_experiment

    shipped = shipped_experiment(experiment)
    if shipped is None:
        return experiment
    for line in shipped.read_text().splitlines():
        if not line.startswith("#"):
            break
        text = line.lstrip("# ").strip()
        if text and not text.startswith("@package"):  # Hydra's directive, not a description
            return textwrap.fill(_ISSUE_NOTE.sub("", _description(text)), width, break_on_hyphens=False)
    return experiment


def sweep_title(experiment: str, runs: pd.DataFrame) -> str:
    """A sweep's figure title: its experiment (:func:`figure_title`) and what its runs share:
    ``dlcomm sweep: 4 workers, mlp on synthetic, wan_hetero network, 2 seeds``."""
    from dlcomm.report.clocks import network_name

    def values(column: str) -> list[str]:
        found = runs[column].dropna().astype(str) if column in runs else pd.Series(dtype=str)
        return sorted(set(found) - {""})

    parts = []
    worlds = sorted(int(float(w)) for w in values("tags.world_size"))
    if worlds:
        parts.append(f"{worlds[0]} workers" if worlds[0] == worlds[-1] else f"{worlds[0]}-{worlds[-1]} workers")
    models, datasets = values("tags.model"), values("tags.dataset")
    if len(models) == 1 and len(datasets) == 1:
        parts.append(f"{models[0]} on {datasets[0]}")
    networks = sorted({network_name(run) for _, run in runs.iterrows()} - {"off"})
    if len(networks) == 1:
        parts.append(f"{networks[0]} network")
    seeds = values("params.seed")
    if seeds:
        parts.append(f"{len(seeds)} seed{'s' if len(seeds) > 1 else ''}")
    name = figure_title(experiment).replace("\n", " ")
    return textwrap.fill(f"{name} sweep" + (f": {', '.join(parts)}" if parts else ""), 80, break_on_hyphens=False)


def _against_figures(
    experiment: str,
    table: pd.DataFrame,
    runs: pd.DataFrame,
    axes: list[str],
    title: str,
    folder: Path,
    chance: float | None = None,
) -> list[Path | None]:
    """The figures of a number against a swept setting (:func:`dlcomm.report.plots.against`):
    speedup and final accuracy against workers (a line per workers-per-node when that varies
    too: the node-based paper's clusters; accuracy against workers is the Crossover paper's
    Fig. 10), best accuracy against the global mini-batch (the Crossover paper's Fig. 9)
    when the per-worker batch or the micro-batches per step vary (where several mini-batches run
    at one worker count, the workers figures get a line per mini-batch and this one a line per
    worker count: Fig. 9 at 16 and 64 workers), and time per iteration against
    each swept latency on a log axis (the SESGD paper's Fig. 5). The papers' own points are
    marked where :mod:`dlcomm.report.papers` has them; accuracy axes show ``chance`` (in %)."""
    params = {key: "params." + key for key in axes}
    figures: list[Path | None] = []
    workers_swept = "nodes" in params or "workers_per_node" in params
    batch_swept = "train.batch_size" in params or "train.comm_interval" in params
    if workers_swept or batch_swept:
        runs = runs.assign(world=runs["tags.world_size"].astype(float).astype("Int64"))  # NA where a run lacks it
    if batch_swept:  # images per optimizer step: workers x per-worker batch x micro-batches per step
        interval = runs.get("params.train.comm_interval", pd.Series(1, index=runs.index)).astype(float).astype("Int64")
        runs = runs.assign(
            global_batch=runs["world"]
            * step_batch(runs["params.train.batch_size"].astype(float).astype("Int64"), interval)
        )
    # several global mini-batches at one worker count (the Crossover paper's Fig. 9 at 16 and 64
    # workers): a line per mini-batch against workers, a line per worker count against the mini-batch
    batches_per_world = runs.groupby("world")["global_batch"].nunique().max() if batch_swept else 1
    if workers_swept:
        over = " / ".join(plots.method_text(method) for method in sorted(set(table["baseline"]) - {""}))
        clocks = set(table.get("speedup_clock", pd.Series(dtype=str)).fillna("")) - {""}
        if len(clocks) == 1:  # a ratio of two times on one clock: which
            over += f"\n({table_clock(table, clocks == {'simulated'}, runs)})"
        split = params.get("workers_per_node") if "nodes" in params else None
        split = "global_batch" if split is None and batches_per_world > 1 else split
        by_factors = runs["world"].max() >= 8 * runs["world"].min()  # 4, 16, 64 workers: a log axis
        for y, y_label, name in (
            ("speedup", f"speedup over {over}", "speedup_vs_workers"),
            ("final_acc_mean", "final test accuracy %", "accuracy_vs_workers"),
        ):
            figures.append(
                plots.against(
                    table,
                    runs,
                    "world",
                    "workers",
                    y,
                    y_label,
                    folder / f"{name}.png",
                    title,
                    log_x=by_factors,
                    split_key=split,
                    paper=marks(experiment, name),
                    chance=chance,
                )
            )
    if batch_swept:
        split = "world" if batches_per_world > 1 and runs["world"].nunique() > 1 else None
        figures.append(
            plots.against(
                table,
                runs,
                "global_batch",
                "global mini-batch (images per step)",
                "best_acc_mean",
                "best test accuracy %",
                folder / "accuracy_vs_batch.png",
                title,
                log_x=True,
                split_key=split,
                paper=marks(experiment, "accuracy_vs_batch"),
                chance=chance,
            )
        )
    time_column = "sim_ms_per_iter" if table["sim_ms_per_iter"].notna().all() else "wall_ms_per_iter"
    clock = table_clock(table, time_column.startswith("sim"), runs)
    y_label = f"ms per iteration\n({clock})"
    if "sent_mb" in table:  # kept by summarise: report.traffic, or compressors compared
        timed = table.assign(train_s=table[time_column] * table["steps"] / 1000)
        axes_drawn = [("sent_mb", "MB sent per worker over the run", "accuracy_vs_bytes")]
        # under a time budget every method trains for the same time: accuracy.png has the curves
        if timed["train_s"].max() > 1.01 * timed["train_s"].min():
            axes_drawn.append(("train_s", time_axis(clock), "accuracy_vs_time"))
        for x, x_label, name in axes_drawn:
            figures.append(
                plots.tradeoff(
                    timed,
                    x,
                    x_label,
                    "final_acc_mean",
                    "final test accuracy %",
                    folder / f"{name}.png",
                    title,
                    chance=chance,
                )
            )
    for key in axes:
        if key.endswith("latency_ms"):  # latencies span decades (0.1 to 5 ms): a log axis, as the SESGD paper's Fig. 5
            name = "time_vs_latency" if key == "network.inter.latency_ms" else "time_vs_" + key.replace(".", "_")
            figures.append(
                plots.against(
                    table,
                    runs,
                    params[key],
                    plots.AXIS_NAMES.get(key, key),
                    time_column,
                    y_label,
                    folder / f"{name}.png",
                    title,
                    log_x=True,
                    paper=marks(experiment, name),
                )
            )
    return figures


def write_report(
    experiment: str,
    source: str | RunData,
    folder: Path,
    runs: pd.DataFrame | None = None,
    command: str = "",
    title: str = "",
) -> tuple[pd.DataFrame, list[Path]]:
    """Read (the finished runs of ``experiment`` from ``source``, a tracking URI or
    :class:`~dlcomm.report.rundata.RunData`; or the given ``runs``: a sweep's), keep them in
    ``folder`` (``runs.json``, ``histories.csv``: :func:`~dlcomm.report.rundata.save_run_data`),
    summarise, write the table and figures into ``folder``; the table and the files written.
    ``command``: what the markdown says generated it (default ``dlcomm report``); ``title``: the
    figures' (default: the experiment's, :func:`figure_title`)."""
    data = run_data(source)
    kept = save_run_data(folder, experiment, data.runs(experiment) if runs is None else runs, data)
    # drawn from what was kept (paths made portable): the store and the folder give the same report
    kept_data = FolderRunData(folder)
    histories = Histories(kept_data)
    recorded = kept_data.runs(experiment)
    runs, axes = assign(recorded, method_groups_of(experiment, recorded))
    baseline = baseline_of(experiment, runs)
    table = summarise(runs, baseline, lambda frame: histories.curve(frame, "ma"), traffic_of(experiment, runs))
    folder.mkdir(parents=True, exist_ok=True)
    title = title or figure_title(experiment)
    chance = plots.chance_level(runs)
    # no accuracy figure for runs at chance level, or evaluated once: the report says why instead
    no_accuracy = plots.why_no_accuracy(runs, histories.curves, chance)
    drawn = [
        None if no_accuracy else plots.accuracy(runs, histories.curves, folder / "accuracy.png", title, chance),
        plots.time_breakdown(
            table,
            folder / "time_per_iteration.png",
            title,
            table_clock(table, bool(table["sim_ms_per_iter"].notna().all()), runs),
        ),
    ]
    drawn += _against_figures(experiment, table, runs, axes, title, folder, chance)
    figures = [figure for figure in drawn if figure is not None]
    stale = folder / "accuracy.png"
    if no_accuracy and stale.exists():  # a figure an earlier report drew: gone with its reason
        stale.unlink()
    markdown, csv, tex = folder / "table.md", folder / "table.csv", folder / "table.tex"
    markdown.write_text(
        _markdown(
            experiment,
            table,
            baseline,
            figures,
            command or "dlcomm report",
            kept[1].name,
            (no_accuracy,) if no_accuracy else (),
        )
    )
    # the comparison column where rows of several comparisons share the file (the .md's headings name one)
    (table if table["comparison"].nunique() > 1 else table.drop(columns="comparison")).to_csv(
        csv, index=False, float_format="%.6g"
    )
    tex.write_text(_latex(table))
    return table, [markdown, csv, tex, *figures, *kept]


def report_from(folder: Path, out: Path | None = None) -> tuple[pd.DataFrame, list[Path]]:
    """Redraw a report from the run data of its ``folder`` (``results/<experiment>/``: runs.json,
    histories.csv), with no MLflow store: table.md/.csv/.tex, every figure and the run data, into
    ``folder`` itself, or into ``out/<experiment>/``; the table and the files written."""
    from dlcomm.paths import entry_name

    data = FolderRunData(Path(folder))
    data.check_histories()  # a damaged histories file refused before anything is written
    target = Path(out) / entry_name(data.experiment) if out is not None else Path(folder)
    return write_report(data.experiment, data, target)


def _open_runs(uri: str, experiment: str) -> Census:
    """The census of the RUNNING runs (of ``experiment`` when named); empty for an experiment
    the store does not have (reading its runs will say so)."""
    try:
        return survey(uri, experiment, strict=False)
    except UserError:
        return Census()


def loose_ends(found: Census, experiment: str) -> list[str]:
    """Lines about ``experiment``'s RUNNING runs that are not in its table and never will be by
    themselves: lost ones (with the hint to reap them), and those whose fate cannot be told."""
    found = found.of(experiment)
    lines = []
    if found.lost:
        listed = ", ".join(f"{v.run.run_id} ({v.reason})" for v in found.lost)
        lines.append(
            f"{experiment}: {len(found.lost)} lost run(s), RUNNING in MLflow with nothing left to end them, "
            f"not in the table: {listed}; run 'dlcomm runs reap' to close them as FAILED"
        )
    for reason, ids in found.unchecked_by_reason().items():
        lines.append(
            f"{experiment}: {len(ids)} RUNNING run(s), not in the table, could not be checked for loss "
            f"({reason}): {' '.join(ids)}"
        )
    return lines


def run_report(settings: list[str], every: bool, source: str = "") -> Iterator[str]:
    """``dlcomm report``'s work: ``settings`` are ``key=value`` words (experiment, tracking.uri,
    out); ``every``: all experiments of the store; ``source``: a report's folder to redraw from
    its run data instead (``--from results/<experiment>``; then only ``out=`` applies, the root
    the experiment's folder is written under). Yields a line as each experiment is reported,
    after a line naming its lost runs, if any (:func:`loose_ends`)."""
    from dlcomm.paths import check_writable, home_setting, results_dir
    from dlcomm.report.runs import experiment_names, load_runs, skipped_line
    from dlcomm.settings import parse_settings
    from dlcomm.tracking.mlflow_run import check_store, resolve_tracking_uri

    if source:
        yield from _report_from_folder(settings, every, Path(source))
        return
    known = parse_settings(
        settings,
        {"experiment": "", "sweep": "", "tracking.uri": "", "out": ""},
        "report",
        "pass experiment=<name>, sweep=<parent run id>|last, tracking.uri=<uri> or out=<folder>",
    )
    if known["out"]:  # before reading the store: a report nobody can write is refused at once
        check_writable(Path(known["out"]), f"out={known['out']}", "pass out=<a folder you can write>")
    uri = resolve_tracking_uri(known["tracking.uri"])
    check_store(uri)
    if known["sweep"]:
        if every or known["experiment"]:
            raise UserError(f"sweep={known['sweep']} reports one sweep: drop experiment= and --all")
        yield from _report_sweep(uri, known["sweep"], Path(known["out"]) if known["out"] else results_dir())
        return
    if every and known["experiment"]:
        raise UserError(f"--all reports every experiment: drop experiment={known['experiment']} (or --all)")
    if every == bool(known["experiment"]):
        raise UserError(
            "name one experiment (experiment=<name>), one sweep (sweep=<parent run id> or sweep=last), or pass --all"
        )
    from dlcomm.runs.reap import close_lost_on_open

    yield from close_lost_on_open(uri, "dlcomm report")
    experiments = experiment_names(uri) if every else [known["experiment"]]
    if not experiments:
        raise UserError(f"the store {uri} has no finished run: train first (dlcomm train tracking.experiment=<name>)")
    root = Path(known["out"]) if known["out"] else results_dir()
    if not known["out"]:
        check_writable(root, home_setting(), "set DLCOMM_HOME to a folder you can write, or pass out=<folder>")
    found = _open_runs(uri, "" if every else known["experiment"])
    reported = []
    for experiment in experiments:
        yield from loose_ends(found, experiment)
        skipped: dict[str, list[str]] = {}
        try:
            folder = report_folder(root, experiment, bool(known["out"]))
            runs = load_runs(uri, experiment, skipped)
        except UserError as error:
            if not every:
                raise
            yield f"{experiment}: not reported: {error}"  # --all: another tool's experiment, say, among dlcomm's
            continue
        if skipped:
            yield skipped_line(experiment, skipped)
        table, written = write_report(experiment, uri, folder, runs=runs)
        reported.append(experiment)
        yield f"{experiment}: wrote {', '.join(str(path) for path in written)}"
        yield from (f"{experiment}: {line}" for line in clock_lines(table))
    if not reported:
        raise UserError(
            f"no experiment of the store {uri} has a finished run that dlcomm recorded or can read (see the lines "
            "above): train first (dlcomm train tracking.experiment=<name>)"
        )
    for experiment in sorted({v.run.experiment for v in found.lost + found.unchecked} - set(experiments)):
        yield from loose_ends(found, experiment)


def report_folder(root: Path, experiment: str, chosen: bool) -> Path:
    """``root/<experiment>/``, where the experiment's report goes, when it can be: inside ``root``,
    not a folder dlcomm keeps for itself in a results folder (``runs``, ``mlflow.db``, ...: an
    experiment named so by another tool or an older dlcomm; ``chosen``: the user's ``out=``, where
    those names are free), and a folder or nothing (not a file)."""
    from dlcomm.paths import OWN_NAMES, check_shape, entry_name, inside, own_name

    folder = inside(root, root / entry_name(experiment), f"experiment={experiment}")
    if own_name(experiment) and not chosen:
        raise UserError(
            f"experiment={experiment}: its report would go to {folder}, a name dlcomm keeps for itself under results/ "
            f"({', '.join(OWN_NAMES)}); pass out=<another folder> (the report goes to <folder>/{folder.name}/)"
        )
    check_shape(folder, True, f"experiment {experiment}'s report", "pass out=<another folder>, or move it aside")
    return folder


def _report_from_folder(settings: list[str], every: bool, folder: Path) -> Iterator[str]:
    """``dlcomm report --from <folder> [out=<root>]``: the report redrawn from the folder's run
    data into the folder itself, or into ``<root>/<experiment>/``."""
    from dlcomm.paths import check_writable, entry_name, inside
    from dlcomm.settings import parse_settings

    known = parse_settings(
        settings,
        {"out": ""},
        "report --from",
        "with --from pass only out=<folder> (the experiment and its runs are the folder's)",
    )
    if every:
        raise UserError("--from redraws one folder's report: drop --all")
    data = FolderRunData(folder)
    root = Path(known["out"]) if known["out"] else None
    target = inside(root, root / entry_name(data.experiment), f"{folder}'s experiment") if root else folder
    check_writable(target, str(target), "pass out=<a folder you can write>")
    table, written = report_from(folder, Path(known["out"]) if known["out"] else None)
    yield f"{data.experiment}: wrote {', '.join(str(path) for path in written)} (from the run data in {folder})"
    yield from (f"{data.experiment}: {line}" for line in clock_lines(table))


def _report_sweep(uri: str, which: str, root: Path) -> Iterator[str]:
    from dlcomm.paths import check_writable
    from dlcomm.report.sweep import report_sweep
    from dlcomm.tracking.ui import experiment_of, run_page, ui_lines

    check_writable(root, str(root), "set DLCOMM_HOME to a folder you can write, or pass out=<folder>")
    parent, written, table = report_sweep(uri, which, root)
    yield (
        f"sweep {parent}: wrote {', '.join(str(path) for path in written)}; the table and figures are also "
        "artifacts of its parent run (comparison/) and its description, each run's figures its summary/* metrics"
    )
    yield from (f"sweep {parent}: {line}" for line in clock_lines(table))
    yield ui_lines(run_page(uri, experiment_of(uri, parent), parent), uri)
