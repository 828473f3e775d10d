"""The report's figures: seed mean and spread of accuracy curves against hand-computed numbers,
the words that replace config strings, and what the rendered axes hold (bands, integer epoch
ticks, error bars, a log latency axis)."""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Callable

import matplotlib.pyplot as plt
import pandas as pd
import pytest
from matplotlib.collections import PolyCollection

from dlcomm.report import plots
from dlcomm.report.build import figure_title, seed_curves


def test_seed_curves_are_the_mean_and_sample_std_over_seeds() -> None:
    seeds = [
        pd.Series([0.5, 0.6, 0.7], index=[1, 2, 3]),
        pd.Series([0.7, 0.8, 0.7], index=[1, 2, 3]),
        pd.Series([0.6, 1.0, 0.7], index=[1, 2, 3]),
    ]
    curves = seed_curves(seeds)
    assert list(curves.index) == [1, 2, 3]
    assert list(curves["mean"]) == pytest.approx([0.6, 0.8, 0.7])
    # x=1: deviations -0.1, 0.1, 0 -> sqrt(0.02 / 2); x=2: -0.2, 0, 0.2 -> sqrt(0.08 / 2); x=3: all equal
    assert list(curves["std"]) == pytest.approx([0.1, 0.2, 0.0])


def test_one_seed_has_its_curve_as_mean_and_no_spread() -> None:
    curves = seed_curves([pd.Series([0.5, 0.6], index=[1, 2])])
    assert list(curves["mean"]) == pytest.approx([0.5, 0.6])
    assert curves["std"].isna().all()  # one seed says nothing about the spread: nan, not 0


def test_seeds_with_no_common_range_pair_their_points_in_order() -> None:
    """Each seed evaluated once, at its own end time (the README's sweep): no range they all cover,
    so the k-th points pair up at the mean x, instead of the method vanishing from the figure."""
    curves = seed_curves([pd.Series([0.80], index=[10.0]), pd.Series([0.82], index=[12.0])])
    assert list(curves.index) == [11.0] and list(curves["mean"]) == pytest.approx([0.81])
    assert list(curves["std"]) == pytest.approx([0.02 / math.sqrt(2)])
    assert seed_curves(
        [pd.Series([0.8], index=[1.0]), pd.Series([0.8, 0.9], index=[5.0, 6.0])]
    ).empty  # nothing to pair


def test_seeds_at_different_x_are_interpolated_onto_the_range_they_all_cover() -> None:
    a = pd.Series([0.0, 0.4, 0.8], index=[0.0, 2.0, 4.0])  # a line of slope 0.2
    b = pd.Series([0.2, 0.2, 0.6], index=[1.0, 3.0, 5.0])
    curves = seed_curves([a, b])
    assert list(curves.index) == [1.0, 2.0, 3.0, 4.0]  # union of both within [1, 4]
    # a at 1..4: 0.2 0.4 0.6 0.8; b: 0.2 0.2 0.2 0.4; two values' sample std is |a - b| / sqrt(2)
    assert list(curves["mean"]) == pytest.approx([0.2, 0.3, 0.4, 0.6])
    assert list(curves["std"]) == pytest.approx([0.0, 0.2 / math.sqrt(2), 0.4 / math.sqrt(2), 0.4 / math.sqrt(2)])


def test_methods_and_settings_read_as_words() -> None:
    assert plots.method_text("allreduce") == "AllReduce-SGD"
    assert (
        plots.method_text("gossip_pull overlap=scheduled scheduler=managed")
        == "pull-gossip (overlap scheduled, scheduler managed)"
    )
    assert plots.method_text("local_sgd period=4") == "Local-SGD (period 4)"
    assert plots.method_text("sesgd") == "Shuffle-Exchange SGD"
    assert plots.method_text("ps_layerdrop layers=[1, 2]") == "parameter server with layer dropping (layers [1, 2])"
    assert plots.method_text("my_algo k=1") == "my_algo (k 1)"  # unknown names pass through
    assert plots.setting_text("nodes=4 workers_per_node=2") == "4 nodes, 2 workers per node"
    assert plots.setting_text("network.inter.latency_ms=0.5") == "0.5 ms between nodes"
    assert plots.setting_text("model.width=0.25") == "model.width 0.25"  # no phrase: key value
    assert plots.method_text("ps_layerdrop ratio=0.97") == "parameter server with layer dropping (R = 0.97)"


