"""The local launcher: every rank is a process on this machine.

The parent holds the rendezvous ``TCPStore`` on a port the kernel picked (port 0), so two
runs at once never collide and no port is ever guessed. The store has no authentication, and
torch's master store listens on every interface whatever its ``host_name``; here it is handed a
socket bound to 127.0.0.1 (``master_listen_fd``), and the ranks' collectives use the loopback
interface, so nothing of a local run is reachable from another host. It then watches the ranks: a rank
that raises reports its exception through a queue; a rank that dies shows a non-zero exit
code. On the first failure the parent waits briefly for the other reports (so that the
rank that failed first is named, not a peer that only lost its connection), sends SIGTERM
to the rest and SIGKILL after ``launcher.teardown_grace_s``: no hang, whatever the ranks
were blocked in.

Nothing a rank starts outlives the run: each rank leads a process group of its own, which its
DataLoader workers (and anything they start) join, and the parent ends the whole group, not only
the rank, on every exit path (a rank that failed, the teardown, Ctrl-C, SIGTERM, a finished run);
a rank whose parent is gone ends its group. A rank's own children are forks of it (multiprocessing's
``fork``, not the ``forkserver`` it was started with): a forkserver of the rank's would hold its
workers, which then watch the server instead of the rank, and would register their semaphores with
the resource tracker, which warns of them as leaked when the rank is killed.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import sys
import threading
import time
import traceback
from dataclasses import replace
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import Sequence

from dlcomm.config.schema import ProcessLauncherConfig, RunConfig
from dlcomm.errors import EXIT_USAGE, Diverged, UserError
from dlcomm.launch.base import launcher_settings
from dlcomm.launch.driver import DriverLauncher, LaunchResult, RankFailure, root_cause
from dlcomm.launch.interrupts import INTERRUPTS
from dlcomm.launch.procstart import is_alive, rank_processes
from dlcomm.launch.registry import register
from dlcomm.launch.store import loopback_store
from dlcomm.spec import RunSpec
from dlcomm.streams import forgive_streams

_POLL_S = 0.1
_SETTLE_S = 1.0  # after a first failure, how long to collect the other ranks' reports
_CONSEQUENCE_S = 2.0  # a rank that only lost a peer reports this much later than the peer's own failure


def _rank_process(spec: RunSpec, rank: int, port: int, local_ranks: int, errors: Connection, parent_pid: int) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    forgive_streams()  # the driver's stdout may be gone or full: rank 0's prints must not fail the run
    _lead_own_group()
    _exit_when_orphaned(parent_pid)
    _collectives_on_loopback()
    try:
        from dlcomm.launch.rank import run_rank

        run_rank(spec, rank, "127.0.0.1", port, machine_rank=rank, local_ranks=local_ranks)
    except UserError as error:
        _report(errors, RankFailure(rank, f"stopped: {error}", user_error=True, at=time.time()))
        os._exit(EXIT_USAGE)
    except Diverged as error:
        _report(errors, RankFailure.diverged(error))
        os._exit(1)
    except BaseException as error:  # noqa: BLE001 - every failure must reach the parent
        _report(
            errors, RankFailure(rank, _failure_message(error, spec), details=traceback.format_exc(), at=time.time())
        )
        os._exit(1)


def _report(errors: Connection, failure: RankFailure) -> None:
    """Send the driver this rank's failure, whole, before the process ends."""
    errors.send(failure)
    errors.close()


def _failure_message(error: BaseException, spec: RunSpec) -> str:
    """What a rank that raised says after "rank <r>": for NCCL's errors and torch's
    ``DistBackendError`` one line in words (:func:`dlcomm.launch.job_end.comm_failure`), after a
    short pause when it only saw a peer go, so that the peer that failed first is the one named;
    otherwise the exception's type and text."""
    from dlcomm.launch.job_end import comm_failure

    found = comm_failure(error, launcher_settings(spec.cfg(), ProcessLauncherConfig).comm_timeout_s, gloo=False)
    if found is None:
        return f"raised {type(error).__name__}: {error}"
    what, consequence = found
    if consequence:
        time.sleep(_CONSEQUENCE_S)
    return f"failed: {what}"


def _lead_own_group() -> None:
    """Make this rank a process group of its own that its children join, and start those
    children as forks (see the module docstring)."""
    os.setpgid(0, 0)
    signal.signal(signal.SIGTTOU, signal.SIG_IGN)  # outside the terminal's foreground group, still write to it
    if sys.platform.startswith("linux"):
        mp.set_start_method("fork", force=True)


def _collectives_on_loopback() -> None:
    """gloo and NCCL listen on the loopback interface (every rank is on this machine), unless the
    environment names another interface."""
    from dlcomm.launch.netif import interface_addresses

    loopback = next((name for name, address in sorted(interface_addresses().items()) if address == "127.0.0.1"), None)
    if loopback is not None:
        os.environ.setdefault("GLOO_SOCKET_IFNAME", loopback)
        os.environ.setdefault("NCCL_SOCKET_IFNAME", loopback)


def _exit_when_orphaned(parent_pid: int) -> None:
    # The rank's own parent is the fork server (procstart), so the driver is watched by its pid.
    def watch() -> None:
        while True:
            if not is_alive(parent_pid):
                if os.getpgrp() == os.getpid():
                    os.killpg(os.getpid(), signal.SIGKILL)  # the rank and everything it started
                os._exit(1)
            time.sleep(1.0)

    threading.Thread(target=watch, daemon=True, name="orphan-watch").start()


