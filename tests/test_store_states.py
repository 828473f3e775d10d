"""Store states dlcomm did not make (issue 49 item 4): whatever MLflow lets a store hold, every
command that opens one answers it with a run, a report, a list, or one line (``dlcomm: error:
...`` naming the problem and the fix, exit 2), never a traceback.

A generated part builds stores from a copy of a store holding one real dlcomm run, then changes
them as users and other tools do: the experiment the commands name deleted (MLflow keeps it,
restorable), renamed away (its name free), its name taken by an experiment another tool made;
runs of other tools beside dlcomm's (arbitrary params, tags, metrics and statuses, RUNNING ones
among them, runs with no params at all, runs deleted), runs of older dlcomm versions (a real
run's data with some params, tags or metrics missing and some values changed, dlcomm's own tag
names with odd values: ``driver_pid=99999999999999999999``, ``world_size=²``), and experiment
names that are long (past MLflow's 500 characters, which an older MLflow stored) or odd (spaces,
unicode, quotes, slashes). Then ``dlcomm runs reap``, ``dlcomm report experiment=<name>``,
``dlcomm report --all``, ``dlcomm train`` and ``dlcomm train -m`` run against it in this
process (:func:`answered`).
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st

from dlcomm import cli
from dlcomm.metrics import names

from conftest import CliResult

pytestmark = pytest.mark.slow  # real stores, real (tiny) trainings

TINY = ["dataset=synthetic", "model=mlp", "nodes=2", "train.max_steps=2", "launcher=threads"]
ORIGINAL = "dlcomm"  # the experiment the template's run went to (tracking.experiment's default)
DEAD_PID = "4000000"  # above any pid_max: no process has it

# names dlcomm itself writes and reads: the generated runs use them too, with values dlcomm never wrote
DLCOMM_PARAMS = [
    "seed",
    "algo.name",
    "nodes",
    "workers_per_node",
    "model.name",
    "dataset.name",
    "train.batch_size",
    "train.comm_interval",
    "train.eval_replicas",
    "compress.name",
    "report.baseline",
    "network.compute",
    "sweep.size",
    "tracking.experiment",
]
DLCOMM_TAGS = [
    "driver_pid",
    "driver_start",
    "hostname",
    "slurm_job_id",
    "launcher",
    "sweep",
    "mlflow.parentRunId",
    "world_size",
    "algo",
    "network",
    "host_ranks",
    "host_cores",
    "git_commit",
    "dlcomm_version",
    "error",
    "sweep_element",
]
DLCOMM_METRICS = [
    names.FINAL_TEST_ACC,
    names.FINAL_BEST_TEST_ACC,
    names.FINAL_TIME_PER_ITER,
    names.FINAL_COMM_SHARE,
    names.FINAL_STEPS,
    names.FINAL_SIM_TIME_PER_ITER,
    names.EPOCH_TEST_ACC_MEAN,
    names.EPOCH_TRAIN_TIME,
    names.CLOCK_TIME,
]


def _mlflow_key(key: str) -> bool:
    """Whether MLflow takes ``key`` as a param, tag or metric name."""
    from mlflow.utils.validation import path_not_unique, validate_param_and_metric_name

    return bool(validate_param_and_metric_name(key)) and not path_not_unique(key)


ODD = st.characters(exclude_categories=("Cs", "Cc"))  # anything printable, unicode and quotes included
KEY = st.from_regex(r"[\w][\w.\- :/]{0,20}", fullmatch=True).filter(_mlflow_key)
VALUE = st.one_of(
    st.text(ODD, max_size=12),
    st.sampled_from(
        ["", "0", "-1", "1.5", "²", "nan", "inf", "true", "None", "allreduce", "slurm", "local", "threads", "12_3"]
        + [socket.gethostname(), str(os.getpid()), DEAD_PID, "99999999999999999999"]
    ),
    st.text(ODD, min_size=300, max_size=400),
)
METRIC = st.floats(allow_nan=True, allow_infinity=True)
NAME = st.one_of(
    st.just(ORIGINAL),
    st.from_regex(r"[\w][\w .,:()+\-]{0,23}", fullmatch=True),  # names people type: spaces, unicode letters
    st.text(ODD, min_size=1, max_size=16),  # anything: slashes, quotes, '$', a leading dot
    # long: 240 to 520 characters (MLflow refuses over 500 today; older versions stored them)
    st.tuples(st.text(ODD, min_size=1, max_size=4), st.integers(240, 520)).map(lambda t: (t[0] * 520)[: t[1]]),
)


@dataclass
class Run:
    """A run another tool (or an older dlcomm) put in the store."""

    status: str
    params: dict[str, str]
    tags: dict[str, str]
    metrics: dict[str, float]
    older: bool = False  # starts from the real dlcomm run's params, tags and metrics, less ``dropped``
    dropped: set[str] = field(default_factory=set)
    deleted: bool = False  # the run itself deleted (lifecycle_stage deleted)
    elsewhere: bool = False  # in another experiment of the store, not the named one


RUNS = st.builds(
    Run,
    status=st.sampled_from(["RUNNING", "FINISHED", "FAILED", "KILLED", "SCHEDULED"]),
    params=st.dictionaries(st.one_of(st.sampled_from(DLCOMM_PARAMS), KEY), VALUE, max_size=5),
    tags=st.dictionaries(st.one_of(st.sampled_from(DLCOMM_TAGS), KEY), VALUE, max_size=5),
    metrics=st.dictionaries(st.one_of(st.sampled_from(DLCOMM_METRICS), KEY), METRIC, max_size=4),
    older=st.booleans(),
    dropped=st.sets(st.sampled_from(DLCOMM_PARAMS + DLCOMM_TAGS + DLCOMM_METRICS), max_size=4),
    deleted=st.booleans(),
    elsewhere=st.booleans(),
)


@dataclass
class State:
    """A store: the experiment the commands name (``name``), what became of it (``fate``), and runs
    of others in it and beside it."""

    name: str
    fate: str  # active | deleted | renamed_away | taken (the name held by another tool's experiment)
    runs: list[Run]
    artifacts: str = ""  # where the named experiment keeps its runs' files ("": where it was made to)

    def foreign_finished(self) -> bool:
        """Whether the named experiment holds a finished run no report can read (no ``algo.name``)."""
        return any(
            run.status == "FINISHED"
            and not run.deleted
            and not run.elsewhere
            and "algo.name" not in run.params
            and (not run.older or "algo.name" in run.dropped)
            for run in self.runs
        )


UNWRITABLE = "/proc/dlcomm/artifacts"  # a store moved from another machine, another tool's setting
STATES = st.builds(
    State,
    name=NAME,
    fate=st.sampled_from(["active", "deleted", "renamed_away", "taken"]),
    runs=st.lists(RUNS, max_size=4),
    artifacts=st.sampled_from(["", "", UNWRITABLE, f"file://{UNWRITABLE}"]),
)


# -- building a store -----------------------------------------------------------------------------------------------
def answered(home: Path, capsys: pytest.CaptureFixture, argv: list[str]) -> CliResult:
    """``dlcomm <argv>`` through ``cli.main`` in this process, with results under ``home``, checked:
    exit 0 or 2, no traceback; exit 2 is exactly one ``dlcomm: error:`` line, the last on stderr,
    every other stderr line one of dlcomm's own (``dlcomm: ...``: a lost run closed, a note)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DLCOMM_HOME", str(home))
        patch.chdir(home)
        capsys.readouterr()
        try:
            code = cli.main(argv)
        except SystemExit as stop:  # argparse's way out
            code = stop.code
        out = capsys.readouterr()
    code = int(code or 0)
    said = f"dlcomm {' '.join(argv)[:300]} -> {code}\n--- stdout:\n{out.out[-3000:]}\n--- stderr:\n{out.err[-3000:]}"
    assert "Traceback" not in out.out + out.err, said
    assert code in (0, 2), said
    errors = [line for line in out.err.splitlines() if line.startswith("dlcomm: error: ")]
    if code == 2:
        lines = [line for line in out.err.splitlines() if line.strip()]
        assert len(errors) == 1 and lines[-1] == errors[0], said
        assert all(line.startswith("dlcomm: ") for line in lines), said
    else:
        assert not errors, said
    return CliResult(code, out.out, out.err, home)


