"""Functions run on every rank by ``dlcomm.launch.harness.run_ranks`` (importable by spawned processes)."""

from __future__ import annotations

import copy
import threading
import time
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from dlcomm.algorithms.allreduce import Allreduce, AllreduceConfig
from dlcomm.algorithms.local_sgd import LocalSGD, LocalSGDConfig
from dlcomm.config.schema import ModelConfig
from dlcomm.models import build_model
from dlcomm.train.loop import cross_entropy_loss, hooked_step
from outer_fixtures import flat, flat_tensors

SHAPE = (1, 16, 16)


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return build_model(ModelConfig(name="small_cnn"), SHAPE, 10)


def _batch(generator: torch.Generator, size: int = 8) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(size, *SHAPE, generator=generator), torch.randint(0, 10, (size,), generator=generator)


def _flat(model: torch.nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def allreduce_vs_ddp(cluster, channel, overlap: bool, bucket_mb: float, steps: int, micro_batches: int = 1) -> float:
    """Max |ours - DDP| over parameters after ``steps`` SGD-momentum steps on per-rank data;
    ``micro_batches > 1``: gradient accumulation, DDP's under ``no_sync`` but for the last."""
    from torch.nn.parallel import DistributedDataParallel

    ours = _model()
    reference = copy.deepcopy(ours)
    ddp = DistributedDataParallel(reference, bucket_cap_mb=max(bucket_mb, 1e-6))
    ours_opt = torch.optim.SGD(ours.parameters(), lr=0.1, momentum=0.9)
    ddp_opt = torch.optim.SGD(ddp.parameters(), lr=0.1, momentum=0.9)
    algorithm = Allreduce(AllreduceConfig(overlap=overlap, bucket_mb=bucket_mb), cluster, channel)
    algorithm.setup(ours, ours_opt)
    generator = torch.Generator().manual_seed(100 + cluster.rank)
    for step in range(steps):
        inputs, labels = _batch(generator, 8 * micro_batches)
        hooked_step(algorithm, ours, ours_opt, cross_entropy_loss, inputs, labels, step, micro_batches)
        ddp_opt.zero_grad(set_to_none=True)
        parts = list(zip(inputs.chunk(micro_batches), labels.chunk(micro_batches)))
        with ddp.no_sync():
            for part, part_labels in parts[:-1]:
                (F.cross_entropy(ddp(part), part_labels) / micro_batches).backward()
        (F.cross_entropy(ddp(parts[-1][0]), parts[-1][1]) / micro_batches).backward()
        ddp_opt.step()
    return float((_flat(ours) - _flat(reference)).abs().max())


def local_sgd_vs_averager(cluster, channel, period: int, steps: int) -> tuple[float, list]:
    """Max |ours - PeriodicModelAverager| after ``steps``, and this rank's parameters after every step."""
    from torch.distributed.algorithms.model_averaging.averagers import PeriodicModelAverager

    ours = _model()
    reference = copy.deepcopy(ours)
    ours_opt = torch.optim.SGD(ours.parameters(), lr=0.1, momentum=0.9)
    ref_opt = torch.optim.SGD(reference.parameters(), lr=0.1, momentum=0.9)
    # torch averages when (step - warmup_steps) % period == 0, counting calls from 0; with
    # warmup_steps = period - 1 that is after steps period-1, 2*period-1, ... as ours.
    averager = PeriodicModelAverager(period=period, warmup_steps=period - 1)
    algorithm = LocalSGD(LocalSGDConfig(period=period), cluster, channel)
    algorithm.setup(ours, ours_opt)
    generator = torch.Generator().manual_seed(200 + cluster.rank)
    trajectory = []
    for step in range(steps):
        inputs, labels = _batch(generator)
        hooked_step(algorithm, ours, ours_opt, cross_entropy_loss, inputs, labels, step)
        trajectory.append(_flat(ours).numpy().copy())  # numpy: pickled by value across processes
        ref_opt.zero_grad(set_to_none=True)
        F.cross_entropy(reference(inputs), labels).backward()
        ref_opt.step()
        averager.average_parameters(reference.parameters())
    return float((_flat(ours) - _flat(reference)).abs().max()), trajectory


def collectives_of_one(cluster, channel) -> dict:
    """Every collective on ``intra`` (this rank's node, one rank per node) and on ``world``,
    with the transport's calls counted by name: what a group of one gives and asks for."""
    import torch

    calls: list[tuple[str, str]] = []
    transport = cluster.transport
    for name in ("all_reduce", "broadcast", "reduce", "all_gather"):
        real = getattr(transport, name)

        def counted(*args, _name=name, _real=real, **kwargs):
            group = kwargs.get("group", args[-1])
            calls.append((_name, group))
            return _real(*args, **kwargs)

        setattr(transport, name, counted)
    out: dict = {}
    value = float(cluster.rank + 1)
    for group in ("intra", "world"):
        summed = torch.full((5,), value, dtype=torch.float64)
        channel.allreduce(summed, group=group, average=False)
        meaned = torch.full((5,), value, dtype=torch.float64)
        channel.allreduce(meaned, group=group)
        root = cluster.rank if group == "intra" else 0  # a node's one rank is its root
        sent = torch.full((3,), value)
        channel.broadcast(sent, src=root, group=group)
        reduced = torch.full((3,), value)
        channel.reduce(reduced, dst=root, group=group)
        handle = channel.allgather(torch.full((2,), value), group=group, async_op=True)
        gathered = handle.wait()
        out[group] = {
            "sum": summed.tolist(),
            "mean": meaned.tolist(),
            "broadcast": sent.tolist(),
            "reduce": reduced.tolist() if cluster.rank == root else None,
            "allgather": [part.tolist() for part in gathered],
            "bytes": sum(total.bytes_sent for (_, kind, grp), total in channel.totals.items() if grp == group),
        }
    out["calls"] = calls
    return out


def channel_accounting(cluster, channel) -> dict:
    """Traffic, results and exposed time of a few recorded operations."""
    rank = cluster.rank
    out: dict = {}
    channel.begin_iteration()
    tensor = torch.full((1200,), float(rank))
    channel.allreduce(tensor)
    out["allreduce_mean"] = float(tensor[0])
    stats = channel.end_iteration()
    out["allreduce_bytes"], out["allreduce_messages"] = stats.bytes_sent, stats.messages

    channel.begin_iteration()
    payload = torch.full((256,), float(rank))
    channel.broadcast(payload, src=1)
    out["broadcast_value"] = float(payload[0])
    out["broadcast_messages"] = channel.end_iteration().messages

    channel.begin_iteration()
    if rank == 1:
        time.sleep(0.3)  # everyone else waits for rank 1 inside the allreduce
    channel.allreduce(torch.ones(10))
    out["exposed_s"] = channel.end_iteration().exposed_s

    if "intra" in cluster.group_ranks:
        node_tensor = torch.tensor([float(rank)])
        channel.allreduce(node_tensor, group="intra")
        out["intra_mean"] = float(node_tensor[0])
    out["leader"] = "leaders" in cluster.group_ranks
    out["metric_ops_counted"] = any(key[0] == "train" and key[2] == "world" for key in channel.totals)
    return out


def turns_and_transfer(cluster, channel, compute_s: float) -> list[dict]:
    """Three iterations: rank ``r`` computes ``r * compute_s`` (a sleep: on serial threads it holds
    the turn), then all allreduce 4 MiB. Each iteration's blocked time, its split and the
    transfers the rank performed in its own call."""
    rank = cluster.rank
    out = []
    tensor = torch.ones(1 << 20)
    for _ in range(3):
        channel.begin_iteration()
        time.sleep(rank * compute_s)
        channel.allreduce(tensor)
        comm = channel.end_iteration()
        out.append({"blocked": comm.exposed_s, "peer_wait": comm.peer_wait_s, "carried": comm.carried_s})
    return out


def wait_in_a_later_iteration(cluster, channel, late_s: float) -> list[dict]:
    """Rank 0 issues an allreduce in iteration 0 and waits for it in iteration 1 (as SGP's overlap
    does); rank 1 posts it ``late_s`` into iteration 0. Each iteration's blocked time and split."""
    out = []
    channel.begin_iteration()
    if cluster.rank == 1:
        time.sleep(late_s)
    handle = channel.allreduce(torch.ones(8), async_op=True)
    first = channel.end_iteration()
    channel.begin_iteration()
    handle.wait()
    second = channel.end_iteration()
    for comm in (first, second):
        out.append({"blocked": comm.exposed_s, "peer_wait": comm.peer_wait_s})
    return out


class FakeCompute:
    """A compute timer the program advances by hand, so virtual clocks are exact."""

    def __init__(self) -> None:
        self.seconds = 0.0

    def __call__(self) -> float:
        return self.seconds


def _simulated(channel) -> FakeCompute:
    from dlcomm.comm.clock import VirtualClock

    compute = FakeCompute()
    channel.clock = VirtualClock(compute)
    return compute


def collective_clocks(cluster, channel, compute_s: list[float], numel: int) -> dict:
    """Rank r computes compute_s[r], then one allreduce, then two back-to-back async ones."""
    compute = _simulated(channel)
    channel.begin_iteration()
    compute.seconds += compute_s[cluster.rank]
    handle = channel.allreduce(torch.full((numel,), float(cluster.rank)), async_op=True)
    result = handle.wait()
    out = {
        "entry": handle.record.start,
        "end": handle.record.end,
        "modelled": handle.record.modelled_s,
        "after": channel.clock.now(),
        "mean": float(result[0]),
    }
    first = channel.allreduce(torch.ones(numel), async_op=True)
    second = channel.allreduce(torch.ones(numel // 2), async_op=True)
    second.wait()  # waited first: the first must still be resolved before it
    first.wait()
    out["first"] = (first.record.ready, first.record.end)
    out["second"] = (second.record.ready, second.record.end, second.record.modelled_s)
    out["after_both"] = channel.clock.now()
    stats = channel.end_iteration()
    out["iteration"] = (stats.clock_time_s, stats.clock_exposed_s, stats.modelled_s, stats.exposed_s)
    return out


def p2p_clocks(cluster, channel, compute_s: list[float], numel: int) -> dict:
    """Rank 0 sends to rank 1 after compute_s[0]; rank 1 receives after compute_s[1]."""
    compute = _simulated(channel)
    channel.begin_iteration()
    compute.seconds += compute_s[cluster.rank]
    out: dict = {}
    if cluster.rank == 0:
        (handle,) = channel.exchange(sends=[(torch.arange(numel, dtype=torch.float32), 1)]).handles
        handle.wait()
    else:
        buffer = torch.zeros(numel)
        (handle,) = channel.exchange(recvs=[(buffer, 0)]).handles
        handle.wait()
        out["payload_ok"] = bool(torch.equal(buffer, torch.arange(numel, dtype=torch.float32)))
    out.update(
        start=handle.record.start,
        ready=handle.record.ready,
        end=handle.record.end,
        modelled=handle.record.modelled_s,
        after=channel.clock.now(),
        exposed=handle.record.exposed_s,
    )
    channel.end_iteration()
    return out


def emulated_allreduce(cluster, channel, numel: int, repeats: int) -> list[tuple[float, float, float]]:
    """(wall seconds from all ranks ready to the wait's return, modelled seconds, overran) per op."""
    measured = []
    for _ in range(repeats):
        channel.barrier()
        channel.begin_iteration()
        handle = channel.allreduce(torch.ones(numel), async_op=True)
        handle.wait()
        returned = time.perf_counter()
        channel.end_iteration()
        measured.append((returned - handle.record.ready, handle.record.modelled_s, handle.record.overran))
    return measured


def unmodelled_outside_iterations(cluster, channel) -> tuple[float, float]:
    """An allreduce outside an iteration is recorded but not modelled."""
    handle = channel.allreduce(torch.ones(1000), async_op=True)
    handle.wait()
    return handle.record.modelled_s, handle.record.end


def broadcast_and_allgather_clocks(cluster, channel, compute_s: list[float], numel: int) -> dict:
    """A simulated broadcast from rank 1, then an all-gather of each rank's id."""
    compute = _simulated(channel)
    channel.begin_iteration()
    compute.seconds += compute_s[cluster.rank]
    payload = torch.full((numel,), float(cluster.rank))
    handle = channel.broadcast(payload, src=1, async_op=True)
    handle.wait()
    gathered = channel.allgather(torch.tensor([float(cluster.rank)]))
    channel.end_iteration()
    return {
        "value": float(payload[0]),
        "broadcast": (handle.record.start, handle.record.end, handle.record.modelled_s),
        "gathered": [float(t[0]) for t in gathered],
        "after": channel.clock.now(),
    }


# ---- the gossip family ---------------------------------------------------------------------


def _gossip_algorithm(name: str, cluster, channel, **knobs):
    from dlcomm.algorithms.registry import ALGORITHMS

    cls = ALGORITHMS.get(name)
    return cls(cls.Config(**knobs), cluster, channel, seed=5)


def gossip_step_keeps_the_mean(cluster, channel, name: str, knobs: dict, steps: int) -> list:
    """Replicas made different, then ``steps`` steps with lr = 0: this rank's parameters before and after each."""
    model = _model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
    algorithm = _gossip_algorithm(name, cluster, channel, **knobs)
    algorithm.setup(model, optimizer)
    with torch.no_grad():
        noise = torch.Generator().manual_seed(300 + cluster.rank)
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=noise))
    generator = torch.Generator().manual_seed(400 + cluster.rank)
    states = [_flat(model).numpy().copy()]
    for step in range(steps):
        inputs, labels = _batch(generator)
        hooked_step(algorithm, model, optimizer, cross_entropy_loss, inputs, labels, step)
        states.append(_flat(model).numpy().copy())
    return states


def sgp_push_sum(cluster, channel, steps: int) -> list:
    """SGP with unequal weights (w_i = 1 + rank) and lr = 0: per step, (x_i, w_i, z_i)."""
    model = _model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
    algorithm = _gossip_algorithm("sgp", cluster, channel, cycle="power2")
    algorithm.setup(model, optimizer)
    with torch.no_grad():
        algorithm.buffer[-1] = 1.0 + cluster.rank
        algorithm.params.copy_(
            torch.randn(algorithm.params.shape, generator=torch.Generator().manual_seed(cluster.rank))
        )
    generator = torch.Generator().manual_seed(500 + cluster.rank)
    history = []
    for step in range(steps + 1):
        z = _flat(model).numpy().copy()
        history.append((z * algorithm.weight, algorithm.weight, z))
        if step < steps:
            inputs, labels = _batch(generator)
            hooked_step(algorithm, model, optimizer, cross_entropy_loss, inputs, labels, step)
    return history


def crossover_hier_steps(cluster, channel, steps: int) -> list:
    """Real training steps of crossover_hier: this rank's parameters after each."""
    model = _model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    algorithm = _gossip_algorithm("crossover_hier", cluster, channel)
    algorithm.setup(model, optimizer)
    generator = torch.Generator().manual_seed(600 + cluster.rank)
    states = []
    for step in range(steps):
        inputs, labels = _batch(generator)
        hooked_step(algorithm, model, optimizer, cross_entropy_loss, inputs, labels, step)
        states.append(_flat(model).numpy().copy())
    return states


def crossover_sources(cluster, channel, steps: int, segments: int) -> list:
    """The source lists this rank computes alone for every step and segment."""
    from dlcomm.algorithms.crossover import CrossoverGossip

    gossip = CrossoverGossip(
        channel, [torch.zeros(1)] * segments, list(range(cluster.world_size)), cluster.rank, fair=True, seed=11
    )
    return [gossip.sources(step, k) for step in range(steps) for k in range(segments)]


# ---- group schemes -------------------------------------------------------------------------


def node_based_steps(cluster, channel, k_prime: int, per_epoch: int, epochs: int, total: int = 0) -> dict:
    """node_based with BatchNorm: parameters+buffers after each step and the global exchanges per epoch;
    ``total``: the run's steps when it is cut within an epoch (train.max_steps)."""
    model = _model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    algorithm = _gossip_algorithm("node_based", cluster, channel, k_prime=k_prime)
    algorithm.setup(model, optimizer)
    total = total or per_epoch * epochs
    algorithm.plan(per_epoch, total)
    generator = torch.Generator().manual_seed(700 + cluster.rank)
    states, consensus, exchanges = [], [], []
    step = 0
    for epoch in range(epochs):
        count = 0
        for _ in range(min(per_epoch, total - step)):
            inputs, labels = _batch(generator)
            channel.begin_iteration()
            hooked_step(algorithm, model, optimizer, cross_entropy_loss, inputs, labels, step)
            records = channel.end_iteration().records
            count += sum(1 for r in records if r.kind == "allreduce" and r.group == "world") > 0
            state = torch.cat(
                [_flat(model)] + [b.reshape(-1).float() for b in model.buffers() if b.is_floating_point()]
            )
            states.append(state.numpy().copy())
            consensus.append(algorithm.consensus_after(step))
            step += 1
        exchanges.append(count)
    return {"states": states, "consensus": consensus, "exchanges": exchanges}


def sesgd_steps(cluster, channel, name: str, knobs: dict, steps: int) -> dict:
    model = _model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    algorithm = _gossip_algorithm(name, cluster, channel, **knobs)
    algorithm.setup(model, optimizer)
    generator = torch.Generator().manual_seed(800 + cluster.rank)
    states, groups = [], []
    for step in range(steps):
        inputs, labels = _batch(generator)
        hooked_step(algorithm, model, optimizer, cross_entropy_loss, inputs, labels, step)
        states.append(_flat(model).numpy().copy())
        groups.append(algorithm.group(step))
    return {"states": states, "groups": groups}


def hier_vs_flat_allreduce(cluster, channel, steps: int) -> float:
    """Max |allreduce_hier - allreduce| over parameters after ``steps`` steps on the same data."""
    from dlcomm.algorithms.allreduce import Allreduce, AllreduceConfig
    from dlcomm.algorithms.allreduce_hier import AllreduceHier, AllreduceHierConfig

    hier, flat = _model(), _model()
    hier_opt = torch.optim.SGD(hier.parameters(), lr=0.1, momentum=0.9)
    flat_opt = torch.optim.SGD(flat.parameters(), lr=0.1, momentum=0.9)
    hier_alg = AllreduceHier(AllreduceHierConfig(bucket_mb=0.05), cluster, channel)
    flat_alg = Allreduce(AllreduceConfig(), cluster, channel)
    hier_alg.setup(hier, hier_opt)
    flat_alg.setup(flat, flat_opt)
    generator = torch.Generator().manual_seed(900 + cluster.rank)
    for step in range(steps):
        inputs, labels = _batch(generator)
        hooked_step(hier_alg, hier, hier_opt, cross_entropy_loss, inputs, labels, step)
        hooked_step(flat_alg, flat, flat_opt, cross_entropy_loss, inputs, labels, step)
    return float((_flat(hier) - _flat(flat)).abs().max())


def gossip_pull_run(cluster, channel, knobs: dict, steps: int, step_sleep_s: float = 0.0) -> dict:
    """Workers: ``steps`` steps of gossip_pull on a tiny model (sleeping ``step_sleep_s`` per step
    so that windows overlap in time), then ``finish``; the manager: ``serve``. What each saw."""
    from dlcomm.algorithms.gossip_pull import GossipPull, GossipPullConfig

    algorithm = GossipPull(GossipPullConfig(**knobs), cluster, channel, seed=3)
    model = _model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    if cluster.role == "manager":
        algorithm.serve("manager", model, optimizer)
        return {"role": "manager"}
    algorithm.setup(model, optimizer)
    generator = torch.Generator().manual_seed(500 + cluster.rank)
    for step in range(steps):
        inputs, labels = _batch(generator)
        channel.begin_iteration()
        hooked_step(algorithm, model, optimizer, cross_entropy_loss, inputs, labels, step)
        channel.end_iteration()
        time.sleep(step_sleep_s * (1 + cluster.rank % 3))
    algorithm.finish()
    stats = algorithm.stats
    return {
        "role": "worker",
        "holds": [(h.peer, h.granted, h.released) for h in stats.holds],
        "pulls": stats.pulls,
        "skipped": stats.skipped_windows,
        "conflicts": stats.conflicts,
        "resolved": stats.resolved,
        "staleness": stats.staleness_steps,
        "pending": algorithm.pending,
        "assigned": algorithm.assigned,
        "reserved_by": algorithm.reserved_by,
    }


def ps_run(
    cluster, channel, name: str, knobs: dict, steps: int, pause_s: float = 0.0, compress: dict | None = None
) -> dict:
    """``steps`` parameter-server steps on the tiny model; the workers report what went each way.
    Workers pause ``pause_s`` seconds after the first step (as if evaluating); ``compress``: the
    compressor's knobs (``compress=<name>``)."""
    from dlcomm.algorithms.ps import ParameterServer
    from dlcomm.algorithms.registry import ALGORITHMS
    from dlcomm.compress.registry import COMPRESSORS

    cls = ALGORITHMS.get(name)
    codec = None if compress is None else COMPRESSORS.get(compress["name"]).Config(**compress)
    algorithm = cls(cls.Config(**knobs), cluster, channel, seed=3, compress=codec)
    assert isinstance(algorithm, ParameterServer), name
    torch.manual_seed(0)
    model = _model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    if cluster.role == "server":
        algorithm.serve("server", model, optimizer)
        return {"role": "server"}
    algorithm.setup(model, optimizer)
    generator = torch.Generator().manual_seed(700 + cluster.rank)
    unchanged_moved = 0  # layers the server did not send back that moved on this worker anyway
    for step in range(steps):
        inputs, labels = _batch(generator)
        before = [p.detach().clone() for p in model.parameters()]
        channel.begin_iteration()
        hooked_step(algorithm, model, optimizer, cross_entropy_loss, inputs, labels, step)
        channel.end_iteration()
        for old, new, changed in zip(before, model.parameters(), algorithm.stats.changed[-1]):
            unchanged_moved += int(not changed and not torch.equal(old, new))
        if step == 0:
            time.sleep(pause_s)
    algorithm.finish()
    return {
        "stats": algorithm.stats,
        "sizes": [p.numel() for p in model.parameters()],
        "final": _flat(model).numpy().copy(),
        "unchanged_moved": unchanged_moved,
    }


def control_quiet_spell(cluster, channel, quiet_s: float) -> tuple[int, list[float]] | None:
    """Two ranks with responders; rank 1 says nothing for ``quiet_s`` seconds, then one message.
    What rank 0 received (None on rank 1), and whether a collective on the workers' group still works after."""
    from dlcomm.comm.control import ControlPlane

    control = ControlPlane(channel)
    peer = 1 - cluster.rank
    control.start([peer])
    received = None
    if cluster.rank == 1:
        time.sleep(quiet_s)
        control.send(0, 7.0, 42.0)
    else:
        received = control.inbox.get(timeout=60)
    channel.barrier()
    control.close([peer])
    return received


# ---- modelled communication per iteration, every algorithm -----------------------------------


def _mlp() -> torch.nn.Module:
    """Two linear layers: parameter tensors of 96, 6, 24 and 4 floats (segments of 408 and 112 bytes)."""
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(16, 6), torch.nn.ReLU(), torch.nn.Linear(6, 4))


