"""A sweep's comparison in one place: at the end of `dlcomm train -m` and on `dlcomm report sweep=...`."""

from __future__ import annotations

import json
import math
import re

import pandas as pd
import pytest

from dlcomm.report.sweep import children_summaries, summary_clock
from dlcomm.report.table import summarise

from conftest import FAST, children, parent_id, store_client

# the summary/* metrics whose group row (the UI's Average over a method's runs) must read as the table's cell
TABLE_CELLS = {
    "ms_per_iter": "{clock}_ms_per_iter",
    "compute_ms": "{clock}_compute_ms",
    "comm_exposed_ms": "{clock}_comm_exposed_ms",
    "test_acc_pct": "final_acc_mean",
    "speedup": "speedup",
}


def _group_rows_read_as_the_table(table: pd.DataFrame, logged: dict[str, dict[str, float]], clock: str) -> None:
    """Each (setting, method)'s mean of its runs' summary/* equals the table's figure (to the
    rounding the metrics are logged with), and samples/s is the throughput at the group's time."""
    for _, row in table.iterrows():
        ids = row["runs"].split()
        for key, cell in TABLE_CELLS.items():
            mean = sum(logged[i]["summary/" + key] for i in ids) / len(ids)
            # the speedup is logged as the table prints it, the rest to 3 decimals (table.csv: 6 digits)
            rounding = 5e-3 if key == "speedup" else 1e-3
            assert mean == pytest.approx(row[cell.format(clock=clock)], abs=rounding), (row["method"], key)
        ms = sum(logged[i]["summary/ms_per_iter"] for i in ids) / len(ids)
        samples = sum(logged[i]["summary/samples_per_s"] for i in ids) / len(ids)
        # 2 workers x batch 64, at the group's time: compared in ms, where the logged figures were rounded
        # (to 1e-3 ms: a relative error of 2e-5 at 26 ms, more than the rel=1e-5 this once allowed)
        assert 2 * 64 * 1e3 / samples == pytest.approx(ms, abs=1e-3), row["method"]


@pytest.mark.parametrize("simulated", [False, True])
def test_a_group_of_a_method_s_runs_reads_as_the_table_and_the_baseline_is_1(simulated: bool) -> None:
    # two seeds of unequal times: each run's baseline-mean / own time would give the baseline's
    # runs 1.2 and 0.857 (their group row 1.03) and local_sgd's 1.5 and 1.0 (1.25, the table 1.2)
    times = {("allreduce", 1): 0.100, ("allreduce", 2): 0.140, ("local_sgd", 1): 0.080, ("local_sgd", 2): 0.120}
    runs = pd.DataFrame(
        [
            {
                "run_id": f"{algo}-{seed}",
                "setting": "all",
                "method": algo,
                "seed": seed,
                "tags.world_size": "2",
                "params.train.batch_size": "64",
                "params.train.comm_interval": "1",
                # the clock the speedup is not on has other times: the summary must not take them
                "metrics.final/time_per_iter_s": t if not simulated else 3 * t + 0.01 * seed,
                "metrics.final/comm_share": 0.25 + 0.1 * seed,
                "metrics.final/sim_time_per_iter_s": t if simulated else math.nan,
                "metrics.final/sim_comm_share": 0.25 + 0.1 * seed if simulated else math.nan,
                "metrics.final/test_acc_mean": 0.81234 + 0.01117 * seed,
                "metrics.final/best_test_acc_mean": 0.9,
                "metrics.final/steps": 10.0,
            }
            for (algo, seed), t in times.items()
        ]
    )
    table = summarise(runs, "allreduce", lambda frame: None)
    clock = "sim" if simulated else "wall"
    assert list(table["speedup_clock"]) == ["simulated" if simulated else "wall"] * 2
    logged = children_summaries(table, runs)
    assert set(logged) == set(runs["run_id"])
    assert logged["allreduce-1"]["summary/speedup"] == logged["allreduce-2"]["summary/speedup"] == 1.0
    assert logged["local_sgd-1"]["summary/speedup"] == logged["local_sgd-2"]["summary/speedup"] == 1.2
    assert logged["allreduce-1"]["summary/ms_per_iter"] == 100.0  # the run's own time, on the speedup's clock
    expected_clock = "simulated" if simulated else "wall clock"  # no network tag in these rows: no name to give
    assert {summary_clock(row) for _, row in table.iterrows()} == {expected_clock}
    named = table.assign(network="eth_10g", ranks_per_core=2.0).iloc[0]
    assert summary_clock(named) == ("simulated eth_10g" if simulated else "wall clock; ranks shared cores")
    _group_rows_read_as_the_table(table, logged, clock)

    # without the baseline in the sweep: no speedup, the other figures as before
    alone = summarise(runs[runs["method"] == "local_sgd"], "allreduce", lambda frame: None)
    logged = children_summaries(alone, runs)
    assert set(logged) == {"local_sgd-1", "local_sgd-2"}
    assert not any("summary/speedup" in metrics for metrics in logged.values())