def test_every_shipped_algorithm_has_a_display_name_on_its_class() -> None:

    from dlcomm.algorithms.registry import ALGORITHMS

    algorithms = ALGORITHMS.all()
    shipped = {name for name, cls in algorithms.items() if cls.__module__.startswith("dlcomm.")}
    assert shipped and shipped <= set(algorithms)
    unnamed = sorted(name for name in shipped if not algorithms[name].display_name)
    assert not unnamed, f"algorithms without a display_name: {unnamed}"
    assert plots.display_name("crossover") == "Crossover-SGD" and plots.display_name("no_such") == "no_such"


def test_figure_titles_name_the_paper_and_figure() -> None:
    assert figure_title("sesgd_fig5") == "SESGD paper, Fig. 5"  # the unfinished "(time per iteration ..." left out
    wrapped = figure_title("crossover_fmnist")  # wrapped, not cut
    assert (
        wrapped.replace("\n", " ")
        == "Crossover-SGD paper, Figs. 8-9 (accuracy of the gossip methods against AllReduce-SGD)"
    )
    assert wrapped.count("\n") == 1 and max(len(line) for line in wrapped.splitlines()) <= 80
    expected = {
        "wan_gossip_fmnist": "The wide-area pull-gossip paper, Fashion-MNIST + Network-in-Network (its Table 3)",
        "node_based_table3": "Node-based paper, Table III",
        "layerdrop_1g": "The layer-dropping parameter-server paper, its 1 Gb/s setting (Table 1)",
    }
    for experiment, title in expected.items():
        assert figure_title(experiment).replace("\n", " ") == title
    from importlib.resources import files

    for path in files("dlcomm.configs").joinpath("experiment").iterdir():
        if path.name.endswith(".yaml"):
            title = figure_title(path.name.removesuffix(".yaml")).replace("\n", " ")
            assert title.count("(") == title.count(")") and not title.endswith((",", ":")), title
    assert figure_title("my_own") == "my_own"  # not shipped: its name


def _accuracy_runs(seeds: dict[str, int], epochs: int = 3) -> tuple[pd.DataFrame, dict]:
    """Runs of one setting, ``seeds[method]`` per method, and their curves: accuracy 0.5, 0.6,
    0.7, ... at epochs 1, 2, 3, ..., shifted by 0.02 per seed."""
    rows, per_seed = [], {}
    for method, count in seeds.items():
        for seed in range(count):
            rows.append({"setting": "all", "method": method, "run_id": f"{method}{seed}"})
            accuracy = pd.Series([0.5 + 0.1 * epoch for epoch in range(epochs)], index=range(1, epochs + 1))
            per_seed.setdefault(method, []).append(accuracy + 0.02 * seed)
    curves = {method: seed_curves(series) for method, series in per_seed.items()}
    return pd.DataFrame(rows), curves


def _axes(seeds: dict[str, int], epochs: int = 3):
    runs, curves = _accuracy_runs(seeds, epochs)
    figure = plots._accuracy_figure(runs, lambda frame, kind: ("epoch", curves[frame["method"].iloc[0]]), "t")
    figure.canvas.draw()
    return figure, figure.axes[0]


def test_accuracy_draws_a_band_for_two_seeds_and_none_for_one() -> None:
    figure, by_epoch = _axes({"allreduce": 2})
    bands = [c for c in by_epoch.collections if isinstance(c, PolyCollection)]
    assert len(bands) == 1 and len(by_epoch.lines) == 1
    top = bands[0].get_paths()[0].vertices[:, 1].max()
    assert top == pytest.approx(100 * (0.71 + 0.02 / math.sqrt(2)))  # mean + 1 sample std at epoch 3
    plt.close(figure)
    figure, by_epoch = _axes({"allreduce": 1})
    assert len(by_epoch.lines) == 1 and not any(isinstance(c, PolyCollection) for c in by_epoch.collections)
    plt.close(figure)


@pytest.mark.parametrize("epochs", [2, 3])
def test_accuracy_has_integer_epoch_ticks_and_worded_legend(epochs: int) -> None:
    figure, by_epoch = _axes({"allreduce": 2, "local_sgd period=4": 1}, epochs)
    ticks = [label.get_text() for label in by_epoch.get_xticklabels()]
    assert ticks and all(re.fullmatch(r"−?\d+", tick) for tick in ticks), ticks
    assert all(float(tick).is_integer() for tick in by_epoch.get_xticks())
    legend = next(axis.get_legend() for axis in figure.axes if axis.get_legend())
    assert [text.get_text() for text in legend.get_texts()] == ["AllReduce-SGD", "Local-SGD (period 4)"]
    plt.close(figure)