def _hydra_value(text: str) -> str:
    """``text`` as the value of a Hydra override: bare when its grammar reads it so, else quoted."""
    if re.fullmatch(r"[A-Za-z0-9_.\-/]+", text):
        return text
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A home whose store holds one real run of dlcomm (experiment ``dlcomm``), trained here once."""
    home = tmp_path_factory.mktemp("template")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DLCOMM_HOME", str(home))
        patch.chdir(home)
        assert cli.main(["train", *TINY]) == 0
    return home


def _client(home: Path):
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=f"sqlite:///{home / 'results' / 'mlflow.db'}")


def _set_in_sql(home: Path, statement: str, value: str, experiment_id: str) -> None:
    """What an older MLflow (no limit on names) or another tool wrote, as it is."""
    connection = sqlite3.connect(home / "results" / "mlflow.db")
    try:
        with connection:
            connection.execute(statement, (value, int(experiment_id)))
    finally:
        connection.close()


def _rename(client, home: Path, experiment_id: str, name: str) -> None:
    from mlflow.exceptions import MlflowException

    try:
        client.rename_experiment(experiment_id, name)
    except MlflowException:  # a name MLflow refuses today (over 500 characters)
        _set_in_sql(home, "UPDATE experiments SET name = ? WHERE experiment_id = ?", name, experiment_id)


def _add_run(client, experiment_id: str, run: Run, real) -> None:
    from mlflow.entities import Metric, Param

    params, tags, metrics = {}, {}, {}
    if run.older:
        params = {k: v for k, v in real.data.params.items() if k not in run.dropped}
        tags = {k: v for k, v in real.data.tags.items() if k not in run.dropped and not k.startswith("mlflow.")}
        metrics = {k: v for k, v in real.data.metrics.items() if k not in run.dropped}
    params.update(run.params)
    tags.update(run.tags)
    metrics.update(run.metrics)
    created = client.create_run(experiment_id, tags=tags)
    run_id = created.info.run_id
    items = [Param(k, v) for k, v in params.items()]
    for start in range(0, len(items), 100):
        client.log_batch(run_id, params=items[start : start + 100])
    points = [Metric(k, v, 0, 1) for k, v in metrics.items()]
    for start in range(0, len(points), 1000):
        client.log_batch(run_id, metrics=points[start : start + 1000])
    if run.status == "SCHEDULED":
        client.update_run(run_id, status="SCHEDULED")
    elif run.status != "RUNNING":
        client.set_terminated(run_id, run.status)
    if run.deleted:
        client.delete_run(run_id)


def build(template: Path, home: Path, state: State) -> None:
    """``home`` with a copy of the template's store, turned into ``state``."""
    (home / "results").mkdir(parents=True)
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(home)  # another tool's experiment keeps its artifacts in ./mlruns: the home's
        _build(template, home, state)


