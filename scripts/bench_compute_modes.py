"""How fast N simulated workers step under each ``launcher.compute`` (issue 60, item 5).

For each model and rank count, one iteration of N replicas (forward, backward, SGD with momentum,
batch B each) four ways, interleaved round by round so that the machine's load falls on all alike:

* ``serial``: the N replicas stepped one after the other, every torch thread (``compute=serial``);
* ``parallel``: N threads, each stepping its replica with ``cores / N`` torch threads
  (``compute=parallel``), a barrier per iteration;
* ``batched``: N threads (``cores / N`` torch threads, as dlcomm) through dlcomm's own batched compute (:mod:`dlcomm.train.batched`: the
  last to arrive runs one ``vmap`` forward and backward for all), then each its optimizer step
  (``compute=batched``);
* ``one batch``: one replica stepping one batch of N x B (the ceiling: the device's own cost of
  the arithmetic, no per-replica overhead).

Printed: the median ms per iteration over the rounds, and serial / batched and batched / one
batch. CPU always; CUDA too when a GPU is visible (``--device``). The models are dlcomm's
(``model=mlp``, ``small_cnn`` on 1x28x28, ``resnet18`` with the CIFAR stem on 3x32x32).

    python scripts/bench_compute_modes.py --quick            # mlp and small_cnn at 4 and 16 ranks
    python scripts/bench_compute_modes.py                    # mlp, small_cnn, resnet18 at 4, 16, 64
    python scripts/bench_compute_modes.py --device cuda --models resnet18 --ranks 4 16 --batch 64
    python scripts/bench_compute_modes.py --json src/dlcomm/launch/compute_modes.json  # what auto reads (rows replaced)
    python scripts/bench_compute_modes.py --quick --threads 1 --parts  # and where a batched iteration's time goes
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import threading
import time
from time import perf_counter
from typing import Any, Callable

import torch

MODES = ("serial", "parallel", "batched", "one batch")
SHAPES = {"mlp": (1, 28, 28), "small_cnn": (1, 28, 28), "resnet18": (3, 32, 32)}


MLP_HIDDEN: list[int] = []  # --mlp-hidden: model.hidden of model=mlp (empty: dlcomm's default)


def build(name: str) -> torch.nn.Module:
    """dlcomm's model ``name`` as ``dlcomm train model=<name>`` builds it (10 classes; resnet18
    with ``model.cifar_stem=true``, mlp with ``--mlp-hidden``)."""
    from dlcomm.models import build_model
    from dlcomm.models.registry import MODELS

    cfg = MODELS.get(name).Config(name=name)
    if name == "resnet18":
        cfg.cifar_stem = True
    if name == "mlp" and MLP_HIDDEN:
        cfg.hidden = list(MLP_HIDDEN)
    return build_model(cfg, SHAPES[name], 10)


def loss_fn(model: torch.nn.Module, inputs: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.cross_entropy(model(inputs), labels)


def sgd(model: torch.nn.Module) -> torch.optim.Optimizer:
    return torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)


class Job:
    """N replicas of one model on one device, their optimizers and batches, stepped each way."""

    def __init__(self, name: str, ranks: int, batch: int, device: torch.device) -> None:
        torch.manual_seed(0)
        self.device, self.ranks = device, ranks
        self.models = [build(name).to(device) for _ in range(ranks)]
        self.optimizers = [sgd(model) for model in self.models]
        shape = SHAPES[name]
        self.inputs = [torch.randn(batch, *shape, device=device) for _ in range(ranks)]
        self.labels = [torch.randint(0, 10, (batch,), device=device) for _ in range(ranks)]
        self.big = build(name).to(device)
        self.big_optimizer = sgd(self.big)
        self.big_inputs, self.big_labels = torch.cat(self.inputs), torch.cat(self.labels)
        self._batched: Any = None
        self._pool: _Pool | None = None

    def _step(self, r: int) -> None:
        self.optimizers[r].zero_grad(set_to_none=True)
        loss_fn(self.models[r], self.inputs[r], self.labels[r]).backward()
        self.optimizers[r].step()

    def serial(self) -> None:
        for r in range(self.ranks):
            self._step(r)

    def one_batch(self) -> None:
        self.big_optimizer.zero_grad(set_to_none=True)
        loss_fn(self.big, self.big_inputs, self.big_labels).backward()
        self.big_optimizer.step()

    def parallel(self) -> None:
        self._threads(self._step)

    def batched(self) -> None:
        if self._batched is None:
            from dlcomm.comm.inprocess import Fabric
            from dlcomm.train.batched import BatchedCompute

            fabric = Fabric(batched=BatchedCompute(self.ranks), ranks=self.ranks, hang_timeout_s=0)
            self._batched = [fabric.batched.for_rank(fabric, r) for r in range(self.ranks)]
            self._step_count = 0
        step = self._step_count
        self._step_count += 1

        def rank(r: int) -> None:
            self.optimizers[r].zero_grad(set_to_none=True)
            self._batched[r].forward_backward(self.models[r], loss_fn, self.inputs[r], self.labels[r], step, seed=0)
            self.optimizers[r].step()

        self._threads(rank)

    def _threads(self, body: Callable[[int], None]) -> None:
        """``body(r)`` on rank ``r``'s thread for every rank at once; the threads live as long as
        the job (as a run's rank threads do), one CUDA stream each on a GPU."""
        if self._pool is None:
            self._pool = _Pool(self.ranks, self.device)
        self._pool.run(body)

    def parts(self, rounds: int) -> dict[str, float]:
        """Where a batched iteration's time goes (``--parts``), median ms over ``rounds``, the
        parts interleaved: the vmapped call alone (run here on the captured entries of one
        batched iteration), the N optimizer steps one after the other, and serial's N forward
        and backward passes without them (what the vmapped call replaces)."""
        from dlcomm.train.batched import BatchedCompute

        self.batched()  # the threads and the stacks made
        job = self._batched[0].job
        captured: list[Any] = []

        def capture(entries: list[Any]) -> None:
            captured.extend(entries)
            BatchedCompute.perform(job, entries)

        job.perform = capture  # this instance only, for one iteration
        self.batched()
        del job.perform

        def passes() -> None:
            for r in range(self.ranks):
                self.optimizers[r].zero_grad(set_to_none=True)
                loss_fn(self.models[r], self.inputs[r], self.labels[r]).backward()

        def steps() -> None:
            for optimizer in self.optimizers:
                optimizer.step()

        calls = {"vmapped call": lambda: job.perform(captured), "serial passes": passes, "optimizer steps": steps}
        seconds: dict[str, list[float]] = {name: [] for name in calls}
        for _ in range(rounds):
            for name, call in calls.items():
                began = perf_counter()
                call()
                seconds[name].append(perf_counter() - began)
        return {name: 1e3 * statistics.median(values) for name, values in seconds.items()}

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()


class _Pool:
    """One long-lived thread per rank, released together for each call (two barriers)."""

    def __init__(self, ranks: int, device: torch.device) -> None:
        self._start, self._done = threading.Barrier(ranks + 1), threading.Barrier(ranks + 1)
        self._body: Callable[[int], None] | None = None
        self._device = device
        self._threads = [threading.Thread(target=self._loop, args=(r,), daemon=True) for r in range(ranks)]
        for thread in self._threads:
            thread.start()

    def _loop(self, r: int) -> None:
        stream = torch.cuda.Stream(self._device) if self._device.type == "cuda" else None
        while True:
            self._start.wait()
            body = self._body
            if body is None:
                return
            if stream is not None:
                with torch.cuda.stream(stream):
                    body(r)
            else:
                body(r)
            self._done.wait()

    def run(self, body: Callable[[int], None]) -> None:
        self._body = body
        self._start.wait()
        self._done.wait()

    def close(self) -> None:
        self._body = None
        self._start.wait()
        for thread in self._threads:
            thread.join()


def measure(job: Job, rounds: int, warmup: int, cores: int) -> dict[str, float]:
    """The median ms per iteration of each mode over ``rounds`` rounds (modes interleaved)."""
    calls = {"serial": job.serial, "parallel": job.parallel, "batched": job.batched, "one batch": job.one_batch}
    shared = max(1, cores // job.ranks)  # as dlcomm shares them (dlcomm.launch.threads.torch_threads)
    threads = {"serial": cores, "parallel": shared, "batched": shared, "one batch": cores}
    seconds: dict[str, list[float]] = {mode: [] for mode in MODES}
    cuda = job.device.type == "cuda"
    # the first batched steps cost more (torch.func's set-up on the compute thread, ~20 ms; the
    # allocator's first page faults): warm them first, as a run's first steps do
    torch.set_num_threads(threads["batched"])
    began = perf_counter()
    for _ in range(2 * job.ranks):
        job.batched()
        if perf_counter() - began > 20:
            break
    for index in range(warmup + rounds):
        for mode in MODES:
            torch.set_num_threads(threads[mode])
            if cuda:
                torch.cuda.synchronize()
            began = perf_counter()
            calls[mode]()
            if cuda:
                torch.cuda.synchronize()
            if index >= warmup:
                seconds[mode].append(perf_counter() - began)
    torch.set_num_threads(cores)
    return {mode: 1e3 * statistics.median(values) for mode, values in seconds.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", default=list(SHAPES), choices=list(SHAPES))
    parser.add_argument("--ranks", nargs="+", type=int, default=[4, 16, 64])
    parser.add_argument("--batch", type=int, default=32, help="per replica (default 32)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument(
        "--threads",
        type=int,
        default=0,
        help="torch threads of serial, batched and one batch (default: every core, as dlcomm)",
    )
    parser.add_argument("--device", nargs="+", default=None, help="cpu and/or cuda (default: cpu, and cuda if visible)")
    parser.add_argument("--quick", action="store_true", help="mlp and small_cnn at 4 and 16 ranks, 3 rounds")
    parser.add_argument("--mlp-hidden", nargs="+", type=int, default=[], help="model.hidden of mlp (default dlcomm's)")
    parser.add_argument("--json", default="", help="also write the figures here")
    parser.add_argument(
        "--parts",
        action="store_true",
        help="also print a batched iteration's parts: the vmapped call alone, the N optimizer steps, serial's N passes",
    )
    args = parser.parse_args(argv)
    MLP_HIDDEN[:] = args.mlp_hidden
    if args.quick:
        args.models, args.ranks, args.rounds = ["mlp", "small_cnn"], [4, 16], 3
    devices = args.device or (["cpu", "cuda"] if torch.cuda.is_available() else ["cpu"])
    if "cuda" in devices and not torch.cuda.is_available():
        sys.exit("bench_compute_modes: --device cuda: no CUDA device is visible")
    cores = args.threads or os.cpu_count() or 1
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(
        f"bench_compute_modes: {os.cpu_count()} cores, {cores} torch thread(s), load {load:.1f}, torch {torch.__version__}, batch {args.batch} per replica"
    )
    print(
        f"{'device':6} {'model':10} {'ranks':>5} "
        + " ".join(f"{m + ' ms':>13}" for m in MODES)
        + "  serial/batched  batched/one"
    )
    rows = []
    for device in devices:
        for model in args.models:
            for ranks in args.ranks:
                job = Job(model, ranks, args.batch, torch.device(device))
                ms = measure(job, args.rounds, args.warmup, cores)
                parts = {}
                if args.parts:
                    torch.set_num_threads(max(1, cores // ranks))  # as the batched column ran
                    parts = job.parts(max(args.rounds, 5))
                    torch.set_num_threads(cores)
                job.close()
                row = {"device": device, "model": model, "ranks": ranks, "batch": args.batch, **ms}
                if model == "mlp" and MLP_HIDDEN:
                    row["knobs"] = f"model.hidden={list(MLP_HIDDEN)}"
                rows.append(row)
                print(
                    f"{device:6} {model:10} {ranks:>5} "
                    + " ".join(f"{ms[m]:>13,.1f}" for m in MODES)
                    + f"  {ms['serial'] / ms['batched']:>14.2f}x  {ms['batched'] / ms['one batch']:>10.2f}x",
                    flush=True,
                )
                if parts:
                    print("       parts: " + ", ".join(f"{name} {value:,.1f} ms" for name, value in parts.items()))
    if args.json:
        update(args.json, rows, load)
    return 0


def update(path: str, rows: list[dict[str, Any]], load: float) -> None:
    """Write ``rows`` into the JSON file ``path`` (src/dlcomm/launch/compute_modes.json is what
    ``launcher.compute=auto`` reads): a row of the same device, model, ranks and batch is replaced,
    the others kept; ``measured`` gains this run's machine, time and load."""
    key = ("device", "model", "ranks", "batch")
    old: dict[str, Any] = {"measured": [], "rows": []}
    if os.path.exists(path):
        with open(path) as file:
            old = json.load(file)
    new = {tuple(row[k] for k in key) for row in rows}
    kept = [row for row in old["rows"] if tuple(row[k] for k in key) not in new]
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    measured = f"{platform.node()}, {when}, {os.cpu_count()} cores, load {load:.1f}, torch {torch.__version__}"
    rounded = [{k: round(v, 2) if isinstance(v, float) else v for k, v in row.items()} for row in rows]
    merged = sorted(kept + rounded, key=lambda row: tuple(row[k] for k in key))
    with open(path, "w") as file:
        json.dump({"measured": [*old["measured"], measured], "rows": merged}, file, indent=1)
        file.write("\n")


if __name__ == "__main__":
    sys.exit(main())
