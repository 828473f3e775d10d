"""Every figure a report draws stands alone: each time axis names its clock (and, simulated, the
network it models), no title carries an issue number, a run id or a sweep id, the text is
readable at the figure's size, accuracy axes show the differences and not the warm-up, and a
setting's bars stand apart from the next's.

The report is written from small synthetic runs through its real entry point
(:func:`dlcomm.report.build.write_report`, :func:`dlcomm.report.sweep.report_sweep`), with every
figure caught as it is saved; :func:`figure_problems` is also applied to every committed report
as it is redrawn (tests/test_results_redraw.py)."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pytest

from dlcomm.report import plots
from dlcomm.report.build import write_report

# a label that speaks of time per iteration, training time, a clock or a speedup (a ratio of times)
TIME_AXIS = re.compile(r"per iteration|training time|\bclock\b|speedup|\btime\b", re.IGNORECASE)
NAMED_CLOCK = re.compile(r"simulated clock on [\w.-]+|wall clock")
# where a figure came from, not what it shows
BAD_TITLE = re.compile(r"\bissues? \d+|\b[0-9a-f]{32}\b|\bsweep [0-9a-f]{8}\b", re.IGNORECASE)
SMALLEST_FONT = 8.0  # points: tick labels and legends at the saved size


def figure_problems(figure) -> list[str]:
    """What keeps ``figure`` from standing alone, a line each (empty: nothing)."""
    problems = []
    suptitle = figure._suptitle.get_text() if figure._suptitle is not None else ""
    titles = [suptitle] + [axis.get_title(loc) for axis in figure.axes for loc in ("left", "center", "right")]
    problems += [f"title {title!r} names an issue, a run or a sweep" for title in titles if BAD_TITLE.search(title)]
    for axis in figure.axes:
        for label in (axis.get_xlabel(), axis.get_ylabel()):
            flat = " ".join(label.split())
            if TIME_AXIS.search(flat) and not NAMED_CLOCK.search(flat):
                problems.append(f"time axis {flat!r} names no clock (simulated on a network, or wall)")
            if "simulated" in flat and not re.search(r"simulated clock on [\w.-]+", flat):
                problems.append(f"axis {flat!r} says simulated without naming the network")
        for tick in axis.get_xticklabels() + axis.get_yticklabels():
            if tick.get_text() and tick.get_rotation() % 360:
                problems.append(f"tick label {tick.get_text()!r} rotated {tick.get_rotation():g} degrees")
            if tick.get_text() and tick.get_fontsize() < SMALLEST_FONT:
                problems.append(f"tick label {tick.get_text()!r} at {tick.get_fontsize():g} pt")
        legend = axis.get_legend()
        for text in legend.get_texts() if legend is not None else []:
            if text.get_fontsize() < SMALLEST_FONT:
                problems.append(f"legend entry {text.get_text()!r} at {text.get_fontsize():g} pt")
    return problems


@pytest.fixture
def drawn(monkeypatch) -> dict:
    """``file name -> figure`` of every figure the report saves (the figure still open)."""
    caught: dict = {}
    real_save = plots._save

    def catching(figure, path: Path) -> Path:
        figure.canvas.draw()  # tick labels exist once drawn
        caught[Path(path).name] = figure
        saved = real_save(figure, path)
        return saved

    monkeypatch.setattr(plots, "_save", catching)
    return caught


class Memory:
    """Run data held in memory: the runs and their histories (``(run_id, key) -> {step: value}``)."""

    def __init__(self, runs: pd.DataFrame, histories: dict[tuple[str, str], dict[int, float]]) -> None:
        self._runs, self._histories = runs, histories

    def runs(self, experiment: str) -> pd.DataFrame:
        return self._runs

    def history(self, run_id: str, key: str) -> pd.Series:
        return pd.Series(self._histories.get((run_id, key), {}), dtype=float)


METHODS = {"allreduce": (20.0, 8e6), "local_sgd": (12.0, 2e6), "diloco": (11.0, 1e6)}  # ms/iter, bytes/iter


def synthetic(
    settings: dict[str, dict[str, str]],
    network: str = "wan_hetero",
    clock_evaluations: bool = True,
    seeds: int = 2,
    first_eval_s: float = 0.0,
) -> Memory:
    """Runs of three methods x ``seeds`` in each of ``settings`` (name -> the parameters that set
    it apart), on the simulated clock of ``network`` (``""``: the wall clock), with accuracy
    curves by epoch, and by the training clock (``clock_evaluations``: the first evaluation of
    the untrained model at 20%, at ``first_eval_s`` on the clock) or by the epochs' times."""
    rows, histories, started = [], {}, 0
    for setting, extra in settings.items():
        for method, (ms, sent) in METHODS.items():
            for seed in range(seeds):
                run_id = f"{setting}-{method}-{seed}"
                steps = {"allreduce": 300, "local_sgd": 400, "diloco": 500}[method]
                level = {"allreduce": 0.85, "local_sgd": 0.86, "diloco": 0.875}[method] + 0.002 * seed
                params = {
                    "algo.name": method,
                    "seed": str(seed),
                    "dataset.name": "synthetic",
                    "dataset.num_classes": "10",
                    "model.name": "mlp",
                    "nodes": "4",
                    "workers_per_node": "1",
                    "train.batch_size": "32",
                    "network.mode": "simulate" if network else "off",
                    "network.name": network or "off",
                    "report.traffic": "true",
                    **extra,
                }
                world = int(params["nodes"]) * int(params["workers_per_node"])
                metrics = {
                    "final/test_acc_mean": level,
                    "final/best_test_acc_mean": level + 0.002,
                    "final/time_per_iter_s": ms / 2e3,
                    "final/comm_share": 0.3,
                    "final/steps": float(steps),
                    "final/bytes_sent_per_iter": sent,
                    "final/peak_bytes_sent_per_iter": 2 * sent,
                }
                if network:
                    scale = float(extra.get("network.inter.latency_ms", 1.0))
                    metrics |= {"final/sim_time_per_iter_s": scale * ms / 1e3, "final/sim_comm_share": 0.4}
                tags = {
                    "world_size": str(world),
                    "network": network or "off",
                    "network_mode": "simulate" if network else "off",
                    "model": "mlp",
                    "dataset": "synthetic",
                    "algo": method,
                }
                started += 1000
                rows.append(
                    {
                        "run_id": run_id,
                        "status": "FINISHED",
                        "start_time": pd.Timestamp(started, unit="ms", tz="UTC"),
                        "end_time": pd.Timestamp(started + 500, unit="ms", tz="UTC"),
                        **{f"params.{k}": v for k, v in params.items()},
                        **{f"metrics.{k}": v for k, v in metrics.items()},
                        **{f"tags.{k}": v for k, v in tags.items()},
                    }
                )
                epochs = {epoch: level - 0.06 / epoch for epoch in range(1, 6)}
                histories[(run_id, "epoch/test_acc_mean")] = epochs
                time_key = "epoch/sim_time_s" if network else "epoch/train_time_s"
                histories[(run_id, time_key)] = {epoch: 6.0 * epoch for epoch in epochs}
                if clock_evaluations:
                    histories[(run_id, "clock/time_s")] = {step: 5.0 * step or first_eval_s for step in range(7)}
                    histories[(run_id, "clock/test_acc_mean")] = {
                        step: 0.2 if step == 0 else level - 0.04 / step for step in range(7)
                    }
    return Memory(pd.DataFrame(rows), histories)


