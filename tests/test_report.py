"""``dlcomm report``: grouping, the table's arithmetic against hand-computed numbers, the files it
writes from real runs, and its one-line errors."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from dlcomm.report.build import _latex
from dlcomm.report.groups import assign, matches
from dlcomm.report.table import ma_acceleration, presentable, summarise

from conftest import FAST, mlflow_run


def _run(run_id: str, start: int, algo: str, seed: int, acc: float, t: float, share: float, **params: str) -> dict:
    row = {
        "run_id": run_id,
        "start_time": pd.Timestamp(start, unit="s"),
        "params.algo.name": algo,
        "params.seed": str(seed),
        "params.nodes": "4",
        "params.model.name": "small_cnn",
        "params.dataset.name": "fashion_mnist",
        "params.train.eval_every": "1",
        "params.tracking.experiment": "x",
        "metrics.final/test_acc_mean": acc,
        "metrics.final/best_test_acc_mean": acc,
        "metrics.final/time_per_iter_s": t,
        "metrics.final/comm_share": share,
        "metrics.final/steps": 100.0,
        "tags.git_commit": "abcdef0123456789",
    }
    row.update({f"params.{key}": value for key, value in params.items()})
    return row


def _runs() -> pd.DataFrame:
    return pd.DataFrame(
        [
            _run("a0", 1, "allreduce", 0, 0.80, 0.200, 0.5, **{"algo.bucket_mb": "25"}),
            _run("a1", 2, "allreduce", 1, 0.82, 0.220, 0.5, **{"algo.bucket_mb": "25"}),
            _run("l0", 3, "local_sgd", 0, 0.78, 0.100, 0.2, **{"algo.period": "4"}),
            _run("l1", 4, "local_sgd", 1, 0.70, 0.120, 0.2, **{"algo.period": "4"}),
            _run("l1-again", 9, "local_sgd", 1, 0.74, 0.110, 0.2, **{"algo.period": "4"}),  # rerun: the latest counts
            _run("p8", 5, "local_sgd", 0, 0.60, 0.090, 0.1, **{"algo.period": "8"}),
            _run("big", 6, "allreduce", 0, 0.50, 0.400, 0.5, **{"algo.bucket_mb": "25", "nodes": "8"}),
            _run("eval", 7, "allreduce", 2, 0.84, 0.240, 0.5, **{"algo.bucket_mb": "25", "train.eval_every": "5"}),
        ]
    )


def test_runs_are_grouped_by_setting_and_labelled_by_method() -> None:
    runs, varying = assign(_runs())
    assert varying == ["nodes"]  # evaluation cadence is not a setting; the algorithm's knobs are the method
    by_setting = {setting: sorted(frame["run_id"]) for setting, frame in runs.groupby("setting")}
    assert by_setting == {"nodes=4": ["a0", "a1", "eval", "l0", "l1-again", "p8"], "nodes=8": ["big"]}
    assert sorted(runs["method"].unique()) == ["allreduce", "local_sgd period=4", "local_sgd period=8"]
    assert matches("gossip_pull overlap=none scheduler=managed", "overlap=none")
    assert not matches("gossip_pull overlap=naive scheduler=managed", "overlap=none")


def test_a_method_group_s_choice_labels_the_method_instead_of_making_a_setting() -> None:
    """``report.method_groups: optim`` (wan_compare): DeMo with SGD beside AdamW-trained methods is one
    setting, its label says the optimizer, and two DeMo learning rates stay two methods (not reruns)."""
    adamw = {"optim.name": "adamw", "optim.lr": "0.001", "optim.betas": "[0.9, 0.999]"}
    rows = [
        _run("a0", 1, "allreduce", 0, 0.85, 0.07, 0.8, **adamw),
        _run("d0", 2, "diloco", 0, 0.87, 0.01, 0.1, **adamw),
        _run(
            "m0", 3, "demo", 0, 0.77, 0.36, 0.9, **{"optim.name": "sgd", "optim.lr": "0.001", "optim.momentum": "0.9"}
        ),
        _run("m1", 4, "demo", 0, 0.70, 0.36, 0.9, **{"optim.name": "sgd", "optim.lr": "0.01", "optim.momentum": "0.9"}),
    ]
    runs, varying = assign(pd.DataFrame(rows), ("optim",))
    assert varying == [] and set(runs["setting"]) == {"all"}
    assert dict(zip(runs["run_id"], runs["method"])) == {
        "a0": "allreduce",
        "d0": "diloco",
        "m0": "demo optim=sgd lr=0.001",
        "m1": "demo optim=sgd lr=0.01",
    }
    apart, _ = assign(pd.DataFrame(rows))  # without it the optimizer makes settings, as before
    assert apart["setting"].nunique() == 3 and set(apart["method"]) == {"allreduce", "diloco", "demo"}


def test_settings_come_in_the_order_of_their_values_in_the_runs_and_the_table() -> None:
    """4, 16, 64 nodes in that order (as text, "nodes=16" sorts before "nodes=4"); words after numbers."""
    rows = [
        _run(f"r{nodes}", i, "allreduce", 0, 0.8, 0.2, 0.5, nodes=nodes)
        for i, nodes in enumerate(["64", "4", "auto", "16"])
    ]
    runs, _ = assign(pd.DataFrame(rows))
    assert list(runs["setting"]) == ["nodes=4", "nodes=16", "nodes=64", "nodes=auto"]
    table = summarise(runs, "allreduce", lambda frame: None)
    assert list(table["setting"]) == ["nodes=4", "nodes=16", "nodes=64", "nodes=auto"]


def test_table_numbers_match_hand_computation() -> None:
    runs, _ = assign(_runs())
    table = summarise(runs, "allreduce", lambda frame: None).set_index(["setting", "method"])
    base = table.loc[("nodes=4", "allreduce")]
    assert base["seeds"] == 3
    assert base["final_acc_mean"] == pytest.approx(82.0)
    assert base["final_acc_std"] == pytest.approx(2.0)  # sample std of 80, 82, 84
    assert base["wall_ms_per_iter"] == pytest.approx(220.0)
    assert base["wall_compute_ms"] + base["wall_comm_exposed_ms"] == pytest.approx(base["wall_ms_per_iter"])
    local = table.loc[("nodes=4", "local_sgd period=4")]
    assert local["final_acc_mean"] == pytest.approx(76.0) and local["runs"] == "l0 l1-again"
    assert local["wall_comm_exposed_ms"] == pytest.approx(0.2 * 105.0)
    assert local["speedup"] == pytest.approx(220.0 / 105.0) and local["speedup_clock"] == "wall"
    # exposed communication, wall clock: allreduce 0.5 x 220 ms against local_sgd 0.2 x 105 ms
    assert local["comm_cut_pct"] == pytest.approx(100 * (1 - 21.0 / 110.0))
    assert base["comm_cut_pct"] == pytest.approx(0.0)
    assert table.loc[("nodes=8", "allreduce")]["speedup"] == pytest.approx(1.0)
    assert math.isnan(table.loc[("nodes=8", "allreduce")]["final_acc_std"])  # one seed: no spread, not 0
    assert local["commits"] == "abcdef0123"


def test_time_and_speedup_spreads_are_over_seeds_with_speedups_paired_by_seed() -> None:
    """Baseline seeds 0-2 at 200, 300, 400 ms; the method's seeds 0 and 1 at 100 and 200 ms:
    speedup = 300 / 150 = 2 (ratio of the means), its spread the std of the per-seed ratios 2.0
    and 1.5 (seed 2 has no partner); the baseline's own speedup has no spread."""
    runs = pd.DataFrame(
        [
            _run("b0", 1, "allreduce", 0, 0.8, 0.2, 0.5),
            _run("b1", 2, "allreduce", 1, 0.8, 0.3, 0.5),
            _run("b2", 3, "allreduce", 2, 0.8, 0.4, 0.5),
            _run("m0", 4, "sgp", 0, 0.8, 0.1, 0.5),
            _run("m1", 5, "sgp", 1, 0.8, 0.2, 0.5),
        ]
    )
    table = summarise(assign(runs)[0], "allreduce", lambda frame: None).set_index("method")
    assert table.loc["allreduce", "wall_ms_per_iter_std"] == pytest.approx(100.0)
    assert table.loc["sgp", "speedup"] == pytest.approx(2.0)
    assert table.loc["sgp", "speedup_std"] == pytest.approx(math.sqrt(0.125))  # std(2.0, 1.5), ddof=1
    assert math.isnan(table.loc["allreduce", "speedup_std"])
    shown = presentable(table.reset_index()).set_index("method")
    # these runs have no simulated time: the speedup is the wall clock's, and its header says so
    assert (
        shown.loc["sgp", "speedup (wall clock)"] == "2.00 ± 0.35"
        and shown.loc["allreduce", "speedup (wall clock)"] == "1.00"
    )
    assert "comm cut % (wall clock)" in shown.columns
    assert shown.loc["allreduce", "wall ms/iter (compute + comm)"] == "300.0 ± 100.0 (150.0 + 150.0)"