def _build(template: Path, home: Path, state: State) -> None:
    shutil.copyfile(template / "results" / "mlflow.db", home / "results" / "mlflow.db")
    connection = sqlite3.connect(home / "results" / "mlflow.db")
    try:  # artifacts beside this store, not the template's
        with connection:
            for table, column in (("experiments", "artifact_location"), ("runs", "artifact_uri")):
                connection.execute(f"UPDATE {table} SET {column} = replace({column}, ?, ?)", (str(template), str(home)))
    finally:
        connection.close()
    client = _client(home)
    original = client.get_experiment_by_name(ORIGINAL)
    [real] = client.search_runs([original.experiment_id])
    if state.name != ORIGINAL:
        _rename(client, home, original.experiment_id, state.name)
    target = original.experiment_id
    if state.fate in ("renamed_away", "taken"):
        client.rename_experiment(original.experiment_id, "renamed by someone")
        if state.fate == "taken":  # another tool's experiment, of the same name
            target = client.create_experiment("made elsewhere")
            _rename(client, home, target, state.name)
    if state.artifacts:
        _set_in_sql(
            home, "UPDATE experiments SET artifact_location = ? WHERE experiment_id = ?", state.artifacts, target
        )
    for run in state.runs:
        _add_run(client, "0" if run.elsewhere else target, run, real)
    if state.fate == "deleted":
        client.delete_experiment(original.experiment_id)


def _settings(examples: int) -> settings:
    """A few examples each (a second per command); no shrinking: each step of it builds a store and
    runs the commands again (minutes), and the example as generated says what broke."""
    return settings(
        max_examples=examples,
        deadline=None,
        phases=(Phase.explicit, Phase.reuse, Phase.generate),
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large],
    )


