#!/usr/bin/env python
"""launcher=threads against launcher=local on the default job: throughput, start-up and memory.

One invocation runs, one after another, as subprocesses (``dlcomm train``, all in one temporary
DLCOMM_HOME whose MLflow store a first, unmeasured 1-step run creates, as a user's results folder
already has one; the default job: small CNN, Fashion-MNIST, batch 64 per worker, AllReduce-SGD,
``network=off``; ``train.max_steps=<steps>``, ``train.eval_size=1000``):

    a. 1 worker,  launcher=local
    b. N workers, launcher=local                                (N = --workers, default 16)
    c. N workers, launcher=threads (launcher.compute=auto, its default: parallel for this job)
    d. N workers, launcher=threads launcher.compute=serial       (--skip-serial drops it)

With ``--repeats R`` the set runs R times, interleaved (a b c d a b c d ...), and every figure is
the median over the repeats. Printed per run:

* samples/s: all workers' samples trained over the training wall time of the iterations, the run's
  own figures: ``rows(timings.csv) x batch / final/train_time_s`` (every row of timings.csv is
  one rank's batch; ``final/train_time_s`` is rank 0's wall time of the epochs' iterations, data
  loading included, evaluation excluded: the same formula as the run's ``epoch/samples_per_s``,
  over the whole run);
* ms/iter: ``final/train_time_s / final/steps``, the cluster's wall time per iteration;
* first iter s: from starting the command to the first iteration done. The subprocess's stderr is
  read as it comes and time-stamped; the figure is the moment the progress bar first shows
  ``n/<total>`` with n >= 1. tqdm redraws at most every 0.5 s, so when the first iteration ends
  within 0.5 s of the bar appearing the bar first shows a later n: the figure is late by at most
  0.5 s plus one iteration;
* wall s: the whole command, from starting it to its exit (interpreter start, data loading,
  evaluation, MLflow included);
* peak RSS and PSS (MiB) as the run reports them (``memory/peak_rss_mib``, ``memory/peak_pss_mib``,
  the numbers of its "peak memory" line): threads: the one process; local: RSS of rank 0 / the
  largest other rank, PSS summed over the ranks (what the job takes in all);
* the final test accuracy (the launchers train the same numbers on the CPU: they should agree).

Then the targets: threads / local samples/s at N workers >= 1.3; threads at N / 1 worker
samples/s >= 0.9; time to the first iteration at N workers, threads <= 10 s (local beside it).
Each is marked PASS or FAIL. The exit code is 0 whatever the figures; non-zero when a run fails
(its stderr's tail is printed).

    python scripts/bench_launchers.py                          # 16 workers, 60 steps: a few minutes on 2 cores
    python scripts/bench_launchers.py --workers 64 --repeats 3 --skip-serial
    python scripts/bench_launchers.py train.device=cuda        # extra overrides go to every run
"""

from __future__ import annotations

import argparse
import csv
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

from dlcomm.metrics import names
from dlcomm.metrics.batch import step_batch

TARGET_THREADS_OVER_LOCAL = 1.3
TARGET_THREADS_OVER_ONE = 0.9
GOAL_FIRST_ITER_S = 10.0
# the progress bar: "train:  33%|###    | 1/3 [...]" (redrawn after "\r", not on new lines)
BAR = re.compile(r"train:\s*\d+%\|[^|\r\n]*\|\s*(\d+)/(\d+)")
RUN_ID = re.compile(r"mlflow run ([0-9a-f]{32})")


@dataclass
class Variant:
    key: str
    label: str
    workers: int
    overrides: list[str]


@dataclass
class Figures:
    samples_s: float
    ms_iter: float
    first_iter_s: float
    wall_s: float
    rss_mib: tuple[float, float]  # threads: (process, process); local: (rank 0, largest other rank)
    pss_mib: float
    test_acc: float


class RunFailed(Exception):
    pass


def _variants(workers: int, skip_serial: bool) -> list[Variant]:
    variants = [
        Variant("a", "1 worker, local", 1, ["launcher=local", "nodes=1"]),
        Variant("b", f"{workers} workers, local", workers, ["launcher=local", f"nodes={workers}"]),
        Variant("c", f"{workers} workers, threads", workers, ["launcher=threads", f"nodes={workers}"]),
    ]
    if not skip_serial:
        variants.append(
            Variant(
                "d",
                f"{workers} workers, threads serial",
                workers,
                ["launcher=threads", "launcher.compute=serial", f"nodes={workers}"],
            )
        )
    return variants


