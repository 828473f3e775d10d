"""Shared helpers: running the CLI as a user would, and reading what it recorded."""

from __future__ import annotations

import atexit
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

# outer_fixtures' checks are the outer-loop tests' assertions: pytest shows their values as a test's own
pytest.register_assert_rewrite("outer_fixtures")

# One compute-profile cache for the whole test session (network.compute=profile measures a replica
# for ~2 s the first time a model/batch/optimizer is seen; every test has its own DLCOMM_HOME), and
# one dlcomm cache (the empty MLflow store each new results folder's store is copied from: 3 s of
# migrations once, not in every test that trains). The process that makes them (pytest's controller;
# xdist's workers inherit the variables) removes them at exit; the user's own caches are not touched.
if "DLCOMM_PROFILES" not in os.environ:
    _session = tempfile.mkdtemp(prefix="dlcomm-test-session-")
    os.environ["DLCOMM_PROFILES"] = os.path.join(_session, "profiles")
    os.environ.setdefault("DLCOMM_CACHE", os.path.join(_session, "cache"))
    atexit.register(shutil.rmtree, _session, ignore_errors=True)
# Tests share 2 cores between xdist's workers and their ranks: a profile measured in one is taken
# whatever the load (dlcomm.train.profile_measure refuses it otherwise); the tests of the refusal unset it.
os.environ.setdefault("DLCOMM_PROFILE_BUSY", "accept")


# The algorithm choices, as `dlcomm --help` lists them (dlcomm.catalog.choices: dlcomm's registered
# algorithms, the installed plugins' (e.g. examples/plugin's choco) and any YAML file of configs/algo/), sorted.
def _algorithm_choices() -> list[str]:
    from dlcomm.catalog import choices

    return choices("algo")


ALGORITHMS = _algorithm_choices()

# Small, fast runs: synthetic 28x28 data, few steps. Tests add their own overrides.
FAST = [
    "dataset=synthetic",
    "dataset.train_size=2048",
    "dataset.test_size=512",
    "train.eval_batch_size=256",
]


@dataclass
class CliResult:
    returncode: int
    stdout: str
    stderr: str
    home: Path

    @property
    def run_id(self) -> str:
        # rank 0's closing line names it; else the driver's starting line (under launcher=local through
        # cli_here, rank 0's lines go to the fork server's stdout, not this test's)
        text = self.stdout + self.stderr
        starting = r"MLflow run '.*' \(([0-9a-f]{32})\)"
        found = re.findall(r"mlflow run ([0-9a-f]{32})", text) or re.findall(starting, text)
        assert found, f"no run id in output:\n{self.stdout}\n{self.stderr}"
        return found[-1]

    @property
    def tracking_uri(self) -> str:
        return f"sqlite:///{self.home / 'results' / 'mlflow.db'}"

    @property
    def run_dir(self) -> Path:
        return self.home / "results" / "runs" / self.run_id