def launch_local(spec: RunSpec) -> LaunchResult:
    """Run every rank of ``spec`` as a local process; return when all finished or one failed."""
    from dlcomm.launch.rank import job_layout

    cfg = spec.cfg()
    layout = job_layout(cfg)
    world = layout.job_size  # the workers and the algorithm's service processes
    store = loopback_store(world)
    context = rank_processes()
    # one pipe a rank for its failure report, not a multiprocessing.Queue: a Queue of the forkserver
    # context is three named semaphores, which a driver killed by SIGKILL leaves to the resource
    # tracker ("There appear to be 3 leaked semaphore objects"); a pipe is two file descriptors
    pipes = [context.Pipe(duplex=False) for _ in range(world)]
    errors = [reader for reader, _ in pipes]
    local_ranks = world  # all ranks share this machine
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    processes = [
        context.Process(
            target=_rank_process,
            args=(spec, rank, store.port, local_ranks, pipes[rank][1], os.getpid()),
            name=f"dlcomm-{layout.role_of(rank)}{rank}",
        )
        for rank in range(world)
    ]
    try:
        INTERRUPTS.hold()  # a rank half-started (its state still on the way from here) must not be left behind
        try:
            for process in processes:
                process.start()
        except Exception:
            if INTERRUPTS.received is None:
                raise
            # the fork server, which shares this process's group, got the same signal and is gone
        INTERRUPTS.release()  # a signal that came meanwhile acts now
        return _watch(processes, errors, cfg.launcher.teardown_grace_s, [layout.role_of(r) for r in range(world)])
    except KeyboardInterrupt:
        _teardown(processes, cfg.launcher.teardown_grace_s)
        return LaunchResult(interrupted=True)
    finally:
        _end_groups(processes)
        del store


def _watch(
    processes: Sequence[BaseProcess], errors: list[Connection], grace_s: float, roles: list[str]
) -> LaunchResult:
    failures: list[RankFailure] = []
    first_failure_at: float | None = None
    while True:
        failures.extend(_drain(errors))
        for rank, process in enumerate(processes):
            code = process.exitcode
            if code not in (None, 0) and not any(f.rank == rank for f in failures):
                failures.append(_exit_failure(rank, code, roles[rank]))
        if failures and first_failure_at is None:
            first_failure_at = time.monotonic()
        if first_failure_at is not None and time.monotonic() - first_failure_at >= _SETTLE_S:
            _teardown(processes, grace_s)
            failures.extend(_drain(errors))
            return LaunchResult(failure=_with_role(root_cause(failures), roles))
        if all(process.exitcode == 0 for process in processes):
            return LaunchResult()
        time.sleep(_POLL_S)


def _drain(errors: list[Connection]) -> list[RankFailure]:
    """The failure reports that have arrived on the ranks' pipes."""
    drained = []
    for reader in errors:
        try:
            while reader.poll():
                drained.append(reader.recv())
        except (EOFError, OSError):  # every writer closed: that rank has nothing more to say
            continue
    return drained


def _exit_failure(rank: int, code: int, role: str) -> RankFailure:
    if code < 0:
        name = signal.Signals(-code).name
        return RankFailure(rank, f"was killed by {name}", signalled=True, at=time.time(), role=role)
    return RankFailure(rank, f"exited with code {code}", at=time.time(), role=role)


def _with_role(failure: RankFailure, roles: list[str]) -> RankFailure:
    return replace(failure, role=roles[failure.rank])


def _signal_group(process: BaseProcess, signum: int) -> bool:
    """Send ``signum`` to the process group ``process`` leads (the rank and what it started);
    False when there is no such group (the rank has not made it yet, or all of it has ended)."""
    if process.pid is None:
        return False
    try:
        os.killpg(process.pid, signum)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def _teardown(processes: Sequence[BaseProcess], grace_s: float) -> None:
    processes = [process for process in processes if process.pid is not None]  # those started
    for process in processes:
        if not _signal_group(process, signal.SIGTERM) and process.is_alive():
            process.terminate()
    deadline = time.monotonic() + grace_s
    for process in processes:
        process.join(timeout=max(0.0, deadline - time.monotonic()))
    for process in processes:
        if process.is_alive():
            _signal_group(process, signal.SIGKILL)
            process.kill()
            process.join(timeout=5.0)


def _end_groups(processes: Sequence[BaseProcess]) -> None:
    """However the run ended, end what is left of each rank's group (a failed rank's DataLoader
    workers, whatever a rank started); the ranks themselves have ended or are killed here."""
    for process in processes:
        if process.pid is None:
            continue
        _signal_group(process, signal.SIGKILL)
        if process.is_alive():
            process.kill()
        process.join(timeout=5.0)


@register
class LocalLauncher(DriverLauncher):
    """``launcher=local``: the ranks, and the algorithm's service processes, are processes of
    this machine; this process waits for them and closes the run."""

    Config = ProcessLauncherConfig
    where = "as processes of this machine"

    @classmethod
    def check(cls, cfg: RunConfig, roles: tuple[str, ...] = ()) -> None:
        """Beside the base checks: the processes must fit in this machine's memory;
        ``launcher.backend`` must carry the device's tensors, and ``train.device=cuda`` needs one
        visible GPU per process, the algorithm's services included (:mod:`dlcomm.launch.gpus`)."""
        super().check(cfg, roles)
        from dlcomm.launch.footprint import check_fits, estimate_processes
        from dlcomm.launch.gpus import check_local_gpus

        check_fits(
            cfg,
            estimate_processes(cfg, cfg.nodes * cfg.workers_per_node + len(roles)),
            len(roles),
            cls.name,
            "processes",
            "launcher=threads, or launcher=slurm",
        )
        check_local_gpus(cfg, roles)

    @classmethod
    def run_job(cls, spec: RunSpec) -> LaunchResult:
        """Every rank a process: :func:`launch_local`."""
        return launch_local(spec)