HERE = socket.gethostname()
# Explicit examples, run every time before the generated ones: the states the issue names.
DELETED = State(ORIGINAL, "deleted", [])
FOREIGN = State(
    "shared",
    "taken",
    [
        Run("FINISHED", {"lr": "0.1", "a b:c/d": "é$^"}, {"mlflow.user": "someone"}, {"loss": float("nan")}),
        Run("FINISHED", {}, {}, {}),  # no params, no metrics
        Run("RUNNING", {}, {}, {}),  # RUNNING, none of dlcomm's tags
        Run("RUNNING", {}, {"driver_pid": "99999999999999999999", "hostname": HERE}, {}),
        Run("RUNNING", {}, {"driver_pid": DEAD_PID, "hostname": HERE, "mlflow.parentRunId": "-1"}, {}),
        Run("FINISHED", {"seed": "²"}, {"world_size": "four"}, {names.FINAL_TEST_ACC: float("inf")}, older=True),
        Run("FINISHED", {}, {}, {}, older=True, dropped={"algo.name", "world_size"}),
    ],
)
MIXED = State(
    ORIGINAL,
    "active",
    [
        Run("FINISHED", {"lr": "1"}, {}, {"loss": 0.5}),
        Run("FINISHED", {"compress.name": "$x^", "report.baseline": ""}, {}, {}, older=True),
        Run("FINISHED", {}, {"sweep": "true"}, {}, older=True, dropped={names.FINAL_TEST_ACC}),
        Run("RUNNING", {}, {"launcher": "slurm", "slurm_job_id": "12_3"}, {}, elsewhere=True),
    ],
)
MOVED = State(ORIGINAL, "active", [], artifacts=UNWRITABLE)  # its files' folder is another machine's
LONG = State("ü" * 510, "active", [])  # 510 characters, 1020 bytes: no folder entry can be so long
ODD_NAME = State("../a/b \\ 'c' $d", "active", [])


def _refused_as_deleted(result: CliResult) -> bool:
    return result.returncode == 2 and "was deleted" in result.stderr and "mlflow experiments restore" in result.stderr


@_settings(15)
@given(state=STATES)
@example(state=DELETED)
@example(state=FOREIGN)
@example(state=MIXED)
@example(state=LONG)
@example(state=ODD_NAME)
def test_reading_commands_answer_any_store_state(template, tmp_path_factory, capsys, state: State) -> None:
    home = tmp_path_factory.mktemp("state")
    build(template, home, state)
    answered(home, capsys, ["runs", "reap"])
    reaped = answered(home, capsys, ["runs", "reap", f"experiment={state.name}", "--dry-run"])
    reported = answered(home, capsys, ["report", f"experiment={state.name}"])
    answered(home, capsys, ["report", "--all"])
    if state.fate == "deleted":  # the experiment is there, deleted: said so, with the ways out
        assert _refused_as_deleted(reaped) and _refused_as_deleted(reported), (reaped.stderr, reported.stderr)
    if reported.returncode == 0 and state.fate in ("active", "taken") and state.foreign_finished():
        assert "left out of the table" in reported.stdout, reported.stdout  # and which runs, why: one line


@_settings(8)
@given(state=STATES)
@example(state=DELETED)
@example(state=FOREIGN)
@example(state=MOVED)
def test_a_run_and_its_report_in_any_store_state(template, tmp_path_factory, capsys, state: State) -> None:
    home = tmp_path_factory.mktemp("state")
    build(template, home, state)
    trained = answered(home, capsys, ["train", *TINY, f"tracking.experiment={_hydra_value(state.name)}"])
    if state.fate == "deleted" or (state.artifacts and state.fate in ("active", "taken")):
        assert trained.returncode == 2, trained.stderr  # refused before any run is recorded
    if trained.returncode == 0:
        answered(home, capsys, ["report", f"experiment={state.name}"])


@_settings(4)
@given(state=STATES)
@example(state=DELETED)
def test_a_sweep_in_any_store_state(template, tmp_path_factory, capsys, state: State) -> None:
    home = tmp_path_factory.mktemp("state")
    build(template, home, state)
    swept = answered(
        home, capsys, ["train", "-m", *TINY, "seed=1,2", f"tracking.experiment={_hydra_value(state.name)}"]
    )
    if state.fate == "deleted":
        assert swept.returncode == 2, swept.stderr
