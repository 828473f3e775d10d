"""One clock per comparison (issue 56, items 2 and 6): ``dlcomm report`` never puts a wall-clock
speedup and a simulated one in one column, nor compares runs charged from different compute
profiles; each comparison is a table of its own, headed by its clock, network and profile."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pytest

from dlcomm.report.groups import assign
from dlcomm.report.table import summarise

# a profile's provenance as the reporter tags a run with it (dlcomm.train.profile.ComputeProfile.tags)
MEASURED = "small_cnn b64 fp32: 21.76 ms per step ±2.7% (measured 2026-11-28 15:00 UTC, on vm, AMD EPYC x86_64, torch 2.14.1, thread CPU time, 1 thread)"
OTHER = "small_cnn b64 fp32: 35.10 ms per step ±1.2% (measured 2026-11-29 09:12 UTC, on box2, Intel Xeon x86_64, torch 2.14.1, thread CPU time, 1 thread)"
ORIGIN_NOW = "measured now, cached in results/profiles/ffb7.json"
ORIGIN_CACHE = "read from the cache results/profiles/ffb7.json"
OTHER_ORIGIN = "read from the cache results/profiles/0c1d.json"


def _profile_tags(provenance: str, origin: str, ms: str, host: str) -> dict[str, str]:
    return {
        "profile": f"{provenance}; {origin}",
        "profile_ms": ms,
        "profile_spread": "0.0270",
        "profile_origin": origin,
        "profile_device": "cpu",
        "profile_host": host,
        "profile_measured_at": "2026-11-28 15:00 UTC",
        "profile_torch": "2.14.1",
        "profile_clock": "thread CPU time, 1 thread",
    }


# (group, algo, seed, seconds per iteration on the group's clock); the simulated runs' wall time is
# 0.3 s whatever the method: a table that took the wrong clock shows speedups of 1.00
RUNS = [
    ("wall", "allreduce", 0, 0.200),
    ("wall", "allreduce", 1, 0.220),
    ("wall", "local_sgd", 0, 0.100),
    ("wall", "local_sgd", 1, 0.110),  # wall speedup 0.21 / 0.105 = 2.00
    ("eth_10g A", "allreduce", 0, 0.050),
    ("eth_10g A", "local_sgd", 0, 0.040),  # 1.25
    ("eth_1g A", "allreduce", 0, 0.500),
    ("eth_1g A", "local_sgd", 0, 0.125),  # 4.00
    ("eth_10g B", "allreduce", 0, 0.080),
    ("eth_10g B", "local_sgd", 0, 0.032),  # 2.50: the same settings as eth_10g A, on another host's profile
    ("eth_10g unrecorded", "allreduce", 0, 0.060),
    ("eth_10g unrecorded", "local_sgd", 0, 0.040),  # 1.50: simulated from a profile before dlcomm tagged it
]
SPEEDUPS = {"wall": 2.0, "eth_10g A": 1.25, "eth_1g A": 4.0, "eth_10g B": 2.5, "eth_10g unrecorded": 1.5}


def _run(group: str, algo: str, seed: int, seconds: float) -> tuple[dict, dict, dict]:
    """Params, tags and metrics of one finished run as dlcomm records them."""
    simulated = group != "wall"
    network = group.split()[0] if simulated else "off"
    params = {
        "algo.name": algo,
        "seed": str(seed),
        "nodes": "2",
        "workers_per_node": "1",
        "model.name": "small_cnn",
        "dataset.name": "synthetic",
        "train.batch_size": "64",
        "train.comm_interval": "1",
        "network.name": network,
        "network.mode": "simulate" if simulated else "off",
        "network.compute": "profile",
        "network.inter.bandwidth_gbps": {"eth_10g": "10.0", "eth_1g": "1.0"}.get(network, "10.0"),
    }
    tags = {"world_size": "2", "network": network, "algo": algo, "git_commit": "abcdef0123456789"}
    if group.endswith(" A"):  # the first run measured it, the others read it from the cache
        tags |= _profile_tags(
            MEASURED, ORIGIN_NOW if (algo, seed) == ("allreduce", 0) else ORIGIN_CACHE, "21.760", "vm"
        )
    elif group.endswith(" B"):
        tags |= _profile_tags(OTHER, OTHER_ORIGIN, "35.100", "box2")
    metrics = {
        "final/test_acc_mean": 0.8,
        "final/best_test_acc_mean": 0.8,
        "final/steps": 10.0,
        "final/time_per_iter_s": 0.3 if simulated else seconds,
        "final/comm_share": 0.5,
    }
    if simulated:
        metrics |= {"final/sim_time_per_iter_s": seconds, "final/sim_comm_share": 0.4}
    return params, tags, metrics


def _store(home: Path, runs=RUNS, sweep: bool = False) -> tuple[str, dict[str, str], str]:
    """A store under ``home/results`` whose experiment ``mixed`` holds ``runs`` (finished, in
    order), as children of a sweep's parent run when ``sweep``; its URI, ``run id -> group`` and
    the parent's id ('' without)."""
    from mlflow.entities import Metric, Param
    from mlflow.tracking import MlflowClient

    from dlcomm.tracking import store

    database = home / "results" / "mlflow.db"
    database.parent.mkdir(parents=True, exist_ok=True)
    uri = f"sqlite:///{database}"
    store.create_sqlite_store(uri, database)
    client = MlflowClient(tracking_uri=uri)
    experiment = client.create_experiment("mixed", artifact_location=(home / "results" / "mlartifacts").as_uri())
    parent = ""
    if sweep:
        parent = client.create_run(experiment, tags={"sweep": "true", "mlflow.runName": "sweep"}).info.run_id
    groups = {}
    for number, (group, algo, seed, seconds) in enumerate(runs):
        params, tags, metrics = _run(group, algo, seed, seconds)
        if parent:
            tags["mlflow.parentRunId"] = parent
        run_id = client.create_run(experiment, start_time=1_000 * (number + 1), tags=tags).info.run_id
        client.log_batch(
            run_id,
            metrics=[Metric(key, value, 0, 0) for key, value in metrics.items()],
            params=[Param(key, value) for key, value in params.items()],
        )
        client.set_terminated(run_id, "FINISHED")
        groups[run_id] = group
    return uri, groups, parent


