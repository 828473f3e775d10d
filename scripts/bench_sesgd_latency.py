#!/usr/bin/env python
"""SESGD against Ring-SGD (AllReduce) as the network latency grows: the SESGD paper's Fig. 5.

16 workers, one per node, DenseNet-121 (torchvision, 7.98 M parameters in 364 tensors; synthetic
3x32x32 batches of 2 per worker), ``network.mode=simulate`` at 1 Gb/s between nodes with latency
0.1, 0.5, 1, 2 and 5 ms. Compute is each rank's CPU time, communication the cost model's, so the
figures are those of a 16-machine cluster whatever this machine's core count. Each algorithm runs
in one set of 16 processes; the network model is swapped between latencies. Printed: the mean
simulated time per iteration of each and Ring / SESGD, layer-wise (one message per tensor, as the
paper's Ring-SGD and SESGD communicate) and, beside it, with fused 25 MB buckets (ours, not the
paper's), plus the cost model's prediction of the communication alone:

    ring  (per tensor):  2 (n - 1) (alpha + S_l / (n beta))   summed over the L tensors
    SESGD (per tensor):  2 (g - 1) (alpha + S_l / (g beta))   g = n / groups = 4

    python scripts/bench_sesgd_latency.py            # ~6 minutes on 2 cores
    python scripts/bench_sesgd_latency.py --iters 2 --latencies 0.1 5
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import torch

from dlcomm.algorithms.registry import ALGORITHMS
from dlcomm.comm.network import NetworkModel
from dlcomm.compose import compose
from dlcomm.config.schema import ModelConfig, NetworkConfig
from dlcomm.config.typed import plain
from dlcomm.launch.harness import run_ranks
from dlcomm.models import build_model
from dlcomm.train.loop import cross_entropy_loss, hooked_step

CONFIGS = {
    "ring/layer": ("allreduce", {"bucket_mb": 0.0}),
    "sesgd/layer": ("sesgd", {"groups": 4, "bucket_mb": 0.0}),
    "ring/fused": ("allreduce", {"bucket_mb": 25.0}),
    "sesgd/fused": ("sesgd", {"groups": 4, "bucket_mb": 25.0}),
}


def network(latency_ms: float) -> NetworkConfig:
    return compose(["network=lat_5ms", f"network.inter.latency_ms={latency_ms}", "nodes=16"]).network


def _rank(
    cluster, channel, name: str, knobs: dict, networks: list[NetworkConfig], iters: int, batch: int
) -> list[list[tuple[float, float, float]]]:
    torch.manual_seed(0)
    model = build_model(ModelConfig(name="densenet121"), (3, 32, 32), 10)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    cls = ALGORITHMS.get(name)
    algorithm = cls(cls.Config(**knobs), cluster, channel, seed=0)
    algorithm.setup(model, optimizer)
    generator = torch.Generator().manual_seed(cluster.rank)
    x, y = torch.randn(batch, 3, 32, 32, generator=generator), torch.randint(0, 10, (batch,), generator=generator)
    per_latency, step = [], 0
    for net in networks:
        channel.network = NetworkModel.from_config(net, cluster.layout)
        channel.barrier()
        times = []
        for i in range(iters + 1):  # the first iteration of each latency is a warm-up
            channel.begin_iteration()
            hooked_step(algorithm, model, optimizer, cross_entropy_loss, x, y, step)
            stats = channel.end_iteration()
            step += 1
            if i:
                times.append((stats.clock_time_s, stats.clock_exposed_s, stats.modelled_s))
        per_latency.append(times)
    return per_latency


def predicted(kind: str, sizes: list[int], n: int, group: int, alpha: float, beta: float) -> float:
    members = n if kind.startswith("ring") else group
    return sum(2 * (members - 1) * (alpha + s / (members * beta)) for s in sizes)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--latencies", type=float, nargs="+", default=[0.1, 0.5, 1.0, 2.0, 5.0])
    parser.add_argument("--iters", type=int, default=3)
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--configs", nargs="+", default=list(CONFIGS))
    args = parser.parse_args()
    nets = [network(latency) for latency in args.latencies]
    started = time.time()
    means: dict[str, list[tuple[float, float]]] = {}
    for label in args.configs:
        name, knobs = CONFIGS[label]
        results = run_ranks(
            _rank, 16, name, knobs, nets, args.iters, args.batch, network=plain(nets[0]), threads=1, timeout=3600
        )
        means[label] = [
            (
                statistics.mean(t for rank in results for t, _, _ in rank[i]),
                statistics.mean(e for rank in results for _, e, _ in rank[i]),
            )
            for i in range(len(nets))
        ]
        print(f"  {label}: done ({time.time() - started:.0f} s)", file=sys.stderr, flush=True)
    model = build_model(ModelConfig(name="densenet121"), (3, 32, 32), 10)
    tensors = [p.numel() * 4 for p in model.parameters()]
    print(
        f"16 workers (16 nodes), DenseNet-121 ({sum(tensors) / 4e6:.2f} M parameters, {len(tensors)} tensors), "
        f"1 Gb/s, simulate; s per iteration (exposed communication in brackets)"
    )
    header = f"{'latency':>8} | " + " | ".join(f"{label:>20}" for label in args.configs)
    if {"ring/layer", "sesgd/layer"} <= set(means):
        header += " | ring/SESGD layer | predicted comm ratio"
    if {"ring/fused", "sesgd/fused"} <= set(means):
        header += " | ring/SESGD fused"
    print(header)
    for i, latency in enumerate(args.latencies):
        row = f"{latency:>6} ms | " + " | ".join(
            f"{means[label][i][0]:>9.3f} ({means[label][i][1]:>7.3f})" for label in args.configs
        )
        if {"ring/layer", "sesgd/layer"} <= set(means):
            alpha, beta = latency / 1000, 1e9 / 8
            ratio = predicted("ring", tensors, 16, 4, alpha, beta) / predicted("sesgd", tensors, 16, 4, alpha, beta)
            row += f" | {means['ring/layer'][i][0] / means['sesgd/layer'][i][0]:>16.2f} | {ratio:>20.2f}"
        if {"ring/fused", "sesgd/fused"} <= set(means):
            row += f" | {means['ring/fused'][i][0] / means['sesgd/fused'][i][0]:>16.2f}"
        print(row)
    print(f"({time.time() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
