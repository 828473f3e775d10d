"""Lost runs: RUNNING in MLflow, but nothing is left that could ever end them.

A run is ended by the process that runs it (see :mod:`dlcomm.tracking.mlflow_run`); its
launcher says which (:attr:`dlcomm.launch.base.Launcher.ended_by`). When that process never
started or died without a word, the run stays RUNNING forever:

* a run ended by its SLURM job (``launcher=slurm`` or ``srun``: tag ``slurm_job_id``, ``<job>``
  or ``<array>_<index>``) is lost when its job is no longer in the queue: cancelled while pending,
  its node lost, killed before its ranks could close the run. The ranks close the run before
  their job ends, so a job that left the queue with its run still RUNNING will not close it;
* a run ended by its driver (``launcher=local``: tags ``hostname`` and ``driver_pid``, the
  process that launched the ranks and closes the run) is lost when, on that same host, no
  process has that pid any more. A sweep's parent run of a local sweep records its driver the same way; the parent
  of a SLURM sweep is ended by its last child (:func:`dlcomm.tracking.mlflow_run.close_parent_if_done`)
  and is never judged by itself.

What cannot be told is said, not guessed: a SLURM run with no job id recorded (runs of dlcomm
versions that did not record it for single jobs, or a submission in progress), SLURM runs when
``squeue`` cannot answer, local runs without a recorded pid or whose driver ran on another host.

:func:`census` is pure (the live job ids and a pid check are passed in), so it is tested without
SLURM; :func:`survey` reads the store and asks ``squeue`` (:mod:`dlcomm.launch.squeue`) only when
some run needs it.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field
from typing import Callable

from dlcomm.errors import UserError

JOB_TAG, PID_TAG, HOST_TAG, PARENT_TAG = "slurm_job_id", "driver_pid", "hostname", "mlflow.parentRunId"
START_TAG = "driver_start"  # when the driver started (dlcomm.launch.procstart.process_start)
# tags every dlcomm run (or sweep parent) has one of: a RUNNING run with none is another tool's
OWN_TAGS = (JOB_TAG, PID_TAG, HOST_TAG, "launcher", "dlcomm_version", "sweep")


@dataclass(frozen=True)
class OpenRun:
    """What the store says about a RUNNING run: enough to find who should end it."""

    run_id: str
    experiment: str
    launcher: str = ""
    job_id: str = ""  # tag slurm_job_id
    host: str = ""  # tag hostname: where the run was opened
    pid: int | None = None  # tag driver_pid
    started: str = ""  # tag driver_start: tells the driver from a later process given the same pid
    parent_id: str = ""  # tag mlflow.parentRunId
    is_sweep: bool = False  # a sweep's parent run
    pid_tag: str = ""  # tag driver_pid as written (``pid`` is None where it is no process id)
    foreign: bool = False  # none of the tags dlcomm writes: another tool's run

    @property
    def on_slurm(self) -> bool:
        """Whether its SLURM job ends it: a job id is recorded, or its launcher says so."""
        return bool(self.job_id) or _ended_by_slurm_job(self.launcher)

    @property
    def needs_queue(self) -> bool:
        """Whether telling this run's fate needs the SLURM queue."""
        return self.on_slurm and bool(self.job_id) and not self.is_sweep


@dataclass(frozen=True)
class Verdict:
    run: OpenRun
    reason: str


@dataclass
class Census:
    """The RUNNING runs, split: ``lost`` (with why), ``unchecked`` (with why not), ``alive``."""

    lost: list[Verdict] = field(default_factory=list)
    unchecked: list[Verdict] = field(default_factory=list)
    alive: list[OpenRun] = field(default_factory=list)

    def of(self, experiment: str) -> Census:
        """The part of the census in one experiment."""
        return Census(
            [v for v in self.lost if v.run.experiment == experiment],
            [v for v in self.unchecked if v.run.experiment == experiment],
            [r for r in self.alive if r.experiment == experiment],
        )

    def unchecked_by_reason(self) -> dict[str, list[str]]:
        """The unchecked runs' ids, grouped by why they could not be checked."""
        grouped: dict[str, list[str]] = {}
        for verdict in self.unchecked:
            grouped.setdefault(verdict.reason, []).append(verdict.run.run_id)
        return grouped


def _ended_by_slurm_job(launcher: str) -> bool:
    """Whether runs of launcher ``launcher`` (a run's tag; empty or unknown for some) are closed
    by the tasks of their SLURM job rather than by their driver."""
    from dlcomm.launch.registry import LAUNCHERS

    found = LAUNCHERS.find(launcher) if launcher else None
    return found is not None and found.ended_by == "slurm_job"


