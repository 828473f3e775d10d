#!/usr/bin/env python
"""Simulated time under ``launcher=threads`` against ``launcher=local`` and against one worker.

``network.mode=simulate`` charges each rank its measured compute (CPU time, see
:mod:`dlcomm.comm.clock`) plus the modelled communication. The default job (small CNN,
Fashion-MNIST, batch 64, AllReduce-SGD) on the ``eth_1g`` preset, ``--steps`` iterations (the
first ``--skip`` dropped: warm-up), every configuration run in one invocation of this script:

(a) compute: the mean simulated compute per iteration (``sim_compute_s``) at ``--workers`` (16)
    workers under ``launcher=threads`` (``compute=auto``: serial under simulate), over the same at
    one worker (``launcher=local``). Target: within 5%. Both have the machine's cores to
    themselves while they compute, so both measure compute as wall time.
(b) the mean simulated time per iteration (``sim_time_s``) at 4 workers (2 per core here) under
    ``launcher=threads launcher.compute=parallel`` over the same under ``launcher=local``: both
    give each rank one torch thread and measure the thread's CPU time. Target: within 5%. Serial
    turns (the default under simulate) beside it for comparison: each rank then computes with
    every core, so its compute, and the simulated time, are those of a rank alone on this machine
    (as in (a)), not of one of 4 ranks sharing 2 cores.

    python scripts/bench_threads_simulate.py                    # ~5 minutes on 2 cores
    python scripts/bench_threads_simulate.py --workers 8 --steps 20
"""

from __future__ import annotations

import argparse

import pandas as pd

from benchlib import train_timings


def run(overrides: list[str]) -> pd.DataFrame:
    """One ``dlcomm train`` in a fresh results folder; its timings.csv."""
    return train_timings(overrides, script="bench_threads_simulate")


def per_iteration(timings: pd.DataFrame, column: str, skip: int) -> float:
    """Mean over steps (after ``skip``) of the mean over ranks of ``column``, in ms."""
    kept = timings[timings["step"] >= skip]
    return 1000 * float(kept.groupby("step")[column].mean().mean())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=16)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--skip", type=int, default=5, help="first iterations left out (warm-up)")
    args = parser.parse_args()
    common = ["network=eth_1g", "network.mode=simulate", f"train.max_steps={args.steps}", "train.eval_size=1000"]
    configurations = {
        "1 worker, local": ["nodes=1", "launcher=local"],
        f"{args.workers} workers, threads serial": [f"nodes={args.workers}", "launcher=threads"],
        f"{args.workers} workers, threads parallel": [f"nodes={args.workers}", "launcher=threads",
                                                      "launcher.compute=parallel"],
        "4 workers, local": ["nodes=4", "launcher=local"],
        "4 workers, threads parallel": ["nodes=4", "launcher=threads", "launcher.compute=parallel"],
        "4 workers, threads serial": ["nodes=4", "launcher=threads"],
    }
    rows = {}
    for label, overrides in configurations.items():
        print(f"running {label} ...", flush=True)
        timings = run([*common, *overrides])
        rows[label] = {column: per_iteration(timings, column, args.skip)
                       for column in ("sim_compute_s", "sim_comm_exposed_s", "sim_time_s", "time_s")}
    table = pd.DataFrame(rows).T.rename(columns=lambda c: c.replace("_s", "") + " ms")
    print(table.round(2).to_string())
    one = rows["1 worker, local"]["sim_compute_s"]
    serial = rows[f"{args.workers} workers, threads serial"]["sim_compute_s"]
    parallel = rows[f"{args.workers} workers, threads parallel"]["sim_compute_s"]
    local4 = rows["4 workers, local"]["sim_time_s"]
    parallel4, serial4 = rows["4 workers, threads parallel"]["sim_time_s"], rows["4 workers, threads serial"]["sim_time_s"]
    checks = [
        (f"(a) simulated compute/iter, {args.workers} workers threads serial / 1 worker", serial / one),
        (f"    (for comparison) {args.workers} workers threads parallel / 1 worker", parallel / one),
        ("(b) simulated time/iter, 4 workers threads parallel / local", parallel4 / local4),
        ("    (for comparison) 4 workers threads serial / local", serial4 / local4),
    ]
    for label, ratio in checks:
        verdict = "" if label.startswith("    ") else ("PASS" if abs(ratio - 1) <= 0.05 else "FAIL")
        print(f"{label}: {ratio:.3f} (target 1 +- 0.05) {verdict}")


if __name__ == "__main__":
    main()