def _drain(stream, chunks: list[bytes], stamps: list[float] | None) -> None:
    """Read ``stream`` as it comes; with ``stamps``, time-stamp the first chunk after which the
    progress bar shows an iteration done (stamps[0])."""
    fd = stream.fileno()
    while True:
        chunk = os.read(fd, 65536)
        if not chunk:
            return
        chunks.append(chunk)
        if stamps is not None and not stamps:
            now = time.perf_counter()
            text = b"".join(chunks).decode("utf-8", "replace")
            if any(int(m.group(1)) >= 1 for m in BAR.finditer(text)):
                stamps.append(now)


def _tail(text: str, lines: int = 30) -> str:
    # the bar's "\r" redraws make one long line: keep their last state
    return "\n".join(line.rsplit("\r", 1)[-1] for line in text.splitlines()[-lines:])


def _run(variant: Variant, steps: int, extra: list[str], home: str) -> Figures:
    command = [
        sys.executable,
        "-m",
        "dlcomm.cli",
        "train",
        *variant.overrides,
        f"train.max_steps={steps}",
        "train.eval_size=1000",
        *extra,
    ]
    # one results folder for the whole invocation (see the module docstring)
    env = dict(os.environ, DLCOMM_HOME=home)
    env.setdefault("PYTHONWARNINGS", "ignore")
    out: list[bytes] = []
    err: list[bytes] = []
    stamps: list[float] = []
    started = time.perf_counter()
    proc = subprocess.Popen(
        command, cwd=home, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    readers = [
        threading.Thread(target=_drain, args=(proc.stdout, out, None), daemon=True),
        threading.Thread(target=_drain, args=(proc.stderr, err, stamps), daemon=True),
    ]
    for reader in readers:
        reader.start()
    code = proc.wait()
    wall = time.perf_counter() - started
    for reader in readers:
        reader.join()
    stdout, stderr = (b"".join(chunks).decode("utf-8", "replace") for chunks in (out, err))
    if code != 0:
        raise RunFailed(
            f"run {variant.key} ({variant.label}) failed with exit code {code}: {' '.join(command)}\n"
            f"--- stdout (tail) ---\n{_tail(stdout)}\n--- stderr (tail) ---\n{_tail(stderr)}"
        )
    found = RUN_ID.findall(stdout + stderr)
    if not found or not stamps:
        raise RunFailed(
            f"run {variant.key} ({variant.label}): no {'mlflow run id' if not found else 'progress bar'} in its "
            f"output: {' '.join(command)}\n--- stdout (tail) ---\n{_tail(stdout)}\n--- stderr (tail) ---\n{_tail(stderr)}"
        )
    return _figures(Path(home), found[-1], variant, wall, stamps[0] - started)


def _figures(home: Path, run_id: str, variant: Variant, wall: float, first_iter: float) -> Figures:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{home / 'results' / 'mlflow.db'}")
    final = client.get_run(run_id).data.metrics
    run_dir = home / "results" / "runs" / run_id
    train = yaml.safe_load((run_dir / "config.yaml").read_text())["train"]
    batch = step_batch(train["batch_size"], train.get("comm_interval", 1))
    with open(run_dir / "timings.csv", newline="") as f:
        rows = sum(1 for _ in csv.DictReader(f))
    train_s, steps = final[names.FINAL_TRAIN_TIME], final[names.FINAL_STEPS]

    def per_rank(name: str) -> list[float]:
        return [m.value for m in sorted(client.get_metric_history(run_id, name), key=lambda m: m.step)]

    rss, pss = per_rank(names.PEAK_RSS_MIB), per_rank(names.PEAK_PSS_MIB)
    if variant.overrides[0] == "launcher=threads":  # every rank reports the one process
        rss_pair, pss_total = (max(rss), max(rss)), max(pss)
    else:
        rss_pair, pss_total = (rss[0], max(rss[1:], default=float("nan"))), sum(pss)
    return Figures(
        samples_s=rows * batch / train_s,
        ms_iter=1000 * train_s / steps,
        first_iter_s=first_iter,
        wall_s=wall,
        rss_mib=rss_pair,
        pss_mib=pss_total,
        test_acc=final.get(names.FINAL_TEST_ACC, float("nan")),
    )


def _median(runs: list[Figures]) -> Figures:
    med = statistics.median
    return Figures(
        samples_s=med(r.samples_s for r in runs),
        ms_iter=med(r.ms_iter for r in runs),
        first_iter_s=med(r.first_iter_s for r in runs),
        wall_s=med(r.wall_s for r in runs),
        rss_mib=(med(r.rss_mib[0] for r in runs), med(r.rss_mib[1] for r in runs)),
        pss_mib=med(r.pss_mib for r in runs),
        test_acc=med(r.test_acc for r in runs),
    )


def _check(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=16, help="N, the workers of runs b-d")
    parser.add_argument("--steps", type=int, default=60, help="train.max_steps of every run")
    parser.add_argument("--repeats", type=int, default=1, help="run the set this many times, interleaved; medians")
    parser.add_argument("--skip-serial", action="store_true", help="leave out run d (threads, compute=serial)")
    parser.add_argument("overrides", nargs="*", help="extra Hydra overrides for every run (e.g. train.device=cuda)")
    args = parser.parse_args()
    started = time.time()
    variants = _variants(args.workers, args.skip_serial)
    results: dict[str, list[Figures]] = {v.key: [] for v in variants}
    home = tempfile.mkdtemp(prefix="bench_launchers_")
    try:
        _run(
            Variant("w", "warm-up: creates the MLflow store", 1, ["launcher=threads", "nodes=1"]),
            1,
            args.overrides,
            home,
        )
        for repeat in range(args.repeats):
            for variant in variants:
                figures = _run(variant, args.steps, args.overrides, home)
                results[variant.key].append(figures)
                print(
                    f"  [{repeat + 1}/{args.repeats}] {variant.key}. {variant.label}: {figures.samples_s:,.0f} samples/s, "
                    f"first iteration {figures.first_iter_s:.1f} s, wall {figures.wall_s:.1f} s "
                    f"({time.time() - started:.0f} s)",
                    file=sys.stderr,
                    flush=True,
                )
    except RunFailed as failure:
        print(failure, file=sys.stderr)
        return 1
    finally:
        shutil.rmtree(home, ignore_errors=True)
    med = {key: _median(runs) for key, runs in results.items()}
    extra = f", overrides {' '.join(args.overrides)}" if args.overrides else ""
    print(
        f"default job (small CNN, Fashion-MNIST, batch 64 per worker, allreduce, network=off), {args.steps} steps, "
        f"train.eval_size=1000{extra}; {'median of ' + str(args.repeats) + ' interleaved runs' if args.repeats > 1 else '1 run'} each"
    )
    print(
        f"{'run':<36}{'samples/s':>11}{'ms/iter':>10}{'first iter s':>14}{'wall s':>9}"
        f"{'peak RSS MiB':>17}{'PSS MiB':>10}{'test acc':>10}"
    )
    for variant in variants:
        f = med[variant.key]
        if variant.overrides[0] == "launcher=threads":
            rss = f"{f.rss_mib[0]:.0f}"
        elif variant.workers == 1:
            rss = f"{f.rss_mib[0]:.0f}"
        else:
            rss = f"{f.rss_mib[0]:.0f} / {f.rss_mib[1]:.0f}"
        print(
            f"{variant.key}. {variant.label:<33}{f.samples_s:>11,.0f}{f.ms_iter:>10.1f}{f.first_iter_s:>14.1f}"
            f"{f.wall_s:>9.1f}{rss:>17}{f.pss_mib:>10.0f}{100 * f.test_acc:>9.2f}%"
        )
    print(
        "(peak RSS: threads the process, local rank 0 / largest other rank; PSS: threads the process, local summed over ranks)"
    )
    n = args.workers
    a, b, c = med["a"], med["b"], med["c"]
    over_local, over_one = c.samples_s / b.samples_s, c.samples_s / a.samples_s
    print(
        f"threads / local samples/s at {n} workers: {over_local:.2f} (target >= {TARGET_THREADS_OVER_LOCAL}) "
        f"{_check(over_local >= TARGET_THREADS_OVER_LOCAL)}"
    )
    print(
        f"threads at {n} workers / 1 worker samples/s: {over_one:.2f} (target >= {TARGET_THREADS_OVER_ONE}) "
        f"{_check(over_one >= TARGET_THREADS_OVER_ONE)}"
    )
    print(
        f"time to the first iteration at {n} workers: threads {c.first_iter_s:.1f} s (goal <= {GOAL_FIRST_ITER_S:g} s) "
        f"{_check(c.first_iter_s <= GOAL_FIRST_ITER_S)}, local {b.first_iter_s:.1f} s"
    )
    if "d" in med:
        d = med["d"]
        print(
            f"threads serial: / local {d.samples_s / b.samples_s:.2f}, / 1 worker {d.samples_s / a.samples_s:.2f}, "
            f"first iteration {d.first_iter_s:.1f} s (for comparison: not the default for this job)"
        )
    print(f"(wall time {time.time() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