def _markdown_tables(text: str) -> list[tuple[str, list[str]]]:
    """The markdown tables of ``text``: each as the last line of text above it and its lines."""
    tables, current, above = [], [], ""
    for line in text.splitlines() + [""]:
        if line.startswith("|"):
            current.append(line)
            continue
        if current:
            tables.append((above, current))
            current = []
        above = line if line.strip() else above
    return tables


def _cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def test_a_report_of_wall_and_simulated_runs_on_two_networks_and_profiles_mixes_no_clocks(tmp_path, cli_here) -> None:
    """Wall-clock runs, and simulated runs on eth_10g and eth_1g charged from profile A, on eth_10g
    from profile B (another host's) and from an unrecorded profile: each speedup is taken against the
    baseline of its own clock, network and profile, every run stays in the report, and each table of
    table.md and table.tex holds one clock and one profile, headed by them."""
    uri, groups, _ = _store(tmp_path)
    result = cli_here(tmp_path, "report", "experiment=mixed")
    assert result.returncode == 0, result.stderr
    folder = tmp_path / "results" / "mixed"
    table = pd.read_csv(folder / "table.csv", keep_default_na=False)
    # every run is in the table: runs on another profile are no reruns of the same configuration
    assert sorted(" ".join(table["runs"]).split()) == sorted(groups)
    for _, row in table.iterrows():
        [group] = {groups[run_id] for run_id in row["runs"].split()}  # a row's runs share one comparison
        expected = 1.0 if row["method"] == "allreduce" else SPEEDUPS[group]
        assert float(row["speedup"]) == pytest.approx(expected), (group, row["method"])
        assert row["speedup_clock"] == ("wall" if group == "wall" else "simulated")
    markdown = (folder / "table.md").read_text()
    assert "speedup_clock" not in markdown  # the header names only columns the .md has
    tables = _markdown_tables(markdown)
    assert len(tables) == 4  # wall; profile A (eth_10g and eth_1g, a setting each); profile B; unrecorded
    headed = [above for above, _ in tables]  # the heading above each table names its comparison
    for above, lines in tables:
        assert above.startswith("### Comparison "), above
        [speedup] = [cell for cell in _cells(lines[0]) if cell.startswith("speedup")]
        assert re.fullmatch(r"speedup \((wall clock|simulated( eth_10g| eth_1g)?)\)", speedup), speedup
    assert "Wall clock" in headed[0]
    assert sum(MEASURED in line for line in headed) == 1 and "eth_1g" in headed[1] and "eth_10g" in headed[1]
    assert sum(OTHER in line for line in headed) == 1
    assert sum("compute profile unrecorded" in line for line in headed) == 1
    # where the runs' copies of profile A came from: one measured it, the other read it from the cache
    assert ORIGIN_NOW in headed[1] and ORIGIN_CACHE in headed[1]
    assert (folder / "table.tex").read_text().count(r"\begin{tabular}") == 4
    assert "4 comparisons" in result.stdout  # the command says it split them, in a line


