"""The SLURM launcher: one run is one SLURM job, submitted with submitit.

The job has ``nodes`` nodes and ``workers_per_node`` tasks per node; submitit starts
:class:`RankTask` in every task, which reads its rank from SLURM (``submitit.JobEnvironment``)
and runs :func:`dlcomm.launch.rank.run_rank`. Rank 0 hosts the rendezvous ``TCPStore`` on the
job's first node, at a port derived from the job id (every task computes the same one). The
driver has already opened the MLflow run; the ranks close it: rank 0 as FINISHED when training
ends, any rank that raises as FAILED.
"""

from __future__ import annotations

import os
import shutil
import sys
import threading
import time
import traceback
from dataclasses import dataclass
from datetime import timedelta
from functools import cached_property
from pathlib import Path
from typing import Any, cast

from dlcomm.config.schema import RunConfig, SlurmLauncherConfig
from dlcomm.config.validate import require
from dlcomm.errors import EXIT_USAGE, Diverged, UserError
from dlcomm.launch.base import Launcher, element_label, launcher_settings
from dlcomm.launch.interrupts import INTERRUPTS
from dlcomm.launch.job_end import TermWatcher, cancel_job, comm_failure_line, down_hosts
from dlcomm.launch.registry import register
from dlcomm.spec import RunSpec
from dlcomm.tracking.ui import experiment_of, run_page, ui_lines

_PORT_BASE, _PORT_SPAN = 20000, 12768  # below Linux's ephemeral ports (32768 and up)
SRUN_ARGS = ("--kill-on-bad-exit=1",)  # submitit's srun line for the job's tasks (docs/slurm.md)


def check_slurm_settings(launcher: Any) -> None:
    """The ``launcher.*`` ranges of ``launcher=slurm`` and ``launcher=srun``."""
    require(
        launcher.time_min >= 1,
        "launcher.time_min",
        launcher.time_min,
        "pass the job's time limit in minutes, 1 or more",
    )
    require(
        launcher.max_requeue >= 0,
        "launcher.max_requeue",
        launcher.max_requeue,
        "use 0 (never requeue) or a positive count",
    )
    require(
        launcher.check_every >= 1, "launcher.check_every", launcher.check_every, "pass a positive number of iterations"
    )
    require(
        0 <= launcher.signal_delay_s < launcher.time_min * 60,
        "launcher.signal_delay_s",
        launcher.signal_delay_s,
        "the warning must come within the time limit: use 0 up to launcher.time_min*60 seconds",
    )
    require(
        launcher.array_parallelism >= 1,
        "launcher.array_parallelism",
        launcher.array_parallelism,
        "pass a positive count",
    )


def check_slurm_available() -> None:
    """``sbatch`` must be on PATH before anything is submitted or recorded."""
    if shutil.which("sbatch") is None:
        raise UserError(
            "launcher=slurm is invalid here: no sbatch on PATH; load your site's SLURM module "
            "(e.g. `module load slurm`) or start a one-machine cluster with `scripts/slurm_local.sh up`"
        )


def check_partition_fits(nodes: int, partition: str) -> None:
    """An unknown partition, or more nodes than the partition has (the job would pend forever
    with PartitionNodeLimit and its MLflow run stay RUNNING): refuse it before anything is
    submitted or recorded. Silent when sinfo cannot answer."""
    import subprocess

    try:
        listing = subprocess.run(
            ["sinfo", "-h", "-o", "%P %D"], capture_output=True, encoding="utf-8", errors="replace", timeout=30
        )
    except (OSError, subprocess.SubprocessError):
        return
    sizes: dict[str, int] = {}  # partition -> nodes
    default = None  # sinfo marks the default partition with a trailing '*'
    for line in listing.stdout.splitlines():
        name, _, count = line.partition(" ")
        if count.strip().isdigit():
            if name.endswith("*"):
                name = default = name[:-1]
            sizes[name] = sizes.get(name, 0) + int(count)
    if partition and sizes and partition not in sizes:
        raise UserError(
            f"launcher.partition={partition} is invalid: this cluster's partitions are {', '.join(sorted(sizes))}; "
            "pass one of them, or leave it empty for the default"
        )
    wanted = sizes.get(partition or default or "")
    label = f"partition {partition!r}" if partition else "the default partition"
    if wanted is not None and nodes > wanted:
        raise UserError(
            f"nodes={nodes} is invalid with launcher=slurm: {label} has {wanted} node(s); "
            f"pass nodes={wanted} or fewer (more workers_per_node instead) or another launcher.partition"
        )


