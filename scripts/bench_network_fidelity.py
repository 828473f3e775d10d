#!/usr/bin/env python
"""Fidelity of the network model: emulate against its own model, simulate against emulate.

For AllReduce-SGD and Local-SGD (period 2), 2, 4 and 8 ranks, presets ``eth_1g`` and ``lat_5ms``,
a ResNet-18-sized model (11.2 M parameters, 44.7 MB of fp32: by default an MLP of that size,
``--model resnet18`` for the real one; synthetic 3x32x32 batches of 2 per rank, plain SGD, one
fused bucket, one torch thread per rank, glibc told to keep freed memory), every configuration
runs twice on this machine:

(a) ``network.mode=emulate``: for every modelled operation, the measured time from the moment
    the last member entered it (its modelled start) to the moment ``wait`` returned, summed, over
    the sum of the cost model's durations. 1.00 means the wall clock showed exactly the modelled
    network; above 1 either the sleep overshoots or this machine's real transfer outlasted the
    model ("overruns" counts those operations).
(b) ``network.mode=simulate``: mean simulated time per iteration over the emulate-mode mean wall
    time per iteration. Simulate charges compute from a profile of one replica stepped alone with
    all this process's threads (``--compute profile``, the default, as ``network.compute=profile``)
    or each rank's CPU time (``--compute measured``); emulate charges wall time, so they differ by
    what ranks lose waiting for a core and, under the profile, by the threads a lone replica has;
    the compute and communication columns split both (the target is 10%).

    python scripts/bench_network_fidelity.py                 # 2, 4 and 8 ranks: 12 configurations, ~8 minutes
    python scripts/bench_network_fidelity.py --ranks 4 --presets eth_1g --iters 6
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch

from dlcomm.algorithms.allreduce import Allreduce, AllreduceConfig
from dlcomm.algorithms.local_sgd import LocalSGD, LocalSGDConfig
from dlcomm.comm.channel import Channel
from dlcomm.comm.clock import VirtualClock
from dlcomm.compose import compose
from dlcomm.config.typed import plain
from dlcomm.launch.harness import run_ranks
from dlcomm.models import build_model
from dlcomm.models.small import MLPConfig
from dlcomm.models.torchvision_models import ResNetConfig
from dlcomm.train.loop import cross_entropy_loss, hooked_step
from dlcomm.train.profile import ComputeProfile, ProfiledCompute
from dlcomm.train.profile_measure import measure_step

# "resnet18-mlp": an MLP 3072 -> 3640 -> 10 with ResNet-18's parameter count (11.22 M vs 11.18 M),
# hence the same traffic, but a tenth of its compute: the communication is what is measured.
MODELS = {
    "resnet18-mlp": MLPConfig(name="mlp", hidden=[3640]),
    "resnet18": ResNetConfig(name="resnet18"),
}
# One fused bucket (64 MiB) for the whole model: a second, tiny bucket would be modelled in
# microseconds, which 8 processes on 2 cores cannot keep up with (see docs/benchmarks.md).
ALGORITHMS = {
    "allreduce": lambda bucket_mb: (Allreduce, AllreduceConfig(bucket_mb=bucket_mb)),
    "local_sgd": lambda bucket_mb: (LocalSGD, LocalSGDConfig(period=2, bucket_mb=bucket_mb)),
}
# glibc returns every freed block above 32 MB to the kernel, so a fresh 45 MB gradient costs
# ~25 ms of page faults per step on this machine; keeping freed memory in the heap (what a
# caching allocator does on a GPU) leaves the step's compute to the arithmetic. Set for the
# spawned ranks, which read it at start-up.
LEAN_MALLOC = {"MALLOC_MMAP_MAX_": "0", "MALLOC_TRIM_THRESHOLD_": str(2**40)}


def _bench_rank(
    cluster,
    channel,
    model_name: str,
    algo: str,
    bucket_mb: float,
    batch: int,
    iters: int,
    warmup: int,
    profile: ComputeProfile | None = None,
) -> dict:
    """Per measured iteration: wall time, clock time, and the modelled operations' figures.
    ``profile``: a simulated clock charges it (network.compute=profile) instead of CPU time."""
    torch.manual_seed(0)
    model = build_model(MODELS[model_name], (3, 32, 32), 10)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)  # plain SGD: the least compute per step
    if profile is not None and channel.mode == "simulate":
        profiled = ProfiledCompute(profile, lambda step: 1.0, model)  # before the algorithm's gradient hooks
        channel = Channel(cluster, channel.network, VirtualClock(profiled))
        channel.compute_meter = profiled
    algorithm_class, config = ALGORITHMS[algo](bucket_mb)
    algorithm = algorithm_class(config, cluster, channel)
    algorithm.setup(model, optimizer)
    generator = torch.Generator().manual_seed(cluster.rank)
    x = torch.randn(batch, 3, 32, 32, generator=generator)
    y = torch.randint(0, 10, (batch,), generator=generator)
    rows = []
    channel.barrier()
    for step in range(warmup + iters):
        started = time.perf_counter()
        channel.begin_iteration()
        hooked_step(algorithm, model, optimizer, cross_entropy_loss, x, y, step, meter=channel.compute_meter)
        comm = channel.end_iteration()
        wall = time.perf_counter() - started
        if step >= warmup:
            rows.append(
                {
                    "wall_s": wall,
                    "clock_s": comm.clock_time_s,
                    "wall_compute_s": wall - comm.exposed_s,
                    "clock_compute_s": comm.clock_time_s - comm.clock_exposed_s,
                    "modelled_s": comm.modelled_s,
                    "measured_s": sum(op.end - op.ready for op in comm.records),
                    "overruns": comm.overruns,
                    "ops": comm.ops,
                }
            )
    return {"rows": rows, "params": sum(p.numel() for p in model.parameters())}


def _run(
    algo: str, ranks: int, preset: str, mode: str, args: argparse.Namespace, profile: ComputeProfile | None = None
) -> list[dict]:
    network = plain(compose([f"network={preset}", f"network.mode={mode}"]).network)
    results = run_ranks(
        _bench_rank,
        ranks,
        args.model,
        algo,
        args.bucket_mb,
        args.batch,
        args.iters,
        args.warmup,
        profile,
        network=network,
        threads=1,
        timeout=3600,
    )
    return results


def _profile(args: argparse.Namespace) -> ComputeProfile:
    """One replica stepped alone in this process (what network.compute=profile does: one thread, its CPU time)."""
    torch.manual_seed(0)
    model = build_model(MODELS[args.model], (3, 32, 32), 10)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    generator = torch.Generator().manual_seed(0)
    batch = (
        torch.randn(args.batch, 3, 32, 32, generator=generator),
        torch.randint(0, 10, (args.batch,), generator=generator),
    )
    device = torch.device("cpu")
    found = measure_step(model, optimizer, cross_entropy_loss, itertools.repeat(batch), device, check_load=False)
    return ComputeProfile.of(found, device)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--algos", nargs="+", default=list(ALGORITHMS))
    parser.add_argument("--ranks", nargs="+", type=int, default=[2, 4, 8])
    parser.add_argument("--presets", nargs="+", default=["eth_1g", "lat_5ms"])
    parser.add_argument("--model", choices=list(MODELS), default="resnet18-mlp")
    parser.add_argument("--batch", type=int, default=2, help="per-rank batch size")
    parser.add_argument("--bucket-mb", type=float, default=64.0, help="bucket size of both algorithms (MiB)")
    parser.add_argument("--default-malloc", action="store_true", help="leave glibc's malloc settings alone")
    parser.add_argument("--iters", type=int, default=10, help="measured iterations per run")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument(
        "--compute",
        choices=["profile", "measured"],
        default="profile",
        help="simulate's compute: a profile of one replica alone (the default) or each rank's CPU time",
    )
    args = parser.parse_args()
    if not args.default_malloc:
        os.environ.update(LEAN_MALLOC)
    profile = _profile(args) if args.compute == "profile" else None
    if profile is not None:
        print(f"compute profile: {profile.describe()}", flush=True)
    cores = os.cpu_count() or 1
    print(
        f"{args.model}, synthetic 3x32x32, batch {args.batch} per rank, 1 thread per rank, {cores} cores, "
        f"bucket {args.bucket_mb:g} MiB, {args.iters} measured iterations after {args.warmup} warm-up, gloo over "
        f"loopback, {'default' if args.default_malloc else 'caching'} malloc",
        flush=True,
    )
    header = (
        f"{'algo':<10}{'ranks':>6}{'preset':>9} | {'modelled':>9}{'measured':>9}{'(a) ratio':>10}{'overruns':>9} |"
        f" {'emulate':>8}{'simulate':>9}{'(b) ratio':>10} | {'compute: emu':>12}{'sim':>7} | {'comm: emu':>9}{'sim':>7}  {'ranks/core':>10}"
    )
    print(header + "\n" + "-" * len(header), flush=True)
    started = time.time()
    figures = []
    for algo, ranks, preset in itertools.product(args.algos, args.ranks, args.presets):
        emulate = [row for result in _run(algo, ranks, preset, "emulate", args) for row in result["rows"]]
        simulate = [row for result in _run(algo, ranks, preset, "simulate", args, profile) for row in result["rows"]]
        modelled = sum(row["modelled_s"] for row in emulate)
        measured = sum(row["measured_s"] for row in emulate)
        emulate_iter = statistics.fmean(row["wall_s"] for row in emulate)
        simulate_iter = statistics.fmean(row["clock_s"] for row in simulate)
        figure = {
            "algo": algo,
            "ranks": ranks,
            "preset": preset,
            "ranks_per_core": ranks / cores,
            "modelled_ms_per_iter": 1000 * modelled / len(emulate),
            "measured_ms_per_iter": 1000 * measured / len(emulate),
            "a_ratio": measured / modelled,
            "overruns": sum(row["overruns"] for row in emulate),
            "ops": sum(row["ops"] for row in emulate),
            "emulate_ms_per_iter": 1000 * emulate_iter,
            "simulate_ms_per_iter": 1000 * simulate_iter,
            "b_ratio": simulate_iter / emulate_iter,
            "emulate_compute_ms_per_iter": 1000 * statistics.fmean(row["wall_compute_s"] for row in emulate),
            "simulate_compute_ms_per_iter": 1000 * statistics.fmean(row["clock_compute_s"] for row in simulate),
        }
        figures.append(figure)
        print(
            f"{algo:<10}{ranks:>6}{preset:>9} | {figure['modelled_ms_per_iter']:>9.1f}{figure['measured_ms_per_iter']:>9.1f}"
            f"{figure['a_ratio']:>10.3f}{figure['overruns']:>5}/{figure['ops']:<3} | {figure['emulate_ms_per_iter']:>8.1f}"
            f"{figure['simulate_ms_per_iter']:>9.1f}{figure['b_ratio']:>10.3f} | {figure['emulate_compute_ms_per_iter']:>12.1f}"
            f"{figure['simulate_compute_ms_per_iter']:>7.1f} | {figure['emulate_ms_per_iter'] - figure['emulate_compute_ms_per_iter']:>9.1f}"
            f"{figure['simulate_ms_per_iter'] - figure['simulate_compute_ms_per_iter']:>7.1f}  {figure['ranks_per_core']:>10.1f}",
            flush=True,
        )
    a_ok = all(0.95 <= f["a_ratio"] <= 1.05 for f in figures)
    b_figures = [f for f in figures if f["ranks_per_core"] <= 2]
    b_ok = all(0.9 <= f["b_ratio"] <= 1.1 for f in b_figures)
    print(f"(a) emulate measured/modelled within 0.95-1.05: {'yes' if a_ok else 'NO'} (all {len(figures)} runs)")
    print(
        f"(b) simulate/emulate within 0.90-1.10 at <= 2 ranks per core: {'yes' if b_ok else 'NO'} ({len(b_figures)} runs)"
    )
    print(f"(ms per iteration, means over ranks and iterations; wall time {time.time() - started:.0f} s)")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(
            json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, "figures": figures}, indent=2)
        )
    return 0 if a_ok and b_ok else 1


if __name__ == "__main__":
    sys.exit(main())