def modelled_comm_per_step(cluster, channel, cases: list) -> list[dict]:
    """For each ``(name, knobs, steps)`` in turn, on the same ranks: ``steps`` steps of algorithm
    ``name`` on the two-layer model, and the Channel's modelled communication of each iteration
    on this rank (workers; a service role serves)."""
    from dlcomm.algorithms.registry import ALGORITHMS

    results = []
    for name, knobs, steps in cases:
        cls = ALGORITHMS.get(name)
        algorithm = cls(cls.Config(**knobs), cluster, channel, seed=9)
        model = _mlp()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
        if cluster.role != "worker":
            algorithm.serve(cluster.role, model, optimizer)
            results.append({"role": cluster.role})
            continue
        algorithm.plan(steps_per_epoch=steps, total_steps=steps)
        algorithm.setup(model, optimizer)
        generator = torch.Generator().manual_seed(800 + cluster.rank)
        modelled = []
        for step in range(steps):
            inputs, labels = torch.randn(8, 16, generator=generator), torch.randint(0, 4, (8,), generator=generator)
            channel.begin_iteration()
            hooked_step(algorithm, model, optimizer, cross_entropy_loss, inputs, labels, step)
            modelled.append(channel.end_iteration().modelled_s)
        algorithm.finish()
        channel.barrier()  # nothing of this algorithm still in flight when the next one starts
        stats = getattr(algorithm, "stats", None)
        results.append(
            {"role": "worker", "modelled": modelled, "leader": cluster.is_leader, "sent": getattr(stats, "sent", None)}
        )
    return results


