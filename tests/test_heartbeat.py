"""scripts/heartbeat.py: make setup's pip installs never leave a silent stretch."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "heartbeat.py"
QUIET = "import sys, time; print('Collecting torch', flush=True); print('Downloading torch (900 MB)', flush=True); time.sleep(2.6); sys.exit(3)"


def test_a_quiet_stretch_gets_a_line_every_interval_and_the_exit_status_passes_through() -> None:
    began = time.monotonic()
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--every", "1", "--show", "^Collecting", "--", sys.executable, "-c", QUIET],
        capture_output=True,
        text=True,
        timeout=60,
    )
    lines = result.stdout.splitlines()
    assert result.returncode == 3
    assert lines[0] == "Collecting torch"  # shown; the Downloading line is not, but is what the heartbeat names
    beats = [line for line in lines[1:] if line.startswith("  ... ")]
    assert len(beats) == 2 and beats == lines[1:], lines  # at 1 s and 2 s of silence, nothing else
    assert all(beat.endswith("(last: Downloading torch (900 MB))") for beat in beats)
    assert time.monotonic() - began < 30


def test_a_command_that_talks_gets_no_heartbeat() -> None:
    talk = "import time\nfor i in range(6):\n    print('Collecting', i, flush=True); time.sleep(0.3)"
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--every", "1", "--", sys.executable, "-c", talk],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0 and result.stdout.splitlines() == [f"Collecting {i}" for i in range(6)]
