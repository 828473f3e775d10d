"""Which SLURM jobs exist right now, as ``squeue`` lists them.

One call lists the whole queue (``squeue -h -a -r -o "%i %A"``) instead of one ``squeue -j``
per job: ``squeue -j`` of a job SLURM has forgotten fails with "Invalid job id specified",
which looks like any other failure (a controller that does not answer) unless its text is
parsed. ``squeue`` lists the jobs that are pending, running, suspended or completing (not those
that ended), so a job that is absent has ended or never existed. Without accounting (``sacct``:
"accounting storage is disabled") the queue is all there is to ask.

Each job is listed under both its names: ``<array>_<index>`` (``%i``, what submitit and dlcomm
record for array elements) and its own numeric id (``%A``); pending array elements are listed
one per line (``-r``); ``-a`` includes hidden partitions. On clusters with
``PrivateData=jobs`` a user sees only their own jobs.
"""

from __future__ import annotations

import subprocess
from typing import Callable

from dlcomm.errors import UserError

Runner = Callable[..., subprocess.CompletedProcess]
_COMMAND = ["squeue", "-h", "-a", "-r", "-o", "%i %A"]
NO_SQUEUE = (
    "no squeue on PATH, so which SLURM jobs still exist cannot be told: run this where SLURM's commands "
    "are (a login node, or after `module load slurm`)"
)


def parse(listing: str) -> set[str]:
    """The job ids in ``squeue -o "%i %A"`` output (every word of every line)."""
    return {word for line in listing.splitlines() for word in line.split()}


def live_job_ids(run: Runner = subprocess.run) -> set[str]:
    """The ids of every job in the queue now. A one-line :class:`UserError` when ``squeue`` is
    not on PATH or does not answer: nothing can be said about any job then."""
    try:
        done = run(_COMMAND, capture_output=True, encoding="utf-8", errors="replace", timeout=60)
    except FileNotFoundError:
        raise UserError(NO_SQUEUE) from None
    except (OSError, subprocess.SubprocessError) as error:
        raise UserError(
            f"squeue could not be run ({type(error).__name__}: {error}): which SLURM jobs still exist cannot be told"
        ) from None
    if done.returncode != 0:
        lines = [line.strip() for line in (done.stderr or "").splitlines() if line.strip()]
        reason = lines[0] if lines else f"exit {done.returncode}"
        raise UserError(
            f"squeue failed ({reason}): which SLURM jobs still exist cannot be told; try again when the "
            "SLURM controller answers"
        )
    return parse(done.stdout)
