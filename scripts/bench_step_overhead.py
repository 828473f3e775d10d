#!/usr/bin/env python
"""Host overhead of dlcomm's training step: its iteration against the same step in plain torch.

One rank (world size 1) trains with ``algo=allreduce`` through dlcomm's own rank code
(:func:`dlcomm.launch.rank.train_rank`: Channel, device timer, TrainLoop, rank 0's reporter with
its progress bar and metric stream, a real MLflow run in a temporary DLCOMM_HOME), under
``launcher=local`` (a torch.distributed process group in this process: gloo, or nccl on CUDA)
and ``launcher=threads`` (the in-process fabric). The data set handed to the loop gives it one
fixed batch and, between two of its batches, runs one step of :class:`benchlib.PlainStep` (the
same model, built from the same seed, and optimizer, on its own replica; its all_reduce is the
rank's transport's, what the Channel calls), so dlcomm and plain torch alternate step by step and
machine load hits both alike. The buckets are made large enough that dlcomm's allreduce is one
flat bucket too.

What is measured, per step, on the host clock (``perf_counter``):

* dlcomm: from the moment the loop is handed a batch to the moment it asks for the next one,
  i.e. everything the loop does per iteration (hooks, Channel, timing, the timing row, the
  reporter, the checks) except producing the batch;
* plain: the step, ended on CUDA by the synchronisation of an event recorded after it, as
  dlcomm's device timer synchronises its iteration's end event (one host sync per step each).

It prints, after ``--warmup`` steps, the median and the fastest step of each and the ratios
dlcomm / plain (target <= 1.05), and dlcomm's own timing row (median ``time_s``).

    python scripts/bench_step_overhead.py                  # CPU: mlp, synthetic, batch 8, 1 thread
    python scripts/bench_step_overhead.py --device cuda    # small_cnn and resnet18 (cifar stem), batch 64
    python scripts/bench_step_overhead.py --models resnet18 --launchers threads --steps 100
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path
from time import perf_counter

from benchlib import PlainStep

LAUNCHERS = ("local", "threads")
TARGET = 1.05
# the synthetic data set's default shape, 1x28x28 (Fashion-MNIST's), for every model
MODEL_ARGS = {"mlp": [], "small_cnn": [], "resnet18": ["model.cifar_stem=true"]}


def timed_step(plain, batch, cuda: bool) -> float:
    """Host seconds of one ``plain(*batch)``, ended on CUDA by the synchronisation of an event
    recorded after it (one host sync per step, as dlcomm's device timer has)."""
    import torch

    began = perf_counter()
    plain(*batch)
    if cuda:
        end = torch.cuda.Event()
        end.record()
        end.synchronize()
    return perf_counter() - began


class Interleaved:
    """The run's data set, except that its training batches are one fixed batch on the device and
    that each request for the next runs ``plain`` once first; records both sides' step times."""

    def __init__(self, data, batch, plain, cuda: bool) -> None:
        self._data, self.batch, self.plain, self.cuda = data, batch, plain, cuda
        self.dlcomm_s: list[float] = []
        self.plain_s: list[float] = []

    def __getattr__(self, name):
        return getattr(self._data, name)

    def train_batches(self, indices, batch_size, seed):
        return self._batches()

    def _batches(self):
        handed = None
        while True:
            if handed is not None:
                self.dlcomm_s.append(perf_counter() - handed)
            self.plain_s.append(timed_step(self.plain, self.batch, self.cuda))
            handed = perf_counter()
            yield self.batch


@contextlib.contextmanager
def _quiet():
    """The run's own lines and progress bar kept out of the table."""
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        yield


def _overrides(launcher: str, model: str, batch: int, args) -> list[str]:
    return [
        f"launcher={launcher}",
        "nodes=1",
        "algo=allreduce",
        "algo.bucket_mb=4096",  # one flat bucket, as the plain step's
        f"model={model}",
        *MODEL_ARGS[model],
        "dataset=synthetic",
        f"train.batch_size={batch}",
        f"train.max_steps={args.warmup + args.steps}",
        "train.epochs=1",
        f"dataset.train_size={batch * (args.warmup + args.steps)}",  # one epoch of the steps
        f"train.timing_warmup={args.warmup}",
        f"train.device={args.device}",
        "train.eval_size=64",
        *([] if args.device == "cuda" else [f"train.threads_per_rank={args.threads}"]),
        *args.overrides,
    ]


def _rank(cfg, launcher: str):
    """``(cluster, data, task, plain step, batch)`` of one rank of ``cfg`` under ``launcher``:
    local, a torch.distributed group of this process (gloo, nccl on CUDA); threads, the fabric."""
    import torch

    from dlcomm.comm.cluster import Cluster
    from dlcomm.comm.inprocess import Fabric
    from dlcomm.data import build_dataset
    from dlcomm.launch.rank import job_layout
    from dlcomm.tasks import build_task
    from dlcomm.train.optim import build_optimizer

    cuda = cfg.train.device == "cuda"
    layout = job_layout(cfg)
    device = torch.device("cuda", 0) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    if launcher == "local":
        import torch.distributed as dist

        cluster = Cluster.connect(layout, 0, dist.HashStore(), "nccl" if cuda else "gloo", device)
    else:
        cluster = Cluster.in_process(layout, 0, Fabric(ranks=1, hang_timeout_s=cfg.launcher.hang_timeout_s), device)
    data = build_dataset(cfg.dataset)
    task = build_task(cfg)
    torch.manual_seed(cfg.seed)
    replica = task.build_model(cfg.model, data).to(device)
    optimizer = build_optimizer(cfg.optim, task.param_groups(replica, cfg.optim))
    transport = cluster.transport
    plain = PlainStep(replica, optimizer, task.loss, lambda bucket: transport.all_reduce(bucket, "world").wait())
    generator = torch.Generator().manual_seed(cfg.seed)
    batch = (
        torch.randn(cfg.train.batch_size, *data.input_shape, generator=generator).to(device),
        torch.randint(0, data.num_classes, (cfg.train.batch_size,), generator=generator).to(device),
    )
    return cluster, data, task, plain, batch


def _close(cluster) -> None:
    if cluster.backend == "inprocess":
        cluster.transport.fabric.leave(cluster.rank)
    cluster.close()


def _bench_launcher(launcher: str, model: str, args) -> dict:
    """One run of ``steps`` dlcomm iterations interleaved with as many plain steps."""
    import pandas as pd
    import torch

    from dlcomm.launch.rank import train_rank
    from dlcomm.paths import runs_dir
    from dlcomm.run import prepare_run
    from dlcomm.tracking.mlflow_run import close_run, open_run

    spec = prepare_run(_overrides(launcher, model, args.batch, args))
    run_id = open_run(spec)
    spec = spec.with_run(run_id, runs_dir(spec.tracking_uri) / run_id)
    cfg = spec.cfg()
    cluster, data, _, plain, batch = _rank(cfg, launcher)
    cuda = cluster.device.type == "cuda"
    interleaved = Interleaved(data, batch, plain, cuda)
    stream = torch.cuda.Stream(cluster.device) if cuda and launcher == "threads" else None  # as launch/threads.py
    try:
        with _quiet(), torch.cuda.stream(stream) if stream else contextlib.nullcontext():
            train_rank(spec, cluster, data=interleaved)
        close_run(spec.tracking_uri, run_id, "FINISHED")
    finally:
        _close(cluster)
    rows = pd.read_csv(Path(spec.run_dir) / "timings.csv")
    return {
        "dlcomm_s": interleaved.dlcomm_s[args.warmup :],
        "plain_s": interleaved.plain_s[args.warmup : len(interleaved.dlcomm_s)],
        "time_s": rows.loc[rows["step"] >= args.warmup, "time_s"].tolist(),
    }


def plain_alone(model: str, batch: int, args) -> dict:
    """The plain step alone at ``batch`` (world size 1, launcher=local's group): median and
    fastest ms after the warm-up."""
    from dlcomm.compose import compose

    cfg = compose(_overrides("local", model, batch, args))
    cluster, _, _, plain, tensors = _rank(cfg, "local")
    try:
        seconds = [timed_step(plain, tensors, cluster.device.type == "cuda") for _ in range(args.warmup + args.steps)]
    finally:
        _close(cluster)
    seconds = seconds[args.warmup :]
    return {"median_ms": 1e3 * statistics.median(seconds), "fastest_ms": 1e3 * min(seconds), "steps": len(seconds)}


def summarise(times: dict) -> dict:
    dlcomm, plain = times["dlcomm_s"], times["plain_s"]
    out = {
        "dlcomm_median_ms": 1e3 * statistics.median(dlcomm),
        "dlcomm_fastest_ms": 1e3 * min(dlcomm),
        "plain_median_ms": 1e3 * statistics.median(plain),
        "plain_fastest_ms": 1e3 * min(plain),
        "row_time_median_ms": 1e3 * statistics.median(times["time_s"]),
        "steps": len(dlcomm),
    }
    out["median_ratio"] = out["dlcomm_median_ms"] / out["plain_median_ms"]
    out["fastest_ratio"] = out["dlcomm_fastest_ms"] / out["plain_fastest_ms"]
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--models", nargs="+", help="default: mlp on cpu, small_cnn resnet18 on cuda")
    parser.add_argument("--launchers", nargs="+", choices=LAUNCHERS, default=list(LAUNCHERS))
    parser.add_argument("--batch", type=int, help="default: 8 on cpu, 64 on cuda")
    parser.add_argument("--steps", type=int, default=300, help="measured steps of each side")
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--threads", type=int, default=1, help="torch threads on the CPU")
    parser.add_argument(
        "--plain-batches",
        type=int,
        nargs="+",
        help="instead: only the plain step, alone, at each of these batch sizes (median and fastest ms)",
    )
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("overrides", nargs="*", help="extra dlcomm overrides for every run")
    args = parser.parse_args()
    cuda = args.device == "cuda"
    args.models = args.models or (["small_cnn", "resnet18"] if cuda else ["mlp"])
    args.batch = args.batch or (64 if cuda else 8)
    os.environ.setdefault("PYTHONWARNINGS", "ignore")
    import torch

    if cuda and not torch.cuda.is_available():
        sys.exit("bench_step_overhead: --device cuda: no CUDA device is visible")
    torch.set_num_threads(torch.get_num_threads() if cuda else args.threads)
    where = (
        f" ({torch.cuda.get_device_name(0)})" if cuda else f", {args.threads} torch thread(s), {os.cpu_count()} cores"
    )
    results: dict = {}
    worst = 0.0
    with tempfile.TemporaryDirectory(prefix="dlcomm-step-overhead-") as home:
        os.environ["DLCOMM_HOME"] = home
        os.chdir(home)
        if args.plain_batches:
            print(f"the plain step alone, {args.device}{where}, {args.steps} steps after {args.warmup} of warm-up")
            print(f"{'model':<10}{'batch':>6}{'median':>9}{'fastest':>9}  (ms)")
            for model in args.models:
                for batch in args.plain_batches:
                    s = results[f"{model}/{batch}"] = plain_alone(model, batch, args)
                    print(f"{model:<10}{batch:>6}{s['median_ms']:>9.3f}{s['fastest_ms']:>9.3f}", flush=True)
        else:
            print(
                f"dlcomm's step vs plain torch, {args.device}{where}, batch {args.batch}, {args.steps} steps each "
                f"after {args.warmup} of warm-up, interleaved step by step",
                flush=True,
            )
            print(
                f"{'model':<10}{'launcher':<9}{'dlcomm med':>11}{'plain med':>10}{'ratio':>7}"
                f"{'dlcomm min':>11}{'plain min':>10}{'ratio':>7}{'row time_s':>11}  (ms)"
            )
            for model in args.models:
                for launcher in args.launchers:
                    s = results[f"{model}/{launcher}"] = summarise(_bench_launcher(launcher, model, args))
                    worst = max(worst, s["median_ratio"], s["fastest_ratio"])
                    print(
                        f"{model:<10}{launcher:<9}{s['dlcomm_median_ms']:>11.3f}{s['plain_median_ms']:>10.3f}"
                        f"{s['median_ratio']:>7.3f}{s['dlcomm_fastest_ms']:>11.3f}{s['plain_fastest_ms']:>10.3f}"
                        f"{s['fastest_ratio']:>7.3f}{s['row_time_median_ms']:>11.3f}",
                        flush=True,
                    )
            print(f"largest ratio {worst:.3f} (target <= {TARGET})")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, **results}, indent=2))
    return 0 if worst <= TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