def reductions_of(cluster, channel, sizes: list[int]) -> list:
    """Per size: this rank's allreduce (sum) result and, on the last rank, its reduce (sum)
    result, of data with many magnitudes (so that the order of the additions shows in the bits)."""
    out = []
    last = cluster.world_size - 1
    for size in sizes:
        generator = torch.Generator().manual_seed(size * 1_000 + cluster.rank)
        data = torch.randn(size, generator=generator) * torch.exp(5 * torch.randn(size, generator=generator))
        summed = channel.allreduce(data.clone(), average=False)
        reduced = channel.reduce(data.clone(), dst=last)
        out.append((summed if cluster.rank == 0 else None, reduced if cluster.rank == last else None))
    return out


def draws_between_collectives(cluster, channel, rounds: int) -> list[float]:
    """Each rank seeds the global generator with its rank, then alternates draws and allreduces:
    a rank's draws must come from its own stream whatever else runs in between."""
    torch.manual_seed(100 + cluster.rank)
    drawn = []
    for _ in range(rounds):
        value = torch.rand(3)
        drawn.extend(value.tolist())
        channel.allreduce(value)
    return drawn


def fail_while_others_wait(cluster, channel, failing: int) -> None:
    """Rank ``failing`` raises before a collective the others are already blocked in."""
    if cluster.rank == failing:
        time.sleep(0.2)
        raise ValueError(f"rank {failing} fails on purpose")
    channel.allreduce(torch.ones(4))