def test_a_sweep_ends_with_its_comparison_on_its_parent_run_and_each_run_s_summary(home, cli_here) -> None:
    result = cli_here(
        home,
        "train",
        "-m",
        *FAST,
        "launcher=threads",
        "nodes=2",
        "train.max_steps=3",
        "train.epochs=1",
        "algo=allreduce,local_sgd",
        "seed=1,2",
    )
    assert result.returncode == 0, result.stderr
    parent = parent_id(result)
    folder = home / "results" / "sweeps" / parent
    assert f"sweep comparison: {folder}/table.md" in result.stdout
    client = store_client(home)
    artifacts = {item.path for item in client.list_artifacts(parent, "comparison")}
    assert {
        "comparison/table.md",
        "comparison/table.csv",
        "comparison/table.json",
        "comparison/time_per_iteration.png",
    } <= artifacts
    assert "comparison/accuracy.png" not in artifacts  # 3 steps, evaluated once: no curve (table.md says why)
    table = pd.read_csv(folder / "table.csv")
    assert sorted(table["method"]) == ["allreduce", "local_sgd"] and list(table["seeds"]) == [2, 2]

    # each run's summary/* metrics (network off: the wall clock): its own figures from its final
    # metrics, its method's speedup and throughput from the table; a group of runs reads as the table
    runs = children(home, parent)
    assert len(runs) == 4
    for run in runs:
        m = run.data.metrics
        t = m["final/time_per_iter_s"]
        assert m["summary/ms_per_iter"] == pytest.approx(1e3 * t, abs=5e-4)  # logged rounded
        assert m["summary/comm_exposed_ms"] == pytest.approx(1e3 * t * m["final/comm_share"], abs=5e-4)
        # threads: waiting for peers is told apart (network off: the wall clock; 2 ranks share no core)
        assert m["summary/peer_wait_ms"] == pytest.approx(1e3 * t * m["final/peer_wait_share"], abs=5e-4)
        split = m["summary/compute_ms"] + m["summary/peer_wait_ms"] + m["summary/comm_exposed_ms"]
        assert split == pytest.approx(1e3 * t, abs=1.5e-3)  # three figures, each rounded to 3 decimals
        assert m["summary/test_acc_pct"] == pytest.approx(100 * m["final/test_acc_mean"], abs=5e-4)
        assert run.data.tags["summary_clock"] == "wall clock"  # network off, a core per rank: said so
        if run.data.tags["algo"] == "allreduce":
            assert m["summary/speedup"] == 1.0
    logged = {run.info.run_id: run.data.metrics for run in runs}
    _group_rows_read_as_the_table(table, logged, "wall")
    # in the MLflow UI: the parent's page shows the table and its figures, links the grouped children
    # (a shared view of the runs list), lists the headline figures; the sweep prints the page's address
    parent_run = client.get_run(parent)
    description = parent_run.data.tags["mlflow.note.content"]
    assert "| method " in description and "speedup" in description
    assert f"(get-artifact?path=comparison%2Ftime_per_iteration.png&run_uuid={parent})" in description
    assert "\nNo accuracy figure: every run" in description  # why no accuracy image (at chance after 3 steps)
    key = re.search(
        r"\[grouped by method\]\(#/experiments/\d+/runs\?workflowType=machine_learning&viewStateShareKey=(\w+)\)",
        description,
    ).group(1)
    view = json.loads(client.get_experiment(parent_run.info.experiment_id).tags[f"mlflow.sharedViewState.{key}"])
    assert view["searchFilter"] == f"tags.`mlflow.parentRunId` = '{parent}'"
    speedups = dict(zip(table["method"], table["speedup"]))
    # the metric's name says its clock (network off: the wall clock); rounded to its spread over seeds
    assert parent_run.data.metrics["local_sgd/speedup_wall"] == pytest.approx(speedups["local_sgd"], abs=5e-2)
    assert parent_run.data.metrics["allreduce/speedup_wall"] == 1.0
    assert description.splitlines()[0].startswith("Speedup over allreduce on the wall clock")
    assert f"/runs/{parent}?workflowType=machine_learning" in result.stdout.split("sweep comparison:")[1]

    # reported again, by `sweep=last`: the same table, and the parent keeps one MLflow table (no rows appended)
    again = cli_here(home, "report", "sweep=last", f"out={home / 'again'}")
    assert again.returncode == 0, again.stderr
    assert again.stdout.startswith(f"sweep {parent}: wrote ")
    pd.testing.assert_frame_equal(pd.read_csv(home / "again" / "sweeps" / parent / "table.csv"), table)
    local = client.download_artifacts(parent, "comparison/table.json", str(home / "download"))
    assert len(pd.read_json(local, orient="split")) == 2