def test_one_evaluation_beside_curves_draws_error_bars_and_no_empty_time_panel() -> None:
    """A method evaluated once (a run of a few hundred steps) beside one with a curve: the spread
    over seeds is an error bar of ±1 sample std at its point, and a clock that has no curve gets
    no empty panel."""
    runs, once = _accuracy_runs({"allreduce": 2}, epochs=1)
    more, curves = _accuracy_runs({"local_sgd": 1}, epochs=3)
    curves = {**curves, **once}
    figure = plots._accuracy_figure(
        pd.concat([runs, more]),
        lambda frame, kind: ("epoch", curves[frame["method"].iloc[0]]) if kind == "epoch" else None,
        "t",
    )
    assert len(figure.axes) == 1
    axis = figure.axes[0]
    assert not any(isinstance(c, PolyCollection) for c in axis.collections)
    (bar,) = [c for c in axis.collections if c.get_segments()]
    low, high = bar.get_segments()[0][:, 1]
    assert (low, high) == pytest.approx((100 * (0.51 - 0.02 / math.sqrt(2)), 100 * (0.51 + 0.02 / math.sqrt(2))))
    assert "bar: ±1 std over seeds" in axis.get_legend().get_title().get_text()
    plt.close(figure)


def _flat_runs(levels: dict[str, list[float]], seeds: int = 1, steps: int = 20) -> tuple[pd.DataFrame, Callable]:
    """Runs of one setting, one method per key of ``levels`` (its accuracy at epochs 1, 2, ...,
    0.004 apart per seed), their ``metrics.final/steps`` and a ``curve_of`` for both clocks."""
    rows, curves = [], {}
    for method, accuracies in levels.items():
        per_seed = []
        for seed in range(seeds):
            rows.append({"setting": "all", "method": method, "run_id": f"{method}{seed}", "metrics.final/steps": steps})
            per_seed.append(pd.Series(accuracies, index=range(1, len(accuracies) + 1)) + 0.004 * seed)
        curves[method] = seed_curves(per_seed)
    return pd.DataFrame(rows), lambda frame, kind: ("epoch", curves[frame["method"].iloc[0]])


def test_runs_evaluated_once_get_a_sentence_instead_of_an_accuracy_figure(tmp_path: Path) -> None:
    """One point per method (every run evaluated once, at its end) is no curve: no figure (it was
    the points jittered around one epoch tick), and the sentence the report writes in its place."""
    runs, curve_of = _flat_runs({"allreduce": [0.85], "sesgd": [0.83]}, seeds=3, steps=117)
    assert plots.why_no_accuracy(runs, curve_of, 10.0) == (
        "No accuracy figure: every run was evaluated once, at its end, after 117 steps: one point per method "
        "is no curve; its accuracy is in the table."
    )
    assert plots.accuracy(runs, curve_of, tmp_path / "a.png", "t", 10.0) is None
    assert not (tmp_path / "a.png").exists()
    # without the steps, the sentence leaves them out
    assert plots.why_no_accuracy(runs.drop(columns="metrics.final/steps"), curve_of).startswith(
        "No accuracy figure: every run was evaluated once, at its end: one point"
    )


def test_runs_at_chance_level_get_a_sentence_instead_of_an_accuracy_figure(tmp_path: Path) -> None:
    """Every method within 2 points of chance (10% for 10 classes), curves or not: noise, no figure.
    One method clear of chance, or a chance level the runs cannot tell: the figure is drawn."""
    at_chance = {"allreduce": [0.094, 0.095, 0.093], "sgp": [0.097, 0.098, 0.096]}
    runs, curve_of = _flat_runs(at_chance)
    assert plots.why_no_accuracy(runs, curve_of, 10.0) == (
        "No accuracy figure: every run's test accuracy is at chance level (10% for 10 classes; best 9.5-9.8%) "
        "after 20 steps: the differences between them are noise."
    )
    assert plots.accuracy(runs, curve_of, tmp_path / "a.png", "t", 10.0) is None
    single, single_of = _flat_runs({"allreduce": [0.0938], "sgp": [0.0977]})  # crossover_time's: one point each
    assert "at chance level (10% for 10 classes; best 9.4-9.8%)" in plots.why_no_accuracy(single, single_of, 10.0)
    # within twice the seeds' std of chance is chance too: 13% ± 2% (seeds at 11, 13 and 15%)
    wide = seed_curves([pd.Series([0.09, level], index=[1, 2]) for level in (0.11, 0.13, 0.15)])
    assert "best 13.0-13.0%" in plots.why_no_accuracy(runs.iloc[:1], lambda frame, kind: ("epoch", wide), 10.0)
    learning, learning_of = _flat_runs({**at_chance, "crossover": [0.10, 0.13, 0.15]})
    assert plots.why_no_accuracy(learning, learning_of, 10.0) == ""
    assert plots.accuracy(learning, learning_of, tmp_path / "b.png", "t", 10.0) == tmp_path / "b.png"
    assert plots.why_no_accuracy(runs, curve_of, None) == ""  # chance unknown: curves are drawn


