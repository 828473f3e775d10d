#!/usr/bin/env python
"""Does `dlcomm calibrate` model a cluster well enough to simulate it?

On ``scripts/cluster_local.sh`` hosts (``--hosts`` of them, links shaped to ``--gbps``):

1. ``dlcomm calibrate --slurm-nodes H --tasks-per-host 2``: the fitted inter-host bandwidth
   over the shaped rate (target: within 10%);
2. the default job (AllReduce-SGD, small CNN) with ``launcher=slurm nodes=H workers_per_node=1
   network=off``: the real communication per iteration, taken as the median over steps of the
   smallest ``comm_busy_s`` among the ranks (the rank that reaches the allreduce last waits for
   nobody: its time in flight is the transfer itself);
3. the same job under ``launcher=threads`` with ``network=<the calibrated preset>
   network.mode=simulate``: the modelled communication per iteration (``comm_modelled_s``);
   modelled over real (target: within 15%).

    python scripts/bench_calibration.py                  # 4 hosts at 1 Gb/s, ~4 minutes
    python scripts/bench_calibration.py --hosts 2 --gbps 0.5

Needs root; leaves the cluster down unless --keep.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import pandas as pd
from benchlib import train_timings

ROOT = Path(__file__).resolve().parents[1]
CLUSTER = ROOT / "scripts" / "cluster_local.sh"
CONF = "/etc/dlcomm-cluster/slurm.conf"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=4)
    parser.add_argument("--gbps", type=float, default=1.0)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--keep", action="store_true")
    args = parser.parse_args()
    up = subprocess.run(
        [str(CLUSTER), "up", "--hosts", str(args.hosts), "--gbps", str(args.gbps)], capture_output=True, text=True
    )
    if up.returncode != 0:
        sys.exit(f"bench_calibration: {up.stderr.strip() or up.stdout.strip()}")
    os.environ["SLURM_CONF"] = CONF
    try:
        with tempfile.TemporaryDirectory(prefix="dlcomm-calibration-") as home:
            preset = Path(home) / "calibrated.yaml"
            done = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "dlcomm.cli",
                    "calibrate",
                    "--slurm-nodes",
                    str(args.hosts),
                    "--tasks-per-host",
                    "2",
                    "--out",
                    str(preset),
                ],
                capture_output=True,
                text=True,
                cwd=home,
            )
            print(done.stdout, done.stderr, sep="", end="")
            if done.returncode != 0:
                sys.exit("bench_calibration: calibrate failed")
            text = preset.read_text()
            link = re.search(r"inter:\n  latency_ms: (\S+)\n  bandwidth_gbps: (\S+)", text)
            if link is None:
                sys.exit(f"bench_calibration: no inter-node link in {preset}")
            latency_ms, gbps = map(float, link.groups())
            for folder in ("real", "sim"):
                (Path(home) / folder).mkdir()
            common = ["train.max_steps=%d" % args.steps, f"nodes={args.hosts}", "workers_per_node=1"]
            real = train_timings(
                [*common, "launcher=slurm", "launcher.wait=true", "network=off"], home + "/real", "bench_calibration"
            )
            modelled = train_timings(
                [
                    *common,
                    "launcher=threads",
                    "network=eth_1g",
                    "network.mode=simulate",
                    f"network.inter.latency_ms={latency_ms}",
                    f"network.inter.bandwidth_gbps={gbps}",
                ],
                home + "/sim",
                "bench_calibration",
            )
    finally:
        if not args.keep:
            subprocess.run([str(CLUSTER), "down"], capture_output=True)
    kept = lambda t: t[t["step"] >= 5]  # noqa: E731 - connection set-up and first touches
    real_comm = float(kept(real).groupby("step")["comm_busy_s"].min().median())
    model_comm = float(kept(modelled).groupby("step")["comm_modelled_s"].mean().median())
    print(
        pd.DataFrame(
            {
                "figure": [
                    "fitted inter-host bandwidth, Gb/s",
                    "fitted inter-host latency, ms",
                    "real communication per iteration, ms",
                    "modelled communication per iteration, ms",
                ],
                "value": [gbps, latency_ms, real_comm * 1e3, model_comm * 1e3],
            }
        ).to_string(index=False)
    )
    verdict = lambda ok: "PASS" if ok else "FAIL"  # noqa: E731
    print(
        f"fitted / shaped bandwidth: {gbps / args.gbps:.3f} ({verdict(abs(gbps / args.gbps - 1) <= 0.10)}, target within 10%)"
    )
    print(
        f"modelled / real communication per iteration: {model_comm / real_comm:.3f} "
        f"({verdict(abs(model_comm / real_comm - 1) <= 0.15)}, target within 15%)"
    )


if __name__ == "__main__":
    main()