def messages_in_order(cluster, channel, count: int) -> list:
    """Rank 0 sends ``count`` messages (tag 5) to rank 1 and one (tag 6) to rank 2; rank 1 receives
    them in order; rank 2 receives its one from any source through the transport."""
    transport = cluster.transport
    if cluster.rank == 0:
        works = [transport.isend(torch.full((2,), float(i)), 1, "world", 5) for i in range(count)]
        works.append(transport.isend(torch.full((2,), 42.0), 2, "world", 6))
        for work in works:
            work.wait()
        return []
    if cluster.rank == 1:
        received = []
        for _ in range(count):
            tensor = torch.zeros(2)
            transport.irecv(tensor, 0, "world", 5).wait()
            received.append(float(tensor[0]))
        return received
    tensor = torch.zeros(2)
    work = transport.irecv(tensor, None, "world", 6)
    work.wait()
    return [transport.source_rank(work), float(tensor[0])]


# ---- mixed precision -----------------------------------------------------------------------


def fp16_loss_scales(cluster, channel, name: str, knobs: dict, steps: int, inject: tuple[int, int]) -> dict:
    """``steps`` steps of algorithm ``name`` under fp16 autocast with dynamic loss scaling
    (``torch.amp.GradScaler("cpu")``); rank ``inject[0]`` finds an inf in one gradient entry at
    step ``inject[1]``. This rank's loss scale after each step, and the groups of the one-element
    (found-inf) allreduces it took part in."""
    from dlcomm.train.precision import Precision

    model = _model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    algorithm = _gossip_algorithm(name, cluster, channel, **knobs)
    algorithm.setup(model, optimizer)
    algorithm.plan(steps, steps)
    precision = Precision(True, torch.device("cpu"), "fp16")
    scaler = precision.scaler
    assert scaler is not None  # fp16 scales the loss
    target = next(p for p in model.parameters() if p.requires_grad)
    generator = torch.Generator().manual_seed(900 + cluster.rank)
    scales, flag_groups = [], []
    for step in range(steps):
        inputs, labels = _batch(generator)
        hook = None
        if (cluster.rank, step) == tuple(inject):

            def poison(grad: torch.Tensor) -> torch.Tensor:
                grad = grad.clone()
                grad.view(-1)[0] = float("inf")
                return grad

            hook = target.register_hook(poison)
        channel.begin_iteration()
        hooked_step(algorithm, model, optimizer, cross_entropy_loss, inputs, labels, step, precision=precision)
        records = channel.end_iteration().records
        flag_groups += [r.group for r in records if r.kind == "allreduce" and r.payload_bytes == 4]
        if hook is not None:
            hook.remove()
        scales.append(float(scaler.get_scale()))
    algorithm.finish()
    return {"scales": scales, "flag_groups": flag_groups}


