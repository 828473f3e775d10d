"""How a SLURM job's ranks end when something outside them ends it, and what the run says why.

* SLURM's SIGTERM (``scancel``, the time limit, a host declared DOWN) must be acted on even while
  the rank's main thread is blocked in a collective (a Python handler would wait for the C++
  call to return, and SLURM's SIGKILL comes ``KillWait`` seconds later): :class:`TermWatcher`
  takes it in a thread of its own.
* A host whose slurmd stops answering is set DOWN by slurmctld after ``SlurmdTimeout``, which
  then requeues the job (``--requeue``) and signals the other hosts' tasks. Such an end is a
  failure, not a cancellation: :func:`down_hosts` names the job's hosts SLURM has set down, and
  the job is cancelled so that the requeued copy does not wait for the lost host.
* A host or link lost without SLURM noticing first shows in the ranks as a collective that
  times out (``launcher.comm_timeout_s``) or a connection the peer closed:
  :func:`comm_failure_line` says so in words, for gloo's messages and for NCCL's (the texts of
  torch 2.14's ProcessGroupNCCL and NCCL 2.x, below): the watchdog's timeout ("Watchdog caught
  collective operation timeout: WorkNCCL(...) ran for N milliseconds before timing out", after
  ``launcher.comm_timeout_s``, see :func:`dlcomm.launch.rank.nccl_failures_raise`), NCCL's
  errors ("NCCL error in: <file>:<line>, <ncclGetErrorString>, NCCL version x.y.z" then
  "ncclRemoteError: ...", "ncclSystemError: ...") and any other ``DistBackendError``.
* A rank that dies without a word (killed, or aborted by NCCL's watchdog under torch's default
  error handling) ends the srun step at once: submitit's srun runs with ``--kill-on-bad-exit=1``
  (:data:`dlcomm.launch.slurm.SRUN_ARGS`).
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import threading
from typing import Callable

_GLOO_LOST = (
    "Timed out waiting",
    "Connection closed by peer",
    "Connection reset by peer",
    "Broken pipe",
    "Connection refused",
    "No route to host",
)
# NCCL's words (torch 2.14: ProcessGroupNCCL.cpp, NCCLUtils.hpp; NCCL's ncclGetErrorString):
_NCCL_TIMEOUT = (
    "Watchdog caught collective operation timeout",
    "timed out in blocking wait",
    "NCCL operation timed out",
)
_NCCL_LOST = (
    "ncclRemoteError",
    "remote process exited or there was a network error",
    "NCCL communicator was aborted",
    "NCCL communicator encountered error set by ProcessGroupNCCL",
)
_NCCL_ERROR = (
    "NCCL error",
    "ncclSystemError",
    "ncclInternalError",
    "ncclUnhandledCudaError",
    "ncclInvalidUsage",
    "ncclInvalidArgument",
    "ProcessGroupNCCL",
)
_NCCL_SITE = re.compile(r"NCCL error in: \S+:\d+, ")  # the source file and line torch puts first


def down_hosts(nodelist: str) -> list[str]:
    """The hosts of ``nodelist`` (SLURM's compressed form) that SLURM holds DOWN, FAILED or
    NOT RESPONDING now; [] when none or when sinfo does not answer."""
    try:
        answer = subprocess.run(
            ["sinfo", "-h", "-N", "-n", nodelist, "-o", "%N %T"],
            capture_output=True,
            encoding="utf-8",
            errors="replace",
            timeout=10,
        )
    except (OSError, subprocess.TimeoutExpired):
        return []
    lost = []
    for line in answer.stdout.splitlines():
        name, _, state = line.partition(" ")
        if state.startswith(("down", "fail")) or state.endswith("*"):
            lost.append(name)
    return sorted(set(lost))


def cancel_job(job_id: str) -> None:
    """``scancel`` the job (also a copy SLURM has requeued); ``job_id`` of an array element in the
    ``<array>_<index>`` form (a bare array id would cancel every element); errors ignored: it may be gone."""
    try:
        subprocess.run(["scancel", job_id], capture_output=True, timeout=10)  # a cut-off host cannot reach slurmctld
    except (OSError, subprocess.TimeoutExpired):
        pass


def comm_failure_line(error: BaseException, rank: int, timeout_s: float) -> tuple[str, bool] | None:
    """One line for a rank whose communication with another host failed, and whether it only
    saw a peer go (a consequence: the peer that timed out, failed or died closed its
    connections); None for other errors."""
    found = comm_failure(error, timeout_s)
    if found is None:
        return None
    what, consequence = found
    return f"rank {rank} on host {socket.gethostname()}: {what}", consequence


def comm_failure(error: BaseException, timeout_s: float, gloo: bool = True) -> tuple[str, bool] | None:
    """What failed, in words (without the rank), for NCCL's errors, gloo's (unless ``gloo`` is
    false: on one machine a lost gloo peer is a rank that failed, not a host) and any other
    ``torch.distributed.DistBackendError``, and whether it is only a consequence of a peer's
    failure; None for other errors."""
    text = str(error)
    if any(marker in text for marker in (*_NCCL_TIMEOUT, *_NCCL_LOST, *_NCCL_ERROR)):
        return _nccl_failure(text, timeout_s)
    if gloo and any(marker in text for marker in _GLOO_LOST):
        what = (
            f"a transfer waited launcher.comm_timeout_s={timeout_s:g} s"
            if "Timed out" in text
            else "a peer's connection was lost"
        )
        line = (
            f"{what}: a host or its link stopped answering "
            f"(check the hosts and links of the job; gloo said: {_first_line(text)})"
        )
        return line, "Timed out" not in text
    import torch.distributed as dist

    if isinstance(error, getattr(dist, "DistBackendError", ())):
        return (
            f"the communication backend failed ({type(error).__name__}: {_first_line(text)}); check the GPUs, "
            "driver and network of the job's hosts"
        ), False
    return None


def _nccl_failure(text: str, timeout_s: float) -> tuple[str, bool]:
    said = _first_line(_NCCL_SITE.sub("", text))
    detail = next((line.strip() for line in text.splitlines() if line.strip().startswith("nccl")), "")
    if detail and detail not in said:
        said = f"{said}; {detail[:120]}"
    if any(marker in text for marker in _NCCL_TIMEOUT):
        return (
            f"an NCCL operation waited launcher.comm_timeout_s={timeout_s:g} s (NCCL's watchdog): a peer died, "
            f"hangs or never posted the matching operation, or a host or its link stopped answering "
            f"(NCCL said: {said})"
        ), False
    if any(marker in text for marker in _NCCL_LOST):
        return (
            f"a peer's NCCL connection was lost: another rank failed first, or a host or its link stopped "
            f"answering (NCCL said: {said})"
        ), True
    return (
        f"NCCL failed: {said} (rerun with NCCL_DEBUG=WARN for NCCL's own reason; check the GPUs, driver "
        f"and network of the job's hosts)"
    ), False


def _first_line(text: str) -> str:
    return (text.strip().splitlines() or [""])[0].strip()[:200]


class TermWatcher:
    """Acts on SIGTERM in a thread of its own: calls ``on_term`` there, then ends the process with
    143 (``on_term`` may end it first). A Python signal handler runs only when the main thread
    next executes Python, which a collective blocked in C++ may delay past SLURM's SIGKILL; the
    interpreter's C-level handler, though, writes every signal's number to the wakeup fd at once,
    whichever thread receives it. Install from the main thread."""

    def __init__(self, on_term: Callable[[], None]) -> None:
        self._on_term = on_term
        read_end, write_end = os.pipe()
        os.set_blocking(write_end, False)
        signal.signal(signal.SIGTERM, lambda signum, frame: None)  # the work is the watcher thread's
        signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)
        threading.Thread(target=self._wait, args=(read_end,), daemon=True, name="dlcomm-sigterm").start()

    def _wait(self, read_end: int) -> None:
        while os.read(read_end, 1) != bytes([signal.SIGTERM]):  # other signals' numbers pass by
            pass
        try:
            self._on_term()
        finally:
            os._exit(143)