def test_one_seed_prints_n_a_and_two_seeds_a_number_in_every_format(tmp_path) -> None:
    runs, _ = assign(_runs())
    table = summarise(runs, "allreduce", lambda frame: None)
    shown = presentable(table).set_index(["setting", "method"])
    assert shown.loc[("nodes=8", "allreduce"), "final acc %"] == "50.00 ± n/a"  # one seed
    assert shown.loc[("nodes=8", "allreduce"), "best acc %"] == "50.00 ± n/a"
    assert shown.loc[("nodes=4", "allreduce"), "final acc %"] == "82.00 ± 2.00"  # three seeds
    assert shown.loc[("nodes=4", "local_sgd period=4"), "final acc %"] == "76.00 ± 2.83"  # two seeds
    one_seed = presentable(table)[
        table["seeds"] == 1
    ]  # (local_sgd period=4's speedup is 2.00 ± 0.00: 2.0 at both seeds)
    assert not one_seed.map(lambda cell: "± 0.0" in str(cell)).any().any()
    tex = _latex(table)
    assert r"50.00 $\pm$ n/a" in tex and r"82.00 $\pm$ 2.00" in tex
    table.to_csv(tmp_path / "table.csv", index=False, float_format="%.6g")  # as write_report writes it
    csv = pd.read_csv(tmp_path / "table.csv").set_index(["setting", "method"])
    assert math.isnan(csv.loc[("nodes=8", "allreduce"), "final_acc_std"])  # empty, not 0
    assert csv.loc[("nodes=4", "allreduce"), "final_acc_std"] == pytest.approx(2.0)
    assert csv.loc[("nodes=8", "allreduce"), "final_acc_mean"] == pytest.approx(50.0)