def rendezvous_port(job_id: str) -> int:
    """A port every task of the job derives alike from its numeric job id."""
    digits = "".join(ch for ch in job_id if ch.isdigit()) or "0"
    return _PORT_BASE + int(digits) % _PORT_SPAN


@dataclass
class RankTask:
    """What every task of a job (or of an array element) runs; pickled by submitit.

    Rank 0 hosts the rendezvous store. The run is closed here: FINISHED by rank 0 when
    training ends, FAILED by a rank that raises (its one-line reason in the run's ``error``
    tag, the traceback in the task's log; bad input or settings, :func:`user_line`, only that
    line, as the local launchers print it), KILLED when SLURM ends the job (``scancel``, the
    time limit). A sweep element then ends its parent if it was the last to end.

    Preemption and time limits (``launcher.max_requeue`` > 0): the ranks checkpoint at epoch
    ends and, on SLURM's warning signal (USR2, ``launcher.signal_delay_s`` before the limit),
    after the next agreed iteration; rank 0 then requeues the job (``scontrol requeue``), which
    SLURM starts again with the same pickled task, and the run resumes from its checkpoint into
    the same MLflow run (tag ``requeues`` counts the restarts). Past ``max_requeue``, or when
    SLURM does not take the requeue, the run is KILLED and rank 0's task prints why and exits 1:
    what the task says and its exit status agree with the record.
    """

    spec: RunSpec
    on_sweep_end: Any = None  # a sweep element's: called by the element that ends the sweep (pickled by reference)

    def __call__(self, store: Any = None) -> dict[str, float]:
        """Train as this task's rank; ``store``: rank 0's rendezvous store if already made."""
        import signal

        import submitit

        from dlcomm.launch.rank import run_rank
        from dlcomm.launch.store import join_store
        from dlcomm.train.checkpoint import Preempted, WarningSignal

        env = submitit.JobEnvironment()
        cfg = self.spec.cfg()
        launcher = slurm_settings(cfg)
        resumable = launcher.max_requeue > 0
        warning = WarningSignal(signal.SIGUSR2) if resumable else None  # replaces submitit's own handler
        host, port = env.hostnames[0], rendezvous_port(env.raw_job_id)
        requeuing: list[bool] = []
        ending: list[bool] = []  # this rank is failing the run itself: a SIGTERM then only ends the process

        def on_term() -> None:  # in TermWatcher's thread, whatever the main thread is blocked in
            if requeuing or ending:  # SLURM stops the job it requeues, or the job this rank cancelled
                if requeuing:
                    self._requeued.announce()  # rank 0 asked, and SLURM acts on it: stopping the job is the requeue
                os._exit(0 if requeuing else 1)
            lost = down_hosts(os.environ.get("SLURM_JOB_NODELIST", ""))
            if lost:
                self._end(
                    "FAILED",
                    f"host(s) {', '.join(lost)} stopped answering SLURM, which set them DOWN and ended "
                    "the job; dlcomm cancelled the copy SLURM requeued",
                )
                cancel_job(env.job_id)
            else:
                self._end(
                    "KILLED",
                    "SLURM ended the job (scancel, the time limit without a requeue, or srun's "
                    "--kill-on-bad-exit after a task died without a word: see the job's .err logs)",
                )

        TermWatcher(on_term)
        if store is None and env.global_rank == 0:  # the master store lives as long as rank 0 trains
            store = join_store(host, port, env.num_tasks, master=True, timeout=timedelta(seconds=300))
        os.environ.setdefault("OMP_NUM_THREADS", str(launcher.cpus_per_task))
        try:
            summary = run_rank(
                self.spec,
                env.global_rank,
                host,
                port,
                machine_rank=env.local_rank,
                local_ranks=cfg.workers_per_node,
                resumable=resumable,
                warning=warning,
                check_every=launcher.check_every,
            )
        except Preempted as stop:
            requeuing.append(True)
            if env.global_rank == 0:
                ended = self._requeue(stop, env.raw_job_id)
                if ended:  # not requeued: the run is KILLED with this reason, and the task says so and fails
                    requeuing.clear()
                    ending.append(True)
                    _say_error(f"{ended}; mlflow run {self.spec.run_id} marked KILLED")
                    raise SystemExit(1) from None
            return {}
        except BaseException as error:
            ending.append(True)
            said = user_line(error, env.global_rank)  # bad input or settings: one line, no traceback
            line, consequence = (
                (said, False)
                if said is not None
                else comm_failure_line(error, env.global_rank, launcher.comm_timeout_s) or (_one_line(error), False)
            )
            if consequence:  # let the rank that timed out (the cause) write its reason first
                time.sleep(3)
            lost = down_hosts(os.environ.get("SLURM_JOB_NODELIST", ""))
            self._end("FAILED", f"host(s) {', '.join(lost)} set DOWN by SLURM; {line}" if lost else line)
            # the scancel below reaches this task too, whose TermWatcher exits before submitit would
            # print the traceback: the task's .err log gets it now (a user error only its line)
            if said is not None:
                _say_error(f"{line}; mlflow run {self.spec.run_id} marked FAILED")
            else:
                traceback.print_exc(file=sys.stderr)
                sys.stderr.flush()
            cancel_job(env.job_id)  # the other ranks stop now, and SLURM does not requeue a lost host's job
            if said is not None:  # ends the task without submitit's traceback (it re-raises Exceptions only)
                raise SystemExit(EXIT_USAGE if isinstance(error, UserError) else 1) from None
            raise
        finally:
            del store
        if env.global_rank == 0 and self._end("FINISHED") and self.on_sweep_end is not None:
            # the sweep's last element to end, and it finished: the sweep's comparison (an element that
            # fails cancels its own job at once: `dlcomm report sweep=<parent>` writes it then)
            self.on_sweep_end(self.spec.tracking_uri, self.spec.parent_run_id)
        return summary

    def _requeue(self, stop: BaseException, job_id: str) -> str:
        """Requeue this job (or array element) unless it has been requeued ``max_requeue`` times;
        "" when SLURM took the requeue, else the reason the run was ended KILLED with.

        The line saying the job is requeued comes only once SLURM has taken it: after ``scontrol
        requeue`` succeeded, or from :class:`~dlcomm.launch.job_end.TermWatcher` when SLURM's
        SIGTERM, which stops the job it requeues, comes first (:attr:`_requeued`)."""
        import subprocess

        from dlcomm.tracking.mlflow_run import set_tags

        restarts = int(os.environ.get("SLURM_RESTART_COUNT", "0") or 0)
        limit = slurm_settings(self.spec.cfg()).max_requeue
        if restarts >= limit:
            reason = f"{stop} but the job was already requeued {restarts} times (launcher.max_requeue={limit})"
            self._end("KILLED", reason)
            return reason
        # the count first: a requeue SLURM does stops this task at once (SIGTERM), before any line after it
        set_tags(self.spec.tracking_uri, self.spec.run_id, {"requeues": str(restarts + 1)})
        self._requeued.line = f"dlcomm: {stop}; SLURM requeued job {job_id} ({restarts + 1} of at most {limit})"
        try:
            subprocess.run(
                ["scontrol", "requeue", job_id],
                check=True,
                timeout=60,
                capture_output=True,
                encoding="utf-8",
                errors="replace",
            )
        except (OSError, subprocess.SubprocessError) as error:  # no scontrol, refused (exit 1), no answer
            self._requeued.line = ""  # it did not happen: a SIGTERM now (the time limit) says nothing of a requeue
            set_tags(self.spec.tracking_uri, self.spec.run_id, {"requeues": str(restarts)})
            said = getattr(error, "stderr", "") or ""
            reason = next((line.strip() for line in said.splitlines() if line.strip()), "") or str(error)
            reason = (
                f"{stop}, but SLURM did not requeue job {job_id} (scontrol requeue: {reason}); the run ends here, its "
                f"checkpoint kept in {Path(self.spec.run_dir) / 'checkpoints'}; allow requeues on this cluster "
                "(or set launcher.max_requeue=0 to end at the time limit without checkpointing)"
            )
            self._end("KILLED", reason)
            return reason
        self._requeued.announce()
        return ""

    @cached_property
    def _requeued(self) -> "_Announcement":
        return _Announcement()

    def _end(self, status: str, error: str = "") -> bool:
        """End the run unless another rank ended it first (the first reason is the root cause);
        whether this ended the sweep too (its last element to end)."""
        from dlcomm.tracking.mlflow_run import TERMINAL, close_parent_if_done, close_run, run_status

        if status != "FINISHED" and run_status(self.spec.tracking_uri, self.spec.run_id) in TERMINAL:
            return False
        close_run(self.spec.tracking_uri, self.spec.run_id, status, error)
        return bool(self.spec.parent_run_id and close_parent_if_done(self.spec.tracking_uri, self.spec.parent_run_id))