def _report(data: Memory, folder: Path, experiment: str = "figtext") -> None:
    write_report(experiment, data, folder, runs=data.runs(experiment))


def _assert_stands_alone(drawn: dict, expected: set[str]) -> None:
    assert expected <= set(drawn), f"drawn {sorted(drawn)}, expected {sorted(expected)}"
    problems = [f"{name}: {problem}" for name, figure in drawn.items() for problem in figure_problems(figure)]
    assert not problems, "\n".join(problems)


def test_methods_on_a_simulated_network_name_its_clock_and_network(drawn: dict, tmp_path: Path) -> None:
    _report(synthetic({"all": {}}), tmp_path)
    _assert_stands_alone(drawn, {"accuracy.png", "time_per_iteration.png", "accuracy_vs_bytes.png"})
    by_time = drawn["accuracy.png"].axes[1]
    assert "simulated clock on wan_hetero" in by_time.get_xlabel()
    assert "simulated clock on wan_hetero" in drawn["time_per_iteration.png"].axes[0].get_ylabel()
    assert "simulated clock on wan_hetero" in drawn["accuracy_vs_time.png"].axes[0].get_xlabel()


@pytest.mark.parametrize("first_eval_s", [0.0, 0.01])
def test_the_accuracy_axis_is_zoomed_past_the_untrained_model(drawn: dict, tmp_path: Path, first_eval_s) -> None:
    """The first clock evaluation (20%, before training) beside curves at 83-88%: the axis shows
    the curves, and a note says where the first evaluations went; chance (10%) is named, not drawn
    down to. A run's clock series records that evaluation after its first step (0.01 s in
    results/wan_compare), not at 0: it is the untrained model's all the same."""
    _report(synthetic({"all": {}}, first_eval_s=first_eval_s), tmp_path)
    by_time = drawn["accuracy.png"].axes[1]
    low, high = by_time.get_ylim()
    assert low > 75 and high < 92, (low, high)
    assert any("first evaluations 20%: below the axis" == text.get_text() for text in by_time.texts)
    by_epoch = drawn["accuracy.png"].axes[0]  # no warm-up jump by epoch: the axis is the data's
    assert by_epoch.get_ylim()[0] < 80 and "chance 10%: below the axis" in by_epoch.get_ylabel()


