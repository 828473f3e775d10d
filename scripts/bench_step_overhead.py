#!/usr/bin/env python
"""Host overhead of dlcomm's training step against the same step in plain torch, measured two ways.

One rank (world size 1) trains with ``algo=allreduce`` (its buckets made large enough to be one
flat bucket), ``launcher=local`` and ``launcher=threads``, against :class:`benchlib.PlainStep`:
what a careful user writes in plain torch for the same work (zero_grad(set_to_none=True), forward,
backward, the gradients into one flat bucket and back by one multi-tensor copy each way, optimizer
step; its docstring says why each piece is there), on its own replica of the same model, built
from the same seed, with the same optimizer and the same fixed batch. Neither side calls a
collective: a sum over one rank is the rank's own gradient, and dlcomm's Channel completes every
collective over a group of one in place (``Channel.sole_member``); a user's DDP program still calls
gloo's ``all_reduce`` at world size 1 (~10 us in a tight loop, ~50 us inside a step here: it hands
the bucket to gloo's thread and back), so the separate measurement also times that step, for
information (its last column).

(a) **interleaved**: one process runs dlcomm's rank code (:func:`dlcomm.launch.rank.train_rank`:
    Channel, device timer, TrainLoop, rank 0's reporter with its bar and metric stream, a real
    MLflow run) and its data set runs one plain step before handing over each batch, so the two
    alternate step by step and load hits both alike. dlcomm's background threads run beside
    both sides, though: they slow the plain step too, and the launcher's own threads (the
    driver's) are not there.
(b) **separate**: ``dlcomm train`` itself, through the real command and launcher (the driver, its
    status line and system-metrics sampler, the rank process or thread, everything a user's run
    has; :mod:`bench_fixed_batch` only hands the loop one fixed batch and records when it asks for
    each), against the plain step in a loop of its own process, with no dlcomm thread in it. The
    two processes take turns, 50 steps at a time (after each side's warm-up, the turn handed over
    through two FIFOs, outside the timed steps), so that the machine's changing speed (other
    work on it) hits both alike; each launcher has its own pair of processes. Each plain turn is
    25 steps of the plain step and 25 of the same step with gloo's ``all_reduce`` of one rank (the
    last column: what a DDP program at world size 1 pays, information).

Each round runs (b) and then (a) for every launcher, the launchers' order swapped every round.
What is timed, per step, on the host clock (``perf_counter``): dlcomm, from the moment the loop is
handed a batch to the moment it asks for the next (everything the loop does per iteration except
producing the batch); plain, the step, ended on CUDA by the synchronisation of an event recorded
after it, as dlcomm's device timer synchronises its iteration's end event (one host sync per step
each). A run's figure is the median of its steps after ``--warmup``; each ratio is dlcomm / plain,
one per round; the table gives their median over the rounds and their spread (lowest-highest), and
the machine's load average before and after. The target: both medians <= 1.05 (exit 1 otherwise).

    python scripts/bench_step_overhead.py                  # CPU: mlp, synthetic, batch 8, 1 thread
    python scripts/bench_step_overhead.py --device cuda    # small_cnn and resnet18 (cifar stem), batch 64
    python scripts/bench_step_overhead.py --models resnet18 --launchers threads --steps 100 --rounds 1
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from time import perf_counter
from typing import cast

from benchlib import PlainStep

LAUNCHERS = ("local", "threads")
TARGET = 1.05
# the synthetic data set's default shape, 1x28x28 (Fashion-MNIST's), for every model
MODEL_ARGS = {"mlp": [], "small_cnn": [], "resnet18": ["model.cifar_stem=true"]}
SEED = 0  # the fixed batch's (bench_fixed_batch.fixed_batch)


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


def _plain_step(cfg, cuda: bool, device):
    """``(plain step, data set)`` of ``cfg``: its own replica of the model, as dlcomm builds it,
    summed with ``torch.distributed.all_reduce`` (gloo; nccl on CUDA; the group the rank made,
    where there is one) only where the world has more than one rank: dlcomm's Channel calls no
    collective on a group of one (``Channel.sole_member``), so neither does the reference."""
    import torch
    import torch.distributed as dist

    from dlcomm.data import build_dataset
    from dlcomm.tasks import build_task
    from dlcomm.train.optim import build_optimizer

    if not dist.is_initialized():
        backend = "nccl" if cuda else "gloo"
        dist.init_process_group(
            backend, store=dist.HashStore(), rank=0, world_size=1, device_id=device if cuda else None
        )
    data = build_dataset(cfg.dataset)
    task = build_task(cfg)
    torch.manual_seed(cfg.seed)
    replica = task.build_model(cfg.model, data).to(device)
    optimizer = build_optimizer(cfg.optim, task.param_groups(replica, cfg.optim))
    replica.train()
    world_size = dist.get_world_size()
    return PlainStep(replica, optimizer, task.loss, dist.all_reduce if world_size > 1 else None, world_size), data


def _device(cfg):
    import torch

    cuda = cfg.train.device == "cuda"
    device = torch.device("cuda", 0) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    return cuda, device


def _close(cluster) -> None:
    if cluster.backend == "inprocess":
        cluster.transport.fabric.leave(cluster.rank)
    cluster.close()


# ---- the three kinds of process (each run as `--role ...` in a process of its own) ------------------
def role_interleaved(launcher: str, model: str, args) -> dict:
    """(a): ``steps`` dlcomm iterations through ``train_rank`` interleaved with as many plain steps."""
    import torch
    from bench_fixed_batch import fixed_batch

    from dlcomm.comm.cluster import Cluster
    from dlcomm.comm.inprocess import Fabric
    from dlcomm.launch.rank import job_layout, train_rank
    from dlcomm.launch.threads import ThreadsLauncherConfig
    from dlcomm.paths import runs_dir
    from dlcomm.run import prepare_run
    from dlcomm.tracking.mlflow_run import close_run, open_run

    spec = prepare_run(_overrides(launcher, model, args.batch, args))
    run_id = open_run(spec)
    spec = spec.with_run(run_id, runs_dir(spec.tracking_uri) / run_id)
    cfg = spec.cfg()
    cuda, device = _device(cfg)
    layout = job_layout(cfg)
    if launcher == "local":
        import torch.distributed as dist

        cluster = Cluster.connect(layout, 0, dist.HashStore(), "nccl" if cuda else "gloo", device)
    else:
        hang_timeout_s = cast(ThreadsLauncherConfig, cfg.launcher).hang_timeout_s
        cluster = Cluster.in_process(layout, 0, Fabric(ranks=1, hang_timeout_s=hang_timeout_s), device)
    plain, data = _plain_step(cfg, cuda, device)  # under local, on the group the Cluster made
    interleaved = Interleaved(data, fixed_batch(data, cfg.train.batch_size, SEED, device), plain, cuda)
    stream = torch.cuda.Stream(device) if cuda and launcher == "threads" else None  # as launch/threads.py
    try:
        with _quiet(), torch.cuda.stream(stream) if stream else contextlib.nullcontext():
            train_rank(spec, cluster, data=interleaved)
        close_run(spec.tracking_uri, run_id, "FINISHED")
    finally:
        _close(cluster)
    return {
        "dlcomm_s": interleaved.dlcomm_s[args.warmup :],
        "plain_s": interleaved.plain_s[args.warmup :][: args.steps],
    }


def role_dlcomm(launcher: str, model: str, args) -> dict:
    """(b), dlcomm's side: ``dlcomm train`` as the command runs it, on one fixed batch."""
    import bench_fixed_batch

    from dlcomm.cli import main as dlcomm_main

    with tempfile.TemporaryDirectory(prefix="dlcomm-bench-steps-") as folder:
        gaps_file = Path(folder) / "gaps.json"
        os.environ[bench_fixed_batch.STEPS_FILE] = str(gaps_file)
        os.environ[bench_fixed_batch.STEPS] = str(args.warmup + args.steps)
        os.environ[bench_fixed_batch.WARMUP] = str(args.warmup)
        os.environ[bench_fixed_batch.DEVICE] = args.device
        if args.turns:
            os.environ[bench_fixed_batch.TURNS] = str(args.turns)
        bench_fixed_batch.install()
        sys.argv = ["dlcomm", "train", *_overrides(launcher, model, args.batch, args)]
        with _quiet():
            code = dlcomm_main()
        if code != 0 or not gaps_file.exists():
            sys.exit(f"bench_step_overhead: `dlcomm train {' '.join(sys.argv[2:])}` ended with {code}, no step times")
        return {"dlcomm_s": json.loads(gaps_file.read_text())[args.warmup :]}


