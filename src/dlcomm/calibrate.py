"""``dlcomm calibrate``: measure this cluster's links and write a network preset for simulate mode.

Where it runs decides what it can measure:

* inside an srun step (``srun dlcomm calibrate``, e.g. ``sbatch slurm/calibrate.sbatch``): every
  task is one rank; links between tasks of the same host and of different hosts;
* ``--slurm-nodes N``: submits that srun step itself (``sbatch --wait``, ``--tasks-per-host``
  tasks per host) and waits;
* otherwise: ``--ranks`` processes on this machine; links within this host only (the preset then
  keeps the schema's inter-host link and says so).

For each kind of link (intra: two ranks of one host; inter: rank 0 and the first rank of each
other host), one-way times of messages from 4 KiB to ``--max-mib`` by ping-pong
(:func:`dlcomm.comm.probe.pingpong`, through the Channel as runs use it), then the fit
``t(S) = alpha + S / beta``: ``beta`` from the least-squares slope over the sizes of 1 MiB and
more (where bandwidth dominates), ``alpha`` the smallest message's time less its transfer time.
Spread: the standard deviation of the fits of every (pair, repeat) series.
"""

from __future__ import annotations

import os
import statistics
import sys
from dataclasses import dataclass
from datetime import date, timedelta
from pathlib import Path
from typing import Sequence

from dlcomm.errors import UserError
from dlcomm.tools import ToolSilent, ask, quoted

SIZES = [4 * 1024, 64 * 1024, 1024**2, 4 * 1024**2, 16 * 1024**2]
GBPS = 1e9 / 8
_PORT = 29_655


@dataclass(frozen=True)
class Fit:
    """A link fitted from ``series`` one-way timing series (one per pair and repeat)."""

    alpha_s: float
    beta_Bps: float
    alpha_std_s: float
    beta_std_Bps: float
    series: int

    def line(self, label: str) -> str:
        return (
            f"{label}: alpha {self.alpha_s * 1e3:.3f} ms (std {self.alpha_std_s * 1e3:.3f}), "
            f"beta {self.beta_Bps / GBPS:.3f} Gb/s (std {self.beta_std_Bps / GBPS:.3f}), {self.series} series"
        )


def fit_one(sizes: Sequence[int], times: Sequence[float]) -> tuple[float, float]:
    """``(alpha, beta)`` of one series (see the module docstring)."""
    import numpy as np

    large = [(s, t) for s, t in zip(sizes, times) if s >= 1024**2] or list(zip(sizes, times))[-2:]
    slope = float(np.polyfit([s for s, _ in large], [t for _, t in large], 1)[0]) if len(large) > 1 else 0.0
    beta = 1.0 / slope if slope > 0 else sizes[-1] / times[-1]
    return max(0.0, times[0] - sizes[0] / beta), beta


def fit(sizes: Sequence[int], series: Sequence[Sequence[float]]) -> Fit:
    """The link of the median series, with the spread of the per-series fits."""
    fits = [fit_one(sizes, times) for times in series]
    alpha, beta = fit_one(sizes, [statistics.median(column) for column in zip(*series)])

    def spread(values: list[float]) -> float:
        return statistics.stdev(values) if len(values) > 1 else 0.0

    return Fit(alpha, beta, spread([a for a, _ in fits]), spread([b for _, b in fits]), len(series))


def pairs(nodes: int, per_node: int) -> dict[str, list[tuple[int, int]]]:
    """Rank pairs per kind of link (ranks numbered host by host): at most 4 of each."""
    intra = [(node * per_node, node * per_node + 1) for node in range(nodes)][:4] if per_node > 1 else []
    inter = [(0, node * per_node) for node in range(1, nodes)][:4]
    return {"intra": intra, "inter": inter}


def measure(channel, nodes: int, per_node: int, sizes: Sequence[int], repeats: int) -> dict[str, list[list[float]]]:
    """Every rank calls it; rank 0 gets ``{kind: [series, ...]}`` (one time per size each), one
    pair at a time (the others wait at a barrier) so pairs do not share a link."""
    from dlcomm.comm.probe import pingpong

    me = channel.cluster.rank
    found: dict[str, list[list[float]]] = {}
    for kind, chosen in pairs(nodes, per_node).items():
        for a, b in chosen:
            per_size = []
            for nbytes in sizes:
                times = pingpong(channel, a, b, nbytes, repeats + 1)[1:] if me in (a, b) else []
                per_size.append(times)
                channel.barrier()
            if me == a:  # a's times travel to rank 0
                series = [list(column) for column in zip(*per_size)]
            else:
                series = []
            gathered = channel.gather_objects(series, dst=0)
            if gathered is not None:
                found.setdefault(kind, []).extend(gathered[a])
    return found


