#!/usr/bin/env python
"""Node-based communication against AllReduce-SGD: the node-based paper's Table III setting, in
simulated time per epoch.

Clusters of nodes x workers_per_node = 2x2, 4x2 and 4x4; ``eth_10g`` between nodes (50 us, 10 Gb/s)
and the fast intra-node link (2 us, 800 Gb/s); ResNet-18 (CIFAR stem, 11.2 M parameters, synthetic
3x32x32 batches of 4 per worker); an "epoch" of K iterations (default 16) with K' = K, i.e. one
global consensus per epoch, as the acceptance asks. Each run is ``network.mode=simulate``: compute
is each rank's CPU time, communication the cost model's. Printed per cluster: simulated seconds per
epoch of allreduce, allreduce_hier and node_based, and allreduce / node_based. The cost model's
view of the communication alone (S bytes of gradients, n workers, M nodes, R per node):

    allreduce:   K * ring over n ranks with the inter-node links, 2(n-1)(alpha + S/(n beta))
    node_based:  K * ring over R ranks inside the node  +  1 * ring over n ranks (the consensus)

    python scripts/bench_node_based.py              # ~6 minutes on 2 cores
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

import torch

from dlcomm.algorithms.registry import ALGORITHMS as REGISTERED
from dlcomm.compose import compose
from dlcomm.config.typed import plain
from dlcomm.launch.harness import run_ranks
from dlcomm.models import build_model
from dlcomm.models.torchvision_models import ResNetConfig
from dlcomm.train.loop import cross_entropy_loss, hooked_step

SHAPES = [(2, 2), (4, 2), (4, 4)]
ALGORITHMS = ["allreduce", "allreduce_hier", "node_based"]


def _rank(cluster, channel, name: str, per_epoch: int, batch: int) -> tuple[float, float]:
    torch.manual_seed(0)
    model = build_model(ResNetConfig(name="resnet18", cifar_stem=True), (3, 32, 32), 10)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    cls = REGISTERED.get(name)
    knobs: dict[str, Any] = {"k_prime": per_epoch} if name == "node_based" else {}
    algorithm = cls(cls.Config(**knobs), cluster, channel, seed=0)
    algorithm.plan(per_epoch, per_epoch)
    algorithm.setup(model, optimizer)
    generator = torch.Generator().manual_seed(cluster.rank)
    x, y = torch.randn(batch, 3, 32, 32, generator=generator), torch.randint(0, 10, (batch,), generator=generator)
    channel.barrier()
    total = exposed = 0.0
    for step in range(per_epoch):
        channel.begin_iteration()
        hooked_step(algorithm, model, optimizer, cross_entropy_loss, x, y, step)
        stats = channel.end_iteration()
        total += stats.clock_time_s
        exposed += stats.clock_exposed_s
    return total, exposed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--per-epoch", type=int, default=8, help="K, iterations per epoch (K' = K)")
    parser.add_argument("--batch", type=int, default=4)
    args = parser.parse_args()
    started = time.time()
    rows = []
    for nodes, per_node in SHAPES:
        network = plain(compose(["network=eth_10g", f"nodes={nodes}", f"workers_per_node={per_node}"]).network)
        epoch = {}
        for name in ALGORITHMS:
            results = run_ranks(
                _rank,
                nodes * per_node,
                name,
                args.per_epoch,
                args.batch,
                nodes=nodes,
                network=network,
                threads=1,
                timeout=3600,
            )
            # the epoch ends when the last rank does; communication: the mean exposed time over ranks
            epoch[name] = (max(t for t, _ in results), sum(e for _, e in results) / len(results))
            print(
                f"  {nodes}x{per_node} {name}: {epoch[name][0]:.3f} s, communication {epoch[name][1]:.3f} s "
                f"({time.time() - started:.0f} s)",
                file=sys.stderr,
                flush=True,
            )
        rows.append((nodes, per_node, epoch))
    print(
        f"ResNet-18 (11.2 M parameters), eth_10g between nodes, K = K' = {args.per_epoch} iterations, batch {args.batch}"
        " per worker, simulate: seconds per epoch"
    )
    print(
        f"{'cluster':>8} | {'allreduce':>10} | {'allreduce_hier':>14} | {'node_based':>10} | allreduce/node_based"
        f" | comm: {'allreduce':>9} | {'hier':>7} | {'node_based':>10} | allreduce/node_based"
    )
    for nodes, per_node, epoch in rows:
        (ar, ar_c), (hi, hi_c), (nb, nb_c) = (epoch[name] for name in ALGORITHMS)
        print(
            f"{nodes}x{per_node:<6} | {ar:>10.3f} | {hi:>14.3f} | {nb:>10.3f} | {ar / nb:>20.2f}"
            f" | {ar_c:>15.4f} | {hi_c:>7.4f} | {nb_c:>10.4f} | {ar_c / nb_c:>20.2f}"
        )
    print(f"({time.time() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
