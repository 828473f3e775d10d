"""Run a Python function on ``world`` real ranks (local processes, gloo on CPU), each joined
through dlcomm's Cluster and given a Channel: for tests and benchmarks that exercise the
communication layer without a whole training run.

``fn(cluster, channel, *args)`` must be importable (a module-level function) and return a
picklable value; :func:`run_ranks` returns the values by rank or raises ``RuntimeError`` with
the failing rank's traceback, or naming the rank whose process ended without its result (a
signal, an abort in C++) as soon as that is known.
"""

from __future__ import annotations

import multiprocessing as mp
import pickle
import queue
import signal
import threading
import time
import traceback
from typing import Any, Callable

import torch

from dlcomm.launch.procstart import rank_processes
from dlcomm.launch.store import join_store, loopback_store

#: What :func:`_hold_process_groups` keeps referenced from the rank's main thread until it exits.
_HELD_UNTIL_EXIT: list[Any] = []
#: Seconds between looks at the rank processes while their results are awaited.
_POLL_S = 1.0


def _entry(
    fn: Callable,
    rank: int,
    nodes: int,
    world: int,
    services: tuple[str, ...],
    port: int,
    threads: int,
    network: dict | None,
    timeout_s: float,
    args: tuple,
    results: mp.Queue,
) -> None:
    from dlcomm.comm.channel import Channel
    from dlcomm.comm.cluster import Cluster
    from dlcomm.comm.layout import ClusterLayout
    from dlcomm.config.schema import NetworkConfig
    from dlcomm.config.typed import typed_section

    torch.set_num_threads(threads)
    try:
        layout = ClusterLayout(nodes, world // nodes, services)
        store = join_store("127.0.0.1", port, layout.job_size)
        cluster = Cluster.connect(layout, rank, store, "gloo", torch.device("cpu"), timeout_s=timeout_s)
        try:
            channel = Channel.for_run(cluster, typed_section(NetworkConfig, network)) if network else Channel(cluster)
            # by value (plain pickle): the queue's own pickler would share a tensor's storage through a
            # descriptor this process serves, and it may have exited by the time the parent asks for it
            results.put((rank, True, pickle.dumps(fn(cluster, channel, *args))))
        finally:
            _hold_process_groups(cluster)
            cluster.close()
    except BaseException:  # noqa: BLE001 - reported to the parent
        results.put((rank, False, traceback.format_exc()))


def _hold_process_groups(cluster: Any) -> None:
    """Keep this rank's process groups referenced from its main thread until the process exits.

    A torch future callback may hold a process group: a DDP communication hook's ``then`` callbacks
    (``powerSGD_hook``'s capture the group they all-reduce on). gloo runs such a callback on one of
    its worker threads and frees it there after marking the chained future done, so the main thread
    may already have closed the job and dropped its references: the worker's is then the last, and
    the group's destructor joins the worker threads from one of them, which C++ refuses
    (``std::system_error: Resource deadlock avoided``, the rank aborted; 1 in ~55 runs of the
    4-rank PowerSGD reference here). A rank process ends in ``os._exit`` (multiprocessing), so a
    group held here is never destroyed at all."""
    import torch.distributed as dist

    _HELD_UNTIL_EXIT.append(cluster)
    if dist.is_initialized():
        _HELD_UNTIL_EXIT.append(dist.group.WORLD)


def _ended_without(processes: list[Any], collected: dict[int, Any]) -> list[int]:
    """The ranks whose process has ended and whose result has not come."""
    return [rank for rank, process in enumerate(processes) if process.exitcode is not None and rank not in collected]


def _how_it_ended(exitcode: int) -> str:
    """``exit code 1``, or the signal's name for a process a signal ended (``SIGABRT``)."""
    if exitcode < 0:
        try:
            return signal.Signals(-exitcode).name
        except ValueError:
            return f"signal {-exitcode}"
    return f"exit code {exitcode}"


def run_ranks(
    fn: Callable,
    world: int,
    *args: Any,
    nodes: int | None = None,
    threads: int = 1,
    timeout: float = 300,
    network: dict | None = None,
    services: tuple[str, ...] = (),
    cluster_timeout_s: float = 300.0,
    in_process: str = "",
    semantics: str = "gloo",
    hang_timeout_s: float = 10.0,
) -> list[Any]:
    """``[fn(cluster_r, channel_r, *args) for r in range(world + len(services))]``, each on its
    own process (ranks ``world ..`` play the ``services`` roles: ``cluster.role``); ``network``
    is a ``network`` config (as composed from ``configs/network/``), None for off;
    ``cluster_timeout_s`` is the process groups' timeout (gloo ends an operation that waits longer).
    ``in_process="serial"``, ``"parallel"`` or ``"batched"``: every rank a thread of this process
    instead, on the in-process fabric with that compute scheduling (``launcher=threads``); ``threads`` is then
    torch's thread count for the whole process, ``semantics`` the fabric's rules (``gloo`` or
    ``nccl``: :mod:`dlcomm.comm.nccl_rules`) and ``hang_timeout_s`` its hang watch's patience; a
    deadlock raises ``RuntimeError`` with the watch's one line."""
    nodes = nodes or world
    if world % nodes:
        raise ValueError(f"world={world} is not a multiple of nodes={nodes}")
    if in_process:
        return _run_in_threads(
            fn,
            world,
            args,
            nodes,
            services,
            network,
            in_process,
            threads,
            timeout,
            semantics,
            hang_timeout_s,
        )
    job = world + len(services)
    store = loopback_store(job)
    context = rank_processes()
    results: mp.Queue = context.Queue()
    processes = [
        context.Process(
            target=_entry,
            args=(fn, rank, nodes, world, services, store.port, threads, network, cluster_timeout_s, args, results),
        )
        for rank in range(job)
    ]
    for process in processes:
        process.start()
    try:
        collected: dict[int, Any] = {}
        deadline = time.monotonic() + timeout
        ended_at_last_look: set[int] = set()
        while len(collected) < job:
            try:
                rank, ok, value = results.get(timeout=_POLL_S)
            except queue.Empty:
                # a process that ended before the last look has had a whole poll to deliver its result
                ended = set(_ended_without(processes, collected))
                if ended & ended_at_last_look:
                    rank = min(ended & ended_at_last_look)
                    exitcode = processes[rank].exitcode
                    assert exitcode is not None  # an ended process (_ended_without)
                    raise RuntimeError(f"rank {rank} ended ({_how_it_ended(exitcode)}) without its result") from None
                ended_at_last_look = ended
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"ranks {sorted(set(range(job)) - set(collected))} gave no result in {timeout} s"
                    ) from None
                continue
            if not ok:
                raise RuntimeError(f"rank {rank} failed:\n{value}")
            collected[rank] = pickle.loads(value)
        for rank, process in enumerate(processes):
            process.join(timeout=10)
            if process.exitcode:
                raise RuntimeError(f"rank {rank} ended ({_how_it_ended(process.exitcode)}) after its result")
        return [collected[rank] for rank in range(job)]
    finally:
        for process in processes:
            process.join(timeout=10)
            if process.is_alive():
                process.kill()


