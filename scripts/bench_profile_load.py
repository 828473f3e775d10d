"""Does other work on the machine move a compute profile? (issue 56, item 1). Side by side in one
run, for each workload: the profile measured alone, beside one CPU hog per core, and beside two hogs
per core (a hog: a process spinning a Python loop), with dlcomm's measurement (one thread, timed by
its own CPU time, fastest windows: :mod:`dlcomm.train.profile_measure`) and, for the contrast, the
measurement a careful user would write by hand and dlcomm used before: every core's threads, the
wall clock, the median step.

    python scripts/bench_profile_load.py [--workloads default resnet18] [--baseline-steps 20]

Prints one table: ms per step, the ratio to the same method's figure alone, the windows' spread,
the measuring thread's CPU share, and whether dlcomm would refuse to cache it (too busy).
Targets: one hog per core within 10% of alone; two per core within 25% or refused.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

import torch
from tabulate import tabulate

from dlcomm.compose import compose
from dlcomm.data import build_dataset
from dlcomm.train.profile import _batches, measure
from dlcomm.train.profile_measure import busy_reason, cores_here

WORKLOADS = {
    "default": [],  # the README's `make train` job: small_cnn, Fashion-MNIST, batch 64
    "resnet18": ["model=resnet18", "model.cifar_stem=true", "dataset=synthetic", "dataset.shape=[3,32,32]"],
}


def _hogs(count: int) -> list[subprocess.Popen]:
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]
    time.sleep(1.0)  # running before the measurement starts
    return hogs


def _baseline(cfg, data, steps: int) -> float:
    """The hand-written measurement: all cores' threads, wall clock, median of ``steps`` steps after 3."""
    from dlcomm.tasks import build_task
    from dlcomm.train.optim import build_optimizer

    previous = torch.get_num_threads()
    torch.set_num_threads(cores_here())
    try:
        task = build_task(cfg)
        torch.manual_seed(cfg.seed)
        model = task.build_model(cfg.model, data)
        optimizer = build_optimizer(cfg.optim, task.param_groups(model, cfg.optim))
        batches = _batches(data, cfg.train.batch_size, cfg.seed)
        times = []
        for step in range(steps + 3):
            inputs, labels = next(batches)
            start = time.perf_counter()
            optimizer.zero_grad()
            task.loss(model, inputs, labels).backward()
            optimizer.step()
            if step >= 3:
                times.append(time.perf_counter() - start)
        return statistics.median(times)
    finally:
        torch.set_num_threads(previous)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", nargs="+", default=list(WORKLOADS), choices=list(WORKLOADS))
    parser.add_argument("--baseline-steps", type=int, default=20)
    args = parser.parse_args()
    cores = cores_here()
    rows = []
    for name in args.workloads:
        cfg = compose(WORKLOADS[name])
        data = build_dataset(cfg.dataset)
        alone: dict[str, float] = {}
        for per_core in (0, 1, 2):
            hogs = _hogs(per_core * cores)
            try:
                started = time.perf_counter()
                profile = measure(cfg, data, torch.device("cpu"), check_load=False)
                took = time.perf_counter() - started
                baseline = _baseline(cfg, data, args.baseline_steps)
            finally:
                for hog in hogs:
                    hog.kill()
                    hog.wait()
            alone.setdefault("dlcomm", profile.step_s)
            alone.setdefault("baseline", baseline)
            refused = busy_reason(profile)
            rows.append(
                [
                    profile.workload,
                    f"{per_core} per core ({per_core * cores})" if per_core else "alone",
                    f"{profile.step_s * 1e3:.2f}",
                    f"{profile.step_s / alone['dlcomm']:.3f}",
                    f"{profile.spread:.1%}",
                    f"{profile.cpu_share:.0%}",
                    f"refused: {refused}" if refused else "cached",
                    f"{took:.0f}",
                    f"{baseline * 1e3:.2f}",
                    f"{baseline / alone['baseline']:.3f}",
                ]
            )
            print(
                f"  {name}, {per_core} hog(s) per core: {rows[-1][2]} ms (x{rows[-1][3]}), hand-written {rows[-1][8]} ms (x{rows[-1][9]})",
                flush=True,
            )
    print(f"\n{os.uname().nodename}, {cores} cores, torch {torch.__version__}")
    print(
        tabulate(
            rows,
            headers=[
                "workload",
                "CPU hogs",
                "dlcomm ms/step",
                "/ alone",
                "spread",
                "CPU share",
                "dlcomm would",
                "took s",
                "all threads, wall, median ms",
                "/ alone",
            ],
            disable_numparse=True,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