class _Announcement:
    """A line printed at most once, from whichever thread gets there first (the task's main thread
    after ``scontrol requeue`` returned, or the SIGTERM watcher when SLURM stopped the job first)."""

    def __init__(self) -> None:
        self.line = ""
        self._lock = threading.Lock()

    def announce(self) -> None:
        with self._lock:
            if self.line:
                print(self.line, flush=True)
                self.line = ""


def user_line(error: BaseException, rank: int) -> str | None:
    """What a task says of a rank stopped by bad input or settings (a :class:`UserError`, a
    diverged loss), as the local launchers do (:class:`dlcomm.launch.driver.RankFailure`): one line,
    not tagged by the exception's class; None for any other error, which keeps its traceback."""
    if isinstance(error, Diverged):
        return str(error)  # names the step and the rank itself
    if isinstance(error, UserError):
        return f"rank {rank} stopped: {error}"
    return None


def _say_error(line: str) -> None:
    """The task's own one line on stderr (its .err log; srun's terminal), secrets masked."""
    from dlcomm.secrets import mask

    print(f"dlcomm: error: {mask(line)}", file=sys.stderr, flush=True)


def _one_line(error: BaseException) -> str:
    lines = [line.strip() for line in str(error).strip().splitlines() if line.strip()]
    return f"{type(error).__name__}: {lines[0]}" if lines else type(error).__name__


