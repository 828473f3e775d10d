"""Run a function on ``world`` real ranks (processes, gloo) joined through dlcomm's Cluster.

The function receives ``(cluster, channel, *args)`` and returns something picklable; the
harness returns the list of results by rank, or raises with the failing rank's traceback.
"""

from __future__ import annotations

import multiprocessing as mp
import traceback
from typing import Any, Callable

import torch
import torch.distributed as dist


def _entry(fn: Callable, rank: int, world: int, port: int, nodes: int, args: tuple, results: mp.Queue) -> None:
    from dlcomm.comm.channel import Channel
    from dlcomm.comm.cluster import Cluster
    from dlcomm.comm.layout import ClusterLayout

    torch.set_num_threads(1)
    try:
        store = dist.TCPStore("127.0.0.1", port, world, is_master=False)
        cluster = Cluster.connect(ClusterLayout(nodes, world // nodes), rank, store, "gloo", torch.device("cpu"))
        try:
            results.put((rank, True, fn(cluster, Channel(cluster), *args)))
        finally:
            cluster.close()
    except BaseException:  # noqa: BLE001
        results.put((rank, False, traceback.format_exc()))


def run_ranks(fn: Callable, world: int, *args: Any, nodes: int | None = None, timeout: float = 180) -> list[Any]:
    store = dist.TCPStore("127.0.0.1", 0, world, is_master=True, wait_for_workers=False)
    context = mp.get_context("spawn")
    results: mp.Queue = context.Queue()
    processes = [
        context.Process(target=_entry, args=(fn, rank, world, store.port, nodes or world, args, results))
        for rank in range(world)
    ]
    for process in processes:
        process.start()
    try:
        collected = {}
        for _ in range(world):
            rank, ok, value = results.get(timeout=timeout)
            if not ok:
                raise AssertionError(f"rank {rank} failed:\n{value}")
            collected[rank] = value
        return [collected[rank] for rank in range(world)]
    finally:
        for process in processes:
            process.join(timeout=10)
            if process.is_alive():
                process.kill()
