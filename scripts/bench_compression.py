#!/usr/bin/env python
"""What each compressor costs on the rank and saves on the wire, side by side in one run.

For a model's gradients in one bucket (``--model``, default the default job's ``small_cnn`` on
Fashion-MNIST; ``resnet18`` for an 11 M-entry bucket), every compressor of ``compress=`` averages
the bucket over a one-rank group on the in-process fabric (so the figure is the compressor's own
compute: compress, memory, decompress, aggregate; the one-rank collectives cost microseconds), and
the uncompressed allreduce beside it. Printed per compressor: the median time of ``--repeats``
rounds (after one untimed round, and for PowerSGD after its plain steps), the ratio to the
uncompressed round, and the bytes one member sends per bucket against fp32's (payload bytes as the
Channel counts them for a ring of ``--world`` members: all-gather ``(W-1) S``, allreduce
``2 (W-1)/W S``).

    python scripts/bench_compression.py                    # ~20 s on 2 cores
    python scripts/bench_compression.py --model resnet18   # ~2 minutes
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any


def _rounds(cluster, channel, name: str, knobs: dict, numel_shapes: list, repeats: int) -> dict:
    import torch

    from dlcomm.compress.base import pack
    from dlcomm.compress.registry import COMPRESSORS

    codec_cls = COMPRESSORS.get(name)
    codec = codec_cls(codec_cls.Config(**knobs), seed=0)
    shapes = [torch.Size(shape) for shape in numel_shapes]
    total = sum(shape.numel() for shape in shapes)
    generator = torch.Generator().manual_seed(0)
    times = []
    first = knobs.get("start_iter", 0) + 1
    for step in range(first + repeats):
        tensor = torch.randn(total, generator=generator)
        started = time.perf_counter()
        if codec.identity:
            channel.allreduce(tensor, average=True)
        else:
            codec.start(tensor, 0, step, channel, "world", shapes).wait()
        if step >= first:
            times.append(time.perf_counter() - started)
    sample = torch.randn(total, generator=generator)
    if codec.identity or name == "powersgd":
        sent = None
    else:
        payload, _ = codec.compress(sample, 0)
        sent = pack(payload).numel()
    return {"median_s": statistics.median(times), "payload": sent, "total": total}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="small_cnn")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--world", type=int, default=8)
    args = parser.parse_args()

    import torch

    from dlcomm.comm import traffic
    from dlcomm.config.schema import ModelConfig
    from dlcomm.launch.harness import run_ranks
    from dlcomm.models import build_model
    from dlcomm.models.torchvision_models import ResNetConfig

    torch.set_num_threads(1)
    cfg = ResNetConfig(name=args.model) if args.model.startswith("resnet") else ModelConfig(name=args.model)
    model = build_model(cfg, (1, 28, 28) if args.model == "small_cnn" else (3, 32, 32), 10)
    shapes = [tuple(p.shape) for p in model.parameters()][::-1]
    total = sum(p.numel() for p in model.parameters())
    cases: list[tuple[str, dict[str, Any]]] = [
        ("none", {}),
        ("fp16", {}),
        ("bf16", {}),
        ("topk", {"ratio": 0.01}),
        ("randomk", {"ratio": 0.01}),
        ("qsgd", {}),
        ("sign", {}),
        ("sign", {"error_feedback": True}),
        ("powersgd", {"rank": 1, "start_iter": 2}),
        ("powersgd", {"rank": 4, "start_iter": 2}),
    ]
    fp32 = 4 * total
    print(
        f"{args.model}: {total:,} entries in one bucket ({fp32 / 1e6:.2f} MB fp32); bytes per member for W={args.world}"
    )
    print(f"{'compressor':<26}{'ms/round':>10}{'x none':>8}{'sent KB':>10}{'x fp32 sent':>13}")
    base = None
    w = args.world
    for name, knobs in cases:
        result = run_ranks(_rounds, 1, name, knobs, shapes, args.repeats, in_process="serial")[0]
        if base is None:
            base = result["median_s"]
        if name in ("none",):
            sent = traffic.ring_allreduce_traffic(fp32, w)[0]
        elif name in ("fp16", "bf16"):
            sent = traffic.ring_allreduce_traffic(fp32 // 2, w)[0]
        elif name == "randomk":
            sent = traffic.ring_allreduce_traffic(result["payload"], w)[0]
        elif name == "powersgd":
            sent = sum(traffic.ring_allreduce_traffic(4 * size, w)[0] for size in powersgd_parts(shapes, knobs["rank"]))
        else:
            sent = traffic.ring_allgather_traffic(result["payload"], w)[0]
        label = name + "".join(f" {k}={v}" for k, v in knobs.items() if k != "start_iter")
        ratio = sent / traffic.ring_allreduce_traffic(fp32, w)[0]
        print(
            f"{label:<26}{1e3 * result['median_s']:>10.2f}{result['median_s'] / base:>8.2f}{sent / 1e3:>10.1f}{ratio:>13.4f}"
        )


def powersgd_parts(shapes: list, rank: int) -> tuple[int, int, int]:
    """Entries of the three allreduces of a PowerSGD bucket: the uncompressed tensors, all Ps, all Qs."""
    from dlcomm.compress.powersgd import should_compress

    plain = ps = qs = 0
    for shape in shapes:
        n = shape[0] if shape else 1
        numel = 1
        for d in shape:
            numel *= d
        m = numel // n
        r = min(n, m, rank)
        if should_compress(n, m, r, 2.0):
            ps, qs = ps + n * r, qs + m * r
        else:
            plain += numel
    return plain, ps, qs


if __name__ == "__main__":
    main()