def slurm_settings(cfg: RunConfig) -> SlurmLauncherConfig:
    return launcher_settings(cfg, SlurmLauncherConfig)


def _executor(folder: Path, cfg: RunConfig) -> Any:
    """A submitit executor with the run's SLURM parameters (``launcher.*``), writing into
    ``folder`` made private (:func:`private_folder`)."""
    import submitit

    launcher = slurm_settings(cfg)
    private_folder(folder)
    executor = submitit.SlurmExecutor(folder=folder)
    parameters: dict[str, Any] = {
        "nodes": cfg.nodes,
        "ntasks_per_node": cfg.workers_per_node,
        "cpus_per_task": launcher.cpus_per_task,
        "time": launcher.time_min,
        "signal_delay_s": launcher.signal_delay_s,
        "array_parallelism": launcher.array_parallelism,
        "setup": list(launcher.setup),
        # a rank that exits non-zero (an NCCL abort, a crash) ends the step's other tasks at once
        # instead of leaving them to wait launcher.comm_timeout_s for it
        "srun_args": list(SRUN_ARGS),
        # a bare flag (e.g. --hold) is written as {hold: true}
        "additional_parameters": {
            key: True if str(value).lower() == "true" else value for key, value in launcher.sbatch_args.items()
        },
    }
    optional = {
        "partition": launcher.partition,
        "account": launcher.account,
        "qos": launcher.qos,
        "constraint": launcher.constraint,
        "gpus_per_node": launcher.gpus_per_node,
        "mem": f"{int(launcher.mem_gb * 1024)}MB" if launcher.mem_gb > 0 else "",
    }
    parameters.update({key: value for key, value in optional.items() if value})
    executor.update_parameters(**parameters)
    return executor


def private_folder(folder: Path) -> None:
    """``folder`` made (if need be) readable by its owner alone (mode 0700). submitit pickles the
    whole run into it (the configuration as given: a ``tracking.uri`` with its password, a token in
    a run name) and the job writes its logs there; the files keep the umask's mode (0644), so the
    folder is what keeps them from other users. The job runs as the same user and reads them."""
    folder.mkdir(parents=True, exist_ok=True)
    folder.chmod(0o700)


def submit(spec: RunSpec) -> Any:
    """Submit the run's job; return the submitit job (its ``job_id`` and ``paths``)."""
    executor = _executor(Path(spec.run_dir) / "slurm", spec.cfg())
    executor.update_parameters(job_name=f"dlcomm-{spec.run_id[:8]}")
    return executor.submit(RankTask(spec))


def submit_array(specs: list[RunSpec], folder: Path, name: str, on_sweep_end: Any = None) -> list[Any]:
    """Submit the specs as the elements of ONE job array (``launcher.array_parallelism`` at once).
    They must share their SLURM shape (:func:`group_by_shape`); ``on_sweep_end``: see :class:`RankTask`."""
    executor = _executor(folder, specs[0].cfg())
    executor.update_parameters(job_name=name)
    with executor.batch():
        jobs = [executor.submit(RankTask(spec, on_sweep_end)) for spec in specs]
    return jobs


