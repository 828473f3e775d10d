#!/usr/bin/env python
"""What the Channel costs under ``network=off``: AllReduce-SGD through the Channel against the
same bucketed allreduces called on ``torch.distributed`` directly.

Every rank holds two replicas of one model. "channel" is dlcomm's ``allreduce`` algorithm
(``overlap=false``) with the loop's ``begin_iteration``/``end_iteration``: every operation is
recorded and folded into the iteration's figures. "bare" packs the same buckets and calls
``torch.distributed.all_reduce`` itself, recording nothing. Buckets are one per parameter
tensor by default (``--bucket-mb 0``), the most operations per iteration, hence the most
recording. The two alternate iteration by iteration (``--block``), the order flipping every
round; the script prints rank 0's median iteration time of each, their ratio (target: <= 1.02)
and the median of the per-round ratios.

    python scripts/bench_channel_overhead.py                       # small CNN, 28x28, 2 ranks
    python scripts/bench_channel_overhead.py --model resnet18 --ranks 4 --iters 40
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F

from dlcomm.algorithms.allreduce import Allreduce, AllreduceConfig
from dlcomm.algorithms.buckets import make_buckets
from dlcomm.catalog import schema_of
from dlcomm.launch.harness import run_ranks, time_interleaved
from dlcomm.models import build_model
from dlcomm.train.loop import cross_entropy_loss, hooked_step

VARIANTS = ("bare", "channel")
SHAPES = {"small_cnn": (1, 28, 28), "resnet18": (3, 32, 32)}


def _bench_rank(cluster, channel, model_name: str, batch: int, iters: int, block: int, warmup: int, bucket_mb: float):
    torch.manual_seed(0)
    shape = SHAPES[model_name]
    base = build_model(schema_of("model", model_name)(name=model_name), shape, 10)
    steppers = {}

    bare_model = copy.deepcopy(base)
    bare_opt = torch.optim.SGD(bare_model.parameters(), lr=0.01, momentum=0.9)
    buckets = make_buckets([p for p in bare_model.parameters()], int(bucket_mb * 2**20))
    world = cluster.world_size

    def bare_step(step, x, y):
        bare_opt.zero_grad(set_to_none=True)
        F.cross_entropy(bare_model(x), y).backward()
        works = [dist.all_reduce(bucket.pack_grads(), async_op=True) for bucket in buckets]
        for bucket, work in zip(buckets, works):
            work.wait()
            bucket.buffer.div_(world)
            bucket.unpack_grads()
        bare_opt.step()

    steppers["bare"] = bare_step
    model = copy.deepcopy(base)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    algorithm = Allreduce(AllreduceConfig(overlap=False, bucket_mb=bucket_mb), cluster, channel)
    algorithm.setup(model, optimizer)

    def channel_step(step, x, y):
        channel.begin_iteration()
        hooked_step(algorithm, model, optimizer, cross_entropy_loss, x, y, step)
        channel.end_iteration()

    steppers["channel"] = channel_step
    generator = torch.Generator().manual_seed(cluster.rank)
    x = torch.randn(batch, *shape, generator=generator)
    y = torch.randint(0, 10, (batch,), generator=generator)
    times = time_interleaved(steppers, x, y, iters, block, warmup, channel.barrier)
    return {"times": times, "ops_per_iter": len(buckets)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", choices=list(SHAPES), default="small_cnn")
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--batch", type=int, default=64, help="per-rank batch size")
    parser.add_argument("--iters", type=int, default=400, help="measured iterations per variant")
    parser.add_argument("--block", type=int, default=1, help="iterations per variant per round")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--bucket-mb", type=float, default=0.0, help="0: one allreduce per parameter tensor")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    started = time.time()
    results = run_ranks(
        _bench_rank,
        args.ranks,
        args.model,
        args.batch,
        args.iters,
        args.block,
        args.warmup,
        args.bucket_mb,
        threads=1,
        timeout=3600,
    )
    rank0 = results[0]["times"]
    medians = {name: statistics.median(rank0[name]) for name in VARIANTS}
    ratio = medians["channel"] / medians["bare"]
    # each round's channel iterations over its bare ones: noise that lasts a round cancels
    paired = statistics.median(c / b for c, b in zip(rank0["channel"], rank0["bare"]))
    print(
        f"{args.model}, batch {args.batch} per rank, {args.ranks} ranks, 1 thread per rank, network=off, "
        f"{results[0]['ops_per_iter']} allreduces per iteration, {args.iters} iterations per variant"
    )
    print(f"{'variant':<10}{'median ms/iter':>16}{'n':>6}")
    for name in VARIANTS:
        print(f"{name:<10}{1000 * medians[name]:>16.2f}{len(rank0[name]):>6}")
    print(
        f"channel / bare: {ratio:.4f} (target <= 1.02); median of paired ratios {paired:.4f} (wall time {time.time() - started:.0f} s)"
    )
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(
            json.dumps(
                {
                    "args": {k: str(v) for k, v in vars(args).items()},
                    "median_s": medians,
                    "ratio": ratio,
                    "paired_ratio": paired,
                },
                indent=2,
            )
        )
    return 0 if ratio <= 1.02 else 1


if __name__ == "__main__":
    sys.exit(main())
