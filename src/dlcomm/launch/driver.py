"""What the launchers that run a job's ranks on this machine share (``launcher=local``, one
process per rank; ``launcher=threads``, one thread per rank): this process opens the MLflow run,
runs the ranks, waits for them and closes the run with the truthful status; the first failing
rank is named in one line (its traceback above it when it raised), Ctrl-C and SIGTERM end the
run KILLED with exit 130 until every rank has ended; after that the outcome is decided (signals
are held from then on, :mod:`dlcomm.launch.interrupts`) and the exit code is the recorded status's.
So is a signal that comes once rank 0 has recorded the run's result (:data:`dlcomm.progress.RECORDED`,
just before its done line), while the ranks end: the ranks still running are stopped, and the run
is FINISHED with exit 0 (in a sweep the sweep stops, exit 130).
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from dlcomm import progress
from dlcomm.config.schema import RunConfig
from dlcomm.errors import EXIT_USAGE, Diverged
from dlcomm.launch.base import Launcher, element_label
from dlcomm.launch.interrupts import INTERRUPTS
from dlcomm.spec import RunSpec


@dataclass(frozen=True)
class RankFailure:
    rank: int
    message: str
    details: str = ""
    user_error: bool = False
    signalled: bool = False
    at: float = 0.0
    role: str = "worker"
    diverged_at: int | None = None  # the step whose loss was not finite: the message is the whole story
    whole_story: bool = False  # the message names the ranks itself (a deadlock)

    @classmethod
    def diverged(cls, error: Diverged, role: str = "worker") -> "RankFailure":
        return cls(error.rank, str(error), at=time.time(), role=role, diverged_at=error.step)

    def describe(self) -> str:
        if self.diverged_at is not None or self.whole_story:
            return self.message  # names the step and the rank itself
        role = "" if self.role == "worker" else f" ({self.role})"
        return f"rank {self.rank}{role} {self.message}"


def root_cause(failures: list[RankFailure]) -> RankFailure:
    """The failure to report among several: a rank killed by a signal (its peers only lost their
    connection), else the first divergence (lowest step, then rank: the same line on every
    rerun), else the earliest reported failure."""
    signalled = [f for f in failures if f.signalled]
    if signalled:
        return min(signalled, key=lambda f: f.at)
    diverged = [f for f in failures if f.diverged_at is not None]
    if diverged:
        return min(diverged, key=lambda f: (f.diverged_at, f.rank))
    return min(failures, key=lambda f: f.at)


@dataclass(frozen=True)
class LaunchResult:
    failure: RankFailure | None = None
    interrupted: bool = False

    @property
    def exit_code(self) -> int:
        if self.interrupted:
            return 130
        if self.failure is None:
            return 0
        return EXIT_USAGE if self.failure.user_error else 1


class DriverLauncher(Launcher):
    """A launcher whose ranks run under this process: subclasses say how in :meth:`run_job`."""

    services = True
    ended_by = "driver"
    where = "on this machine"  # how the start line says where the ranks run

    @classmethod
    def run_job(cls, spec: RunSpec) -> LaunchResult:
        """Run every rank of ``spec`` (its MLflow run open, its folder made); how it ended."""
        raise NotImplementedError

    @classmethod
    def before_runs(cls, specs: list[RunSpec]) -> None:
        resolve_profiles(specs)

    @classmethod
    def shared_hardware(cls, cfg: RunConfig, ranks: int) -> str:
        """Every rank runs on this machine: more ranks than cores take turns on them."""
        cores = os.cpu_count() or 1
        return f"{ranks} ranks shared {cores} cores" if ranks > cores else ""

    @classmethod
    def launch(cls, spec: RunSpec) -> int:
        """Open the MLflow run, launch the ranks here, close the run with the truthful status.
        Signals are held while the run is opened and closed (:mod:`dlcomm.launch.interrupts`): it
        is never left RUNNING, and once it is closed the exit code is its status's."""
        from dlcomm.paths import runs_dir
        from dlcomm.tracking.mlflow_run import close_run, open_run
        from dlcomm.tracking.system_metrics import system_metrics

        tags = cls.driver_tags()  # this process closes the run: `dlcomm runs reap` checks it lives
        # every rank runs on this machine: more ranks than cores take turns, and the report says so
        tags.update({"host_cores": str(os.cpu_count() or 1), "host_ranks": str(job_ranks(spec))})
        spec = spec.sharing(shared_hardware(spec.cfg()))
        if spec.shared:
            tags["shared_hardware"] = spec.shared
        if spec.parent_run_id:
            tags.update({"mlflow.parentRunId": spec.parent_run_id, "sweep_element": element_label(spec)})
        signals = INTERRUPTS.install()
        run_id = None
        result = None
        status = ""
        signals.hold()
        try:
            progress.stage("opening the MLflow run")
            run_id = open_run(spec, tags)
            spec = spec.with_run(run_id, runs_dir(spec.tracking_uri) / run_id)
            Path(spec.run_dir).mkdir(parents=True, exist_ok=True)
            world = spec.cfg().nodes * spec.cfg().workers_per_node
            progress.say(f"dlcomm: starting {world} workers {cls.where}, MLflow run '{spec.run_name()}' ({run_id})")
            signals.release()  # a signal that came while the run was opened acts here
            prepare_profile(spec)
            progress.follow(f"starting {world} workers", Path(spec.run_dir) / progress.STAGE_FILE)
            with system_metrics(spec.tracking_uri, run_id, spec.cfg().tracking.system_metrics_every_s):
                result = cls.run_job(spec)
        except KeyboardInterrupt:
            result = LaunchResult(interrupted=True)
        finally:
            progress.end()
            signals.hold()  # the outcome is decided: nothing cuts the closing short or changes the exit code after it
            late = result is not None and result.interrupted and progress.recorded(spec.run_dir)
            if late:  # rank 0 had recorded the result (and printed it, or was about to): the run finished
                result = LaunchResult()
            if run_id is not None:
                status = (
                    "KILLED" if result is None or result.interrupted else ("FAILED" if result.failure else "FINISHED")
                )
                error = result.failure.describe() if result is not None and result.failure is not None else ""
                close_run(spec.tracking_uri, run_id, status, error)
        if result.interrupted:
            print(f"dlcomm: interrupted; mlflow run {run_id} marked KILLED", file=sys.stderr)
        elif result.failure is not None:
            failure = result.failure
            if failure.details and not failure.user_error:
                print(failure.details, file=sys.stderr, end="")
            print(f"dlcomm: error: {failure.describe()}; mlflow run {run_id} marked FAILED", file=sys.stderr)
        if signals.received is not None and not result.interrupted:
            # Every rank had ended: the run is what was recorded, and the exit code says so. In a
            # sweep the signal still stops the sweep (its parent is marked KILLED, exit 130).
            stops = " (the sweep stops)" if spec.parent_run_id else ""
            when = "after the run's result was recorded" if late else "after every rank had ended"
            print(f"dlcomm: {signals.name} {when}; mlflow run {run_id} stays {status}{stops}", file=sys.stderr)
            if spec.parent_run_id:
                return 130
        return result.exit_code


