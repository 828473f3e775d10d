"""Nothing of a run outlives it (issue 34, class 5): an imagefolder run under launcher=local whose
rank fails, or whose driver gets SIGTERM, leaves no process behind (no rank, no fork server, no
DataLoader worker, no resource tracker) and prints no "leaked semaphore" warning.

The driver is started in a session of its own; every process of the run (the ranks' groups
included) stays in that session, so the session's members after the driver exits are what the
run left behind.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from conftest import cli_env

pytestmark = [
    pytest.mark.skipif(not os.path.isdir("/proc"), reason="lists processes through /proc"),
    # a kill lands at a moment; on a busy machine other moments (a data loader's semaphores half made)
    pytest.mark.alone,
]


def _image_folder(root: Path) -> None:
    from PIL import Image

    rng = np.random.default_rng(3)
    for split in ("train", "val"):
        for name in ("ant", "bee"):
            (root / split / name).mkdir(parents=True)
            for k in range(8):
                Image.fromarray(rng.integers(0, 256, (12, 12, 3), dtype=np.uint8)).save(
                    root / split / name / f"{k}.png"
                )


def _session_members(sid: int) -> list[str]:
    """``pid command`` of every live process of session ``sid``."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            command = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()  # state, ppid, pgrp, session, ...
        if fields[0] != "Z" and int(fields[3]) == sid:
            found.append(f"{entry} (ppid {fields[1]}) {command[:120]}")
    return found


def _left_behind(sid: int, wait_s: float = 8.0) -> list[str]:
    """The session's processes still alive ``wait_s`` after the driver ended (what ends with the
    run may take a moment: a fork server sees its last client go, the resource tracker its pipe close)."""
    deadline = time.monotonic() + wait_s
    while True:
        left = _session_members(sid)
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.2)


def _start(home: Path, *extra: str) -> subprocess.Popen:
    _image_folder(home / "images")
    env = cli_env(home)
    env.pop("PYTHONWARNINGS", None)  # the resource tracker's warning must be able to show
    args = [
        "dataset=imagefolder",
        f"dataset.root={home / 'images'}",
        "dataset.image_size=8",
        "dataset.loader_workers=2",
        "model=mlp",
        "nodes=2",
        "train.batch_size=2",
        "train.eval_batch_size=4",
        *extra,
    ]
    with open(home / "output.txt", "w") as output:  # a file, not a pipe: what is left behind may hold it open
        return subprocess.Popen(
            [sys.executable, "-m", "dlcomm.cli", "train", *args],
            cwd=home,
            env=env,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def _output(home: Path) -> str:
    return (home / "output.txt").read_text(errors="replace")


def _finish(driver: subprocess.Popen, home: Path, timeout: float) -> str:
    try:
        driver.wait(timeout=timeout)
    finally:
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)
            driver.wait()
    return _output(home)


def _assert_nothing_left(driver: subprocess.Popen, output: str) -> None:
    left = _left_behind(driver.pid)
    for line in left:  # end them, so that a failure here leaves nothing for the next test
        try:
            os.kill(int(line.split()[0]), signal.SIGKILL)
        except ProcessLookupError:
            pass
    assert not left, "left behind:\n" + "\n".join(left) + "\n" + output[-3000:]
    assert "leaked semaphore" not in output, output[-3000:]


def test_a_failing_imagefolder_run_leaves_no_process_and_no_semaphore(home) -> None:
    driver = _start(home, "train.max_steps=6", "debug.fail_rank=1", "debug.fail_step=2")
    output = _finish(driver, home, timeout=120)
    assert driver.returncode == 1, output[-3000:]
    assert "fault injected by debug.fail_rank=1" in output
    _assert_nothing_left(driver, output)


def test_a_sigtermed_imagefolder_run_leaves_no_process_and_no_semaphore(home) -> None:
    driver = _start(home, "train.epochs=50")
    deadline = time.monotonic() + 90
    while "train:" not in _output(home) and driver.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)  # until the ranks train, their DataLoader workers up
    assert "train:" in _output(home), _output(home)
    time.sleep(1.0)
    driver.send_signal(signal.SIGTERM)
    output = _finish(driver, home, timeout=60)
    assert driver.returncode == 130, output[-3000:]
    _assert_nothing_left(driver, output)


def test_an_imagefolder_run_whose_driver_is_sigkilled_leaves_no_process(home) -> None:
    # nothing of the driver runs after SIGKILL: each rank sees its driver gone and ends its own group
    driver = _start(home, "train.epochs=50")
    deadline = time.monotonic() + 90
    while "train:" not in _output(home) and driver.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    assert "train:" in _output(home), _output(home)
    time.sleep(1.0)
    driver.send_signal(signal.SIGKILL)
    driver.wait(timeout=10)
    _assert_nothing_left(driver, _output(home))