def _span(axis) -> float:
    low, high = axis.get_ylim()
    return high - low


def test_the_accuracy_axis_shows_chance_and_never_magnifies_the_seeds_noise() -> None:
    """Curves from chance upwards: a dashed line at chance labelled "chance (10%)". Curves far
    above it: the axis' label says chance is below it. Curves 0.2 points apart span at least 5
    points, and at least 4 std over seeds when the seeds are wider apart."""
    runs, curve_of = _flat_runs({"allreduce": [0.10, 0.4, 0.6], "sgp": [0.10, 0.45, 0.65]})
    figure = plots._accuracy_figure(runs, curve_of, "t", chance=10.0)
    for axis in figure.axes:
        (line,) = [line for line in axis.get_lines() if line.get_linestyle() == "--"]
        assert list(line.get_ydata()) == [10.0, 10.0]
        assert "chance (10%)" in [text.get_text() for text in axis.texts]
    plt.close(figure)

    close, close_of = _flat_runs({"allreduce": [0.80, 0.810], "sgp": [0.80, 0.812]})
    figure = plots._accuracy_figure(close, close_of, "t", chance=10.0)
    axis = figure.axes[0]
    assert _span(axis) == pytest.approx(plots.AXIS_FLOOR_POINTS)  # not 1.2 points blown up to the height
    assert axis.get_ylabel().endswith("\nchance 10%: below the axis")
    assert not [line for line in axis.get_lines() if line.get_linestyle() == "--"]
    plt.close(figure)

    noisy, noisy_of = _flat_runs({"allreduce": [0.80, 0.81], "sgp": [0.80, 0.812]}, seeds=3)
    std = 100 * 0.004  # the seeds are 0.4 points apart: std 0.4
    spread = max(plots.AXIS_FLOOR_POINTS, 4 * std)
    figure = plots._accuracy_figure(noisy, noisy_of, "t", chance=None)
    assert _span(figure.axes[0]) >= spread - 1e-9
    assert "chance" not in figure.axes[0].get_ylabel()  # chance unknown: not drawn, not named
    plt.close(figure)
    low, high = plots._accuracy_figure(*_flat_runs({"a": [0.99, 0.995]}), "t", chance=10.0).axes[0].get_ylim()
    assert high <= 100 and high - low == pytest.approx(plots.AXIS_FLOOR_POINTS)  # the floor stays within 0-100
    plt.close("all")


def test_accuracy_against_a_setting_shows_chance_and_a_floor_from_the_seeds_spread() -> None:
    runs = pd.DataFrame({"setting": ["w=4", "w=16"], "world": [4.0, 16.0]})
    table = pd.DataFrame(
        {
            "setting": ["w=4", "w=16"],
            "method": ["allreduce", "allreduce"],
            "final_acc_mean": [80.0, 80.5],
            "final_acc_std": [2.0, 2.5],
        }
    )
    figure = plots._against_figure(table, runs, "world", "workers", "final_acc_mean", "acc %", "t", chance=10.0)
    axis = figure.axes[0]
    assert _span(axis) >= 4 * 2.5 - 1e-9  # 4 std over seeds: the 0.5-point step is not the axis' height
    assert axis.get_ylabel().endswith("chance 10%: below the axis")
    plt.close(figure)
    low = table.assign(final_acc_mean=[10.0, 30.0])
    figure = plots._against_figure(low, runs, "world", "workers", "final_acc_mean", "acc %", "t", chance=10.0)
    assert "chance (10%)" in [text.get_text() for text in figure.axes[0].texts]
    plt.close(figure)


