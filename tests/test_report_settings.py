"""A report reads an experiment's ``report.*`` keys without composing and checking a whole run
(issue 59, item 3): from the experiment's config file alone where dlcomm ships one, else from its
runs as recorded. Both reads are held to what composing gives."""

from __future__ import annotations

from pathlib import Path

import pytest

import dlcomm.compose
from dlcomm.compose import compose

RESULTS = Path(__file__).resolve().parents[1] / "results"
EXPERIMENTS = sorted(
    path.stem for path in (Path(dlcomm.compose.__file__).parent / "configs" / "experiment").glob("*.yaml")
)


def test_every_shipped_experiment_s_report_section_is_what_composing_gives() -> None:
    from dlcomm.report.runs import experiment_report

    assert len(EXPERIMENTS) > 10
    for name in EXPERIMENTS:
        assert experiment_report(name) == compose([f"experiment={name}"]).report, name
    assert experiment_report("not_shipped") is None and experiment_report("../config") is None


@pytest.mark.parametrize("experiment", ["layerdrop_1g", "wan_compare"])  # report.baseline=ps; report.traffic=true
def test_a_report_reads_its_experiment_s_settings_without_composing_a_run(experiment, tmp_path, monkeypatch) -> None:
    from dlcomm.report.build import report_from

    composed: list[list[str]] = []

    def composing(overrides: list[str]):
        composed.append(overrides)
        return compose(overrides)

    monkeypatch.setattr(dlcomm.compose, "compose", composing)
    report_from(RESULTS / experiment, tmp_path)
    assert composed == []  # was [['experiment=...'], ['experiment=...']]: one whole run per key read
    for name in ("table.md", "table.csv"):
        assert (tmp_path / experiment / name).read_text() == (RESULTS / experiment / name).read_text(), name


def test_a_recorded_run_s_setting_is_read_from_its_params() -> None:
    import pandas as pd

    from dlcomm.report.build import baseline_of, traffic_of

    runs = pd.DataFrame(
        {
            "start_time": [1, 2],
            "params.report.baseline": ["ps", "local_sgd"],
            "params.report.traffic": ["False", "True"],
        }
    )
    assert baseline_of("my_own", runs) == "local_sgd" and traffic_of("my_own", runs) is True  # the latest run's
    assert baseline_of("my_own", runs.drop(columns="params.report.baseline")) == "allreduce"
    assert baseline_of("layerdrop_1g", runs) == "ps"  # a shipped experiment's file wins, as composing it did


def test_a_plugin_s_experiment_s_report_section_is_read_as_composing_reads_it(tmp_path, monkeypatch) -> None:
    """An installed plugin's configs (entry points dlcomm.configs) are on Hydra's search path after
    dlcomm's own: its experiment's ``report.*`` keys are found there too."""
    from dlcomm import plugins
    from dlcomm.report.runs import experiment_report

    from fake_plugins import write_plugin

    experiment = "# @package _global_\nnodes: 2\nreport:\n  baseline: local_sgd\n  traffic: true\n"
    write_plugin(
        tmp_path,
        "fake_report",
        {},
        {"experiment/fake_paper.yaml": experiment},
        "[dlcomm.configs]\nfake = fake_report.configs\n",
    )
    monkeypatch.syspath_prepend(str(tmp_path))

    def forget() -> None:  # the entry points and config packages are read once a process
        plugins._installed.cache_clear()
        plugins.config_search_path.cache_clear()

    forget()  # this plugin installed now
    try:
        found = experiment_report("fake_paper")
        assert found is not None and (found.baseline, found.traffic) == ("local_sgd", True)
        assert found == compose(["experiment=fake_paper"]).report
    finally:
        monkeypatch.undo()
        forget()