def pid_alive(pid: int) -> bool:
    """Whether a process with this pid exists on this host (another user's counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _verdict(
    run: OpenRun,
    live_jobs: set[str] | None,
    host: str,
    alive: Callable[[int], bool],
    no_queue: str,
    started_at: Callable[[int], str | None],
) -> tuple[str, str]:
    """("lost" | "unchecked" | "alive", reason) for one run."""
    if run.on_slurm:
        if run.is_sweep:
            return "alive", "a SLURM sweep's parent ends with its last child"
        if not run.job_id:
            return "unchecked", "no SLURM job id recorded: an older dlcomm, or still being submitted"
        if live_jobs is None:
            return "unchecked", no_queue or "the SLURM queue was not read"
        if run.job_id in live_jobs:
            return "alive", ""
        return "lost", f"SLURM job {run.job_id} is no longer in squeue"
    if run.pid is None:
        if run.foreign:
            return "unchecked", "none of dlcomm's tags: another tool's run"
        if run.pid_tag:
            return "unchecked", f"its driver_pid tag {run.pid_tag[:24]!r} is no process id"
        return "unchecked", "no driver pid recorded: an older dlcomm"
    if run.host != host:
        return "unchecked", f"its driver ran on host {run.host or '?'}, not on this host {host}"
    if not alive(run.pid):
        return "lost", f"its driver process {run.pid} on {run.host} is gone"
    if run.started and started_at(run.pid) not in (None, run.started):
        return "lost", f"its driver process {run.pid} on {run.host} is gone (the pid is now another process's)"
    return "alive", ""


def census(
    runs: list[OpenRun],
    live_jobs: set[str] | None,
    host: str,
    alive: Callable[[int], bool] = pid_alive,
    no_queue: str = "",
    started_at: Callable[[int], str | None] | None = None,
) -> Census:
    """Split ``runs`` (all RUNNING) into lost, unchecked and alive. ``live_jobs``: the job ids
    SLURM still lists (None: the queue could not be read, ``no_queue`` says why); ``host``: this
    machine's name; ``alive(pid)``: whether a process exists here; ``started_at(pid)``: when it
    started (:func:`dlcomm.launch.procstart.process_start`), compared with the run's record."""
    if started_at is None:
        from dlcomm.launch.procstart import process_start

        started_at = process_start
    result = Census()
    for run in runs:
        kind, reason = _verdict(run, live_jobs, host, alive, no_queue, started_at)
        if kind == "lost":
            result.lost.append(Verdict(run, reason))
        elif kind == "unchecked":
            result.unchecked.append(Verdict(run, reason))
        else:
            result.alive.append(run)
    return result


PID_MAX = 1 << 22  # Linux's PID_MAX_LIMIT: no process id is above it


def process_id(tag: str) -> int | None:
    """The process id a ``driver_pid`` tag holds; None for anything that cannot be one (a tag another
    tool or a hand wrote: ``abc``, ``0``, ``²``, ``99999999999999999999``)."""
    if not (tag.isascii() and tag.isdigit()):
        return None
    pid = int(tag)
    return pid if 0 < pid <= PID_MAX else None


def _open_run(run, experiment: str) -> OpenRun:
    tags = run.data.tags
    return OpenRun(
        run_id=run.info.run_id,
        experiment=experiment,
        launcher=tags.get("launcher", ""),
        job_id=tags.get(JOB_TAG, ""),
        host=tags.get(HOST_TAG, ""),
        pid=process_id(tags.get(PID_TAG, "")),
        started=tags.get(START_TAG, ""),
        parent_id=tags.get(PARENT_TAG, ""),
        is_sweep=tags.get("sweep", "") == "true",
        pid_tag=tags.get(PID_TAG, ""),
        foreign=not any(tag in tags for tag in OWN_TAGS),
    )


def open_runs(uri: str, experiment: str = "") -> list[OpenRun]:
    """Every RUNNING run of the store (of ``experiment`` only, when named). Reads only: the
    store must exist (:func:`dlcomm.tracking.mlflow_run.check_store`)."""
    from dlcomm.tracking.mlflow_run import retrying, store_client

    client = store_client(uri)
    experiments = retrying(client.search_experiments)
    if experiment:
        experiments = [e for e in experiments if e.name == experiment]
        if not experiments:
            from dlcomm.tracking.lifecycle import active

            active(client, uri, experiment, "experiment")  # a deleted one: refused with its fixes
            raise UserError(
                f"the store {uri} has no experiment {experiment!r}: leave experiment= out for every experiment"
            )
    found: list[OpenRun] = []
    for entry in experiments:
        token = None
        while True:
            page = retrying(
                client.search_runs,
                [entry.experiment_id],
                "attributes.status = 'RUNNING'",
                max_results=1000,
                page_token=token,
            )
            found += [_open_run(run, entry.name) for run in page]
            token = page.token
            if not token:
                break
    return found


def survey(
    uri: str,
    experiment: str = "",
    queue: Callable[[], set[str]] | None = None,
    strict: bool = True,
    alive: Callable[[int], bool] = pid_alive,
    host: str = "",
) -> Census:
    """The :func:`census` of the store's RUNNING runs. ``queue()`` gives the live SLURM job ids
    (default: ``squeue``), asked only when some run needs it; when it cannot answer, ``strict``
    raises its one-line :class:`UserError`, else those runs are counted as unchecked."""
    from dlcomm.launch.squeue import live_job_ids

    runs = open_runs(uri, experiment)
    live, no_queue = None, ""
    if any(run.needs_queue for run in runs):
        try:
            live = (queue or live_job_ids)()
        except UserError as error:
            if strict:
                raise
            no_queue = str(error)
    return census(runs, live, host or socket.gethostname(), alive, no_queue)
