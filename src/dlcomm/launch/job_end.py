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
  :func:`comm_failure_line` says so in words.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import threading
from typing import Callable

_GLOO_LOST = ("Timed out waiting", "Connection closed by peer", "Connection reset by peer", "Broken pipe",
              "Connection refused", "No route to host")


def down_hosts(nodelist: str) -> list[str]:
    """The hosts of ``nodelist`` (SLURM's compressed form) that SLURM holds DOWN, FAILED or
    NOT RESPONDING now; [] when none or when sinfo does not answer."""
    try:
        answer = subprocess.run(["sinfo", "-h", "-N", "-n", nodelist, "-o", "%N %T"], capture_output=True, text=True,
                                timeout=10)
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
    saw a peer go (a consequence: the peer that timed out closed its connections); None for other
    errors."""
    text = str(error)
    if not any(marker in text for marker in _GLOO_LOST):
        return None
    what = (f"a transfer waited launcher.comm_timeout_s={timeout_s:g} s" if "Timed out" in text
            else "a peer's connection was lost")
    line = (f"rank {rank} on host {socket.gethostname()}: {what}: a host or its link stopped answering "
            f"(check the hosts and links of the job; gloo said: {text.strip().splitlines()[0][:160]})")
    return line, "Timed out" not in text


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