def train_untracked(cluster, channel, spec, data) -> dict:
    """A whole rank of ``spec`` (``train_rank``: model, algorithm, the training loop, services
    serving) with nothing recorded in MLflow; the summary, and the final parameters when the
    rank is a worker (``train.save_model`` writes them into ``spec.run_dir``)."""
    from dlcomm.launch.rank import train_rank

    summary = train_rank(spec, cluster, data=data, track=False)
    saved = Path(spec.run_dir) / f"model_rank{cluster.rank}.pt"
    params = torch.load(saved) if saved.exists() else {}
    return {"summary": summary, "params": params}


def hand_ordered_ring(cluster, channel, numel: int) -> float:
    """The exchange the exchange primitive exists to prevent: every rank sends to its right and
    then receives from its left, each message on its own (sends before receives, no batch)."""
    transport, n, rank = cluster.transport, cluster.world_size, cluster.rank
    outgoing, incoming = torch.full((numel,), float(rank)), torch.zeros(numel)
    send = transport.isend(outgoing, (rank + 1) % n, "world", 0)
    receive = transport.irecv(incoming, (rank - 1) % n, "world", 0)
    send.wait()
    receive.wait()
    return float(incoming[0])


def batched_ring(cluster, channel, numel: int) -> float:
    """The same ring through the Channel's exchange: one batch per rank."""
    n, rank = cluster.world_size, cluster.rank
    outgoing, incoming = torch.full((numel,), float(rank)), torch.zeros(numel)
    channel.exchange([(outgoing, (rank + 1) % n)], [(incoming, (rank - 1) % n)]).wait()
    return float(incoming[0])


def mismatched_pair_order(cluster, channel) -> None:
    """Rank 0 sends a small then a large message to rank 1, which receives them the other way
    round: gloo matches by tag and would not notice; NCCL matches a pair's messages in order."""
    if cluster.rank == 0:
        channel.exchange([(torch.zeros(2), 1), (torch.zeros(8), 1)]).wait()
    elif cluster.rank == 1:
        channel.exchange(recvs=[(torch.zeros(8), 0), (torch.zeros(2), 0)]).wait()