@pytest.mark.parametrize(
    ("params", "chance"),
    [
        ({"dataset.name": "fashion_mnist"}, 10.0),
        ({"dataset.name": "mnist", "dataset.root": "/nowhere"}, 10.0),  # nothing is read
        ({"dataset.name": "synthetic", "dataset.num_classes": "4", "dataset.shape": "[3, 32, 32]"}, 25.0),
        ({"dataset.name": "cifar100", "dataset.root": "/nowhere"}, 1.0),
        ({"dataset.name": "imagefolder", "dataset.root": "/nowhere"}, None),  # only its folders tell
        ({"dataset.name": "my_own_set"}, None),  # not a data set dlcomm knows
        ({}, None),  # runs recorded without it
    ],
)
def test_the_chance_level_is_read_from_the_runs_recorded_data_set(params: dict, chance: float | None) -> None:
    runs = pd.DataFrame([{f"params.{key}": value for key, value in params.items()}] * 2)
    assert plots.chance_level(runs) == chance
    mixed = pd.DataFrame([{"params.dataset.name": "fashion_mnist"}, {"params.dataset.name": "cifar100"}])
    assert plots.chance_level(mixed) is None  # no one chance level


def test_accuracy_writes_a_png_or_nothing(tmp_path: Path) -> None:
    runs, curves = _accuracy_runs({"allreduce": 2})
    path = plots.accuracy(runs, lambda frame, kind: ("epoch", curves["allreduce"]), tmp_path / "a.png", "t")
    assert path == tmp_path / "a.png" and path.read_bytes()[:4] == b"\x89PNG"
    assert plots.accuracy(runs, lambda frame, kind: None, tmp_path / "none.png", "t") is None
    assert not (tmp_path / "none.png").exists()


def _latency_sweep() -> tuple[pd.DataFrame, pd.DataFrame]:
    """Two methods at latencies 0.1, 1 and 5 ms: the runs (one per setting suffices) and the table."""
    latencies = {"lat=0.1": 0.1, "lat=1": 1.0, "lat=5": 5.0}
    runs = pd.DataFrame({"setting": list(latencies), "latency": list(latencies.values())})
    table = pd.DataFrame(
        [
            {"setting": s, "method": m, "ms": ms * (2 if m == "allreduce" else 1)}
            for m in ("allreduce", "sesgd")
            for s, ms in zip(latencies, (10.0, 20.0, 60.0))
        ]
    )
    return runs, table


def test_against_latency_on_a_log_axis_with_error_bars_where_the_table_has_a_std() -> None:
    runs, table = _latency_sweep()
    figure = plots._against_figure(table, runs, "latency", "latency ms", "ms", "ms", "t", log_x=True)
    axis = figure.axes[0]
    assert axis.get_xscale() == "log"
    assert [label.get_text() for label in axis.get_xticklabels()] == ["0.1", "1", "5"]  # the swept latencies
    assert [text.get_text() for text in axis.get_legend().get_texts()] == ["AllReduce-SGD", "Shuffle-Exchange SGD"]
    assert not any(container.has_yerr for container in axis.containers)  # no ms_std column: no bars
    plt.close(figure)
    figure = plots._against_figure(table.assign(ms_std=1.5), runs, "latency", "latency ms", "ms", "ms", "t")
    axis = figure.axes[0]
    assert axis.get_xscale() == "linear"
    assert len(axis.containers) == 2 and all(container.has_yerr for container in axis.containers)
    plt.close(figure)


def test_a_long_title_is_rewrapped_to_the_figure_and_keeps_every_word() -> None:
    runs, table = _latency_sweep()
    title = figure_title("crossover_largebatch")  # wrapped at 80 characters: wider than a 6.4-inch figure
    assert max(len(line) for line in title.splitlines()) > 64
    figure = plots._against_figure(table, runs, "latency", "latency ms", "ms", "ms", title, log_x=True)
    shown = figure.axes[0].get_title()
    assert shown.split() == title.split() and max(len(line) for line in shown.splitlines()) <= 64
    plt.close(figure)