def _run_in_threads(
    fn: Callable,
    world: int,
    args: tuple,
    nodes: int,
    services: tuple[str, ...],
    network: dict | None,
    compute: str,
    threads: int,
    timeout: float,
    semantics: str = "gloo",
    hang_timeout_s: float = 10.0,
) -> list[Any]:
    from dlcomm.comm.channel import Channel
    from dlcomm.comm.cluster import Cluster
    from dlcomm.comm.inprocess import Fabric, JobAborted, Turns
    from dlcomm.comm.layout import ClusterLayout
    from dlcomm.config.schema import NetworkConfig
    from dlcomm.config.typed import typed_section
    from dlcomm.train.batched import BatchedCompute

    layout = ClusterLayout(nodes, world // nodes, services)
    fabric = Fabric(
        Turns(range(layout.job_size)) if compute == "serial" else None,
        semantics=semantics,
        hang_timeout_s=hang_timeout_s,
        ranks=layout.job_size,
        batched=BatchedCompute(world) if compute == "batched" else None,
    )
    results: dict[int, Any] = {}
    errors: dict[int, str] = {}

    def body(rank: int) -> None:
        if fabric.turns is not None:
            fabric.turns.begin(rank)
        try:
            cluster = Cluster.in_process(layout, rank, fabric, torch.device("cpu"))
            channel = Channel.for_run(cluster, typed_section(NetworkConfig, network)) if network else Channel(cluster)
            results[rank] = fn(cluster, channel, *args)
        except JobAborted:
            pass
        except BaseException:  # noqa: BLE001 - reported to the caller
            errors[rank] = traceback.format_exc()
            fabric.abort(f"rank {rank} failed")
        finally:
            fabric.leave(rank)
            if fabric.turns is not None:
                fabric.turns.end(rank)

    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    workers = [threading.Thread(target=body, args=(rank,), daemon=True) for rank in range(layout.job_size)]
    try:
        for worker in workers:
            worker.start()
        deadline = time.monotonic() + timeout
        for worker in workers:
            worker.join(timeout=max(0.0, deadline - time.monotonic()))
    finally:
        torch.set_num_threads(previous)
    if fabric.hang is not None:
        raise RuntimeError(fabric.hang)
    if errors:
        rank = min(errors)
        raise RuntimeError(f"rank {rank} failed:\n{errors[rank]}")
    missing = sorted(set(range(layout.job_size)) - set(results))
    if missing:
        fabric.abort("timed out")
        raise RuntimeError(f"ranks {missing} gave no result in {timeout} s")
    return [results[rank] for rank in range(layout.job_size)]


def time_interleaved(
    steppers: dict[str, Callable[[int, Any, Any], None]],
    inputs: Any,
    labels: Any,
    iters: int,
    block: int,
    warmup: int,
    barrier: Callable[[], None],
) -> dict[str, list[float]]:
    """Wall seconds of ``iters`` iterations of every stepper (``stepper(step, inputs, labels)``),
    measured side by side: after ``warmup`` iterations each, rounds of ``block`` iterations per
    stepper, the order rotating by one every round so that machine noise hits all alike.
    ``barrier`` lines the ranks up before every block."""

    names = list(steppers)
    times: dict[str, list[float]] = {name: [] for name in names}
    for name in names:
        for step in range(warmup):
            steppers[name](step, inputs, labels)
    for round_index in range(-(-iters // block)):
        shift = round_index % len(names)
        for name in names[shift:] + names[:shift]:
            barrier()
            for step in range(block):
                start = time.perf_counter()
                steppers[name](step, inputs, labels)
                times[name].append(time.perf_counter() - start)
    return times
