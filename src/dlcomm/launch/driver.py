"""What the launchers that run a job's ranks on this machine share (``launcher=local``, one
process per rank; ``launcher=threads``, one thread per rank): this process opens the MLflow run,
runs the ranks, waits for them and closes the run with the truthful status; the first failing
rank is named in one line (its traceback above it when it raised), Ctrl-C and SIGTERM end the
run KILLED with exit 130 until every rank has ended; after that the outcome is decided (the
signals are held while it is recorded) and the exit code is the recorded status's.
"""

from __future__ import annotations

import signal
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from dlcomm.errors import EXIT_USAGE, Diverged
from dlcomm.launch.base import Launcher, element_label
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
    def launch(cls, spec: RunSpec) -> int:
        """Open the MLflow run, launch the ranks here, close the run with the truthful status."""
        from dlcomm.paths import runs_dir
        from dlcomm.tracking.mlflow_run import close_run, open_run

        tags = cls.driver_tags()  # this process closes the run: `dlcomm runs reap` checks it lives
        if spec.parent_run_id:
            tags.update({"mlflow.parentRunId": spec.parent_run_id, "sweep_element": element_label(spec)})
        run_id = open_run(spec, tags)
        spec = spec.with_run(run_id, runs_dir(spec.tracking_uri) / run_id)
        Path(spec.run_dir).mkdir(parents=True, exist_ok=True)
        world = spec.config["nodes"] * spec.config["workers_per_node"]
        print(f"dlcomm: starting {world} workers {cls.where}, MLflow run '{spec.run_name()}' ({run_id})", flush=True)
        result = None
        previous_handler = signal.signal(signal.SIGTERM, _terminate_as_interrupt)
        try:
            result = cls.run_job(spec)
        finally:
            # the outcome is decided: a signal now must not cut the closing short
            with _SignalsHeld(then={signal.SIGTERM: previous_handler}) as held:
                status = "KILLED" if result is None or result.interrupted else ("FAILED" if result.failure else "FINISHED")
                error = result.failure.describe() if result is not None and result.failure is not None else ""
                close_run(spec.tracking_uri, run_id, status, error)
        if result.interrupted:
            print(f"dlcomm: interrupted; mlflow run {run_id} marked KILLED", file=sys.stderr)
        elif result.failure is not None:
            failure = result.failure
            if failure.details and not failure.user_error:
                print(failure.details, file=sys.stderr, end="")
            print(f"dlcomm: error: {failure.describe()}; mlflow run {run_id} marked FAILED", file=sys.stderr)
        if held.signum is not None and not result.interrupted:
            # Every rank had ended: the run is what was recorded, and the exit code says so. In a
            # sweep the signal still stops the sweep (its parent is marked KILLED, exit 130).
            name = signal.Signals(held.signum).name
            stops = " (the sweep stops)" if spec.parent_run_id else ""
            print(f"dlcomm: {name} after every rank had ended; mlflow run {run_id} stays {status}{stops}", file=sys.stderr)
            if spec.parent_run_id:
                return 130
        return result.exit_code


class _SignalsHeld:
    """SIGINT and SIGTERM recorded, not acted on, inside the block (main thread only: elsewhere
    signals cannot be handled anyway); ``signum`` is the last one received, or None. After the
    block each gets its handler from before, or the one ``then`` gives."""

    def __init__(self, then: dict[int, object] | None = None) -> None:
        self.signum: int | None = None
        self._then = dict(then or {})
        self._previous: dict[int, object] = {}

    def _record(self, signum: int, frame: object) -> None:
        self.signum = signum

    def __enter__(self) -> "_SignalsHeld":
        if threading.current_thread() is threading.main_thread():
            for signum in (signal.SIGINT, signal.SIGTERM):
                self._previous[signum] = signal.signal(signum, self._record)
        return self

    def __exit__(self, *exc: object) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, self._then.get(signum, handler))  # type: ignore[arg-type]


def _terminate_as_interrupt(signum: int, frame: object) -> None:
    """SIGTERM (``kill``, a scheduler's cancel) ends the run like Ctrl-C: ranks torn down, KILLED."""
    raise KeyboardInterrupt