def test_against_draws_a_line_per_method_and_split_value_and_the_papers_points() -> None:
    """Speedup against workers for the node-based clusters 2x2, 4x2, 4x4: two lines per method (2
    and 4 workers per node), error bars from speedup_std, and the paper's points as their own line."""
    from dlcomm.report.papers import PaperMarks

    clusters = {
        "nodes=2 workers_per_node=2": (4, 2),
        "nodes=4 workers_per_node=2": (8, 2),
        "nodes=4 workers_per_node=4": (16, 4),
    }
    runs = pd.DataFrame(
        {
            "setting": list(clusters),
            "world": [w for w, _ in clusters.values()],
            "params.workers_per_node": [str(r) for _, r in clusters.values()],
        }
    )
    table = pd.DataFrame(
        [
            {"setting": s, "method": m, "speedup": 1.0 if m == "allreduce" else 1.1, "speedup_std": 0.02}
            for m in ("allreduce", "node_based")
            for s in clusters
        ]
    )
    paper = PaperMarks("paper, Table III", ((4, 1.01), (8, 1.05)))
    figure = plots._against_figure(
        table, runs, "world", "workers", "speedup", "speedup", "t", split_key="params.workers_per_node", paper=paper
    )
    axis = figure.axes[0]
    legend = [text.get_text() for text in axis.get_legend().get_texts()]
    assert legend == [
        "AllReduce-SGD, 2 workers per node",
        "AllReduce-SGD, 4 workers per node",
        "node-based averaging, 2 workers per node",
        "node-based averaging, 4 workers per node",
        "paper, Table III",
    ]
    by_label = {container.get_label(): container.lines[0] for container in axis.containers}
    assert list(by_label["node-based averaging, 2 workers per node"].get_xdata()) == [4, 8]
    assert list(by_label["paper, Table III"].get_ydata()) == [1.01, 1.05]
    assert sum(container.has_yerr for container in axis.containers) == 4
    plt.close(figure)


def test_a_zero_latency_keeps_a_linear_axis() -> None:
    runs, table = _latency_sweep()
    runs.loc[0, "latency"] = 0.0
    figure = plots._against_figure(table, runs, "latency", "latency ms", "ms", "ms", "t", log_x=True)
    assert figure.axes[0].get_xscale() == "linear" and 0.0 in figure.axes[0].lines[0].get_xdata()
    plt.close(figure)


def test_each_swept_latency_key_and_a_batch_sweep_get_their_own_figure(tmp_path) -> None:
    """Two latency keys swept at once write two files with their axes in words; a sweep of the
    per-worker batch writes best accuracy against the global mini-batch (world x batch x
    micro-batches) on a log axis; a sweep of workers, speedup and accuracy against workers."""
    from dlcomm.report.build import _against_figures

    settings = ["inter=0.1 intra=0.01", "inter=1 intra=0.1"]
    runs = pd.DataFrame(
        {
            "setting": settings,
            "params.network.inter.latency_ms": ["0.1", "1"],
            "params.network.intra.latency_ms": ["0.01", "0.1"],
            "tags.world_size": ["4", "4"],
        }
    )
    table = pd.DataFrame(
        {
            "setting": settings,
            "method": "allreduce",
            "baseline": "allreduce",
            "sim_ms_per_iter": [10.0, 20.0],
            "sim_ms_per_iter_std": [1.0, 2.0],
        }
    )
    written = _against_figures(
        "mine", table, runs, ["network.inter.latency_ms", "network.intra.latency_ms"], "t", tmp_path
    )
    assert sorted(path.name for path in written) == ["time_vs_latency.png", "time_vs_network_intra_latency_ms.png"]
    figure = plots._against_figure(
        table,
        runs,
        "params.network.intra.latency_ms",
        plots.AXIS_NAMES["network.intra.latency_ms"],
        "sim_ms_per_iter",
        "ms",
        "t",
        True,
    )
    assert figure.axes[0].get_xlabel() == "latency inside a node (ms)"
    plt.close(figure)
    batches = ["batch=64", "batch=256"]
    runs = pd.DataFrame(
        {
            "setting": batches,
            "tags.world_size": ["16", "16"],
            "params.train.batch_size": ["64", "256"],
            "params.train.comm_interval": ["2", "2"],
        }
    )
    table = pd.DataFrame(
        {
            "setting": batches,
            "method": "crossover",
            "baseline": "",
            "sim_ms_per_iter": [1.0, 2.0],
            "best_acc_mean": [90.0, 85.0],
            "best_acc_std": [0.5, 1.0],
        }
    )
    written = _against_figures("mine", table, runs, ["train.batch_size"], "t", tmp_path)
    assert [path.name for path in written if path is not None] == ["accuracy_vs_batch.png"]
    # workers swept at a fixed global mini-batch (the Crossover paper's Fig. 10): speedup and final
    # accuracy against workers, and no accuracy-against-batch figure with a single global batch
    scaled = ["nodes=4 batch=256", "nodes=16 batch=64"]
    runs = pd.DataFrame(
        {
            "setting": scaled,
            "tags.world_size": ["4", "16"],
            "params.train.batch_size": ["256", "64"],
            "params.nodes": ["4", "16"],
        }
    )
    table = pd.DataFrame(
        {
            "setting": scaled,
            "method": "sgp",
            "baseline": "allreduce",
            "sim_ms_per_iter": float("nan"),
            "wall_ms_per_iter": [1.0, 2.0],
            "speedup": [1.1, 1.2],
            "final_acc_mean": [88.0, 84.0],
            "final_acc_std": [0.2, 0.9],
            "best_acc_mean": [88.0, 84.0],
        }
    )
    written = _against_figures("mine", table, runs, ["nodes", "train.batch_size"], "t", tmp_path)
    assert [path.name for path in written if path is not None] == ["speedup_vs_workers.png", "accuracy_vs_workers.png"]
    figure = plots._against_figure(
        table, runs.assign(world=[4.0, 16.0]), "world", "workers", "final_acc_mean", "%", "t"
    )
    line = figure.axes[0].containers[0]
    assert list(line.lines[0].get_xdata()) == [4.0, 16.0] and list(line.lines[0].get_ydata()) == [88.0, 84.0]
    assert line.has_yerr
    plt.close(figure)
    figure = plots._against_figure(
        table, runs.assign(g=[2048.0, 8192.0]), "g", "global", "best_acc_mean", "%", "t", True
    )
    assert [label.get_text() for label in figure.axes[0].get_xticklabels()] == ["2048", "8192"]
    plt.close(figure)