def compressed_allreduce_vs_ddp_hook(
    cluster, channel, compress: dict, steps: int, hook: str, reference: dict | None = None
) -> float:
    """Max |ours - DDP| over parameters after ``steps`` SGD-momentum steps on per-rank data, ours
    ``algo=allreduce`` with the compressor ``compress`` (its knobs as composed) in one bucket,
    DDP's with torch's comm hook ``hook`` (``powersgd``, ``fp16``, ``bf16``) with the same knobs
    (``reference``: other knobs for DDP's, to see a changed detail tell them apart)."""
    knobs = {**compress, **(reference or {})}
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook
    from torch.nn.parallel import DistributedDataParallel

    from dlcomm.compress.registry import COMPRESSORS

    compressor_cls = COMPRESSORS.get(compress["name"])
    ours = _model()
    reference_model = copy.deepcopy(ours)
    ddp = DistributedDataParallel(reference_model, bucket_cap_mb=25)
    if hook == "powersgd":
        state = powerSGD_hook.PowerSGDState(
            process_group=None,
            matrix_approximation_rank=knobs["rank"],
            start_powerSGD_iter=knobs["start_iter"],
            min_compression_rate=knobs["min_compression_rate"],
            use_error_feedback=knobs["error_feedback"],
            warm_start=knobs["warm_start"],
            random_seed=knobs["random_seed"],
        )
        ddp.register_comm_hook(state, powerSGD_hook.powerSGD_hook)
    else:
        ddp.register_comm_hook(
            None, {"fp16": default_hooks.fp16_compress_hook, "bf16": default_hooks.bf16_compress_hook}[hook]
        )
    ours_opt = torch.optim.SGD(ours.parameters(), lr=0.1, momentum=0.9)
    ddp_opt = torch.optim.SGD(ddp.parameters(), lr=0.1, momentum=0.9)
    algorithm = Allreduce(AllreduceConfig(bucket_mb=25.0), cluster, channel, compress=compressor_cls.Config(**compress))
    algorithm.setup(ours, ours_opt)
    generator = torch.Generator().manual_seed(300 + cluster.rank)
    for step in range(steps):
        inputs, labels = _batch(generator)
        hooked_step(algorithm, ours, ours_opt, cross_entropy_loss, inputs, labels, step)
        ddp_opt.zero_grad(set_to_none=True)
        F.cross_entropy(ddp(inputs), labels).backward()
        ddp_opt.step()
    return float((_flat(ours) - _flat(reference_model)).abs().max())


def compressed_trajectory(
    cluster,
    channel,
    compress: dict,
    steps: int,
    bucket_mb: float = 25.0,
    algo: str = "allreduce",
    knobs: dict | None = None,
) -> dict:
    """This rank's parameters after ``steps`` steps of ``algo`` (its ``knobs``, ``bucket_mb``) with
    the compressor ``compress``, and each iteration's bytes sent and modelled communication time."""
    from dlcomm.algorithms.registry import ALGORITHMS
    from dlcomm.compress.registry import COMPRESSORS

    model = _model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    cls = ALGORITHMS.get(algo)
    sizes: dict[str, Any] = {"bucket_mb": bucket_mb} if "bucket_mb" in cls.Config.__dataclass_fields__ else {}
    algorithm = cls(
        cls.Config(**sizes, **(knobs or {})),
        cluster,
        channel,
        compress=COMPRESSORS.get(compress["name"]).Config(**compress),
    )
    algorithm.setup(model, optimizer)
    generator = torch.Generator().manual_seed(400 + cluster.rank)
    sent, modelled = [], []
    for step in range(steps):
        inputs, labels = _batch(generator)
        channel.begin_iteration()
        hooked_step(algorithm, model, optimizer, cross_entropy_loss, inputs, labels, step)
        stats = channel.end_iteration()
        sent.append(stats.bytes_sent)
        modelled.append(stats.modelled_s)
    buckets = [[p.numel() for p in bucket.params] for bucket in getattr(algorithm, "buckets", [])]
    return {"params": _flat(model).numpy().copy(), "bytes": sent, "modelled": modelled, "buckets": buckets}


def choco_rounds(cluster, channel, compress: dict, rounds: int, gamma: float) -> dict:
    """``rounds`` of D-PSGD's gossip with ``compress`` (CHOCO-Gossip) from this rank's own random
    parameters, no training step between: the parameters before and after."""
    from dlcomm.algorithms.dpsgd import DPSGD, DPSGDConfig
    from dlcomm.compress.registry import COMPRESSORS

    model = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.Linear(5, 3))
    algorithm = DPSGD(
        DPSGDConfig(gamma=gamma), cluster, channel, compress=COMPRESSORS.get(compress["name"]).Config(**compress)
    )
    algorithm.setup(model, torch.optim.SGD(model.parameters(), lr=0.1))
    with torch.no_grad():
        algorithm.buffers[0].copy_(
            torch.randn(algorithm.buffers[0].numel(), generator=torch.Generator().manual_seed(cluster.rank))
        )
    before = algorithm.buffers[0].clone()
    for step in range(rounds):
        algorithm.after_step(step)
    return {"before": before.numpy().copy(), "after": algorithm.buffers[0].numpy().copy()}


def _gossip_rounds(algorithm, model: torch.nn.Module, rank: int, rounds: int) -> dict:
    """Set ``algorithm`` up on ``model``, fill its buffers with this rank's own random numbers, run
    ``rounds`` of its averaging with no training step between: each buffer before and after."""
    algorithm.setup(model, torch.optim.SGD(model.parameters(), lr=0.1))
    generator = torch.Generator().manual_seed(rank)
    with torch.no_grad():
        for buffer in algorithm.buffers:
            buffer.copy_(torch.randn(buffer.numel(), generator=generator))
    before = [buffer.numpy().copy() for buffer in algorithm.buffers]
    for step in range(rounds):
        algorithm.after_step(step)
    return {"before": before, "after": [buffer.numpy().copy() for buffer in algorithm.buffers]}


def crossover_choco_rounds(cluster, channel, compress: dict, rounds: int, gamma: float, seed: int = 5) -> dict:
    """``rounds`` of Crossover-SGD's gossip (two segments: the two layers) with ``compress``, from
    this rank's own random parameters, no training step between: each segment before and after."""
    from dlcomm.algorithms.crossover import Crossover, CrossoverConfig
    from dlcomm.compress.registry import COMPRESSORS

    model = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.Linear(5, 3))
    algorithm = Crossover(
        CrossoverConfig(gamma=gamma),
        cluster,
        channel,
        seed=seed,
        compress=COMPRESSORS.get(compress["name"]).Config(**compress),
    )
    return _gossip_rounds(algorithm, model, cluster.rank, rounds)


