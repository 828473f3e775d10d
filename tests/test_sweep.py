"""Sweeps without SLURM: Hydra's expansion, `dlcomm sweep export`, and a local sweep's runs."""

from __future__ import annotations

import shlex

import pytest

from dlcomm.errors import UserError
from dlcomm.sweep import expand, export_lines, swept_keys

from conftest import ALGORITHMS, FAST, run_cli


def test_expansion_is_the_product_with_the_last_key_fastest() -> None:
    assert expand(["a=1,2", "b=x,y", "c=3"]) == [
        ["a=1", "b=x", "c=3"],
        ["a=1", "b=y", "c=3"],
        ["a=2", "b=x", "c=3"],
        ["a=2", "b=y", "c=3"],
    ]
    assert [element[0] for element in expand(["seed=range(1,4)"])] == ["seed=1", "seed=2", "seed=3"]
    assert swept_keys(["a=1,2", "b=x", "c=5,6"]) == ["a", "c"]


def test_expansion_matches_hydras_basic_sweeper() -> None:
    """The expansions Hydra 1.3's ``BasicSweeper.split_arguments`` gave for these overrides
    (recorded from it when ``expand`` stopped importing it): key order of first appearance, a
    repeated key replaced in place, prefixes and packages kept, ranges, choice(), sort(), tag()."""
    cases = {
        ("a=choice(1,2)", "b=range(0,10,3)"): [
            ["a=1", "b=0"],
            ["a=1", "b=3"],
            ["a=1", "b=6"],
            ["a=1", "b=9"],
            ["a=2", "b=0"],
            ["a=2", "b=3"],
            ["a=2", "b=6"],
            ["a=2", "b=9"],
        ],
        ("a=range(1.0,2.0,0.5)",): [["a=1.0"], ["a=1.5"]],
        ("a=1,2", "b=3", "a=5,6"): [["a=5", "b=3"], ["a=6", "b=3"]],
        ("a=1,2", "b=3", "a=7"): [["a=7", "b=3"]],
        ("+x=1,2", "~y", "z@pkg=3", "++w=4,5"): [
            ["+x=1", "~y=null", "z@pkg=3", "++w=4"],
            ["+x=1", "~y=null", "z@pkg=3", "++w=5"],
            ["+x=2", "~y=null", "z@pkg=3", "++w=4"],
            ["+x=2", "~y=null", "z@pkg=3", "++w=5"],
        ],
        ("a=[1,2],[3,4]", "b={x:1},{x:2}"): [
            ["a=[1,2]", "b={x:1}"],
            ["a=[1,2]", "b={x:2}"],
            ["a=[3,4]", "b={x:1}"],
            ["a=[3,4]", "b={x:2}"],
        ],
        ("a=null", "b=''", 'c="a","b"'): [["a=null", "b=''", 'c="a"'], ["a=null", "b=''", 'c="b"']],
        ("a=sort(3,1,2)", "b=sort(range(1,3),reverse=true)"): [
            ["a=1", "b=2"],
            ["a=1", "b=1"],
            ["a=2", "b=2"],
            ["a=2", "b=1"],
            ["a=3", "b=2"],
            ["a=3", "b=1"],
        ],
        ("a=tag(x,choice(1,2))", "b=1, 2"): [["a=1", "b=1"], ["a=1", "b=2"], ["a=2", "b=1"], ["a=2", "b=2"]],
        ("a=1,2", "b="): [["a=1", "b="], ["a=2", "b="]],
        (): [[]],
    }
    for overrides, elements in cases.items():
        assert expand(list(overrides)) == elements, overrides
    for unsupported in ("a=interval(0,1)", "a=glob(*)"):
        with pytest.raises(UserError, match="the sweep overrides are invalid"):
            expand([unsupported])


def test_exported_lines_split_back_into_the_elements() -> None:
    overrides = ["tracking.run_name='two words',other", "dataset.shape=[1,28,28]"]
    lines = export_lines(overrides)
    assert [shlex.split(line) for line in lines] == expand(overrides)


def test_export_refuses_a_bad_element_in_one_line(home) -> None:
    result = run_cli(home, "sweep", "export", "-m", "seed=1,2", "algo=allreduce,nope", timeout=120)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "dlcomm: error: sweep element [seed=1 algo=nope]: Could not find 'algo/nope'. "
        f"Available options in 'algo': {', '.join(ALGORITHMS)}"
    ]


def test_a_local_sweep_runs_one_run_after_another_under_a_parent(home, cli_here) -> None:
    """The sweep loop is the launchers' own (Launcher.sweep, the same for local and threads): its ranks
    as threads of this process. launcher=local's sweep, processes and all, is
    tests/test_threads_launcher.py's every-algorithm sweep."""
    from mlflow.tracking import MlflowClient

    result = cli_here(home, "train", "-m", "seed=1,2", *FAST, "nodes=2", "train.max_steps=5", "launcher=threads")
    assert result.returncode == 0, result.stderr
    assert "sweep done: 2 of 2 runs finished" in result.stdout
    client = MlflowClient(tracking_uri=result.tracking_uri)
    runs = client.search_runs([client.get_experiment_by_name("dlcomm").experiment_id])
    parents = [run for run in runs if run.data.tags.get("sweep") == "true"]
    assert len(parents) == 1 and parents[0].info.status == "FINISHED"
    children = [run for run in runs if run.data.tags.get("mlflow.parentRunId") == parents[0].info.run_id]
    assert sorted(run.data.params["seed"] for run in children) == ["1", "2"]
    assert all(run.info.status == "FINISHED" and run.data.metrics["final/steps"] == 5 for run in children)
    # one after another: the second started after the first ended
    first, second = sorted(children, key=lambda run: run.info.start_time)
    assert second.info.start_time >= first.info.end_time


def test_a_sweep_whose_ranks_share_this_machine_compares_on_a_cluster_s_clock(monkeypatch) -> None:
    """docs/metrics.md, "Which clock a figure is on": ranks that share this machine's cores (or one
    GPU) time each other's turns, so such a sweep also keeps network=eth_10g's simulated clock,
    unless an override names the network or the runs model one already."""
    import os

    from dlcomm.compose import compose
    from dlcomm.sweep import comparison_clock

    monkeypatch.setattr(os, "cpu_count", lambda: 2)

    def clock(*overrides: str) -> tuple[str, str]:
        return comparison_clock(overrides, [compose(element) for element in expand(list(overrides))])

    assert clock("seed=1,2", "algo=allreduce,local_sgd") == ("network=eth_10g", "4 ranks shared 2 cores")
    assert clock("nodes=1,4") == ("network=eth_10g", "4 ranks shared 2 cores")  # any element sharing
    assert clock("launcher=threads", "launcher.compute=serial", "nodes=2", "seed=1,2") == (
        "network=eth_10g",
        "2 ranks took turns on 2 cores",
    )
    assert clock("network=off", "seed=1,2") == ("", "")  # the wall clock, asked for
    assert clock("network=eth_1g", "seed=1,2") == ("", "")  # a cluster's clock already
    assert clock("experiment=sesgd_fig5") == ("", "")  # its preset models one
    assert clock("experiment=sesgd_table2") == ("", "")  # a paper's setting on the wall clock: as committed
    assert clock("nodes=2", "seed=1,2") == ("", "")  # a core per rank: the wall clock is fair
    assert clock("launcher=slurm", "seed=1,2") == ("", "")  # separate machines
