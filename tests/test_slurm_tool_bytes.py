"""SLURM's tools read the way doctor reads nvidia-smi (dlcomm.tools): output that is not UTF-8 (a
localised message, a stray byte) is replaced text, never a UnicodeDecodeError in the middle of a
run's bookkeeping. Before: squeue's and sinfo's readers decoded strictly and raised."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from dlcomm.launch.job_end import down_hosts
from dlcomm.launch.squeue import live_job_ids


@pytest.fixture
def odd_tools(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``squeue`` and ``sinfo`` on PATH that print a byte (octal 377) no UTF-8 text holds beside real answers."""
    for name, answer in (("squeue", r"4242 4242\n\377\376 warnung\n"), ("sinfo", r"node1 down*\n\377 node2 idle\n")):
        tool = tmp_path / name
        tool.write_text(f"#!/bin/sh\nprintf '{answer}'\n")
        tool.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")


def test_squeue_printing_bytes_that_are_not_utf8_still_lists_the_jobs(odd_tools) -> None:
    assert {"4242"} <= live_job_ids()


def test_sinfo_printing_bytes_that_are_not_utf8_still_names_the_down_host(odd_tools) -> None:
    assert down_hosts("node[1-2]") == ["node1"]