def group_by_shape(specs: list[RunSpec]) -> list[list[RunSpec]]:
    """Specs grouped by what sbatch is asked for (nodes, tasks per node, ``launcher.*``): a job
    array has one set of sbatch parameters, so a sweep over ``nodes`` is one array per value."""
    groups: dict[str, list[RunSpec]] = {}
    for spec in specs:
        cfg = spec.config
        key = repr((cfg["nodes"], cfg["workers_per_node"], sorted((k, str(v)) for k, v in cfg["launcher"].items())))
        groups.setdefault(key, []).append(spec)
    return list(groups.values())


@register
class SlurmLauncher(Launcher):
    """``launcher=slurm``: one run is one SLURM job submitted from here, a sweep one job array
    per SLURM shape; the command returns at once (``launcher.wait=true``: it waits) and the
    job's tasks close the runs."""

    Config = SlurmLauncherConfig
    ended_by = "slurm_job"

    @classmethod
    def check(cls, cfg: RunConfig, roles: tuple[str, ...] = ()) -> None:
        """Beside the base checks: the ``launcher.*`` ranges, GPUs asked for every rank and a
        backend that carries the device's tensors (:func:`dlcomm.launch.gpus.check_slurm_gpus`),
        ``sbatch`` on PATH, a partition that exists and has ``nodes`` nodes. (The GPUs are on the
        compute nodes, not here: what is checked is what the job asks for.)"""
        super().check(cfg, roles)
        check_slurm_settings(cfg.launcher)
        from dlcomm.launch.gpus import check_slurm_gpus

        check_slurm_gpus(cfg)
        check_slurm_available()
        check_partition_fits(cfg.nodes, cast(SlurmLauncherConfig, cfg.launcher).partition)  # launcher=slurm's schema

    @classmethod
    def launch(cls, spec: RunSpec) -> int:
        """Open the MLflow run and submit its SLURM job; return at once (or wait, ``launcher.wait``).
        The ranks close the run (FINISHED or FAILED). Ctrl-C or SIGTERM while the run is opened and
        submitted is held to the end of that (:mod:`dlcomm.launch.interrupts`), then the job is
        cancelled and the run marked KILLED: it never stays RUNNING with no job behind it."""
        from dlcomm.paths import runs_dir
        from dlcomm.tracking.mlflow_run import close_run, open_run, set_tags

        INTERRUPTS.hold()
        run_id = open_run(spec)
        spec = spec.with_run(run_id, runs_dir(spec.tracking_uri) / run_id)
        Path(spec.run_dir).mkdir(parents=True, exist_ok=True)
        if INTERRUPTS.received is not None:
            return _withdraw([], [run_id], spec.tracking_uri)
        try:
            job = submit(spec)
        except Exception as error:  # noqa: BLE001 - sbatch refused: nothing runs, the run is FAILED
            close_run(spec.tracking_uri, run_id, "FAILED")
            raise UserError(f"sbatch refused the job ({_last_line(error)}); {_SBATCH_HINT}") from None
        set_tags(spec.tracking_uri, run_id, {"slurm_job_id": job.job_id})  # `dlcomm runs reap` asks squeue for it
        if INTERRUPTS.received is not None:
            return _withdraw([job.job_id], [run_id], spec.tracking_uri)
        print(f"submitted SLURM job {job.job_id} for mlflow run {run_id}", flush=True)
        print(f"  logs: {job.paths.stdout} and {job.paths.stderr}", flush=True)
        print(
            ui_lines(run_page(spec.tracking_uri, experiment_of(spec.tracking_uri, run_id), run_id), spec.tracking_uri)
        )
        if not slurm_settings(spec.cfg()).wait:
            return 0
        return cls.wait(job)

    @classmethod
    def sweep(cls, specs: list[RunSpec], overrides: list[str], on_end: Any = None) -> int:
        """Open the parent and every child run, then submit one job array per SLURM shape (one
        for a sweep that does not vary nodes, workers_per_node or launcher.*); the elements
        close their runs and the last one the parent. A signal meanwhile is held, then what was
        submitted is cancelled and every run marked KILLED."""
        from dlcomm.paths import results_dir, runs_dir
        from dlcomm.tracking.mlflow_run import close_run, open_run, set_tags

        INTERRUPTS.hold()
        parent, specs = cls.open_parent(specs, overrides)
        opened = []
        for spec in specs:
            run_id = open_run(spec, {"mlflow.parentRunId": parent, "sweep_element": element_label(spec)})
            opened.append(spec.with_run(run_id, runs_dir(spec.tracking_uri) / run_id))
            Path(opened[-1].run_dir).mkdir(parents=True, exist_ok=True)
        folder = results_dir() / "sweeps" / parent / "slurm"
        array_ids = []
        for group in group_by_shape(opened):
            try:
                jobs = submit_array(group, folder, f"dlcomm-sweep-{parent[:8]}", on_end)
            except Exception as error:  # noqa: BLE001 - sbatch refused: those elements never run
                for spec in group:
                    close_run(spec.tracking_uri, spec.run_id, "FAILED", "sbatch refused the array")
                close_run(specs[0].tracking_uri, parent, "FAILED")
                raise UserError(f"sbatch refused the job array ({_last_line(error)}); {_SBATCH_HINT}") from None
            array_id = jobs[0].job_id.split("_")[0]
            array_ids.append(array_id)
            for spec, job in zip(group, jobs):
                set_tags(spec.tracking_uri, spec.run_id, {"slurm_job_id": job.job_id})
            print(
                f"submitted SLURM job array {array_id} ({len(jobs)} elements, "
                f"at most {slurm_settings(group[0].cfg()).array_parallelism} at once)",
                flush=True,
            )
        set_tags(specs[0].tracking_uri, parent, {"slurm_array_job_ids": ",".join(array_ids)})
        if INTERRUPTS.received is not None:
            return _withdraw(array_ids, [spec.run_id for spec in opened] + [parent], specs[0].tracking_uri)
        print(f"  logs: {folder}/<array id>_<element>_<task>_log.out and .err", flush=True)
        uri = specs[0].tracking_uri  # the comparison appears on the parent's page when the last element ends
        print(ui_lines(run_page(uri, experiment_of(uri, parent), parent), uri), flush=True)
        return 0

    @classmethod
    def wait(cls, job: Any) -> int:
        """Show the job's queue state until it ends; 0 when every task returned, 1 otherwise.
        (The queue is read with squeue: clusters without accounting have no sacct.)"""
        import logging
        import subprocess

        from tqdm import tqdm

        logging.getLogger("submitit").setLevel(logging.ERROR)  # its sacct fallback warns at every poll
        name = f"SLURM job {job.job_id}"
        try:
            INTERRUPTS.release()
            with tqdm(desc=name, bar_format="{desc} [{elapsed}]") as bar:
                # the queue first: submitit's own check asks sacct, which prints a warning each time on
                # clusters without accounting
                while True:
                    queue = subprocess.run(
                        ["squeue", "-h", "-j", str(job.job_id), "-o", "%T %R"],
                        capture_output=True,
                        encoding="utf-8",
                        errors="replace",
                    )
                    if not queue.stdout.strip() and job.done():
                        break
                    bar.set_description_str(f"{name}: {queue.stdout.strip() or 'ENDING'}")
                    time.sleep(2)
                bar.set_description_str(f"{name}: ended")
        except KeyboardInterrupt:
            print(f"dlcomm: stopped waiting; {name} goes on (`scancel {job.job_id}` stops it)", file=sys.stderr)
            return 130
        finally:
            INTERRUPTS.hold()
        if job.exception() is None:
            return 0
        print(f"dlcomm: error: SLURM job {job.job_id} failed; see {job.paths.stderr}", file=sys.stderr)
        return 1


def _withdraw(job_ids: list[str], run_ids: list[str], uri: str) -> int:
    """A signal came while the runs were opened and submitted: cancel the jobs, mark the runs
    KILLED; exit 130."""
    from dlcomm.tracking.mlflow_run import close_run

    for job_id in job_ids:
        cancel_job(job_id)
    for run_id in run_ids:
        close_run(uri, run_id, "KILLED")
    cancelled = f"SLURM job {', '.join(job_ids)} cancelled, " if job_ids else "nothing submitted, "
    print(f"dlcomm: interrupted; {cancelled}mlflow run(s) {', '.join(run_ids)} marked KILLED", file=sys.stderr)
    return 130


_SBATCH_HINT = "check launcher.partition, launcher.account and launcher.time_min"


def _last_line(error: BaseException) -> str:
    return (str(error).strip().splitlines() or [type(error).__name__])[-1]
