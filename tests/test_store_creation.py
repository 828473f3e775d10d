"""The MLflow store is created atomically (issue 34, class 1): a first ``dlcomm train`` interrupted
(SIGTERM, SIGINT) while MLflow builds the schema of a new SQLite store leaves either no store or
a complete one, never one that every later run fails on; a disk that fills meanwhile is one line,
exit 2, and no store. Real processes: the signals and the file limit are the point."""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import cli_env

# slow: processes and a real store, 30-70 s a test here; alone: signals land at moments, and a
# bound on the whole test's time, that a busy machine moves
pytestmark = [pytest.mark.slow, pytest.mark.alone]

JOB = ["dataset=synthetic", "model=mlp", "nodes=2", "train.max_steps=5"]


def _start(home: Path, **options) -> subprocess.Popen:
    # a cache of its own, empty: the store is built by MLflow's migrations, not copied from the template
    return subprocess.Popen(
        [sys.executable, "-m", "dlcomm.cli", "train", *JOB],
        cwd=home,
        env={**cli_env(home), "DLCOMM_CACHE": str(home / "cache")},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        **options,
    )


def _store_opens(database: Path) -> None:
    """The store is absent (the next run creates it) or MLflow opens it and can search it."""
    if not database.exists():
        return
    from mlflow.tracking import MlflowClient

    MlflowClient(tracking_uri=f"sqlite:///{database}").search_experiments(max_results=1)


def test_a_first_run_interrupted_while_the_store_is_created_leaves_a_store_the_next_run_uses(
    tmp_path, cli_here
) -> None:
    start = time.monotonic()
    tries = [(signal.SIGTERM, 0.2), (signal.SIGTERM, 0.4), (signal.SIGINT, 0.5), (signal.SIGTERM, 0.7)]
    homes = [tmp_path / f"try{number}" for number in range(len(tries))]
    # the four first runs at once, each signalled its delay after its own schema file appears (one
    # after another they took ~22 of the test's ~26 s here, mostly each interpreter's start)
    firsts = []
    for home in homes:
        home.mkdir()
        firsts.append(_start(home))
    creating: dict[int, float] = {}  # try -> when its schema's file appeared
    signalled: set[int] = set()
    deadline = time.monotonic() + 60
    while len(signalled) < len(tries) and time.monotonic() < deadline:
        for number, (first, home, (signum, delay)) in enumerate(zip(firsts, homes, tries)):
            if number in signalled:
                continue
            results = home / "results"
            if number not in creating and (
                first.poll() is not None  # ended before: signalled as before, to no effect
                or (results / "mlflow.db").exists()
                or list(results.glob(".mlflow.db.creating-*"))
            ):
                creating[number] = time.monotonic()
            if number in creating and time.monotonic() >= creating[number] + delay:
                first.send_signal(signum)
                signalled.add(number)
        time.sleep(0.01)
    for number, (first, home) in enumerate(zip(firsts, homes)):
        if number not in signalled:  # no schema file by the deadline: signalled then, as one by one
            first.send_signal(tries[number][0])
        first.communicate(timeout=60)
        _store_opens(home / "results" / "mlflow.db")
    # the next run needs only the store: through cli.main in this process, its ranks threads
    following = cli_here(homes[0], "train", *JOB, "launcher=threads")
    assert following.returncode == 0, following.stderr[-2000:]
    assert "Traceback" not in following.stderr
    assert not list((homes[0] / "results").glob(".mlflow.db.creating-*")), "a killed creator's file was left"
    assert time.monotonic() - start < 90


def _full_disk() -> None:
    """Files larger than 200 kB cannot be written (EFBIG, as ENOSPC on a full disk): MLflow's schema is ~1 MB."""
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (200_000, 200_000))


def test_a_disk_that_fills_while_the_store_is_created_is_one_line_exit_2_and_no_store(tmp_path, cli_here) -> None:
    first = _start(tmp_path, preexec_fn=_full_disk)
    _, err = first.communicate(timeout=120)
    assert first.returncode == 2, err[-2000:]
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.strip()]
    assert (
        len(lines) == 1 and lines[0].startswith("dlcomm: error: ") and "the new store could not be created" in lines[0]
    ), err
    results = tmp_path / "results"
    assert not (results / "mlflow.db").exists()
    assert not [path.name for path in results.glob(".mlflow.db.creating-*")]
    # with room again the store is made (through cli.main in this process, its ranks threads)
    following = cli_here(tmp_path, "train", *JOB, "launcher=threads")
    assert following.returncode == 0, following.stderr[-2000:]
    assert os.path.getsize(results / "mlflow.db") > 200_000