def sgp_choco_rounds(cluster, channel, compress: dict, rounds: int, overlap: bool = False) -> dict:
    """``rounds`` of SGP's push-sum (the optimizer's step left out: the numerator re-biased and
    pushed) with ``compress``, from this rank's own random parameters and weight 1: the numerator
    before, and the numerator and weight after (in-flight messages added: ``end_epoch``)."""
    from dlcomm.algorithms.sgp import SGP, SGPConfig
    from dlcomm.compress.registry import COMPRESSORS

    model = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.Linear(5, 3))
    algorithm = SGP(
        SGPConfig(overlap=overlap), cluster, channel, compress=COMPRESSORS.get(compress["name"]).Config(**compress)
    )
    algorithm.setup(model, torch.optim.SGD(model.parameters(), lr=0.1))
    with torch.no_grad():
        algorithm.params.copy_(
            torch.randn(algorithm.params.numel(), generator=torch.Generator().manual_seed(cluster.rank))
        )
    before = algorithm.params.numpy().copy()
    for step in range(rounds):
        algorithm.reduce_gradients(step)  # z -> x
        algorithm.after_step(step)  # push, x -> z
    algorithm.end_epoch(0)
    weight = algorithm.weight
    return {"before": before, "after": algorithm.params.numpy().copy() * weight, "weight": weight}


def sesgd_choco_rounds(cluster, channel, compress: dict, rounds: int, gamma: float, groups: int, seed: int = 5) -> dict:
    """``rounds`` of SESGD's shuffled group averaging (one bucket per parameter tensor) with
    ``compress``, from this rank's own random parameters, no training step between: each bucket
    before and after."""
    from dlcomm.algorithms.sesgd import SESGD, SESGDConfig
    from dlcomm.compress.registry import COMPRESSORS

    model = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.Linear(5, 3))
    algorithm = SESGD(
        SESGDConfig(groups=groups, gamma=gamma),
        cluster,
        channel,
        seed=seed,
        compress=COMPRESSORS.get(compress["name"]).Config(**compress),
    )
    return _gossip_rounds(algorithm, model, cluster.rank, rounds)


def compressed_resume(
    cluster, channel, compress: dict, steps: int, split: int, algo: str = "allreduce", knobs: dict | None = None
) -> dict:
    """``steps`` steps straight, and ``split`` steps, a checkpoint of the algorithm's state, model
    and optimizer through ``torch.save`` / ``torch.load(weights_only=True)`` into fresh objects,
    then the rest: this rank's parameters both ways."""
    import io

    from dlcomm.algorithms.base import Algorithm
    from dlcomm.algorithms.registry import ALGORITHMS
    from dlcomm.compress.registry import COMPRESSORS

    def fresh() -> tuple[torch.nn.Module, torch.optim.Optimizer, Algorithm]:
        model = _model()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
        cls = ALGORITHMS.get(algo)
        codec = COMPRESSORS.get(compress["name"]).Config(**compress)
        algorithm = cls(cls.Config(**(knobs or {})), cluster, channel, compress=codec)
        algorithm.setup(model, optimizer)
        return model, optimizer, algorithm

    def run(model, optimizer, algorithm, first: int, last: int) -> None:
        for step in range(first, last):
            generator = torch.Generator().manual_seed(500 + 1000 * step + cluster.rank)
            inputs, labels = _batch(generator)
            hooked_step(algorithm, model, optimizer, cross_entropy_loss, inputs, labels, step)

    straight = fresh()
    run(*straight, 0, steps)
    first = fresh()
    run(*first, 0, split)
    buffer = io.BytesIO()
    torch.save({"model": first[0].state_dict(), "optim": first[1].state_dict(), "algo": first[2].state_dict()}, buffer)
    buffer.seek(0)
    saved = torch.load(buffer, weights_only=True)
    resumed = fresh()
    resumed[0].load_state_dict(saved["model"])
    resumed[1].load_state_dict(saved["optim"])
    resumed[2].load_state_dict(saved["algo"])
    run(*resumed, split, steps)
    return {"straight": _flat(straight[0]).numpy().copy(), "resumed": _flat(resumed[0]).numpy().copy()}


class _FreedAfter:
    """Holds the thread that frees it until ``event`` is set (10 s at most), while what was freed
    beside it still waits."""

    def __init__(self, event: threading.Event) -> None:
        self.event = event

    def __del__(self) -> None:
        self.event.wait(timeout=10.0)


def _callback_holding(group, slow: _FreedAfter):
    # a tuple's items are freed last first: ``slow`` waits while ``group`` is still held
    def callback(future, held=(group, slow)):
        return future.value()

    return callback


def group_freed_on_a_gloo_thread(cluster, channel, held: bool) -> float:
    """An all-reduce whose ``then`` callback holds the world group, as ``powerSGD_hook``'s do: gloo
    frees the callback on its worker thread, and here that free waits until this rank has returned,
    its job been closed and its process reached a multiprocessing exit finalizer, which then stays
    2 s. Unless the main thread still holds the group (``held``: the harness's hold; not ``held``: the
    hold undone in that finalizer, before it lets the free go on), the worker's reference is the last.
    The order is made by an event, not by sleeps: timed, a loaded machine once let the free come
    first (CI at 07667b4: "DID NOT RAISE" with the suite alone)."""
    from multiprocessing import util

    import torch.distributed as dist

    from dlcomm.launch import harness

    on_its_way_out = threading.Event()

    def on_the_way_out() -> None:
        if not held:
            harness._HELD_UNTIL_EXIT.clear()
        on_its_way_out.set()
        time.sleep(2.0)

    util.Finalize(None, on_the_way_out, exitpriority=100)
    total = torch.ones(1)
    work = dist.all_reduce(total, group=dist.group.WORLD, async_op=True)
    chained = work.get_future().then(_callback_holding(dist.group.WORLD, _FreedAfter(on_its_way_out)))
    return float(chained.wait()[0][0])


def abort_on(cluster, channel, aborting: int) -> int:
    """Rank ``aborting`` ends its process at once (``SIGABRT``, as a C++ ``terminate`` does), no
    result sent; the others return their rank."""
    import os

    if cluster.rank == aborting:
        os.abort()
    return cluster.rank


