"""``dlcomm report --from <folder>`` on run data it did not write, or damaged (issue 50): one line
naming the file and the way on, exit 2, nothing written; an experiment name in the run data that
would leave ``out=`` becomes one entry of it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from dlcomm.paths import entry_name

SOURCE = Path(__file__).resolve().parents[1] / "results" / "sesgd_table2"  # a small committed report


def _copy(tmp_path: Path) -> Path:
    folder = tmp_path / "copy"
    shutil.copytree(SOURCE, folder)
    return folder


DAMAGES = [
    ("runs.json", "{not json", "runs.json cannot be read as run data (Expecting property name"),
    ("runs.json", "[1, 2]", 'is not run data dlcomm wrote (it needs an "experiment" name and a list of "runs")'),
    ("runs.json", '{"experiment": "x", "runs": [1]}', "is not run data dlcomm wrote"),
    ("runs.json", '{"runs": []}', "is not run data dlcomm wrote"),
    (
        "histories.csv",
        "run_id,key,step,value\nabc,loss,notastep,1\n",
        "histories.csv cannot be read as run histories (",
    ),
    ("histories.csv", "\x00\x01garbage", "histories.csv cannot be read as run histories ("),
]


@pytest.mark.parametrize(
    "name,content,says", DAMAGES, ids=[f"{name}: {content[:16]!r}" for name, content, _ in DAMAGES]
)
def test_damaged_run_data_is_one_line_naming_the_file(tmp_path, cli_here, name, content, says) -> None:
    folder = _copy(tmp_path)
    (folder / name).write_text(content)
    before = {path: path.stat().st_mtime_ns for path in folder.iterdir()}
    result = cli_here(tmp_path, "report", "--from", str(folder))
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("dlcomm: error: ") and says in lines[0], result.stderr
    assert "dlcomm report experiment=<name>" in lines[0]
    assert {path: path.stat().st_mtime_ns for path in folder.iterdir()} == before  # nothing half-written


def test_an_experiment_name_in_the_run_data_stays_inside_out(tmp_path, cli_here) -> None:
    folder = _copy(tmp_path)
    document = json.loads((folder / "runs.json").read_text())
    document["experiment"] = "../../escaped"
    (folder / "runs.json").write_text(json.dumps(document))
    out = tmp_path / "out"
    result = cli_here(tmp_path, "report", "--from", str(folder), f"out={out}")
    assert result.returncode == 0, result.stderr
    assert (out / entry_name("../../escaped") / "table.md").is_file()
    assert not (tmp_path.parent / "escaped").exists() and not (tmp_path / "escaped").exists()
