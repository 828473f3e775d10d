"""How dlcomm starts rank processes on this machine: forked from a server that imported torch once.

A spawned process imports torch and dlcomm's training stack before its first line of work (2-4 s of
CPU each here); four ranks on two cores spent ~7 s of wall time on that in every run, and a sweep paid
it again per element. ``rank_processes()`` is multiprocessing's *forkserver* context with those modules
preloaded: the server imports them once (per driver process, so once per sweep) and forks each rank
from that interpreter. The server itself never runs a torch operation, so no OpenMP pool or CUDA
context is ever forked; each rank still sets its own threads, device and seeds as under spawn.

Two consequences the callers handle: a rank's parent is the server, not the driver (watch the driver by
its pid: :func:`is_alive`); and a rank inherits the environment the server started with (the driver's
at its first launch), so per-run settings travel as arguments, never as environment variables.
"""

from __future__ import annotations

import multiprocessing as mp
import os
from multiprocessing.context import ForkServerContext

PRELOAD: tuple[str, ...] = (
    "dlcomm.launch.forkserver_shield",
    "dlcomm.launch.rank_imports",
)  # imported once by the fork server, in order


def rank_processes() -> ForkServerContext:
    """The multiprocessing context that starts dlcomm's rank processes."""
    context = mp.get_context("forkserver")
    context.set_forkserver_preload(list(PRELOAD))  # takes effect when the server starts (the first launch)
    return context


def is_alive(pid: int) -> bool:
    """Whether process ``pid`` still runs (a zombie, dead but not yet reaped, counts as ended)."""
    if not os.path.isdir("/proc"):  # not Linux: ask the kernel whether the pid exists
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def process_start(pid: int) -> str | None:
    """When process ``pid`` started, as a token no later process with the same pid can have: this
    boot's id and the start time in clock ticks since boot (``/proc/<pid>/stat``, field 22); None
    where it cannot be read (no /proc, no such process). A run records its driver's
    (tag ``driver_start``) so that ``dlcomm runs reap`` tells its driver from a process that was
    given the same pid later."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            ticks = stat.read().rsplit(")", 1)[1].split()[19]  # field 22; the name (field 2) may hold spaces
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as boot:
            return f"{boot.read().strip()}/{ticks}"
    except (OSError, IndexError):
        return None