def train_until_warned(cluster, channel, spec, folder: str | None, stop_at: int | None, algorithm_class):
    """One run as dlcomm.launch.rank runs it (the train loop, algorithm ``algorithm_class``) on what a
    rank gets: the typed configuration of ``spec`` (a :class:`~dlcomm.spec.RunSpec`, pickled to the
    rank as the launchers pickle it; ``spec.cfg()`` as :func:`dlcomm.launch.rank.train_rank` reads it),
    with checkpoints in ``folder`` (None: none) and the scheduler's warning signal arriving while the
    loop runs step ``stop_at`` (0-based; None: never), so the check after it stops the run:
    ``(loop, algorithm, model, the loop's summary, the step it stopped after)``, the last None for a
    run that finished and the summary None for one that stopped."""
    from dlcomm.config.schema import RunConfig
    from dlcomm.data import build_dataset
    from dlcomm.tasks import build_task
    from dlcomm.train.checkpoint import Checkpointing, Preempted
    from dlcomm.train.loop import TrainLoop
    from dlcomm.train.optim import build_optimizer, build_scheduler
    from dlcomm.train.plan import plan_steps

    class Flag:
        @property
        def raised(self) -> bool:
            return stop_at is not None and loop.state.step > stop_at

    cfg = spec.cfg()
    assert isinstance(cfg, RunConfig), type(cfg)  # the typed run, not a DictConfig
    data, task = build_dataset(cfg.dataset), build_task(cfg)
    torch.manual_seed(cfg.seed)
    model = task.build_model(cfg.model, data)
    optimizer = build_optimizer(cfg.optim, task.param_groups(model, cfg.optim))
    algorithm = algorithm_class(cfg.algo, cluster, channel, seed=cfg.seed, compress=cfg.compress)
    algorithm.setup(model, optimizer)
    per_epoch, total = plan_steps(cfg.train, data.train_size, cluster.world_size)
    scheduler = build_scheduler(cfg.optim, optimizer, per_epoch, total)
    checkpointing = (
        Checkpointing(Path(folder), cluster.rank, torch.device("cpu"), Flag(), check_every=1) if folder else None
    )
    loop = TrainLoop(cfg, channel, algorithm, model, optimizer, scheduler, data, None, checkpointing, task)
    try:
        summary = loop.run()
    except Preempted as stopped:
        return loop, algorithm, model, None, stopped.step
    return loop, algorithm, model, summary, None


#: A small job whose checkpoints the resume tests take apart: 2 workers, an MLP on 256 synthetic
#: samples, 3 epochs of 4 steps each (``run_spec([*SMALL_JOB, "algo=...", ...])``).
SMALL_JOB = [
    "nodes=2",
    "model=mlp",
    "dataset=synthetic",
    "dataset.train_size=256",
    "dataset.test_size=64",
    "train.batch_size=32",
    "train.epochs=3",
    "train.eval_batch_size=64",
]


#: A one-epoch job of a few steps (add ``train.max_steps=N``) on 512 synthetic samples: an MLP,
#: batches of 8, one thread a rank, the model saved (the NCCL-semantics and batched-compute runs).
FEW_STEPS_JOB = [
    "dataset=synthetic",
    "dataset.train_size=512",
    "dataset.test_size=64",
    "train.eval_batch_size=64",
    "model=mlp",
    "train.batch_size=8",
    "train.epochs=1",
    "train.save_model=true",
    "train.threads_per_rank=1",
    "seed=7",
]


def run_spec(overrides: list[str]):
    """The :class:`~dlcomm.spec.RunSpec` a launcher hands its ranks for ``overrides`` (composed and
    checked as ``dlcomm train`` composes them; recorded nowhere)."""
    from dlcomm.compose import compose
    from dlcomm.spec import RunSpec

    return RunSpec.from_config(compose(overrides), tracking_uri="")


def straight_stopped_resumed(run, cluster, channel, spec, folder: str, stop_at: int) -> dict:
    """``run(cluster, channel, spec, folder, stop_at)`` three times: without checkpoints, stopped
    by the warning after step ``stop_at``, then resumed from that checkpoint."""
    return {
        "straight": run(cluster, channel, spec, None, None),
        "stopped": run(cluster, channel, spec, folder, stop_at),
        "resumed": run(cluster, channel, spec, folder, None),
    }


def resumed_three_ways(
    cluster, channel, spec, folder: str, stop_at: int, algorithm_class, state: tuple, in_flight=False, more=None
) -> dict:
    """:func:`straight_stopped_resumed` of :func:`train_until_warned` with ``algorithm_class``: a
    finished run's flat parameters (``"params"``), each attribute in ``state`` of the algorithm
    (its tensors flattened and concatenated) and ``more(spec, algorithm, model)``'s entries; the
    stopped run's step (``"stopped"``) and, where ``in_flight``, whether an exchange was in flight."""

    def run(cluster, channel, spec, folder: str | None, stop_at: int | None) -> dict:
        _, algorithm, model, _, stopped = train_until_warned(cluster, channel, spec, folder, stop_at, algorithm_class)
        if stopped is not None:
            return {"stopped": stopped, **({"in_flight": algorithm.in_flight is not None} if in_flight else {})}
        result = {"params": flat(model), **{name: flat_tensors(getattr(algorithm, name)) for name in state}}
        return {**result, **(more(spec, algorithm, model) if more is not None else {})}

    return straight_stopped_resumed(run, cluster, channel, spec, folder, stop_at)


def train_counting_all_reduces(cluster, channel, spec, data) -> dict:
    """:func:`train_untracked`, with every ``all_reduce`` the rank asks its transport for kept as
    ``(group, op, numel)`` under ``"all_reduce"``."""
    calls: list[tuple[str, str, int]] = []
    transport = cluster.transport
    real = transport.all_reduce

    def counted(tensor, group, op="sum"):
        calls.append((group, op, tensor.numel()))
        return real(tensor, group, op)

    transport.all_reduce = counted
    try:
        return {**train_untracked(cluster, channel, spec, data), "all_reduce": calls}
    finally:
        del transport.all_reduce


def answers_between_iterations(cluster, channel) -> dict:
    """Pull answers recorded as a responder thread records them (phase "serve"): one inside an
    iteration, one between two, one after the last; what each iteration's bytes and the count of
    answers say after each."""
    from dlcomm.comm import traffic

    def answer(nbytes: int) -> None:
        channel.record("serve", "job", nbytes, traffic.point_to_point_traffic(nbytes), phase="serve")

    seen = []
    channel.begin_iteration()
    answer(100)
    seen.append((channel.end_iteration().bytes_sent, channel.answers_counted))
    answer(30)  # between the iterations: the next one holds it
    seen.append(("between", channel.answers_counted))
    channel.begin_iteration()
    seen.append((channel.end_iteration().bytes_sent, channel.answers_counted))
    answer(7)  # after the last iteration: in no iteration's bytes, so not counted
    seen.append(("after", channel.answers_counted))
    return {"seen": seen}