def test_settings_on_the_wall_clock_stand_apart_and_name_the_clock(drawn: dict, tmp_path: Path) -> None:
    """Workers swept on the wall clock: speedup and the time per iteration name the wall clock; a
    setting's bars are separated from the next's by a gap wider than a bar, and named once."""
    settings = {f"n{nodes}": {"nodes": str(nodes)} for nodes in (2, 4, 8)}
    _report(synthetic(settings, network="", clock_evaluations=False), tmp_path)
    _assert_stands_alone(drawn, {"accuracy.png", "time_per_iteration.png", "speedup_vs_workers.png"})
    assert "wall clock" in drawn["accuracy.png"].axes[1].get_xlabel()
    bars = drawn["time_per_iteration.png"].axes[0]
    lefts = sorted({round(patch.get_x(), 6) for patch in bars.patches})
    width = bars.patches[0].get_width()
    steps = [b - a for a, b in zip(lefts, lefts[1:])]
    assert len(lefts) == 9 and sorted(steps)[-2] > 1.5 * width + 1e-9  # two gaps between three settings
    assert sum(step > 1.5 * width for step in steps) == 2
    ticks = [tick.get_text() for tick in bars.get_xticklabels()]
    assert "AllReduce-SGD" in ticks and not any("nodes" in tick for tick in ticks)  # the setting is named once


def test_latency_and_batch_sweeps_name_the_clock(drawn: dict, tmp_path: Path) -> None:
    latencies = {f"lat{lat}": {"network.inter.latency_ms": lat} for lat in ("0.1", "1", "5")}
    _report(synthetic(latencies, network="eth_10g", seeds=1), tmp_path / "latency")
    batches = {f"b{batch}": {"train.batch_size": batch} for batch in ("16", "64")}
    _report(synthetic(batches, network="eth_10g", seeds=1), tmp_path / "batch")
    _assert_stands_alone(drawn, {"time_vs_latency.png", "accuracy_vs_batch.png"})
    assert "simulated clock on eth_10g" in drawn["time_vs_latency.png"].axes[0].get_ylabel()


def test_a_shipped_experiment_title_names_no_issue() -> None:
    from dlcomm.report.build import figure_title

    assert figure_title("wan_compare") == "The wide-area comparison"
    assert not BAD_TITLE.search(figure_title("compression_fmnist"))


def test_a_sweep_s_figures_are_titled_by_its_experiment_and_setting(drawn: dict, tmp_path: Path, monkeypatch) -> None:
    """``dlcomm report sweep=`` (and the end of every ``train -m``): the figures' title is the
    experiment and what its runs share, not the parent run's id."""
    from dlcomm.report import build, runs, sweep

    data = synthetic({"all": {}}, seeds=1)
    parent = "5bb64f00" + "0" * 24
    monkeypatch.setattr(runs, "find_sweep", lambda uri, which: (parent, "dlcomm"))
    monkeypatch.setattr(runs, "load_sweep_runs", lambda uri, parent, experiment: data.runs(experiment))
    real_write = build.write_report
    monkeypatch.setattr(build, "write_report", lambda experiment, uri, *a, **k: real_write(experiment, data, *a, **k))
    monkeypatch.setattr(sweep, "log_comparison", lambda *args: "0")
    sweep.report_sweep("sqlite:///nowhere.db", "last", tmp_path)
    _assert_stands_alone(drawn, {"time_per_iteration.png", "accuracy.png"})
    title = drawn["time_per_iteration.png"].axes[0].get_title().replace("\n", " ")
    assert title == "dlcomm sweep: 4 workers, mlp on synthetic, wan_hetero network, 1 seed"