def run_task(rank: int, world: int, nodes: int, host: str, port: int, sizes: Sequence[int], repeats: int):
    """One rank's part: join through the store at ``host:port``, measure; rank 0 returns the fits."""
    import torch

    from dlcomm.comm.channel import Channel
    from dlcomm.comm.cluster import Cluster
    from dlcomm.comm.layout import ClusterLayout
    from dlcomm.launch.netif import choose_interface
    from dlcomm.launch.store import join_store

    torch.set_num_threads(1)
    # rank 0 hosts the store (on 127.0.0.1, every rank on this machine: listening on the loopback address only)
    store = join_store(host, port, world, master=rank == 0, timeout=timedelta(seconds=120), count_in=False)
    choose_interface(os.environ.get("DLCOMM_IFNAME", ""), host)
    layout = ClusterLayout(nodes=nodes, workers_per_node=world // nodes)
    cluster = Cluster.connect(layout, rank, store, "gloo", torch.device("cpu"))
    try:
        channel = Channel(cluster)
        found = measure(channel, nodes, world // nodes, sizes, repeats)
        return {kind: fit(sizes, series) for kind, series in found.items()} if rank == 0 else None
    finally:
        cluster.close()


def _local_rank(rank: int, world: int, port: int, sizes: list[int], repeats: int, out: str) -> None:
    import pickle

    fits = run_task(rank, world, 1, "127.0.0.1", port, sizes, repeats)
    if rank == 0:
        Path(out).write_bytes(pickle.dumps(fits))


def run_local(ranks: int, sizes: list[int], repeats: int) -> dict[str, Fit]:
    """``ranks`` processes on this machine."""
    import pickle
    import socket
    import tempfile

    from dlcomm.launch.procstart import rank_processes

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with tempfile.TemporaryDirectory() as folder:
        out = str(Path(folder) / "fits.pickle")
        context = rank_processes()
        processes = [
            context.Process(target=_local_rank, args=(r, ranks, port, sizes, repeats, out)) for r in range(ranks)
        ]
        for process in processes:
            process.start()
        for process in processes:
            process.join()
        if any(process.exitcode for process in processes):
            raise UserError("calibration failed: a rank process exited with an error (see above); try --ranks 2")
        return pickle.loads(Path(out).read_bytes())


def run_in_srun(sizes: list[int], repeats: int) -> tuple[dict[str, Fit] | None, str]:
    """This process is one task of an srun step."""
    import submitit

    from dlcomm.launch.slurm import rendezvous_port

    os.environ.setdefault("SUBMITIT_EXECUTOR", "slurm")  # as launcher=srun: submitit reads SLURM's variables
    env = submitit.JobEnvironment()
    if env.num_tasks < 2:
        raise UserError(
            "dlcomm calibrate in an srun step needs at least 2 tasks: run it with --ntasks-per-node=2 or --nodes=2"
        )
    if env.num_tasks % env.num_nodes:
        raise UserError(
            f"{env.num_tasks} tasks on {env.num_nodes} hosts is invalid: give every host the same number of tasks"
        )
    fits = run_task(
        env.global_rank,
        env.num_tasks,
        env.num_nodes,
        env.hostnames[0],
        rendezvous_port(env.raw_job_id) + 1,
        sizes,
        repeats,
    )
    where = f"{env.num_nodes} host(s) ({','.join(env.hostnames)}), {env.num_tasks // env.num_nodes} rank(s) per host"
    return fits, where


def submit(nodes: int, per_host: int, forwarded: list[str]) -> int:
    """``sbatch --wait`` an srun step of this command; its output goes to the terminal."""
    import shlex
    import tempfile

    folder = tempfile.TemporaryDirectory(prefix="dlcomm-calibrate-")
    log = Path(folder.name) / "slurm-%j.out"
    command = " ".join(shlex.quote(part) for part in [sys.executable, "-m", "dlcomm.cli", "calibrate", *forwarded])
    try:
        done = ask(
            [
                "sbatch",
                "--wait",
                "--parsable",
                f"--nodes={nodes}",
                f"--ntasks-per-node={per_host}",
                f"--output={log}",
                "--job-name=dlcomm-calibrate",
                f"--wrap=srun {command}",
            ],
            None,  # --wait: as long as the job queues and runs
        )
    except ToolSilent as error:
        folder.cleanup()
        raise UserError(
            f"--slurm-nodes {nodes}: {error}; run it on a SLURM login node, or leave --slurm-nodes out"
        ) from None
    for written in log.parent.glob("slurm-*.out"):
        print(written.read_text(errors="replace"), end="")
    folder.cleanup()
    if done.returncode != 0:
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        raise UserError(f"the calibration job failed: {quoted(lines[-1]) if lines else 'see above'}")
    return 0


def preset_text(name: str, fits: dict[str, Fit], where: str) -> str:
    """The network preset: the fitted links, the rest from the schema."""
    lines = [f"# Measured by `dlcomm calibrate` on {date.today().isoformat()} over {where}."]
    lines += [f"# {fits[kind].line(kind)}" for kind in ("intra", "inter") if kind in fits]
    if "inter" not in fits:
        lines.append("# One host: the inter-host link was not measured (the schema's default stands).")
    lines += ["defaults:", "  - network_schema", "  - _self_", "", f"name: {name}", "mode: simulate"]
    for kind in ("intra", "inter"):
        if kind in fits:
            lines += [
                f"{kind}:",
                f"  latency_ms: {fits[kind].alpha_s * 1e3:.4g}",
                f"  bandwidth_gbps: {fits[kind].beta_Bps / GBPS:.4g}",
            ]
    return "\n".join(lines) + "\n"


def preset_path(name: str, out: str) -> Path:
    if out:
        return Path(out)
    import dlcomm.configs

    return Path(dlcomm.configs.__file__).parent / "network" / f"{name}.yaml"


#: Ranks of this machine beyond which the pairs' timings would measure the scheduler, not a link.
MOST_LOCAL_RANKS = 64


def check_options(ranks: int, max_mib: int, slurm_nodes: int | None, per_host: int) -> None:
    """Every option's range, before anything is measured or submitted: one line with the fix."""
    rules = [
        (
            2 <= ranks <= MOST_LOCAL_RANKS,
            f"--ranks {ranks}",
            f"a link needs 2 ranks, and more than {MOST_LOCAL_RANKS} "
            "processes of one machine time its scheduler; pass --ranks 2 to " + str(MOST_LOCAL_RANKS) + " (default 2)",
        ),
        (
            1 <= max_mib <= SIZES[-1] >> 20,
            f"--max-mib {max_mib}",
            f"the largest message timed must be 1 to {SIZES[-1] >> 20} MiB (the sizes are 4 KiB to 16 MiB; default 16)",
        ),
        (
            slurm_nodes is None or slurm_nodes >= 1,
            f"--slurm-nodes {slurm_nodes}",
            "pass the number of hosts, 1 or more (leave it out to measure this machine)",
        ),
        (per_host >= 1, f"--tasks-per-host {per_host}", "pass 1 or more ranks per host (default 2)"),
    ]
    for ok, given, rule in rules:
        if not ok:
            raise UserError(f"{given} is invalid: {rule}")


def calibrate(
    name: str,
    out: str,
    ranks: int,
    max_mib: int,
    repeats: int,
    slurm_nodes: int | None,
    per_host: int,
    force: bool,
    forwarded: list[str],
) -> int:
    if not name.replace("_", "").replace("-", "").replace(".", "").isalnum():
        raise UserError(f"--name {name} is invalid: use letters, digits, '_', '-' or '.' (it becomes network=<name>)")
    if repeats < 1:
        raise UserError(
            f"--repeats {repeats} is invalid: time at least one message per size and pair; pass --repeats 1 or more (default 5)"
        )
    check_options(ranks, max_mib, slurm_nodes, per_host)
    target = shown = preset_path(name, out)  # shown: as given; target: its links resolved
    in_srun = "SLURM_STEP_ID" in os.environ and "SLURM_PROCID" in os.environ
    if os.environ.get("SLURM_PROCID", "0") == "0":  # the writer: refuse before minutes of measuring, not after
        from dlcomm.paths import check_output_file

        target = check_output_file(
            target,
            f"--out {target}" if out else f"the preset {target}",
            f"pass --out <a new file, or one to replace with --force>, e.g. {name}.yaml",
        )
        if target.exists() and not force:
            raise UserError(f"{shown} exists: pass --force to replace it, or another --name")
    sizes = [s for s in SIZES if s <= max_mib * 1024**2] or SIZES[:2]
    if slurm_nodes:
        return submit(slurm_nodes, per_host, forwarded)
    if in_srun:
        fits, where = run_in_srun(sizes, repeats)
    else:
        fits, where = run_local(ranks, sizes, repeats), f"this machine ({ranks} ranks)"
    if fits is None:  # not rank 0
        return 0
    for kind in ("intra", "inter"):
        if kind in fits:
            print(fits[kind].line(f"{kind}-host link"))
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(preset_text(name, fits, where))
    if out:
        print(
            f"wrote {shown}: copy it to configs/network/{name}.yaml, then simulate this cluster with "
            f"network={name} network.mode=simulate"
        )
    else:
        print(f"wrote {shown}: simulate this cluster with network={name} network.mode=simulate")
    return 0
