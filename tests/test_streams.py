"""A driver whose stdout or stderr is gone, full or closed still trains and records its run
(issue 49: `> /dev/full` once ended FAILED with rank 0's ENOSPC, `>&-` in a traceback)."""

from __future__ import annotations

import io
import subprocess
import sys

import pytest

from dlcomm.streams import ForgivingStream

from conftest import FAST, cli_env, store_client


class _Full(io.StringIO):
    def write(self, text: str) -> int:
        raise OSError(28, "No space left on device")


def test_a_failing_write_is_dropped_and_so_is_every_later_one() -> None:
    stream = ForgivingStream(_Full())
    assert stream.write("done: ...\n") == len("done: ...\n") and stream.broken
    stream.flush()
    assert stream.write("more\n") == 5 and not stream.isatty()
    with pytest.raises(io.UnsupportedOperation):
        stream.fileno()
    kept = io.StringIO()
    assert ForgivingStream(kept).write("seen") == 4 and kept.getvalue() == "seen"


@pytest.mark.parametrize("where", ["full", "closed"])
def test_a_run_whose_output_cannot_be_written_finishes_and_is_recorded(home, where) -> None:
    command = [sys.executable, "-m", "dlcomm.cli", "train", *FAST, "train.max_steps=4", "launcher=local"]
    if where == "full":  # stdout and stderr on a full disk
        with open("/dev/full", "w") as full:
            process = subprocess.run(command, cwd=home, env=cli_env(home), stdout=full, stderr=full, timeout=300)
    else:  # both closed, as `>&- 2>&-` leaves them
        shell = " ".join(command) + " >&- 2>&-"
        process = subprocess.run(["bash", "-c", shell], cwd=home, env=cli_env(home), timeout=300)
    assert process.returncode == 0
    (run,) = store_client(home).search_runs([store_client(home).get_experiment_by_name("dlcomm").experiment_id])
    assert run.info.status == "FINISHED" and run.data.metrics["final/steps"] == 4