def test_layers_dropped_is_a_column_only_when_some_run_has_it() -> None:
    runs = _runs()
    assert "layers_dropped_pct" not in summarise(assign(runs)[0], "allreduce", lambda frame: None)
    assert "layers dropped %" not in presentable(summarise(assign(runs)[0], "allreduce", lambda frame: None))
    runs.loc[runs["params.algo.name"] == "local_sgd", "metrics.final/ps_dropped_fraction"] = [0.9, 0.8, 0.5, 0.6]
    table = summarise(assign(runs)[0], "allreduce", lambda frame: None).set_index(["setting", "method"])
    assert table.loc[("nodes=4", "local_sgd period=4"), "layers_dropped_pct"] == pytest.approx(
        70.0
    )  # runs l0 0.9, l1-again 0.5
    assert math.isnan(table.loc[("nodes=4", "allreduce"), "layers_dropped_pct"])
    shown = presentable(table.reset_index()).set_index(["setting", "method"])
    assert shown.loc[("nodes=4", "local_sgd period=4"), "layers dropped %"] == "70.0"
    assert shown.loc[("nodes=4", "allreduce"), "layers dropped %"] == ""


def test_wall_clock_headers_say_when_the_ranks_shared_cores() -> None:
    runs = _runs()
    table = summarise(assign(runs)[0], "allreduce", lambda frame: None)
    assert "ranks_per_core" not in table  # runs that did not record their machine: no claim either way
    assert "wall ms/iter (compute + comm)" in presentable(table)
    runs["tags.host_cores"], runs["tags.host_ranks"] = "2", "2"
    shown = presentable(summarise(assign(runs)[0], "allreduce", lambda frame: None))
    assert "wall ms/iter (compute + comm)" in shown and "speedup (wall clock)" in shown  # a core each
    runs.loc[runs["params.algo.name"] == "local_sgd", "tags.host_ranks"] = "4"  # 4 ranks on 2 cores
    table = summarise(assign(runs)[0], "allreduce", lambda frame: None).set_index(["setting", "method"])
    assert table.loc[("nodes=4", "local_sgd period=4"), "ranks_per_core"] == 2.0
    shown = presentable(table.reset_index())
    assert "wall ms/iter (compute + comm; ranks shared cores)" in shown
    assert (
        "speedup (wall clock; ranks shared cores)" in shown and "comm cut % (wall clock; ranks shared cores)" in shown
    )


