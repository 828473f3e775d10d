#!/usr/bin/env python
"""The MLflow UI command's cost: time to its first answer and the memory of its processes.

Starts ``mlflow ui`` on a store as MLflow's bare command does (``default``), with telemetry off
and one worker, and as the README's command does (``light``: also without MLflow's job runner),
side by side, ``--repeat`` times each, alternating. For each start it prints the seconds until the UI's page (``/``) first
answers 200 (polled every 0.1 s), then, after ``--settle`` seconds, the number of processes in the
command's tree and their summed RSS and PSS (``/proc/<pid>/smaps_rollup``: PSS splits the pages
the processes share). Stops the tree after each start.

    python scripts/bench_mlflow_ui.py --store sqlite:////tmp/uisweep/results/mlflow.db
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

VARIANTS = {
    "default": ({}, []),  # MLflow's defaults: telemetry on, its default workers, its job runner
    "telemetry off, 1 worker": ({"MLFLOW_DISABLE_TELEMETRY": "true"}, ["--workers", "1"]),
    # and no job runner (GenAI jobs: judges, issue detection; 7 huey consumers): the README's command
    "light": ({"MLFLOW_DISABLE_TELEMETRY": "true", "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}, ["--workers", "1"]),
}


def tree(root: int) -> list[int]:
    """``root`` and every process below it."""
    children: dict[int, list[int]] = {}
    for status in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = status.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(status.parent.name))
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo += children.get(pid, [])
    return found


def memory_mib(pids: list[int]) -> tuple[float, float]:
    rss = pss = 0
    for pid in pids:
        try:
            for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
                if line.startswith("Rss:"):
                    rss += int(line.split()[1])
                elif line.startswith("Pss:"):
                    pss += int(line.split()[1])
        except OSError:
            pass
    return rss / 1024, pss / 1024


def start(variant: str, store: str, port: int, settle: float, timeout: float) -> dict:
    env, extra = VARIANTS[variant]
    mlflow = str(Path(sys.executable).with_name("mlflow"))
    command = [mlflow, "ui", "--backend-store-uri", store, "--port", str(port), *extra]
    began = time.monotonic()
    process = subprocess.Popen(
        command,
        env={**os.environ, **env} if env else {k: v for k, v in os.environ.items() if k != "MLFLOW_DISABLE_TELEMETRY"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    answered = float("nan")
    try:
        while time.monotonic() - began < timeout:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=2) as answer:
                    if answer.status == 200:
                        answered = time.monotonic() - began
                        break
            except OSError:
                time.sleep(0.1)
        time.sleep(settle)
        pids = tree(process.pid)
        rss, pss = memory_mib(pids)
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    return {"answer_s": answered, "processes": len(pids), "rss_mib": rss, "pss_mib": pss}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", required=True, help="a tracking URI, e.g. sqlite:////path/results/mlflow.db")
    parser.add_argument("--port", type=int, default=5077)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument(
        "--settle", type=float, default=5.0, help="seconds after the first answer before measuring memory"
    )
    parser.add_argument("--timeout", type=float, default=120.0)
    args = parser.parse_args()
    results: dict[str, list[dict]] = {name: [] for name in VARIANTS}
    for _ in range(args.repeat):
        for name in VARIANTS:
            results[name].append(start(name, args.store, args.port, args.settle, args.timeout))
            row = results[name][-1]
            print(
                f"{name:24s} first answer {row['answer_s']:5.1f} s | {row['processes']:2d} processes | "
                f"RSS {row['rss_mib']:6.0f} MiB | PSS {row['pss_mib']:6.0f} MiB",
                flush=True,
            )
    for name, rows in results.items():
        print(
            f"{name}: median first answer {statistics.median(r['answer_s'] for r in rows):.1f} s, "
            f"PSS {statistics.median(r['pss_mib'] for r in rows):.0f} MiB, "
            f"{statistics.median(r['processes'] for r in rows):.0f} processes ({len(rows)} starts)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