def role_plain(model: str, args) -> dict:
    """(b), plain torch's side: the plain step in a loop, nothing else in the process; with
    ``--turns``, ``BLOCK`` steps at a time, each time the dlcomm process hands it the turn."""
    from bench_fixed_batch import BLOCK, fixed_batch

    from dlcomm.compose import compose

    cfg = compose(_overrides("local", model, args.batch, args))
    cuda, device = _device(cfg)
    plain, data = _plain_step(cfg, cuda, device)
    batch = fixed_batch(data, cfg.train.batch_size, SEED, device)
    for _ in range(args.warmup):
        timed_step(plain, batch, cuda)
    if not args.turns:
        return {"plain_s": [timed_step(plain, batch, cuda) for _ in range(args.steps)]}
    import torch.distributed as dist

    # the same replica with gloo's all_reduce of one rank (what DDP at world size 1 calls): information
    summed = PlainStep(plain.model, plain.optimizer, plain.loss_fn, dist.all_reduce)
    for _ in range(args.warmup):
        timed_step(summed, batch, cuda)
    seconds: list[float] = []
    summed_s: list[float] = []
    to_plain = os.open(args.turns / "to_plain", os.O_RDONLY)  # in the order FixedBatches opens them
    to_dlcomm = os.open(args.turns / "to_dlcomm", os.O_WRONLY)
    while os.read(to_plain, 1) == b"g":  # b"q", or b"" if the dlcomm run ended early: done
        seconds += [timed_step(plain, batch, cuda) for _ in range(BLOCK // 2)]
        summed_s += [timed_step(summed, batch, cuda) for _ in range(BLOCK - BLOCK // 2)]
        os.write(to_dlcomm, b"g")
    return {"plain_s": seconds, "summed_s": summed_s}


def plain_alone(model: str, batch: int, args) -> dict:
    """The plain step alone at ``batch`` (world size 1): median and fastest ms after the warm-up."""
    from bench_fixed_batch import fixed_batch

    from dlcomm.compose import compose

    cfg = compose(_overrides("local", model, batch, args))
    cuda, device = _device(cfg)
    plain, data = _plain_step(cfg, cuda, device)
    tensors = fixed_batch(data, batch, SEED, device)
    seconds = [timed_step(plain, tensors, cuda) for _ in range(args.warmup + args.steps)][args.warmup :]
    return {"median_ms": 1e3 * statistics.median(seconds), "fastest_ms": 1e3 * min(seconds), "steps": len(seconds)}


# ---- the driver of the rounds ----------------------------------------------------------------------
def _start(role: str, model: str, launcher: str, args, home: str, turns: Path | None = None):
    """One ``--role`` process, started: ``(process, its figures' file)``."""
    out = Path(home) / f"{role}-{launcher}.json"
    forwarded = [
        f"--device={args.device}",
        f"--batch={args.batch}",
        f"--steps={args.steps}",
        f"--warmup={args.warmup}",
        f"--threads={args.threads}",
        *([f"--turns={turns}"] if turns else []),
    ]
    command = [sys.executable, __file__, f"--role={role}", f"--launcher={launcher}", f"--models={model}"]
    command += [*forwarded, f"--json={out}", "--", *args.overrides]
    env = dict(os.environ, DLCOMM_HOME=home, PYTHONWARNINGS="ignore")
    process = subprocess.Popen(command, cwd=home, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    return process, out


def _finish(started, what: str) -> dict:
    """The figures of a started process (its stderr's tail ends the script if it failed)."""
    process, out = started
    _, stderr = process.communicate()
    if process.returncode != 0 or not out.exists():
        sys.exit(f"bench_step_overhead: the {what} run failed:\n{stderr[-3000:]}")
    figures = json.loads(out.read_text())
    out.unlink()
    return figures


def _separate(model: str, launcher: str, args, home: str) -> tuple[list[float], list[float], list[float]]:
    """(b): ``(dlcomm's steps, plain's steps, plain's steps with an all_reduce of one rank)``, the two
    processes taking turns block by block (each plain turn: half a block of each kind)."""
    turns = Path(tempfile.mkdtemp(prefix="turns-", dir=home))
    for name in ("to_plain", "to_dlcomm"):
        os.mkfifo(turns / name)
    plain = _start("plain", model, launcher, args, home, turns)
    dlcomm = _start("dlcomm", model, launcher, args, home, turns)
    try:
        dlcomm_s = _finish(dlcomm, f"dlcomm ({model}, launcher={launcher})")["dlcomm_s"]
    except BaseException:
        plain[0].kill()  # it may wait for a FIFO the failed run never opened
        plain[0].wait()
        raise
    plain_s = _finish(plain, f"plain ({model}, beside launcher={launcher})")
    return dlcomm_s, plain_s["plain_s"], plain_s["summed_s"]


def _ms(seconds: list[float]) -> float:
    return 1e3 * statistics.median(seconds)


def measure(model: str, args, home: str) -> dict:
    """``--rounds`` rounds of both measurements for every launcher (the launchers' order swapped
    every round): per launcher, the ratio of each round and the step medians (ms) it came from."""
    found: dict[str, dict[str, list[dict]]] = {
        launcher: {"interleaved": [], "separate": [], "with_collective": []} for launcher in args.launchers
    }
    for round_ in range(args.rounds):
        order = args.launchers if round_ % 2 == 0 else args.launchers[::-1]
        for launcher in order:
            dlcomm_s, plain_s, summed_s = _separate(model, launcher, args, home)
            found[launcher]["separate"].append(_figures(dlcomm_s, plain_s))
            found[launcher]["with_collective"].append(_figures(dlcomm_s, summed_s))
        for launcher in order:
            times = _finish(_start("interleaved", model, launcher, args, home), f"interleaved ({model}, {launcher})")
            found[launcher]["interleaved"].append(_figures(times["dlcomm_s"], times["plain_s"]))
        print(f"  round {round_ + 1} of {args.rounds}: {_round_line(found, round_)}", flush=True)
    return found


def _figures(dlcomm_s: list[float], plain_s: list[float]) -> dict:
    dlcomm, plain = _ms(dlcomm_s), _ms(plain_s)
    return {
        "ratio": dlcomm / plain,
        "dlcomm_ms": dlcomm,
        "plain_ms": plain,
        "fastest_ratio": min(dlcomm_s) / min(plain_s),
        "steps": [len(dlcomm_s), len(plain_s)],
    }


def _round_line(found: dict, round_: int) -> str:
    return "; ".join(
        f"{launcher} interleaved {runs['interleaved'][round_]['ratio']:.3f}, separate {runs['separate'][round_]['ratio']:.3f}"
        f" (plain with an all_reduce of one rank {runs['with_collective'][round_]['ratio']:.3f})"
        for launcher, runs in found.items()
    )


def summarise(runs: list[dict]) -> dict:
    """The median over the rounds of the ratio and of each side's step (ms), and the ratio's spread."""
    ratios = [run["ratio"] for run in runs]
    return {
        "ratio": statistics.median(ratios),
        "lowest": min(ratios),
        "highest": max(ratios),
        "dlcomm_ms": statistics.median(run["dlcomm_ms"] for run in runs),
        "plain_ms": statistics.median(run["plain_ms"] for run in runs),
        "rounds": ratios,
    }


def _load() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "n/a"


def _table(results: dict, args, where: str, load: tuple[str, str]) -> float:
    """Prints the table to paste; returns the largest median ratio."""
    print(
        f"\ndlcomm's step / plain torch's: {args.device}{where}, batch {args.batch}, {args.steps} steps a run after "
        f"{args.warmup} of warm-up, {args.rounds} round(s); load average {load[0]} before, {load[1]} after"
    )
    print(
        "| model | launcher | interleaved (one process) | separate processes | dlcomm / plain ms (separate) "
        "| separate, plain with gloo's all_reduce of one rank |"
    )
    print("|---|---|---|---|---|---|")
    worst = 0.0
    for name, both in results.items():
        model, launcher = name.split("/")
        a, b, c = both["interleaved"], both["separate"], both["with_collective"]
        worst = max(worst, a["ratio"], b["ratio"])
        print(
            f"| {model} | {launcher} | {a['ratio']:.3f} ({a['lowest']:.3f}-{a['highest']:.3f}) "
            f"| {b['ratio']:.3f} ({b['lowest']:.3f}-{b['highest']:.3f}) | {b['dlcomm_ms']:.3f} / {b['plain_ms']:.3f} "
            f"| {c['ratio']:.3f} ({c['lowest']:.3f}-{c['highest']:.3f}) |"
        )
    print(
        f"median ratio over the rounds (lowest-highest); largest of the first two {worst:.3f} (target <= {TARGET}); "
        "the last: against the plain step with an all_reduce of one rank, as DDP calls it (information)"
    )
    return worst


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--models", nargs="+", help="default: mlp on cpu, small_cnn resnet18 on cuda")
    parser.add_argument("--launchers", nargs="+", choices=LAUNCHERS, default=list(LAUNCHERS))
    parser.add_argument("--batch", type=int, help="default: 8 on cpu, 64 on cuda")
    parser.add_argument("--steps", type=int, default=1000, help="measured steps of each run")
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=2, help="rounds of process runs (module docstring)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads on the CPU")
    parser.add_argument(
        "--plain-batches",
        type=int,
        nargs="+",
        help="instead: only the plain step, alone, at each of these batch sizes (median and fastest ms)",
    )
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--role", choices=("interleaved", "dlcomm", "plain"), help=argparse.SUPPRESS)
    parser.add_argument("--launcher", help=argparse.SUPPRESS)
    parser.add_argument("--turns", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("overrides", nargs="*", help="extra dlcomm overrides for every run")
    args = parser.parse_args()
    args.models = args.models or (["small_cnn", "resnet18"] if args.device == "cuda" else ["mlp"])
    args.batch = args.batch or (64 if args.device == "cuda" else 8)
    return args


def _write(path: Path | None, figures: dict) -> None:
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(figures, indent=2))


def main() -> int:
    args = _arguments()
    cuda = args.device == "cuda"
    os.environ.setdefault("PYTHONWARNINGS", "ignore")
    import torch

    if cuda and not torch.cuda.is_available():
        sys.exit("bench_step_overhead: --device cuda: no CUDA device is visible")
    torch.set_num_threads(torch.get_num_threads() if cuda else args.threads)
    if args.role:  # one process of a round (the driver below started it)
        model = args.models[0]
        if args.role == "interleaved":
            figures = role_interleaved(args.launcher, model, args)
        elif args.role == "dlcomm":
            figures = role_dlcomm(args.launcher, model, args)
        else:
            figures = role_plain(model, args)
        _write(args.json, figures)
        return 0
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
            load_before = _load()
            print(
                f"dlcomm's step vs plain torch, {args.device}{where}: {args.rounds} round(s), each of every "
                "launcher's dlcomm run taking turns with a plain process, then its interleaved run",
                flush=True,
            )
            for model in args.models:
                found = measure(model, args, home)
                for launcher, runs in found.items():
                    results[f"{model}/{launcher}"] = {kind: summarise(runs[kind]) for kind in runs}
            worst = _table(results, args, where, (load_before, _load()))
    _write(args.json, {"args": {k: str(v) for k, v in vars(args).items()}, **results})
    return 0 if worst <= TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
