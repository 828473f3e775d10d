"""A sweep's comparison in one place: at the end of `dlcomm train -m` and on `dlcomm report sweep=...`."""

from __future__ import annotations

import pandas as pd
import pytest

from conftest import FAST, children, parent_id, store_client


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
        "comparison/accuracy.png",
    } <= artifacts
    table = pd.read_csv(folder / "table.csv")
    assert sorted(table["method"]) == ["allreduce", "local_sgd"] and list(table["seeds"]) == [2, 2]

    # each run's summary/* metrics, by their formulas, from its own final metrics (network off: the wall clock)
    runs = children(home, parent)
    assert len(runs) == 4
    own_ms = {run.info.run_id: 1e3 * run.data.metrics["final/time_per_iter_s"] for run in runs}
    baseline_ms = sum(own_ms[run.info.run_id] for run in runs if run.data.tags["algo"] == "allreduce") / 2
    for run in runs:
        m = run.data.metrics
        t = m["final/time_per_iter_s"]
        assert m["summary/ms_per_iter"] == pytest.approx(1e3 * t, abs=5e-4)  # logged rounded as printed
        assert m["summary/comm_exposed_ms"] == pytest.approx(1e3 * t * m["final/comm_share"], abs=5e-4)
        assert m["summary/compute_ms"] + m["summary/comm_exposed_ms"] == pytest.approx(1e3 * t, abs=1e-3)
        assert m["summary/samples_per_s"] == pytest.approx(
            2 * 64 / t, abs=5e-4
        )  # 2 workers x batch 64, one micro-batch
        assert m["summary/test_acc_pct"] == pytest.approx(100 * m["final/test_acc_mean"], abs=5e-3)
        assert m["summary/speedup"] == pytest.approx(baseline_ms / own_ms[run.info.run_id], abs=2e-3)

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
    ):
        bad = cli_here(home, "report", *settings)
        assert bad.returncode == 2 and "Traceback" not in bad.stderr, bad.stderr
        assert message in bad.stderr.strip().splitlines()[-1], bad.stderr