def test_a_layer_dropping_run_shows_its_dropped_fraction_per_epoch_in_mlflow_and_the_report(home, cli_here) -> None:
    """ps_layerdrop on 2 workers, 2 epochs of 8 steps: epoch/ps_dropped_fraction per epoch (the
    mean of iter/ps_dropped_fraction over its steps), final/ as the run's mean, and the report's
    "layers dropped %" column."""
    from mlflow.tracking import MlflowClient

    result = cli_here(
        home,
        "train",
        *FAST[:1],
        "dataset.train_size=1024",
        "dataset.test_size=256",
        "train.eval_batch_size=256",
        "model=mlp",
        "algo=ps_layerdrop",
        "algo.recompute_every=1",
        "nodes=2",
        "train.epochs=2",
        "tracking.experiment=drop",
        "launcher=threads",
    )
    assert result.returncode == 0, result.stderr
    client = MlflowClient(tracking_uri=result.tracking_uri)
    per_epoch = client.get_metric_history(result.run_id, "epoch/ps_dropped_fraction")
    per_iter = sorted((p.step, p.value) for p in client.get_metric_history(result.run_id, "iter/ps_dropped_fraction"))
    assert sorted(p.step for p in per_epoch) == [1, 2] and [step for step, _ in per_iter] == list(range(16))
    for epoch in per_epoch:  # every step has one value per worker: the epoch's mean is the mean of the steps'
        steps = per_iter[8 * (epoch.step - 1) : 8 * epoch.step]
        assert epoch.value == pytest.approx(sum(value for _, value in steps) / 8)
        assert 0.5 < epoch.value < 1.0  # algo.ratio = 0.9 of the entries, to the nearest layer
    final = mlflow_run(result).data.metrics
    assert final["final/ps_dropped_fraction"] == pytest.approx(sum(value for _, value in per_iter) / 16)
    assert final["final/ps_server_compute_s"] > 0
    done = cli_here(home, "report", "experiment=drop")
    assert done.returncode == 0, done.stderr
    table = pd.read_csv(home / "results" / "drop" / "table.csv")
    assert table["layers_dropped_pct"].tolist() == pytest.approx([100 * final["final/ps_dropped_fraction"]], abs=1e-4)
    markdown = (home / "results" / "drop" / "table.md").read_text()
    assert "layers dropped %" in markdown and f"{100 * final['final/ps_dropped_fraction']:.1f}" in markdown


def test_ma_acceleration_is_when_the_baseline_peaks_over_when_the_method_gets_there() -> None:
    baseline = pd.Series([0.50, 0.70, 0.80, 0.79], index=[1, 2, 3, 4])
    faster = pd.Series([0.60, 0.80, 0.85, 0.86], index=[1, 2, 3, 4])
    never = pd.Series([0.40, 0.50, 0.60, 0.70], index=[1, 2, 3, 4])
    assert ma_acceleration(baseline, faster) == pytest.approx(1.5)
    assert ma_acceleration(baseline, baseline) == pytest.approx(1.0)
    assert math.isnan(ma_acceleration(baseline, never))