def shared_hardware(cfg: RunConfig) -> str:
    """What the job's ranks (workers and the algorithm's service roles) share on this machine, as
    its launcher tells (:meth:`~dlcomm.launch.base.Launcher.shared_hardware`); "" for one rank."""
    from dlcomm.algorithms.registry import ALGORITHMS
    from dlcomm.launch.registry import LAUNCHERS

    ranks = cfg.nodes * cfg.workers_per_node + len(ALGORITHMS.get(cfg.algo.name).roles(cfg.algo))
    return LAUNCHERS.get(cfg.launcher.name).shared_hardware(cfg, ranks) if ranks > 1 else ""


def job_ranks(spec: RunSpec) -> int:
    """The job's processes or threads: its workers and its algorithm's service roles."""
    from dlcomm.algorithms.registry import ALGORITHMS

    cfg = spec.cfg()
    return cfg.nodes * cfg.workers_per_node + len(ALGORITHMS.get(cfg.algo.name).roles(cfg.algo))


def prepare_profile(spec: RunSpec) -> None:
    """Under ``network.compute=profile``, the run's compute profile in its folder before any rank
    starts (this machine runs them all): from ``network.compute_profile``, the cache, or one replica
    stepped here alone on one thread, timed by its own CPU time (:mod:`dlcomm.train.profile_measure`)."""
    cfg = spec.cfg()
    from dlcomm.train.profile import prepare_run_profile, uses_profile

    if not uses_profile(cfg):
        return
    progress.stage("preparing the compute profile the simulated clocks charge")
    import torch

    from dlcomm.launch.gpus import trains_on_cuda
    from dlcomm.paths import profiles_dir

    device = torch.device("cuda", 0) if trains_on_cuda(cfg.train) else torch.device("cpu")
    profile = prepare_run_profile(
        cfg,
        Path(spec.run_dir),
        profiles_dir(),
        device,
        progress=lambda what: progress.say(f"dlcomm: profiling one replica alone: {what}"),
    )
    progress.say(f"dlcomm: compute profile: {profile.provenance()}")


def resolve_profiles(specs: list[RunSpec]) -> None:
    """Under ``network.compute=profile``, every distinct profile the runs of ``specs`` will charge,
    read or measured (and cached) before any run is recorded, one line each naming it; a machine
    too busy to measure stops here, in one line, with nothing recorded
    (:class:`~dlcomm.train.profile_measure.BusyMachine`)."""
    from dlcomm.train.profile import profile_key, run_profile, uses_profile

    wanted = [spec.cfg() for spec in specs if uses_profile(spec.cfg())]
    if not wanted:
        return
    import torch

    from dlcomm.launch.gpus import trains_on_cuda
    from dlcomm.paths import profiles_dir

    seen: set[tuple[str, str, float]] = set()
    for cfg in wanted:
        device = torch.device("cuda", 0) if trains_on_cuda(cfg.train) else torch.device("cpu")
        which = (
            cfg.network.compute_profile,
            cfg.network.compute_profile or profile_key(cfg, device),
            cfg.network.compute_ms,
        )
        if which in seen:
            continue
        seen.add(which)
        progress.stage("the compute profile the simulated clocks charge")
        profile = run_profile(
            cfg, device, profiles_dir(), lambda what: progress.stage(f"profiling one replica alone: {what}")
        )
        progress.say(f"{'sweep' if len(specs) > 1 else 'dlcomm'}: compute profile: {profile.provenance()}")
