#!/usr/bin/env python
"""Overhead of dlcomm's AllReduce-SGD against torch's DistributedDataParallel.

ResNet-18 (CIFAR stem) on synthetic 32x32 batches, 4 ranks on this machine (gloo). Every rank
holds three replicas of the same model: one wrapped in DDP, one driven by dlcomm's
``allreduce`` with ``overlap=false`` and one with ``overlap=true`` (same bucket size as DDP).
They are measured side by side in one job: rounds of ``--block`` iterations per variant, the
variant order rotating every round, so machine noise hits all three alike. The iteration time
of a variant is rank 0's wall time of forward, backward, gradient averaging and optimizer step
(the allreduce synchronises the ranks); the script prints the median over all measured
iterations and the ratio ours / DDP.

    python scripts/bench_allreduce_overhead.py            # defaults: >= 30 iterations each
    python scripts/bench_allreduce_overhead.py --iters 60 --batch 16
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from dlcomm.algorithms.allreduce import Allreduce, AllreduceConfig
from dlcomm.launch.harness import run_ranks, time_interleaved
from dlcomm.models import build_model
from dlcomm.models.torchvision_models import ResNetConfig
from dlcomm.train.loop import cross_entropy_loss, hooked_step

VARIANTS = ("ddp", "ours overlap=false", "ours overlap=true")


def _bench_rank(cluster, channel, batch: int, iters: int, block: int, warmup: int, bucket_mb: float) -> dict:
    from torch.nn.parallel import DistributedDataParallel

    torch.manual_seed(0)
    base = build_model(ResNetConfig(name="resnet18", cifar_stem=True), (3, 32, 32), 10)
    steppers = {}

    ddp = DistributedDataParallel(copy.deepcopy(base), bucket_cap_mb=bucket_mb)
    ddp_opt = torch.optim.SGD(ddp.parameters(), lr=0.01, momentum=0.9)

    def ddp_step(step, x, y):
        ddp_opt.zero_grad(set_to_none=True)
        F.cross_entropy(ddp(x), y).backward()
        ddp_opt.step()

    steppers["ddp"] = ddp_step
    for overlap in (False, True):
        model = copy.deepcopy(base)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        algorithm = Allreduce(AllreduceConfig(overlap=overlap, bucket_mb=bucket_mb), cluster, channel)
        algorithm.setup(model, optimizer)

        def ours_step(step, x, y, model=model, optimizer=optimizer, algorithm=algorithm):
            channel.begin_iteration()
            hooked_step(algorithm, model, optimizer, cross_entropy_loss, x, y, step)
            channel.end_iteration()

        steppers[f"ours overlap={str(overlap).lower()}"] = ours_step

    generator = torch.Generator().manual_seed(cluster.rank)
    x = torch.randn(batch, 3, 32, 32, generator=generator)
    y = torch.randint(0, 10, (batch,), generator=generator)
    times = time_interleaved(steppers, x, y, iters, block, warmup, channel.barrier)
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--batch", type=int, default=8, help="per-rank batch size")
    parser.add_argument("--iters", type=int, default=30, help="measured iterations per variant (>= 30)")
    parser.add_argument("--block", type=int, default=5, help="iterations per variant per round")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--bucket-mb", type=float, default=25.0)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    threads = max(1, (os.cpu_count() or 1) // args.ranks)
    print(
        f"ResNet-18 (CIFAR stem), synthetic 3x32x32, {args.ranks} ranks x batch {args.batch}, gloo, "
        f"{threads} thread(s) per rank, bucket {args.bucket_mb} MiB, {args.iters} iterations per variant",
        flush=True,
    )
    started = time.time()
    results = run_ranks(
        _bench_rank,
        args.ranks,
        args.batch,
        args.iters,
        args.block,
        args.warmup,
        args.bucket_mb,
        threads=threads,
        timeout=3600,
    )
    rank0 = results[0]
    medians = {name: statistics.median(rank0[name]) for name in VARIANTS}
    print(f"{'variant':<22}{'median ms/iter':>16}{'ratio to DDP':>14}{'n':>6}")
    for name in VARIANTS:
        print(f"{name:<22}{1000 * medians[name]:>16.1f}{medians[name] / medians['ddp']:>14.3f}{len(rank0[name]):>6}")
    print(f"(wall time {time.time() - started:.0f} s)")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(
            json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, "median_s": medians}, indent=2)
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
