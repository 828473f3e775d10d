"""The report's figures (PNG): accuracy against epoch and time, the per-iteration time split
into compute and exposed communication, speedup against workers, time per iteration against
latency. Each function returns the file it wrote, or None when the runs cannot show it (a
single world size has no speedup-against-workers curve).

Figures speak words where the table speaks config strings: algorithms by their papers' names
(:func:`display_name`: each algorithm class's ``display_name``), knobs and settings as ``key value`` (:func:`method_text`,
:func:`setting_text`). The table and its CSV keep the config strings."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Callable, NamedTuple

import pandas as pd

from dlcomm.report.groups import PARAM
from dlcomm.report.papers import PaperMarks

# One (axis label, seed curves) per method; the frame has columns "mean" and "std" over seeds
# against x (its index): :func:`dlcomm.report.build.seed_curves`.
Curve = tuple[str, pd.DataFrame] | None


def display_name(algorithm: str) -> str:
    """The name the papers use for ``algorithm`` (its class's ``display_name``, plugins' too);
    an unknown or unnamed one as it is."""
    from dlcomm.algorithms.registry import ALGORITHMS

    cls = ALGORITHMS.all().get(algorithm)
    return (cls.display_name if cls is not None else "") or algorithm


# setting keys a figure puts on an axis -> the axis label
AXIS_NAMES = {
    "network.inter.latency_ms": "latency between nodes (ms)",
    "network.intra.latency_ms": "latency inside a node (ms)",
}
# setting and knob keys that read better as a phrase in a legend ("{}" is the value); other keys
# are shown as ``key value``
KEY_PHRASES = {
    "nodes": "{} nodes",
    "workers_per_node": "{} workers per node",
    "network.inter.latency_ms": "{} ms between nodes",
    "network.intra.latency_ms": "{} ms inside a node",
    "ratio": "R = {}",
    "k_prime": "K' = {}",
    "train.batch_size": "batch {} per worker",
    "train.comm_interval": "{} micro-batches per step",
    "world": "{} workers",
    "global_batch": "global mini-batch {}",
}
_KEY_VALUE = re.compile(r" (?=[\w.]+=)")  # splits "a=1 b=[1, 2]" before each "key=", not inside values


def _key_values(words: str) -> str:
    """``"overlap=scheduled scheduler=managed"`` -> ``"overlap scheduled, scheduler managed"``;
    keys of :data:`KEY_PHRASES` as their phrase (``"nodes=4"`` -> ``"4 nodes"``)."""
    pairs = (pair.partition("=")[::2] for pair in _KEY_VALUE.split(words) if pair)
    return ", ".join(KEY_PHRASES[k].format(v) if k in KEY_PHRASES else f"{k} {v}" for k, v in pairs)


def method_text(method: str) -> str:
    """A method label of :func:`dlcomm.report.groups.method_labels` in words: the algorithm's
    display name, then its knobs in parentheses (``gossip_pull overlap=scheduled`` ->
    ``pull-gossip (overlap scheduled)``)."""
    name, _, knobs = method.partition(" ")
    algorithm, _, codec = name.partition("+")  # "allreduce+powersgd": an algorithm with a compressor
    shown = display_name(algorithm) + (f" + {compressor_name(codec)}" if codec else "")
    return f"{shown} ({_key_values(knobs)})" if knobs else shown


def compressor_name(name: str) -> str:
    """How reports name the compressor ``name`` (its class's ``display_name``); unknown: as it is."""
    from dlcomm.compress.registry import COMPRESSORS

    cls = COMPRESSORS.all().get(name)
    return (cls.display_name if cls is not None else "") or name


def setting_text(setting: str) -> str:
    """A setting label (``nodes=4 workers_per_node=2``) as ``4 nodes, 2 workers per node``."""
    return _key_values(setting)


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    # every text of a figure is literal: a '$' in a name or value another tool recorded is no TeX
    matplotlib.rcParams["text.parse_math"] = False
    import matplotlib.pyplot as plt

    return plt


def _plain_log_x(axis) -> None:
    """A logarithmic x axis ticked at 1, 2 and 5 times the powers of ten, labelled as plain numbers:
    matplotlib's own log labels are TeX (``$10^{2}$``), printed as is under ``text.parse_math=False``."""
    from matplotlib import ticker

    axis.set_xscale("log")
    axis.xaxis.set_major_locator(ticker.LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    axis.xaxis.set_major_formatter(ticker.FuncFormatter(lambda value, _: f"{value:g}"))
    axis.xaxis.set_minor_formatter(ticker.NullFormatter())


def _label(setting: str, method: str, several: bool) -> str:
    return f"{method_text(method)} — {setting_text(setting)}" if several else method_text(method)


def _fitted(title: str, figure) -> str:
    """``title`` re-wrapped to the width of a one-axis ``figure`` (about 10 characters per inch at
    the default title size), so that it is never cut at the figure's edges."""
    import textwrap

    return textwrap.fill(" ".join(title.split()), int(figure.get_figwidth() * 10), break_on_hyphens=False)


def _save(figure, path: Path) -> Path:
    """Write ``figure`` to ``path`` as PNG and free it (grown to hold long rotated tick labels)."""
    figure.tight_layout()
    figure.savefig(path, dpi=110, bbox_inches="tight")
    _pyplot().close(figure)
    return path


_DASHES = ("-", "--", ":", "-.")
_MARKERS = ("o", "s", "^", "D", "v", "P")


def _line_styles(runs: pd.DataFrame, several: bool) -> Callable[[str, str], dict]:
    """Line style per (setting, method): with several settings the colour tells the setting and
    the dash and marker the method (ten lines stay readable as five colours by two dashes);
    with one setting the colour tells the method."""
    settings = sorted(runs["setting"].unique())
    methods = sorted(runs["method"].unique())

    def style(setting: str, method: str) -> dict:
        m = methods.index(method)
        if not several:
            return {"color": f"C{m % 10}", "marker": "o"}
        return {
            "color": f"C{settings.index(setting) % 10}",
            "linestyle": _DASHES[m % len(_DASHES)],
            "marker": _MARKERS[m % len(_MARKERS)],
        }

    return style


class _Drawn(NamedTuple):
    """One method's seed curves in one panel of the accuracy figure."""

    label: str
    setting: str
    method: str
    x_name: str
    curve: pd.DataFrame


def evaluated_workers(runs: pd.DataFrame) -> str:
    """Whose accuracy the curves average, from ``train.eval_replicas`` (0: every worker) and the
    world size of the runs: "mean over workers", "rank 0" or "mean over up to N workers"."""
    world = runs.get("tags.world_size")
    replicas = runs.get(PARAM + "train.eval_replicas")
    if world is None or replicas is None or world.isna().any() or replicas.isna().any():
        return "mean over workers"
    world, replicas = world.astype(int), replicas.astype(int)
    evaluated = replicas.where(replicas > 0, world).clip(upper=world)
    if (evaluated == world).all():
        return "mean over workers"
    if (evaluated == 1).all():
        return "rank 0"
    return f"mean over up to {evaluated.max()} workers"


# An accuracy within this many points of chance (or within twice the seeds' std) is chance level.
CHANCE_MARGIN = 2.0
# An accuracy axis spans at least this many points, and at least this many std over seeds: a
# difference smaller than the seeds' spread is never blown up to the axis' height.
AXIS_FLOOR_POINTS = 5.0
AXIS_FLOOR_SPREADS = 4.0


def _recorded(value: object) -> object:
    """A recorded parameter (MLflow keeps strings) as the value it was: ``"10"`` -> 10,
    ``"[3, 32, 32]"`` -> [3, 32, 32]; anything YAML does not read as a scalar or list stays as is."""
    import yaml

    try:
        parsed = yaml.safe_load(str(value))
    except yaml.YAMLError:
        return value
    return parsed if isinstance(parsed, (int, float, str, bool, list)) else value


def classes_of(runs: pd.DataFrame) -> int | None:
    """The number of classes the runs' data set has, from their recorded ``dataset.*``
    parameters (:meth:`dlcomm.data.source.DataSource.classes`: nothing is read); None when a run's
    data set cannot tell without its data, or the runs' data sets differ in it."""
    from dlcomm.config.typed import typed_section
    from dlcomm.data.registry import SOURCES

    prefix = PARAM + "dataset."
    if PARAM + "dataset.name" not in runs:
        return None
    found = set()
    for _, row in runs.iterrows():
        source = SOURCES.all().get(str(row[PARAM + "dataset.name"]))
        given = {
            key.removeprefix(prefix): _recorded(v) for key, v in row.items() if key.startswith(prefix) and pd.notna(v)
        }
        try:
            found.add(None if source is None else source.classes(typed_section(source.Config, given)))
        except Exception:  # noqa: BLE001 - values its Config refuses, or a plugin's classes() failing: unknown, no chance line
            found.add(None)
    return found.pop() if len(found) == 1 and None not in found else None


def chance_level(runs: pd.DataFrame) -> float | None:
    """Test accuracy in % of guessing: 100 / the classes of the runs' data set (:func:`classes_of`)."""
    classes = classes_of(runs)
    return None if not classes else 100.0 / classes


def _drawn_curves(runs: pd.DataFrame, curve_of: Callable[[pd.DataFrame, str], Curve]) -> dict[str, list[_Drawn]]:
    several = runs["setting"].nunique() > 1
    drawn: dict[str, list[_Drawn]] = {"epoch": [], "time": []}
    for (setting, method), frame in runs.groupby(["setting", "method"], sort=False):
        for kind in drawn:
            curve = curve_of(frame, kind)
            if curve is not None and not curve[1].empty:
                drawn[kind].append(_Drawn(_label(setting, method, several), setting, method, *curve))
    return drawn


def _steps(runs: pd.DataFrame) -> str:
    """``20`` (``12-40`` when they differ): the runs' optimizer steps; '' when the runs do not say."""
    steps = runs.get("metrics.final/steps")
    if steps is None or steps.empty or steps.isna().any():
        return ""
    low, high = int(steps.min()), int(steps.max())
    return f"{low}" if low == high else f"{low}-{high}"


def _at_chance(entries: list[_Drawn], chance: float) -> bool:
    """Every curve's best seed mean is within :data:`CHANCE_MARGIN` points of ``chance`` (or below
    it), or within twice the std over seeds at that point."""
    for entry in entries:
        mean, std = 100 * entry.curve["mean"], 100 * entry.curve["std"]
        best = mean.idxmax()
        spread = 0.0 if pd.isna(std[best]) else float(std[best])
        if mean[best] > chance + max(CHANCE_MARGIN, 2 * spread):
            return False
    return True


def why_no_accuracy(
    runs: pd.DataFrame, curve_of: Callable[[pd.DataFrame, str], Curve], chance: float | None = None
) -> str:
    """The sentence a report writes instead of the accuracy figure, '' when it draws one (or when
    no run has an accuracy curve at all): every run at chance level (``chance``, in %, when known;
    see :func:`_at_chance`), or every run evaluated once (one point per method is no curve; its
    accuracy is the table's)."""
    drawn = _drawn_curves(runs, curve_of)
    entries = [entry for kind in drawn for entry in drawn[kind]]
    if not entries:
        return ""
    steps = _steps(runs)
    after = f" after {steps} steps" if steps else ""
    if chance is not None and _at_chance(entries, chance):
        best = [100 * entry.curve["mean"].max() for entry in entries]
        classes = round(100 / chance)
        return (
            f"No accuracy figure: every run's test accuracy is at chance level ({chance:g}% for {classes} classes; "
            f"best {min(best):.1f}-{max(best):.1f}%){after}: the differences between them are noise."
        )
    if all(len(entry.curve) < 2 for entry in entries):
        return (
            f"No accuracy figure: every run was evaluated once, at its end{',' if after else ''}{after}: one point "
            "per method is no curve; its accuracy is in the table."
        )
    return ""


def _accuracy_axis(axis, chance: float | None, spread: float) -> str:
    """Give an accuracy axis (in %) its chance level and a floor on its span: at least
    :data:`AXIS_FLOOR_POINTS` points and :data:`AXIS_FLOOR_SPREADS` times ``spread`` (the largest
    std over seeds on it), within 0-100, so that noise never fills the axis. Chance is a dashed
    line labelled "chance (10%)" when it falls on the axis; else the note returned (for the axis'
    label: "chance 10%: below the axis"), '' when it is drawn or unknown."""
    low, high = axis.get_ylim()
    floor = max(AXIS_FLOOR_POINTS, AXIS_FLOOR_SPREADS * (0.0 if pd.isna(spread) else spread))
    if high - low < floor:
        middle = (low + high) / 2
        low, high = middle - floor / 2, middle + floor / 2
        low, high = low - max(0.0, high - 100), high - max(0.0, high - 100)  # not above 100
        low, high = low - min(0.0, low), high - min(0.0, low)  # nor below 0
    axis.set_ylim(low, high)  # fixed: the chance line below does not widen it
    if chance is None:
        return ""
    if low <= chance <= high:
        from matplotlib.transforms import blended_transform_factory

        axis.axhline(chance, color="grey", linestyle="--", linewidth=1, zorder=0.5)
        where = blended_transform_factory(axis.transAxes, axis.transData)
        # at the right, where accuracy curves have risen away from it
        axis.text(
            0.99, chance, f"chance ({chance:g}%)", transform=where, fontsize=8, color="grey", ha="right", va="bottom"
        )
        return ""
    return f"chance {chance:g}%: {'below' if chance < low else 'above'} the axis"


# The accuracy axis leaves out the evaluations of the untrained model (at time 0) when the rest
# span less than this share of the range with them: 17% beside curves at 84-88% flattens them.
ZOOM_SHARE = 0.5
# A curve's first point counts as the untrained model's when it lies in this first share of the x range.
START_SHARE = 0.02


def _zoom_past_first(axis, entries: list[_Drawn]) -> str:
    """Zoom ``axis`` (accuracy in %) past the evaluations before training (each curve's first
    point, when every curve starts at x = 0 or within :data:`START_SHARE` of its range: the
    training clock's first evaluation) when they
    alone stretch it (the rest span under :data:`ZOOM_SHARE` of the range with them), the ±1 std
    bands included; the note saying where those points are ("first evaluations 17-22%: below the
    axis"), '' when the axis is left as it is (a curve rising from chance after its first epoch
    keeps its rise)."""

    def extent(frames: list[pd.DataFrame]) -> tuple[float, float]:
        low = min(float((f["mean"] - f["std"].fillna(0)).min()) for f in frames)
        high = max(float((f["mean"] + f["std"].fillna(0)).max()) for f in frames)
        return 100 * low, 100 * high

    def starts_untrained(curve: pd.DataFrame) -> bool:  # its first evaluation at the clock's start
        first, last = float(curve.index[0]), float(curve.index[-1])
        return first <= START_SHARE * last  # 0.01 s of 30 (the clock series' first step is 1, not 0)

    if not entries or any(len(entry.curve) < 2 or not starts_untrained(entry.curve) for entry in entries):
        return ""
    rest = [entry.curve.iloc[1:] for entry in entries]
    full_low, full_high = extent([entry.curve for entry in entries])
    low, high = extent(rest)
    if high - low >= ZOOM_SHARE * (full_high - full_low):
        return ""
    margin = 0.08 * (high - low)
    axis.set_ylim(low - margin, high + margin)
    firsts = [100 * float(entry.curve["mean"].iloc[0]) for entry in entries]
    where = "below" if max(firsts) < low else ("above" if min(firsts) > high else "off")
    shown = f"{min(firsts):.0f}-{max(firsts):.0f}%" if round(min(firsts)) != round(max(firsts)) else f"{firsts[0]:.0f}%"
    return f"first evaluation{'s' if len(firsts) > 1 else ''} {shown}: {where} the axis"


def _accuracy_figure(
    runs: pd.DataFrame, curve_of: Callable[[pd.DataFrame, str], Curve], title: str, chance: float | None = None
):
    """The accuracy figure (see :func:`accuracy`), or None when no method has a curve or
    :func:`why_no_accuracy` says why there is none."""
    from matplotlib.ticker import MaxNLocator

    if why_no_accuracy(runs, curve_of, chance):
        return None
    several = runs["setting"].nunique() > 1
    style = _line_styles(runs, several)
    drawn = _drawn_curves(runs, curve_of)
    # a panel per clock on which some method has a curve (two evaluations or more): runs that
    # never evaluate on a clock, or evaluate once, get no panel of points
    kinds = [kind for kind in drawn if any(len(entry.curve) > 1 for entry in drawn[kind])]
    if not kinds:
        return None
    plt = _pyplot()
    figure, axes = plt.subplots(1, len(kinds), figsize=(14 if len(kinds) == 2 else 9.5, 4.2), squeeze=False)
    panels = dict(zip(kinds, axes[0]))
    spread_shown, off_axis = set(), {}
    for kind, axis in panels.items():
        # curves of one point (runs evaluated once) side by side around their x, not on top of each other
        single = [i for i, entry in enumerate(drawn[kind]) if len(entry.curve) == 1]
        span = 0.05 * max((abs(float(drawn[kind][i].curve.index[0])) for i in single), default=1.0)
        for i, entry in enumerate(drawn[kind]):
            x, mean, std = entry.curve.index, 100 * entry.curve["mean"], 100 * entry.curve["std"]
            if i in single and len(single) > 1:
                x = x + span * (single.index(i) / (len(single) - 1) - 0.5)
            (line,) = axis.plot(x, mean, ms=3, label=entry.label, **style(entry.setting, entry.method))
            if std.notna().any() and len(x) > 1:  # two or more seeds along a curve: a band
                axis.fill_between(x, mean - std, mean + std, color=line.get_color(), alpha=0.2, linewidth=0)
                spread_shown.add("band")
            elif std.notna().any():  # one evaluation (a run of a few hundred steps): an error bar
                axis.errorbar(x, mean, yerr=std, fmt="none", ecolor=line.get_color(), capsize=4)
                spread_shown.add("bar")
            axis.set_xlabel(entry.x_name)
        axis.grid(alpha=0.3)
        cut = _zoom_past_first(axis, drawn[kind])
        shown = [entry.curve.iloc[1:] if cut else entry.curve for entry in drawn[kind]]  # the spread on the axis
        spreads = [curve["std"].max() for curve in shown if curve["std"].notna().any()]
        off_axis[kind] = _accuracy_axis(axis, chance, 100 * max(spreads, default=0.0))
        if cut:  # where the cut-off first evaluations are
            axis.text(0.99, 0.02, cut, transform=axis.transAxes, fontsize=8, color="grey", ha="right", va="bottom")
    for kind, axis in panels.items():
        axis.set(title={"epoch": "against epochs", "time": "against training time"}[kind])
    if "epoch" in panels:  # one epoch: tick 1, not 0.95-1.05
        panels["epoch"].xaxis.set_major_locator(MaxNLocator(integer=True, min_n_ticks=1))
    axes[0][0].set(ylabel=f"test accuracy %\n({evaluated_workers(runs)}, mean over seeds)")
    for index, (kind, axis) in enumerate(panels.items()):  # where chance is off the axis, the figure says so
        if off_axis[kind] and index == 0:  # in the accuracy axis' label
            axis.set_ylabel(f"{axis.get_ylabel()}\n{off_axis[kind]}")
        elif off_axis[kind] and off_axis[kind] != off_axis[kinds[0]]:  # the other panel's: in its title
            axis.set_title(f"{axis.get_title()} ({off_axis[kind]})")
    spread = {"band": "\nband: ±1 std over seeds", "bar": "\nbar: ±1 std over seeds"}
    legend_from = max(panels.values(), key=lambda axis: len(axis.get_legend_handles_labels()[0]))
    legend_from.legend(
        fontsize=9,
        loc="upper left",
        bbox_to_anchor=(1.02, 1.0),
        title_fontsize=9,
        title="line: mean over seeds" + "".join(spread[s] for s in sorted(spread_shown)),
    )
    figure.suptitle(_fitted(title, figure))
    return figure


def accuracy(
    runs: pd.DataFrame,
    curve_of: Callable[[pd.DataFrame, str], Curve],
    path: Path,
    title: str,
    chance: float | None = None,
) -> Path | None:
    """Test accuracy against epoch (left) and against training time (right): per (setting,
    method) the mean over seeds as a line and, for two or more seeds, a band of ±1 sample
    standard deviation over seeds; ``chance`` (in %, when known) as a dashed line, and the
    accuracy axis never narrower than the seeds' spread allows (:func:`_accuracy_axis`).
    ``curve_of(frame, kind)`` gives a method's curves for ``kind`` "epoch" or "time". None, and
    no file, when no run has a curve or :func:`why_no_accuracy` has a sentence instead."""
    figure = _accuracy_figure(runs, curve_of, title, chance)
    return None if figure is None else _save(figure, path)


def _bar_positions(settings: list[str]) -> list[float]:
    """x of each bar, in the table's order: a setting's bars side by side, :data:`GROUP_GAP` bar
    widths of space before the next setting's."""
    positions, x = [], 0.0
    for index, setting in enumerate(settings):
        if index and setting != settings[index - 1]:
            x += GROUP_GAP
        positions.append(x)
        x += 1.0
    return positions


GROUP_GAP = 0.8  # the space between two settings' bars, in bar widths
BAR_LABEL_CHARS = 13  # a bar's method name is wrapped at about this many characters (a bar is ~1 inch)
GROUP_LABEL_CHARS = 11  # a setting's name, in bold, at this many characters per bar beneath it


def _wrapped(text: str, width: int) -> str:
    import textwrap

    return textwrap.fill(text, width, break_on_hyphens=False, break_long_words=False)


def time_breakdown(table: pd.DataFrame, path: Path, title: str, clock: str) -> Path:
    """Figure of :func:`time_breakdown_figure`, written to ``path``."""
    return _save(time_breakdown_figure(table, title, clock), path)


def time_breakdown_figure(table: pd.DataFrame, title: str, clock: str):
    """Stacked bars: compute, waiting for peers (wall clock of threads) and exposed communication
    per iteration, per method (simulated times where the runs have them, else wall). With several
    settings, a setting's bars stand together, apart from the next's, named once beneath them; the
    method names stay horizontal, wrapped to a bar's width. The time axis names its ``clock``
    (:func:`dlcomm.report.clocks.table_clock`)."""
    plt = _pyplot()
    simulated = table["sim_ms_per_iter"].notna().all()
    prefix = "sim" if simulated else "wall"
    several = table["setting"].nunique() > 1
    if several:  # a setting's rows together, in the order the settings first appear
        order = {setting: index for index, setting in enumerate(dict.fromkeys(table["setting"]))}
        table = table.iloc[table["setting"].map(order).argsort(kind="stable")]
    settings = list(table["setting"])
    labels = [_wrapped(method_text(m), BAR_LABEL_CHARS) for m in table["method"]]
    positions = _bar_positions(settings if several else ["all"] * len(settings))
    figure, axis = plt.subplots(figsize=(max(6.5, 1.05 * positions[-1] + 4.0), 4.8))
    compute, comm = table[f"{prefix}_compute_ms"].to_numpy(), table[f"{prefix}_comm_exposed_ms"].to_numpy()
    axis.bar(positions, compute, label="compute")
    waiting = table.get("wall_peer_wait_ms") if not simulated else None
    if waiting is not None and waiting.notna().any():  # threads: waiting for peers told apart (docs/metrics.md)
        waiting = waiting.fillna(0.0).to_numpy()
        axis.bar(positions, waiting, bottom=compute, label="waiting for peers")
        compute = compute + waiting
    axis.bar(positions, comm, bottom=compute, label="exposed communication")
    axis.set_xticks(positions, labels, fontsize=8)
    if several:  # each setting named once, centred under its bars, below the methods' names
        lines = max(label.count("\n") + 1 for label in labels)
        centres, names = [], []
        for setting in dict.fromkeys(settings):
            xs = [x for x, s in zip(positions, settings) if s == setting]
            centres.append((xs[0] + xs[-1]) / 2)
            names.append("\n" * lines + _wrapped(setting_text(setting), GROUP_LABEL_CHARS * len(xs)))
        groups = axis.secondary_xaxis("bottom")
        groups.set_xticks(centres, names, fontsize=9, fontweight="bold")
        groups.tick_params(axis="x", length=0, pad=6)
        groups.spines["bottom"].set_visible(False)
    axis.set(ylabel=f"ms per iteration\n({clock})", title=_fitted(title, figure))
    axis.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=9)
    axis.grid(axis="y", alpha=0.3)
    return figure


def _against_figure(
    table: pd.DataFrame,
    runs: pd.DataFrame,
    x_key: str,
    x_label: str,
    y: str,
    y_label: str,
    title: str,
    log_x: bool = False,
    split_key: str | None = None,
    paper: PaperMarks | None = None,
    chance: float | None = None,
):
    """The figure of :func:`against`, or None when it has nothing to show."""
    per_setting = runs.drop_duplicates("setting").set_index("setting")
    x_of = per_setting[x_key].astype(float)
    shown = table.loc[table[y].notna(), "setting"].map(x_of)  # the x of every point that has a value
    if shown.nunique() < 2:  # one point (or none) on the axis: no figure
        return None
    log_x = log_x and bool((x_of > 0).all())  # a 0 ms latency has no place on a log axis
    plt = _pyplot()
    figure, axis = plt.subplots(figsize=(6.4, 4.2))
    spread = f"{y.removesuffix('_mean')}_std"  # speedup -> speedup_std, best_acc_mean -> best_acc_std
    split_of = per_setting[split_key] if split_key else pd.Series("", index=per_setting.index)
    lines = table.assign(x=table["setting"].map(x_of), split=table["setting"].map(split_of))
    for (method, split), points in lines.groupby(["method", "split"], sort=True):
        points = points.sort_values("x")
        errors = points[spread] if spread in points else None
        label = method_text(method) + (
            f", {_key_values(f'{split_key.removeprefix(PARAM)}={split}')}" if split_key else ""
        )
        axis.errorbar(points["x"], points[y], yerr=errors, marker="o", capsize=3, label=label)
    if paper is not None:
        xs, ys = zip(*paper.points)
        axis.errorbar(xs, ys, linestyle=":", marker="*", ms=9, color="black", label=paper.label)
    if log_x:  # labelled at the swept values (0.1, 1, 5), not at powers of ten
        swept = sorted(x_of.unique())
        axis.set_xscale("log")
        axis.set_xticks(swept, [f"{x:g}" for x in swept])
        axis.minorticks_off()
    chance_note = ""
    if y.endswith("acc_mean"):  # an accuracy: its chance level, and no magnified noise
        chance_note = _accuracy_axis(axis, chance, table[spread].max() if spread in table else 0.0)
    axis.set(
        xlabel=x_label,
        ylabel=y_label
        + ("\n(mean ± std over seeds)" if spread in table else "")
        + (f"\n{chance_note}" if chance_note else ""),
        title=_fitted(title, figure),
    )
    axis.grid(alpha=0.3)
    axis.legend(fontsize=9)
    return figure


def against(
    table: pd.DataFrame,
    runs: pd.DataFrame,
    x_key: str,
    x_label: str,
    y: str,
    y_label: str,
    path: Path,
    title: str,
    log_x: bool = False,
    split_key: str | None = None,
    paper: PaperMarks | None = None,
    chance: float | None = None,
) -> Path | None:
    """``y`` of every method against the setting parameter ``x_key`` (one line per method, and
    per value of the setting parameter ``split_key`` when given), with error bars of
    ±``<y>_std`` (``<name>_std`` for ``y = <name>_mean``) where the table has that column;
    ``log_x``: a logarithmic x axis ticked at the swept values (for latencies, as the SESGD
    paper's Fig. 5; linear when some x is not positive); ``paper``: the paper's own points,
    marked beside ours; ``chance``: for an accuracy ``y`` (``*acc_mean``), its chance level in %
    (:func:`_accuracy_axis`)."""
    figure = _against_figure(table, runs, x_key, x_label, y, y_label, title, log_x, split_key, paper, chance)
    return None if figure is None else _save(figure, path)


def tradeoff(
    table: pd.DataFrame,
    x: str,
    x_label: str,
    y: str,
    y_label: str,
    path: Path,
    title: str,
    chance: float | None = None,
) -> Path | None:
    """One point per (method, setting) of ``y`` against ``x`` (columns of the table), ±``<y>_std``
    error bars: a compressor's accuracy against what it sent or the time it took, beside the
    uncompressed run's. A colour per method, a marker per setting; None when no point has both.
    ``chance``: for an accuracy ``y``, its chance level in % (:func:`_accuracy_axis`)."""
    points = table[table[x].notna() & table[y].notna()] if x in table and y in table else table.iloc[0:0]
    if points.empty:
        return None
    plt = _pyplot()
    figure, axis = plt.subplots(figsize=(9.0, 4.4))  # the axes ~6 inches, the legend beside them
    spread = f"{y.removesuffix('_mean')}_std"
    settings = list(dict.fromkeys(points["setting"]))
    markers = "osD^vP*X"
    several = len(settings) > 1
    for index, (method, rows) in enumerate(points.groupby("method", sort=True)):
        colour = f"C{index % 10}"
        for _, row in rows.iterrows():
            marker = markers[settings.index(row["setting"]) % len(markers)]
            label = method_text(method) if row["setting"] == rows["setting"].iloc[0] else None
            error = row[spread] if spread in row and not pd.isna(row[spread]) else None
            axis.errorbar(row[x], row[y], yerr=error, marker=marker, color=colour, capsize=3, linestyle="", label=label)
    if several:  # which marker is which setting
        for position, setting in enumerate(settings):
            axis.plot(
                [], [], linestyle="", marker=markers[position % len(markers)], color="grey", label=setting_text(setting)
            )
    _plain_log_x(axis)
    chance_note = (
        _accuracy_axis(axis, chance, points[spread].max() if spread in points else 0.0)
        if y.endswith("acc_mean")
        else ""
    )
    axis.set(
        xlabel=x_label,
        ylabel=y_label
        + ("\n(mean ± std over seeds)" if spread in table else "")
        + (f"\n{chance_note}" if chance_note else ""),
        title=_fitted(title, figure),
    )
    axis.grid(alpha=0.3)
    axis.legend(fontsize=9, loc="upper left", bbox_to_anchor=(1.02, 1.0))  # beside: a dozen compressors
    return _save(figure, path)
