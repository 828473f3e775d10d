"""How a run ends: ``train.time_budget_s`` ends it, not the epochs; the run says which limit
ended it, and what its end skipped."""

from __future__ import annotations

from types import SimpleNamespace

from dlcomm.train.plan import UNBOUNDED, ended_by, plan_steps, schedule_steps

from conftest import FAST, mlflow_run


def _train(**knobs: float) -> SimpleNamespace:
    base = dict(batch_size=32, comm_interval=1, epochs=2, max_steps=0, time_budget_s=0.0)
    return SimpleNamespace(**{**base, **knobs})


def test_a_budget_lifts_the_epochs_limit_but_not_max_steps() -> None:
    assert plan_steps(_train(), 6400, 2) == (100, 200)
    assert plan_steps(_train(time_budget_s=30), 6400, 2) == (100, UNBOUNDED)
    assert plan_steps(_train(time_budget_s=30, max_steps=150), 6400, 2) == (100, 150)
    # a cosine schedule spans the epochs' horizon when only the budget bounds the run
    assert schedule_steps(_train(time_budget_s=30), 100, UNBOUNDED) == 200
    assert schedule_steps(_train(time_budget_s=30, max_steps=150), 100, 150) == 150


def test_the_limit_that_ended_the_run_is_named() -> None:
    assert ended_by(_train(time_budget_s=30), 57, 30.4) == "train.time_budget_s=30"
    assert ended_by(_train(time_budget_s=30, max_steps=57), 57, 12.0) == "train.max_steps=57"
    assert ended_by(_train(max_steps=500), 200, 0.0) == "train.epochs=2"


def test_a_run_trains_past_its_epochs_until_the_simulated_budget(home, cli_here) -> None:
    # 512 samples over 2 workers at batch 64: 4 iterations per epoch; 10 ms of simulated compute per
    # iteration plus communication, so the 0.2-s budget needs more iterations than the one epoch has.
    # Through cli.main in this process: its ranks are threads either way
    result = cli_here(
        home,
        "train",
        *FAST,
        "dataset.train_size=512",
        "nodes=2",
        "model=mlp",
        "train.batch_size=64",
        "train.epochs=1",
        "launcher=threads",
        "network=eth_1g",
        "network.mode=simulate",
        "network.compute_ms=10",
        "train.time_budget_s=0.2",
        "tracking.system_metrics_every_s=0.5",
    )
    assert result.returncode == 0, result.stderr
    run = mlflow_run(result)
    steps = run.data.metrics["final/steps"]
    assert steps > 4, f"stopped after {steps} iterations: the epochs limited a budgeted run"
    assert 0.2 <= run.data.metrics["final/clock_time_s"] < 0.2 + 0.05
    assert run.data.tags["ended_by"] == "train.time_budget_s=0.2"
    assert "| train.time_budget_s=0.2 ended the run |" in result.stdout
    assert "within 0.2 simulated s" in result.stdout
    # the final figures in the report's units beside the raw ones
    assert run.data.metrics["final/sim_ms_per_iter"] == round(1e3 * run.data.metrics["final/sim_time_per_iter_s"], 3)
    # the driver's machine, sampled by MLflow's monitor while the job ran (the UI's System metrics tab)
    assert {"system/cpu_utilization_percentage", "system/system_memory_usage_megabytes"} <= set(run.data.metrics)


def test_local_sgd_says_when_the_run_s_end_skips_an_averaging() -> None:
    from dlcomm.algorithms.local_sgd import LocalSGD, LocalSGDConfig

    (note,) = LocalSGD.plan_notes(LocalSGDConfig(period=4), 100, 10)
    assert note.startswith("the run's last 2 of 10 iterations are not averaged")
    assert LocalSGD.plan_notes(LocalSGDConfig(period=4), 100, 12) == []