def test_one_comparison_keeps_its_table_and_names_its_profile(tmp_path, cli_here) -> None:
    """Simulated runs of one profile: one table, headed by the profile's provenance and where each
    run's copy came from; table.csv, one comparison, has no ``comparison`` column."""
    _store(tmp_path, [run for run in RUNS if run[0] == "eth_10g A"])
    result = cli_here(tmp_path, "report", "experiment=mixed")
    assert result.returncode == 0, result.stderr
    markdown = (tmp_path / "results" / "mixed" / "table.md").read_text()
    assert [above for above, _ in _markdown_tables(markdown)] == [
        f"### Simulated clock: eth_10g; compute profile {MEASURED}; {ORIGIN_NOW} (1 run); {ORIGIN_CACHE} (1 run)"
    ]
    assert f"### Simulated clock: eth_10g; compute profile {MEASURED}" in markdown
    assert "Comparison 1" not in markdown
    assert "comparison" not in pd.read_csv(tmp_path / "results" / "mixed" / "table.csv").columns
    assert f"simulated clock: eth_10g; compute profile {MEASURED}" in result.stdout


def _frame(runs) -> pd.DataFrame:
    """``runs`` as the rows :func:`dlcomm.report.runs.load_runs` reads (no store)."""
    rows = []
    for number, (group, algo, seed, seconds) in enumerate(runs):
        params, tags, metrics = _run(group, algo, seed, seconds)
        rows.append(
            {
                "run_id": f"{group}-{algo}-{seed}",
                "start_time": pd.Timestamp(number, unit="s"),
                **{f"params.{k}": v for k, v in params.items()},
                **{f"tags.{k}": v for k, v in tags.items()},
                **{f"metrics.{k}": v for k, v in metrics.items()},
            }
        )
    return pd.DataFrame(rows)


def test_the_clock_lines_name_each_profile_when_runs_differ() -> None:
    from dlcomm.report.table import clock_lines

    table = summarise(
        assign(_frame([r for r in RUNS if r[0] in ("eth_10g A", "eth_10g B")]))[0], "allreduce", lambda f: None
    )
    lines = clock_lines(table)
    assert lines[0].startswith("2 comparisons")
    assert any(MEASURED in line for line in lines) and any(OTHER in line for line in lines)
    one = summarise(assign(_frame([r for r in RUNS if r[0] == "wall"]))[0], "allreduce", lambda f: None)
    assert clock_lines(one) == []  # one comparison, no profile: nothing to tell apart
    assert set(one["comparison"]) == {""}  # no heading: table.md, table.csv and table.tex as before


def test_the_sweep_s_comparison_names_the_profile_its_simulated_speedups_rest_on(tmp_path, monkeypatch, capsys) -> None:
    """The end of `dlcomm train -m`: the comparison's lines name the clock, network and compute
    profile (with where each run's copy came from), and so does the parent run's description."""
    from mlflow.tracking import MlflowClient

    from dlcomm.report.sweep import compare_sweep
    from dlcomm.tracking.ui import DESCRIPTION_TAG

    uri, _, parent = _store(tmp_path, [run for run in RUNS if run[0] == "eth_10g A"], sweep=True)
    monkeypatch.setenv("DLCOMM_HOME", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    compare_sweep(uri, parent)
    out = capsys.readouterr()
    line = f"simulated clock: eth_10g; compute profile {MEASURED}"
    assert line in out.out, out.out + out.err
    said = next(text for text in out.out.splitlines() if line in text)
    assert ORIGIN_NOW in said and ORIGIN_CACHE in said
    description = MlflowClient(tracking_uri=uri).get_run(parent).data.tags[DESCRIPTION_TAG]
    assert line[0].upper() + line[1:] in description