def test_report_of_real_runs_writes_tables_and_figures(home, cli_here) -> None:
    args = [
        "train",
        *FAST,
        "train.max_steps=12",
        "train.epochs=2",
        "nodes=2",
        "tracking.experiment=rep",
        "network=eth_1g",
        "network.mode=simulate",
        "launcher=threads",
    ]
    runs = [
        cli_here(home, *args, f"algo={algo}", f"seed={seed}") for algo in ("allreduce", "local_sgd") for seed in (1, 2)
    ]
    assert all(r.returncode == 0 for r in runs), [r.stderr for r in runs]
    done = cli_here(home, "report", "experiment=rep")
    assert done.returncode == 0, done.stderr
    folder = home / "results" / "rep"
    table = pd.read_csv(folder / "table.csv").set_index("method")
    metrics = {r.run_id: mlflow_run(r).data.metrics for r in runs}
    assert all(mlflow_run(r).data.tags["driver_pid"].isdigit() for r in runs)  # what `dlcomm runs reap` checks
    for method, members in (("allreduce", runs[:2]), ("local_sgd", runs[2:])):
        accs = [100 * metrics[r.run_id]["final/test_acc_mean"] for r in members]
        assert table.loc[method, "final_acc_mean"] == pytest.approx(sum(accs) / 2, abs=1e-4)
        assert set(table.loc[method, "runs"].split()) == {r.run_id for r in members}
        sims = [metrics[r.run_id]["final/sim_time_per_iter_s"] for r in members]
        assert table.loc[method, "sim_ms_per_iter"] == pytest.approx(1e3 * sum(sims) / 2, rel=1e-4)
    assert table.loc["allreduce", "speedup"] == pytest.approx(1.0)
    assert table.loc["local_sgd", "speedup_clock"] == "simulated"
    # Local-SGD (period 2) communicates half as often: the cost model's share per iteration halves
    # period 2 averages after steps 1, 3, ..., 11: 6 of the 11 timed steps (step 0 is the timing warm-up), allreduce all 11
    assert table.loc["local_sgd", "comm_modelled_ms"] == pytest.approx(
        table.loc["allreduce", "comm_modelled_ms"] * 6 / 11, rel=1e-4
    )
    markdown = (folder / "table.md").read_text()
    assert "| allreduce" in markdown and all(r.run_id in markdown for r in runs)
    assert "± n/a" not in markdown and "± " in markdown  # two seeds each: a spread to show
    assert "\\begin{tabular}" in (folder / "table.tex").read_text()
    assert (folder / "time_per_iteration.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # 12 steps, evaluated once at the end, at chance level (about 10%): no accuracy figure, and table.md says why
    assert not (folder / "accuracy.png").exists() and "accuracy.png" not in markdown
    assert "\nNo accuracy figure: every run's test accuracy is at chance level (10% for 10 classes; " in markdown


def test_report_errors_are_one_line(home, cli_here) -> None:
    missing = cli_here(home, "report", "experiment=rep")
    assert missing.returncode == 2 and missing.stderr.count("\n") == 1
    assert "no MLflow store at" in missing.stderr and "Traceback" not in missing.stderr
    other = cli_here(home, "report", "--all", f"tracking.uri=sqlite:///{home}/nothing.db")
    assert other.returncode == 2 and "no MLflow store" in other.stderr
    assert not (home / "nothing.db").exists()  # reading never creates a store
    from mlflow.tracking import MlflowClient

    MlflowClient(tracking_uri=f"sqlite:///{home}/empty.db").search_experiments()  # a store with no run
    empty = cli_here(home, "report", "--all", f"tracking.uri=sqlite:///{home}/empty.db")
    assert empty.returncode == 2 and empty.stderr.count("\n") == 1 and "has no finished run" in empty.stderr
    trained = cli_here(home, "train", *FAST, "train.max_steps=2", "nodes=1", "launcher=threads")
    assert trained.returncode == 0, trained.stderr
    unknown = cli_here(home, "report", "experiment=nonesuch")
    assert unknown.returncode == 2 and unknown.stderr.count("\n") == 1 and "no experiment 'nonesuch'" in unknown.stderr
    neither = cli_here(home, "report")
    assert neither.returncode == 2 and "experiment=<name>" in neither.stderr
    bad = cli_here(home, "report", "experiment=dlcomm", "colour=blue")
    assert bad.returncode == 2 and "'colour=blue' is not a report setting" in bad.stderr


def test_plots_against_a_setting_key(tmp_path) -> None:
    from dlcomm.report import plots

    runs, _ = assign(_runs())
    table = summarise(runs, "allreduce", lambda frame: None)
    runs = runs.assign(world=runs["params.nodes"].astype(float))
    path = plots.against(table, runs, "world", "workers", "speedup", "speedup", tmp_path / "s.png", "t")
    assert path is not None and path.read_bytes()[:4] == b"\x89PNG"
    one = runs[runs["params.nodes"] == "4"]
    assert (
        plots.against(table[table["setting"] == "nodes=4"], one, "world", "w", "speedup", "s", tmp_path / "n.png", "t")
        is None
    )
    # two settings on the axis, but only one with a value (no baseline at 8 nodes): one point, no figure
    lonely = table.assign(speedup=table["speedup"].where(table["setting"] == "nodes=4"))
    assert plots.against(lonely, runs, "world", "w", "speedup", "s", tmp_path / "l.png", "t") is None


def test_compare_results_ignores_clock_columns_and_provenance_but_not_accuracy(tmp_path) -> None:
    """scripts/compare_results.py: a second generation that differs only in what a clock
    measured (or in a clock's column an older table lacks), in run ids or in the order of its rows
    is identical; one whose accuracy or a non-clock column differs is not, exit 1, naming the cell.
    The simulated clock's columns (and a speedup on it) count where both rows were charged from a
    compute profile (``sim_clock=profile``: they repeat bit for bit), not where they were measured."""
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[1] / "scripts" / "compare_results.py"
    base = pd.DataFrame(
        {"setting": ["all"], "method": ["allreduce"], "final_acc_mean": [90.4], "speedup": [1.0], "runs": ["a b c"]}
    )
    variants = {
        "clock": base.assign(speedup=1.3, speedup_std=0.1, runs="d e f"),
        "accuracy": base.assign(final_acc_mean=90.5),
        "column": base.assign(extra=1),
    }
    two = pd.concat([base, base.assign(setting="nodes=16", final_acc_mean=80.0)], ignore_index=True)
    variants["reordered"] = two.iloc[::-1]  # the same rows in another order (settings sorted otherwise)
    variants["swapped"] = two.assign(final_acc_mean=[80.0, 90.4])  # the same values on the wrong rows
    sim = base.assign(sim_ms_per_iter=41.5, sim_clock="profile", speedup_clock="simulated")
    variants["sim_profiled"] = sim.assign(sim_ms_per_iter=41.6)
    variants["speedup_profiled"] = sim.assign(speedup=1.01)
    variants["sim_measured"] = sim.assign(sim_ms_per_iter=44.0, speedup=1.2, sim_clock="measured")
    variants["sim_same"] = sim.assign(speedup_std=0.0, wall_ms_per_iter=12.0, runs="x")
    for name, frame in (("old", base), ("old_two", two), ("old_sim", sim)):
        (tmp_path / name / "x").mkdir(parents=True)
        frame.to_csv(tmp_path / name / "x" / "table.csv", index=False)
    outcome = {}
    for name, frame in variants.items():
        (tmp_path / name / "x").mkdir(parents=True)
        frame.to_csv(tmp_path / name / "x" / "table.csv", index=False)
        old = tmp_path / (
            "old_two" if name in ("reordered", "swapped") else "old_sim" if name.startswith("s") else "old"
        )
        done = subprocess.run(
            [sys.executable, str(script), str(old), str(tmp_path / name)], capture_output=True, text=True
        )
        outcome[name] = (done.returncode, done.stdout.strip())
    identical = "x: identical except wall-clock columns and run ids"
    assert outcome["clock"] == (0, f"{identical} (no simulated column compared)")
    assert outcome["accuracy"] == (1, "x: allreduce final_acc_mean: 90.4 against 90.5")
    assert outcome["column"][0] == 1 and "columns differ: ['extra']" in outcome["column"][1]
    assert outcome["reordered"] == (0, f"{identical} (no simulated column compared)")
    assert outcome["sim_profiled"] == (1, "x: allreduce sim_ms_per_iter: 41.5 against 41.6")
    assert outcome["speedup_profiled"] == (1, "x: allreduce speedup: 1.0 against 1.01")
    assert outcome["sim_measured"] == (0, f"{identical} (no simulated column compared)")
    assert outcome["sim_same"] == (0, f"{identical} (simulated columns identical on 1 of 1 rows)")
    assert outcome["swapped"][0] == 1 and "final_acc_mean: 90.4 against 80.0" in outcome["swapped"][1]


def test_the_table_says_how_the_simulated_compute_was_charged() -> None:
    """sim_clock: profile only when every run of the method charged a profile (its simulated columns
    repeat); runs from before the profile (no network.compute) were measured; no simulated time: empty."""
    from dlcomm.metrics import names
    from dlcomm.report.table import sim_clock

    sim = "metrics." + names.FINAL_SIM_TIME_PER_ITER
    frame = pd.DataFrame({sim: [0.1, 0.2], "params.network.compute": ["profile", "profile"]})
    assert sim_clock(frame) == "profile"
    assert sim_clock(frame.assign(**{"params.network.compute": ["profile", "measured"]})) == "measured"
    assert sim_clock(frame.drop(columns="params.network.compute")) == "measured"
    assert sim_clock(frame.assign(**{sim: [float("nan")] * 2})) == ""


def test_a_run_s_code_is_its_commit_else_the_installed_version() -> None:
    from dlcomm.report.table import code_of

    assert code_of(pd.Series({"tags.git_commit": "abcdef0123456789", "tags.dlcomm_version": "0.3.0"})) == "abcdef0123"
    # an installed package (no checkout): no git_commit tag, the version says which code it was
    assert code_of(pd.Series({"tags.dlcomm_version": "0.3.0"})) == "dlcomm 0.3.0"
    assert code_of(pd.Series({"tags.git_commit": "unknown"})) == "unknown"


def test_a_report_says_why_it_draws_no_accuracy_figure(tmp_path) -> None:
    """Redrawn from committed run data: crossover_time's 12 runs are at chance after 20 steps and
    sesgd_table2's evaluated once, after one epoch; each table.md says so where the figure's link
    was, and redrawing a folder in place removes the figure an earlier report drew there."""
    import shutil
    from pathlib import Path

    from dlcomm.report.build import report_from

    results = Path(__file__).resolve().parents[1] / "results"
    expected = {
        "crossover_time": "No accuracy figure: every run's test accuracy is at chance level (10% for 10 classes; "
        "best 9.3-9.8%) after 20 steps: the differences between them are noise.",
        "sesgd_table2": "No accuracy figure: every run was evaluated once, at its end, after 117 steps: one point "
        "per method is no curve; its accuracy is in the table.",
    }
    for experiment, sentence in expected.items():
        folder = tmp_path / experiment
        shutil.copytree(results / experiment, folder)
        (folder / "accuracy.png").write_bytes(b"\x89PNG an earlier report's figure")
        _, written = report_from(folder)
        markdown = (folder / "table.md").read_text()
        assert f"\n{sentence}\n" in markdown and "accuracy.png" not in markdown
        assert not (folder / "accuracy.png").exists() and "accuracy.png" not in {path.name for path in written}
        assert (folder / "time_per_iteration.png").exists()
    _, written = report_from(results / "node_based_table3", tmp_path / "out")  # curves over 10 epochs: drawn
    markdown = (tmp_path / "out" / "node_based_table3" / "table.md").read_text()
    assert "![accuracy](accuracy.png)" in markdown and "No accuracy figure" not in markdown


def test_traffic_columns_only_when_asked_for_or_compressors_compared() -> None:
    """report.traffic (or a compressor in a method's label) keeps the MB sent over the run
    (bytes per iteration x steps) and in the busiest iteration; otherwise neither is a column."""
    runs = _runs()
    runs["metrics.final/bytes_sent_per_iter"] = 2.0e4
    runs["metrics.final/peak_bytes_sent_per_iter"] = 1.4e6
    runs.loc[runs["params.algo.name"] == "allreduce", "metrics.final/bytes_sent_per_iter"] = 1.4e6
    plain = summarise(assign(runs)[0], "allreduce", lambda frame: None)
    assert "sent_mb" not in plain and "peak_mb" not in plain
    assert "sent MB/worker" not in presentable(plain)
    table = summarise(assign(runs)[0], "allreduce", lambda frame: None, traffic=True)
    rows = table.set_index(["setting", "method"])
    assert rows.loc[("nodes=4", "allreduce"), "sent_mb"] == pytest.approx(140.0)  # 1.4 MB x 100 steps
    assert rows.loc[("nodes=4", "local_sgd period=4"), "sent_mb"] == pytest.approx(2.0)
    assert rows.loc[("nodes=4", "local_sgd period=4"), "peak_mb"] == pytest.approx(1.4)
    shown = presentable(table).set_index("method")
    assert shown.loc["allreduce", "sent MB/worker"].tolist() == ["140.00", "140.00"]  # nodes=4 and nodes=8
    assert shown.loc["local_sgd period=8", "peak MB/iter/worker"] == "1.400"
    older = runs.drop(columns="metrics.final/peak_bytes_sent_per_iter")  # runs from before the metric
    assert "peak_mb" not in summarise(assign(older)[0], "allreduce", lambda frame: None, traffic=True)
