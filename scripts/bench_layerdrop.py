#!/usr/bin/env python
"""The layer-dropping paper's Table 1: per-iteration worker compute, PS compute, communication and
total, without and with layer dropping, at 1 Gb/s (1 PS + 4 workers) and 56 Gb/s (1 PS + 8 workers).

Every run is real processes (one server, n workers) under ``network.mode=simulate``: compute is
each process's CPU time, communication the cost model's (the workers' pushes share the server's
link: ``alpha + sum_i S_i / B``; the answers leave the server one after the other). Model:
ResNet-50 (25.6 M parameters, 102 MB of float32 gradients), synthetic 3x64x64 batches of 8 per
worker. The threshold is computed at step 0 and kept (the paper recomputes every 100 steps; a
run here is a few steps). Columns, means over workers and steps 1..K-1 (step 0 warms up):

* worker compute: the iteration minus the time waiting for the server (forward, backward, the
  compressor and memory);
* PS compute: the server's time from the last gradient in to the answer out (average, optimizer);
* communication: the wait minus the PS compute (both directions, incast included);
* total: the iteration; and bytes each way and the fraction of entries dropped.

    python scripts/bench_layerdrop.py                 # ~10 minutes on 2 cores
    python scripts/bench_layerdrop.py --ratios 0.9 --steps 4   # quicker
"""

from __future__ import annotations

import argparse
import sys
import time

import torch

from dlcomm.algorithms.ps import ParameterServer
from dlcomm.algorithms.registry import ALGORITHMS
from dlcomm.compose import compose
from dlcomm.config.typed import plain
from dlcomm.launch.harness import run_ranks
from dlcomm.models import build_model
from dlcomm.models.torchvision_models import ResNetConfig
from dlcomm.train.loop import cross_entropy_loss, hooked_step

SETTINGS = [("eth_1g", 4, 0.95, 0.82), ("eth_56g", 8, 0.81, 0.70)]  # network, workers, paper's comm cut, total cut
PAPER = {  # Table 1, seconds per iteration: worker, PS, communication, total
    ("eth_1g", False): (0.388, 0.073, 3.457, 3.918),
    ("eth_1g", True): (0.408, 0.085, 0.182, 0.675),
    ("eth_56g", False): (0.222, 0.048, 1.951, 2.222),
    ("eth_56g", True): (0.230, 0.060, 0.375, 0.665),
}


def _rank(cluster, channel, name: str, knobs: dict, steps: int, batch: int, size: int) -> dict:
    torch.manual_seed(0)
    model = build_model(ResNetConfig(name="resnet50"), (3, size, size), 1000)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    cls = ALGORITHMS.get(name)
    algorithm = cls(cls.Config(**knobs), cluster, channel, seed=0)
    if cluster.role == "server":
        algorithm.serve("server", model, optimizer)
        return {}
    algorithm.setup(model, optimizer)
    generator = torch.Generator().manual_seed(cluster.rank)
    x, y = torch.randn(batch, 3, size, size, generator=generator), torch.randint(0, 1000, (batch,), generator=generator)
    rows = []
    for step in range(steps):
        channel.begin_iteration()
        hooked_step(algorithm, model, optimizer, cross_entropy_loss, x, y, step)
        stats = channel.end_iteration()
        rows.append((stats.clock_time_s, stats.clock_exposed_s))
    algorithm.finish()
    assert isinstance(algorithm, ParameterServer)  # ps and ps_layerdrop
    s = algorithm.stats
    return {"rows": rows, "server": s.server_compute_s, "up": s.bytes_up, "down": s.bytes_down, "dropped": s.dropped}


def _summarise(workers: list[dict]) -> dict:
    def mean(values: list[float]) -> float:
        return sum(values) / len(values)

    total = [r[0] for w in workers for r in w["rows"][1:]]
    wait = [r[1] for w in workers for r in w["rows"][1:]]
    server = [v for w in workers for v in w["server"][1:]]
    return {
        "worker": mean([t - e for t, e in zip(total, wait)]),
        "ps": mean(server),
        "comm": mean([e - p for e, p in zip(wait, server)]),
        "total": mean(total),
        "up_mb": mean([v for w in workers for v in w["up"][1:]]) / 1e6,
        "down_mb": mean([v for w in workers for v in w["down"][1:]]) / 1e6,
        "dropped": mean([v for w in workers for v in w["dropped"][1:]]),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ratios", default="0.9,0.97", help="R values of ps_layerdrop, comma-separated")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--size", type=int, default=64, help="input height and width")
    parser.add_argument("--only", default="", help="one network (eth_1g or eth_56g) instead of both")
    args = parser.parse_args()
    ratios = [float(r) for r in args.ratios.split(",")]
    started = time.time()
    results = {}
    settings = [s for s in SETTINGS if not args.only or s[0] == args.only]
    for network_name, workers, _, _ in settings:
        network = plain(compose([f"network={network_name}", f"nodes={workers}"]).network)
        variants: list[tuple[str, dict[str, float], float | None]] = [("ps", {}, None)]
        variants += [("ps_layerdrop", {"ratio": r, "recompute_every": 100}, r) for r in ratios]
        for name, knobs, ratio in variants:
            out = run_ranks(
                _rank,
                workers,
                name,
                knobs,
                args.steps,
                args.batch,
                args.size,
                network=network,
                services=("server",),
                threads=1,
                timeout=3600,
            )
            results[(network_name, ratio)] = _summarise(out[:workers])
            print(
                f"  {network_name} {name} {knobs}: {results[(network_name, ratio)]} ({time.time() - started:.0f} s)",
                file=sys.stderr,
                flush=True,
            )
    print(
        f"ResNet-50 (25.6 M parameters), synthetic 3x{args.size}x{args.size}, batch {args.batch} per worker, "
        f"simulate; seconds per iteration (mean of steps 1..{args.steps - 1}); paper's Table 1 in brackets"
    )
    print(
        f"{'network':>8} {'workers':>7} {'dropping':>12} | {'worker':>14} | {'PS':>14} | {'communication':>15} | "
        f"{'total':>15} | up MB | down MB | dropped"
    )
    for network_name, workers, paper_comm_cut, paper_total_cut in settings:
        base = results[(network_name, None)]
        for ratio in [None, *ratios]:
            row = results[(network_name, ratio)]
            paper = PAPER[(network_name, ratio is not None)]
            label = "no" if ratio is None else f"yes, R={ratio:g}"
            print(
                f"{network_name:>8} {workers:>7} {label:>12} | {row['worker']:6.3f} ({paper[0]:.3f}) | "
                f"{row['ps']:6.3f} ({paper[1]:.3f}) | {row['comm']:7.3f} ({paper[2]:.3f}) | {row['total']:7.3f} ({paper[3]:.3f})"
                f" | {row['up_mb']:5.1f} | {row['down_mb']:7.1f} | {row['dropped']:.3f}"
            )
        for ratio in ratios:
            row = results[(network_name, ratio)]
            print(
                f"{network_name}: R={ratio:g} cuts communication by {100 * (1 - row['comm'] / base['comm']):.1f}% "
                f"(paper {100 * paper_comm_cut:.0f}%) and the total by {100 * (1 - row['total'] / base['total']):.1f}% "
                f"(paper {100 * paper_total_cut:.0f}%); bytes up {row['up_mb']:.1f} of {base['up_mb']:.1f} MB, "
                f"down {row['down_mb']:.1f} of {base['down_mb']:.1f} MB"
            )
    print(f"({time.time() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