def test_with_several_settings_colour_tells_the_setting_and_dash_the_method() -> None:
    runs = pd.DataFrame(
        [
            {"setting": s, "method": m, "run_id": f"{s}{m}"}
            for s in ("nodes=2", "nodes=4")
            for m in ("allreduce", "node_based")
        ]
    )
    curve = seed_curves([pd.Series([0.8, 0.9], index=[1, 2])])
    figure = plots._accuracy_figure(runs, lambda frame, kind: ("epoch", curve), "t")
    lines = {line.get_label(): line for line in figure.axes[0].get_lines()}
    two, four = "2 nodes", "4 nodes"
    assert lines[f"AllReduce-SGD — {two}"].get_color() == lines[f"node-based averaging — {two}"].get_color()
    assert lines[f"AllReduce-SGD — {two}"].get_color() != lines[f"AllReduce-SGD — {four}"].get_color()
    assert lines[f"AllReduce-SGD — {two}"].get_linestyle() == lines[f"AllReduce-SGD — {four}"].get_linestyle()
    assert lines[f"AllReduce-SGD — {two}"].get_linestyle() != lines[f"node-based averaging — {two}"].get_linestyle()
    plt.close(figure)


def test_the_accuracy_axis_says_whose_accuracy_it_averages() -> None:
    """train.eval_replicas decides which workers are evaluated: every one (0, or at least the world),
    rank 0 alone (1: the parameter server's copy), or an evenly spaced subset of the larger runs."""

    def runs(worlds: list[int], replicas: list[int]) -> pd.DataFrame:
        return pd.DataFrame(
            {"tags.world_size": [str(w) for w in worlds], "params.train.eval_replicas": [str(r) for r in replicas]}
        )

    assert plots.evaluated_workers(runs([4, 16], [0, 16])) == "mean over workers"
    assert plots.evaluated_workers(runs([4, 8], [16, 16])) == "mean over workers"
    assert plots.evaluated_workers(runs([4, 8], [1, 1])) == "rank 0"
    assert plots.evaluated_workers(runs([4, 16, 64], [8, 8, 8])) == "mean over up to 8 workers"
    assert plots.evaluated_workers(pd.DataFrame({"x": [1]})) == "mean over workers"  # runs without the columns
    curve = seed_curves([pd.Series([0.8, 0.9], index=[1, 2])])
    frame = runs([64], [8]).assign(setting="all", method="sgp", run_id="r")
    figure = plots._accuracy_figure(frame, lambda _frame, kind: ("epoch", curve) if kind == "epoch" else None, "t")
    assert figure.axes[0].get_ylabel() == "test accuracy %\n(mean over up to 8 workers, mean over seeds)"
    plt.close(figure)