def test_report_sweep_refuses_what_is_not_a_sweep_in_one_line(home, cli_here) -> None:
    run = cli_here(home, "train", *FAST, "launcher=threads", "nodes=2", "train.max_steps=2", "train.epochs=1")
    assert run.returncode == 0, run.stderr
    for settings, message in (
        (["sweep=last"], "holds no sweep: run one with `dlcomm train -m ...` first"),
        ([f"sweep={run.run_id}"], "is a run, not a sweep's parent"),
        (["sweep=0123456789abcdef0123456789abcdef"], "is not a run of"),
        (["sweep=last", "experiment=dlcomm"], "reports one sweep: drop experiment= and --all"),
        # both named: the line says they conflict (it once asked for what was passed)
        (["experiment=dlcomm", "--all"], "--all reports every experiment: drop experiment=dlcomm (or --all)"),
    ):
        bad = cli_here(home, "report", *settings)
        assert bad.returncode == 2 and "Traceback" not in bad.stderr, bad.stderr
        assert message in bad.stderr.strip().splitlines()[-1], bad.stderr


def _two_method_table(simulated: bool) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Two seeds of allreduce and local_sgd on eth_10g, with accuracies whose mean has a binary tail."""
    times = {("allreduce", 1): 0.100, ("allreduce", 2): 0.140, ("local_sgd", 1): 0.080, ("local_sgd", 2): 0.120}
    runs = pd.DataFrame(
        [
            {
                "run_id": f"{algo}-{seed}",
                "setting": "all",
                "method": algo,
                "seed": seed,
                "tags.world_size": "2",
                "tags.network": "eth_10g",
                "params.network.name": "eth_10g",
                "params.train.batch_size": "64",
                "metrics.final/time_per_iter_s": t,
                "metrics.final/comm_share": 0.3,
                "metrics.final/sim_time_per_iter_s": t if simulated else math.nan,
                "metrics.final/sim_comm_share": 0.3 if simulated else math.nan,
                "metrics.final/test_acc_mean": 0.79831 + 0.00011 * seed,
                "metrics.final/best_test_acc_mean": 0.9,
                "metrics.final/steps": 10.0,
            }
            for (algo, seed), t in times.items()
        ]
    )
    return summarise(runs, "allreduce", lambda frame: None), runs


@pytest.mark.parametrize("simulated", [False, True])
def test_the_parent_s_first_two_lines_are_the_headline_naming_the_clock(simulated: bool) -> None:
    from types import SimpleNamespace

    from dlcomm.report.sweep import parent_description

    table, _ = _two_method_table(simulated)
    parent = SimpleNamespace(
        data=SimpleNamespace(tags={"mlflow.runName": "sweep of 4"}), info=SimpleNamespace(run_id="p")
    )
    description = parent_description(parent, table, [], "#/view")
    first_two = " ".join(description.splitlines()[:2])  # what the UI shows before "Show more"
    clock = "the simulated eth_10g clock" if simulated else "the wall clock"
    assert f"Speedup over allreduce on {clock}" in first_two, first_two
    # each method's speedup (the table's: 120/100 ms) and accuracy (79.8% whatever the seed: a spread of 0.01)
    assert "allreduce 1.00x**, 79.8" in first_two and "local_sgd 1.20x**, 79.8" in first_two, first_two
    assert "[grouped by method](#/view)" in description


@pytest.mark.parametrize("simulated", [False, True])
def test_the_parent_s_metrics_name_their_clock_and_are_rounded_to_their_spread(simulated: bool) -> None:
    from dlcomm.report.sweep import parent_metrics, spread_decimals

    table, _ = _two_method_table(simulated)
    metrics = parent_metrics(table)
    clock = "sim_eth_10g" if simulated else "wall"
    assert set(metrics) == {
        f"{method}/{key}"
        for method in ("allreduce", "local_sgd")
        for key in (f"speedup_{clock}", f"ms_per_iter_{clock}", "test_acc_pct")
    }
    assert metrics[f"local_sgd/speedup_{clock}"] == 1.2  # 1.20 ± 0.059 (the per-seed ratios 1.25, 1.17): 2 decimals
    # accuracy 79.8475 ± 0.0078 (%): to the spread's first significant digit, 3 decimals; ms 120 ± 28: none
    accuracy = table.set_index("method")["final_acc_mean"]["allreduce"]
    assert (
        metrics["allreduce/test_acc_pct"] == round(float(accuracy), 3)
        and metrics[f"allreduce/ms_per_iter_{clock}"] == 120.0
    )
    assert all(len(repr(value)) <= 7 for value in metrics.values()), metrics  # no 79.83500000000001
    assert (spread_decimals(0.0078, 2), spread_decimals(28.0, 2), spread_decimals(math.nan, 2)) == (3, 0, 2)
    assert spread_decimals(0.0, 2) == 2  # a clock that repeats exactly: as the table prints it
