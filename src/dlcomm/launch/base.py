"""The launcher interface: what ``launcher=<name>`` does with a composed, checked run.

A launcher is a class registered by name (:mod:`dlcomm.launch.registry`), stateless, with
three steps the driver calls in order:

* :meth:`Launcher.check` -- everything this launcher can tell wrong before any process starts
  or any MLflow run is recorded (its ``launcher.*`` ranges, ``sbatch`` on PATH, a visible GPU,
  whether it starts an algorithm's service processes); one-line :class:`UserError`;
* :meth:`Launcher.launch` -- one run: open its MLflow run, start (or submit) the ranks, and
  wait for them where this process runs them (SLURM returns at once unless ``launcher.wait``);
  the exit code;
* :meth:`Launcher.sweep` -- a sweep's elements under one parent run; by default one run after
  another through :meth:`launch`.

Two class attributes say what the rest of dlcomm needs to know without naming launchers:
:attr:`Launcher.services` (it starts the processes an algorithm names in ``roles()``) and
:attr:`Launcher.ended_by` (who closes a run, hence how ``dlcomm runs reap`` tells a lost one).
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Callable, ClassVar, TypeVar

from dlcomm import progress
from dlcomm.config.schema import LauncherConfig, RunConfig
from dlcomm.errors import UserError

SweepEnd = Callable[[str, str], None]  # (tracking uri, parent run id): what runs once a sweep has ended

if TYPE_CHECKING:
    from dlcomm.spec import RunSpec


class Launcher:
    name: ClassVar[str]
    Config: ClassVar[type | None] = None
    """Its schema: a subclass of :class:`dlcomm.config.schema.LauncherConfig` (its own, declared
    beside the class, whose ``name`` default is the launcher's name; or a shared one, such as
    ``ProcessLauncherConfig``, with the class's ``name``), stored as Hydra's ``launcher/<name>``.
    dlcomm's launchers all have one; None (a plugin's): its YAML ``launcher/<name>.yaml`` names a
    schema of :mod:`dlcomm.config.schema`."""
    services: ClassVar[bool] = False
    """Whether it starts the service processes an algorithm names in ``roles()`` (a parameter
    server, a gossip manager) beside the workers."""
    ended_by: ClassVar[str] = "driver"
    """Who closes the MLflow run: ``"driver"``, this dlcomm process (tags ``hostname`` and
    ``driver_pid``: the run is lost when that process is gone), or ``"slurm_job"``, the tasks of
    a SLURM job (tag ``slurm_job_id``: lost when ``squeue`` no longer lists the job)."""

    @classmethod
    def before_runs(cls, specs: list["RunSpec"]) -> None:
        """What this launcher does once, before any run of ``specs`` is recorded (the driver's
        launchers: the compute profiles the simulated clocks charge); nothing by default."""

    @classmethod
    def check(cls, cfg: RunConfig, roles: tuple[str, ...] = ()) -> None:
        """Raise a one-line :class:`UserError` for what this launcher cannot run; ``roles``:
        the service processes the algorithm needs. Subclasses extend it (``super().check``)."""
        if roles and not cls.services:
            from dlcomm.launch.registry import LAUNCHERS

            able = [name for name, launcher in LAUNCHERS.all().items() if launcher.services]
            raise UserError(
                f"launcher={cls.name} is invalid for algo={cfg.algo.name}: it needs the service process(es) "
                f"{', '.join(roles)}, which it does not start; pass "
                f"{' or '.join(f'launcher={name}' for name in able) or 'launcher=local'}"
            )

    @classmethod
    def shared_hardware(cls, cfg: RunConfig, ranks: int) -> str:
        """What the job's ``ranks`` share on this machine, in words ("8 ranks took turns on 2
        cores"), or "" when each has hardware of its own or the ranks run elsewhere (SLURM): the
        wall clock is then a cluster's (docs/metrics.md, "Which clock a figure is on")."""
        return ""

    @classmethod
    def launch(cls, spec: RunSpec) -> int:
        """Run ``spec`` (checked, not yet recorded); the exit code (0, 1, 2 or 130)."""
        raise NotImplementedError

    @classmethod
    def sweep(cls, specs: list[RunSpec], overrides: list[str], on_end: SweepEnd | None = None) -> int:
        """The sweep's elements (checked, not yet recorded) under one parent run: by default one
        :meth:`launch` after another here; a failed element does not stop the others (exit 1 at
        the end); Ctrl-C stops all and marks the parent KILLED. ``on_end(tracking uri, parent run
        id)`` is called once the sweep has ended with some run finished (the caller's comparison:
        :func:`dlcomm.report.sweep.compare_sweep`)."""
        from dlcomm.launch.interrupts import INTERRUPTS
        from dlcomm.tracking.mlflow_run import close_parent_if_done, close_run

        INTERRUPTS.hold()  # between elements a signal is held; it stops the sweep after the element
        parent, specs = cls.open_parent(specs, overrides)
        codes: list[int] = []
        for index, spec in enumerate(specs):
            if INTERRUPTS.received is None:
                progress.say(f"--- sweep element {index + 1}/{len(specs)}: {element_label(spec)}")
                codes.append(cls.launch(spec))
            if codes[-1:] == [130] or INTERRUPTS.received is not None:
                close_run(spec.tracking_uri, parent, "KILLED")
                if not codes or codes[-1] != 130:
                    print(f"dlcomm: interrupted; sweep parent mlflow run {parent} marked KILLED", file=sys.stderr)
                return 130
        close_parent_if_done(specs[0].tracking_uri, parent)
        failed = sum(code != 0 for code in codes)
        progress.say(f"sweep done: {len(codes) - failed} of {len(codes)} runs finished; parent mlflow run {parent}")
        if on_end is not None and failed < len(codes):
            on_end(specs[0].tracking_uri, parent)
        return 0 if failed == 0 else 1

    @classmethod
    def driver_tags(cls) -> dict[str, str]:
        """Tags of a run (or parent run) this process will close: ``dlcomm runs reap`` checks it lives."""
        if cls.ended_by != "driver":
            return {}
        from dlcomm.launch.procstart import process_start

        started = process_start(os.getpid())  # the pid alone may be another process's by then
        return {"driver_pid": str(os.getpid()), **({"driver_start": started} if started else {})}

    @classmethod
    def open_parent(cls, specs: list[RunSpec], overrides: list[str]) -> tuple[str, list[RunSpec]]:
        """Open the sweep's parent run; return its id and the elements marked as its children."""
        from dlcomm.tracking.mlflow_run import open_parent_run

        first = specs[0]
        parent = open_parent_run(
            first.tracking_uri,
            first.cfg().tracking.experiment,
            overrides,
            len(specs),
            cls.name,
            cls.driver_tags(),
        )
        # below the status line, never on it (its "... 3 s" was once followed by "sweep of" on one line)
        progress.say(f"sweep of {len(specs)} runs: parent mlflow run {parent}")
        return parent, [spec.in_sweep(parent) for spec in specs]


L = TypeVar("L", bound=LauncherConfig)


def launcher_settings(cfg: RunConfig, kind: type[L]) -> L:
    """``cfg.launcher`` as the settings of launcher family ``kind`` (composition gives each launcher
    its own ``Config``: ``launcher=slurm`` a :class:`~dlcomm.config.schema.SlurmLauncherConfig`);
    another type here is a programming error."""
    if not isinstance(cfg.launcher, kind):
        raise TypeError(f"launcher={cfg.launcher.name} has no {kind.__name__} settings")
    return cfg.launcher


def element_label(spec: RunSpec) -> str:
    """A sweep element's overrides, as the ``sweep_element`` tag and the progress lines show them."""
    return " ".join(spec.overrides)
