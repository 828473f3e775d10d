"""What dlcomm tells the MLflow UI (dlcomm.tracking.ui): where it opens, the shared view of a
sweep, the links it prints."""

from __future__ import annotations

import json

import pytest

from dlcomm.tracking import ui


@pytest.mark.parametrize(
    ("uri", "address"),
    [
        ("http://alice:s3cretPW@mlflow.example.org:5001/", "http://mlflow.example.org:5001"),
        ("https://mlflow.example.org/prefix", "https://mlflow.example.org/prefix"),
        ("http://[::1]:5001", "http://[::1]:5001"),
        ("sqlite:////tmp/x/results/mlflow.db", "http://127.0.0.1:5000"),
    ],
)
def test_the_ui_address_of_a_store_never_carries_its_password(uri, address) -> None:
    assert ui.ui_address(uri) == address
    assert "s3cretPW" not in ui.run_page(uri, "3", "abc")


def test_a_server_needs_no_command_a_local_store_gets_the_readme_s() -> None:
    assert ui.ui_command("http://127.0.0.1:5001") == ""
    command = ui.ui_command("sqlite:////tmp/x/results/mlflow.db")
    assert command.startswith("MLFLOW_DISABLE_TELEMETRY=true MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false ")
    assert command.endswith(" ui --backend-store-uri sqlite:////tmp/x/results/mlflow.db --port 5000 --workers 1")


def test_a_sweep_s_view_filters_its_children_and_groups_them_by_algorithm() -> None:
    state = ui.sweep_view_state("0123abcd")
    assert state["searchFilter"] == "tags.`mlflow.parentRunId` = '0123abcd'"
    assert state["groupBy"] == {"aggregateFunction": "average", "groupByKeys": [{"mode": "tag", "groupByData": "algo"}]}
    assert (
        "metrics.`summary/speedup`" in state["selectedColumns"] and "tags.`summary_clock`" in state["selectedColumns"]
    )
    # the answer in the first columns (the runs list shows them left to right, the rest off-screen at 1600 px)
    assert state["columnOrder"][:2] == ["metrics.`summary/speedup`", "metrics.`summary/test_acc_pct`"]
    assert ui.share_key(state) == ui.share_key(json.loads(json.dumps(state)))  # written twice: one tag
    assert ui.share_key(state) != ui.share_key(ui.sweep_view_state("0123abce"))


def test_the_view_is_an_experiment_tag_the_ui_s_share_key_opens(tmp_path) -> None:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    experiment = client.create_experiment("e", artifact_location=(tmp_path / "art").as_uri())
    key = ui.share_view(client, experiment, ui.sweep_view_state("p1"))
    stored = client.get_experiment(experiment).tags[f"mlflow.sharedViewState.{key}"]
    assert json.loads(stored) == ui.sweep_view_state("p1")
    assert ui.runs_view(experiment, key) == (
        f"#/experiments/{experiment}/runs?workflowType=machine_learning&viewStateShareKey={key}"
    )


def test_an_image_in_a_description_loads_from_the_server_s_artifact_route() -> None:
    assert ui.artifact_image("r1", "comparison/time per iteration.png", "t") == (
        "![t](get-artifact?path=comparison%2Ftime+per+iteration.png&run_uuid=r1)"
    )


def test_a_long_description_is_cut_at_a_line_end_within_mlflow_s_limit() -> None:
    text = "\n".join(f"| row {i} | " + "x" * 90 + " |" for i in range(200))
    cut = ui.fit_description(text)
    assert len(cut) <= ui.DESCRIPTION_LIMIT and "comparison/table.md" in cut
    assert cut.split("\n\n(cut")[0].endswith("|\n") or cut.split("\n\n(cut")[0].endswith("|")
    assert ui.fit_description("short") == "short"


def test_an_experiment_dlcomm_writes_to_is_marked_model_training(tmp_path) -> None:
    from mlflow.tracking import MlflowClient

    from dlcomm.tracking.mlflow_run import _experiment_id

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(tracking_uri=uri)
    new = _experiment_id(client, "fresh", uri)
    old = client.create_experiment("made by hand", artifact_location=(tmp_path / "a").as_uri())
    assert _experiment_id(client, "made by hand", uri) == old
    for experiment in (new, old):
        assert client.get_experiment(experiment).tags["mlflow.experimentKind"] == "custom_model_development"


def test_a_run_s_description_starts_with_its_result_on_the_simulated_clock() -> None:
    from types import SimpleNamespace

    from dlcomm.tracking.reporter import run_description

    line = (
        "done: test accuracy 86.10% (averaged model 86.20%) | wall 52.6 ms/iter (communication 76.84%) over 20"
        " iterations | simulated eth_10g: 3.5 ms/iter, communication 43.75% of it (modelled 1.5 ms/iter),"
        " training 0.1 s, compute profile 1.94 ms/step ±3.7% (AMD EPYC) | train.max_steps=20 ended the run | mlflow run abc (sqlite:////x/mlflow.db)"
    )
    spec = SimpleNamespace(overrides=["algo=local_sgd", "tracking.uri=http://u:pw@h"], run_name=lambda: "local_sgd 4x1")
    first, second = run_description(line, spec).splitlines()[:2]  # what the UI shows before "Show more"
    assert (
        first
        == "**Result**: test accuracy 86.10% (averaged model 86.20%); simulated eth_10g: 3.5 ms/iter, communication 43.75% of it (modelled 1.5 ms/iter), training 0.1 s  "
    )
    assert second == "**local_sgd 4x1**: `dlcomm train algo=local_sgd`"
    # without a network model: the wall clock's part
    plain = run_description(line.replace(" | simulated eth_10g: 3.5 ms/iter", " | x"), spec).splitlines()[0]
    assert plain.startswith("**Result**: test accuracy 86.10% (averaged model 86.20%); wall 52.6 ms/iter")