def cli_env(home: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["DLCOMM_HOME"] = str(home)
    env.setdefault("PYTHONWARNINGS", "ignore")
    return env


def run_cli(home: Path, *args: str, timeout: float = 300) -> CliResult:
    """``dlcomm <args>`` in a subprocess with results under ``home``."""
    done = subprocess.run(
        [sys.executable, "-m", "dlcomm.cli", *args],
        cwd=home,
        env=cli_env(home),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    return CliResult(done.returncode, done.stdout, done.stderr, home)


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path


@pytest.fixture
def cli_here(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture):
    """``call(home, *args)``: ``dlcomm <args>`` through ``cli.main`` in this process, results under
    ``home``, as a :class:`CliResult`. For tests of what a command does rather than of its process:
    no interpreter start and no imports of torch and MLflow (about 6 s of CPU a call here). Under
    ``launcher=local`` the ranks are processes either way, forked from this process's fork server:
    what they print (rank 0's epoch and ``done:`` lines) is not in the result, the driver's lines are."""
    from dlcomm import cli

    def call(home: Path, *args: str) -> CliResult:
        with monkeypatch.context() as patch:
            patch.setenv("DLCOMM_HOME", str(home))
            patch.chdir(home)
            capsys.readouterr()  # what came before is not this command's
            code = cli.main(list(args))
            out = capsys.readouterr()
        return CliResult(code, out.out, out.err, home)

    return call


# fixtures that run dlcomm for real: a results folder (``home``), test_models_paper's ten trainings
SLOW_FIXTURES = {"home", "trained"}


def _join_group(item: pytest.Item, group: str) -> None:
    """Put ``item`` in xdist's ``group`` under ``--dist loadgroup``. xdist (3.8) marks a grouped test by
    suffixing ``@group`` to its node id through ``item._nodeid``, which pytest 9 no longer reads (it keeps
    ``item._id``): the group was silently lost and the SLURM tests ran on both workers at once, their jobs
    queueing behind each other's (seen at e2a2b19). Here the suffix goes where pytest 9 reads it."""
    item.add_marker(pytest.mark.xdist_group(group))
    if getattr(item.config.option, "loadgroup", False) and hasattr(item, "_id") and "@" not in item.nodeid:
        from _pytest.nodeid import coerce_node_id

        item._id = coerce_node_id(f"{item.nodeid}@{group}")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The tiers (markers in pyproject.toml): a test that takes one of ``SLOW_FIXTURES`` is ``slow``,
    as are those that mark themselves so (processes, real stores, tens of seconds here); ``make
    test-fast`` runs the rest, ``make test`` (CI) everything.

    ``make test`` runs the suite on pytest-xdist workers: the tests of the one local SLURM (``slurm``,
    ``hosts``) share one worker (``--dist loadgroup``), so that they never queue behind each other's
    jobs; the ``alone`` ones run afterwards in a pytest of their own.

    The files with ``slow`` tests come first, each file whole and in the order collected (a stable
    sort; a module's fixtures are then set up once): xdist hands out tests in this order, and the
    parallel part ends when its busier worker does, so a long test handed out last
    (test_threads_launcher's every-algorithm sweep, ~84 s in CI, was the 1702nd of 1768) leaves the
    other worker idle for whatever of it outlasts the tests after it; after these come the files of
    unit tests only, minutes of sub-second work that even the workers out."""
    for item in items:
        if SLOW_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)
        if item.get_closest_marker("slurm") or item.get_closest_marker("hosts"):
            _join_group(item, "local_slurm")
    slow_files = {item.path for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.path not in slow_files)


def mlflow_run(result: CliResult):
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=result.tracking_uri).get_run(result.run_id)


# ---- sweeps: a parent run and its children in the store under <home>/results -----------------


def store_client(home: Path):
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=f"sqlite:///{home / 'results' / 'mlflow.db'}")


def parent_id(result) -> str:
    found = re.search(r"parent mlflow run ([0-9a-f]{32})", result.stdout)
    assert found, f"no parent run in the output:\n{result.stdout}"
    return found.group(1)


def children(home: Path, parent: str) -> list:
    client = store_client(home)
    experiment = client.get_run(parent).info.experiment_id
    return client.search_runs([experiment], filter_string=f"tags.mlflow.parentRunId = '{parent}'")


def wait_until_ended(home: Path, parent: str, count: int, timeout_s: float) -> list:
    """Wait for a sweep to end: its ``count`` children and then the parent, which the last child closes
    a moment after closing itself (checking the children alone raced that moment)."""
    deadline = time.monotonic() + timeout_s
    while True:
        runs = children(home, parent)
        parent_status = store_client(home).get_run(parent).info.status
        if len(runs) == count and parent_status != "RUNNING" and all(run.info.status != "RUNNING" for run in runs):
            return runs
        assert time.monotonic() < deadline, (parent_status, [(run.info.run_name, run.info.status) for run in runs])
        time.sleep(1)


@pytest.fixture
def default_sigint():
    """SIGINT as an interactive Python has it (``default_int_handler``) for the test, whatever the
    test process started with: run in a shell's background (``nohup ... &``, some CI runners) it
    starts ignoring SIGINT, and dlcomm then rightly leaves SIGINT alone."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)