def test_two_mini_batches_at_one_worker_count_split_the_lines_by_workers_and_by_mini_batch(
    tmp_path, monkeypatch
) -> None:
    """Fig. 9 at 16 and 64 workers: 16 workers run global mini-batches 1,024 and 4,096, 64 workers
    4,096. Against the mini-batch there is a line per worker count (not one line zigzagging
    between 16 and 64 workers at 4,096); against workers, a line per global mini-batch."""
    from dlcomm.report.build import _against_figures

    settings = {"n16 i2": ("16", "32", "2"), "n16 i8": ("16", "32", "8"), "n64 i8": ("64", "8", "8")}
    runs = pd.DataFrame(
        {
            "setting": list(settings),
            "tags.world_size": [w for w, _, _ in settings.values()],
            "params.nodes": [w for w, _, _ in settings.values()],
            "params.train.batch_size": [b for _, b, _ in settings.values()],
            "params.train.comm_interval": [i for _, _, i in settings.values()],
        }
    )
    table = pd.DataFrame(
        {
            "setting": list(settings),
            "method": "crossover",
            "baseline": "allreduce",
            "sim_ms_per_iter": float("nan"),
            "wall_ms_per_iter": 1.0,
            "speedup": 1.0,
            "final_acc_mean": [85.0, 75.0, 70.0],
            "best_acc_mean": [85.0, 75.0, 70.0],
            "best_acc_std": 0.5,
        }
    )
    chosen = {}
    real_against = plots.against

    def recording(table, runs, x_key, *args, split_key=None, **kwargs):
        chosen[x_key] = split_key
        return real_against(table, runs, x_key, *args, split_key=split_key, **kwargs)

    monkeypatch.setattr(plots, "against", recording)
    written = _against_figures("mine", table, runs, ["nodes", "train.batch_size", "train.comm_interval"], "t", tmp_path)
    assert [path.name for path in written if path is not None] == [
        "speedup_vs_workers.png",
        "accuracy_vs_workers.png",
        "accuracy_vs_batch.png",
    ]
    assert chosen == {"world": "global_batch", "global_batch": "world"}
    with_world = runs.assign(world=[16, 16, 64], global_batch=[1024, 4096, 4096])
    figure = plots._against_figure(
        table, with_world, "global_batch", "g", "best_acc_mean", "%", "t", True, split_key="world"
    )
    lines = {
        c.get_label(): (list(c.lines[0].get_xdata()), list(c.lines[0].get_ydata())) for c in figure.axes[0].containers
    }
    assert lines == {
        "Crossover-SGD, 16 workers": ([1024, 4096], [85.0, 75.0]),
        "Crossover-SGD, 64 workers": ([4096], [70.0]),
    }
    plt.close(figure)
    figure = plots._against_figure(
        table, with_world, "world", "w", "final_acc_mean", "%", "t", split_key="global_batch"
    )
    labels = sorted(c.get_label() for c in figure.axes[0].containers)
    assert labels == ["Crossover-SGD, global mini-batch 1024", "Crossover-SGD, global mini-batch 4096"]
    plt.close(figure)


def test_the_time_breakdown_stacks_waiting_for_peers_between_compute_and_communication(tmp_path, monkeypatch) -> None:
    """Threads tell waiting for peers apart on the wall clock: its bar sits on compute, the
    communication on both, so the stack is the iteration (docs/metrics.md)."""
    drawn = {}
    monkeypatch.setattr(plots, "_save", lambda figure, path: drawn.setdefault("figure", figure) and path)
    table = pd.DataFrame(
        {
            "setting": ["all", "all"],
            "method": ["allreduce", "local_sgd"],
            "sim_ms_per_iter": [math.nan, math.nan],
            "wall_compute_ms": [20.0, 21.0],
            "wall_peer_wait_ms": [70.0, 40.0],
            "wall_comm_exposed_ms": [4.0, 2.0],
        }
    )
    plots.time_breakdown(table, tmp_path / "t.png", "t", "wall clock")
    axis = drawn["figure"].axes[0]
    bars = [(rect.get_y(), rect.get_height()) for container in axis.containers for rect in container]
    assert [label.get_text() for label in axis.get_legend().get_texts()] == [
        "compute",
        "waiting for peers",
        "exposed communication",
    ]
    assert bars == [(0, 20.0), (0, 21.0), (20.0, 70.0), (21.0, 40.0), (90.0, 4.0), (61.0, 2.0)]
    plt.close("all")


def test_a_log_axis_is_labelled_in_plain_numbers_not_tex() -> None:
    """Figure text is literal (text.parse_math off, so a '$' in a name is no TeX): matplotlib's
    own log labels ('$\\mathdefault{10^{2}}$') would print as code; the bytes axis reads 50, 100, 200, 500."""
    from dlcomm.report import plots

    plt = plots._pyplot()
    figure, axis = plt.subplots()
    axis.plot([41.1, 606.5], [86.7, 85.2], "o")
    plots._plain_log_x(axis)
    figure.canvas.draw()
    labels = [label.get_text() for label in axis.get_xticklabels() if label.get_text()]
    plt.close(figure)
    assert labels and not any("$" in label for label in labels)
    assert {"50", "100", "200", "500"} <= set(labels)
