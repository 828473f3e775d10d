"""The srun launcher: ``srun dlcomm train launcher=srun ...`` inside an allocation the user made
(``slurm/single.sbatch``, ``slurm/array.sbatch``): every srun task is one rank, and the tasks
train as a job submitted by ``launcher=slurm`` does (:class:`dlcomm.launch.slurm.RankTask`).
"""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path
from typing import Any

from dlcomm.config.schema import RunConfig, SrunLauncherConfig
from dlcomm.errors import UserError
from dlcomm.launch.base import Launcher
from dlcomm.launch.registry import register
from dlcomm.launch.slurm import RankTask, check_slurm_settings, rendezvous_port
from dlcomm.spec import RunSpec


@register
class SrunLauncher(Launcher):
    """``launcher=srun``: this process is one task of an srun step; no sweeps (export them with
    ``dlcomm sweep export`` for ``slurm/array.sbatch``, or use ``launcher=slurm``)."""

    Config = SrunLauncherConfig
    ended_by = "slurm_job"

    @classmethod
    def check(cls, cfg: RunConfig, roles: tuple[str, ...] = ()) -> None:
        """Beside the base checks: the ``launcher.*`` ranges, and inside an srun step a GPU for
        every rank of this node among those this task sees, and a backend that carries the
        device's tensors (:func:`dlcomm.launch.gpus.check_srun_gpus`)."""
        from dlcomm.launch.gpus import check_srun_gpus

        super().check(cfg, roles)
        check_slurm_settings(cfg.launcher)
        check_srun_gpus(cfg, in_step="SLURM_JOB_ID" in os.environ and "SLURM_PROCID" in os.environ)

    @classmethod
    def launch(cls, spec: RunSpec) -> int:
        run_in_allocation(spec)
        return 0

    @classmethod
    def sweep(cls, specs: list[RunSpec], overrides: list[str], on_end: Any = None) -> int:
        raise UserError(
            "launcher=srun is invalid with -m: one srun step is one run; write the sweep's lines with "
            "`dlcomm sweep export -m ...` for slurm/array.sbatch, or use launcher=slurm"
        )


def run_in_allocation(spec: RunSpec) -> dict[str, float]:
    """``launcher=srun``: this process is one task of an srun step in an allocation the user made
    (``slurm/single.sbatch``, ``slurm/array.sbatch``). Rank 0 opens the MLflow run, or reopens
    the one this SLURM job started before a requeue, and hands its id to the others through the
    rendezvous store; then every task trains as :class:`RankTask` does."""
    import submitit

    from dlcomm.launch.store import join_store
    from dlcomm.paths import runs_dir
    from dlcomm.tracking.mlflow_run import open_run

    os.environ.setdefault("SUBMITIT_EXECUTOR", "slurm")
    if "SLURM_JOB_ID" not in os.environ or "SLURM_PROCID" not in os.environ:
        raise UserError(
            "launcher=srun is invalid outside an srun step: run it as `srun dlcomm train launcher=srun ...` "
            "inside sbatch (see slurm/single.sbatch), or use launcher=slurm to submit from here"
        )
    env = submitit.JobEnvironment()
    cfg = spec.cfg()
    if (cfg.nodes, cfg.nodes * cfg.workers_per_node) != (env.num_nodes, env.num_tasks):
        raise UserError(
            f"nodes={cfg.nodes} workers_per_node={cfg.workers_per_node} is invalid in this allocation of "
            f"{env.num_nodes} node(s) and {env.num_tasks} task(s): pass nodes=$SLURM_JOB_NUM_NODES "
            "workers_per_node=$SLURM_NTASKS_PER_NODE (as slurm/*.sbatch do)"
        )
    store = join_store(
        env.hostnames[0],
        rendezvous_port(env.raw_job_id),
        env.num_tasks,
        master=env.global_rank == 0,
        timeout=timedelta(seconds=600),
        count_in=False,
    )
    if env.global_rank == 0:
        marker = runs_dir(spec.tracking_uri) / "slurm-jobs" / env.raw_job_id  # this job's run, across requeues
        try:
            run_id = job_run(spec, marker, env.raw_job_id)
        except UserError as refused:  # the other tasks wait for the run's id: they get the refusal instead
            store.set("dlcomm/run_id", f"{_REFUSED}{refused}")
            raise
        if not run_id:
            run_id = open_run(spec, {"slurm_job_id": env.job_id})
            marker.parent.mkdir(parents=True, exist_ok=True)
            marker.write_text(run_id + "\n")
        store.set("dlcomm/run_id", run_id)
    run_id = store.get("dlcomm/run_id").decode()
    if run_id.startswith(_REFUSED):
        raise UserError(run_id[len(_REFUSED) :])
    run_dir = runs_dir(spec.tracking_uri) / run_id
    run_dir.mkdir(parents=True, exist_ok=True)
    return RankTask(spec.with_run(run_id, run_dir))(store if env.global_rank == 0 else None)


_REFUSED = "refused: "


def job_run(spec: RunSpec, marker: Path, job_id: str) -> str:
    """The run this SLURM job started before a requeue, to resume into; "" for a new run. A run that
    has ended (FINISHED, FAILED, KILLED) is never trained again: this start records a new run. A
    configuration that differs from the recorded one in what the run computes (every key but
    ``tracking``, ``launcher``, ``debug`` and ``report``, and the launcher knobs that change the
    numbers, e.g. ``launcher.backend``: :func:`dlcomm.spec.computed_config`) is refused in one line
    naming the keys: continuing would record numbers of one configuration under another."""
    from dlcomm import progress
    from dlcomm.spec import computing_knobs
    from dlcomm.tracking.mlflow_run import TERMINAL, flatten, recorded_run

    if not marker.is_file():
        return ""
    run_id = marker.read_text(errors="replace").strip()
    found = recorded_run(spec.tracking_uri, run_id)
    if found is None or found.info.status in TERMINAL:
        ended = f"ended {found.info.status}" if found is not None else "is not in the store"
        progress.say(f"dlcomm: SLURM job {job_id}'s run {run_id[:12]} {ended}; this start records a new run")
        return ""
    recorded_hash = found.data.tags.get("config_hash", "")
    if recorded_hash and recorded_hash != spec.config_hash:
        knobs = {f"launcher.{item.name}" for item in computing_knobs(spec.run.launcher)}  # at their defaults too
        now = {**flatten(spec.computed), **{key: value for key, value in flatten(spec.config).items() if key in knobs}}
        sections = {key.split(".")[0] for key in now} - {"launcher"}
        then = {key: value for key, value in found.data.params.items() if key in now or key.split(".")[0] in sections}
        differing = sorted(key for key in set(now) | set(then) if now.get(key) != then.get(key))
        shown = ", ".join(f"{key}={then.get(key, '<unset>')} -> {now.get(key, '<unset>')}" for key in differing[:6])
        more = f" and {len(differing) - 6} more" if len(differing) > 6 else ""
        raise UserError(
            f"SLURM job {job_id} resumes run {run_id[:12]}, whose configuration differs from this start's "
            f"({shown or 'its config_hash'}{more}): resuming would record these numbers under the old settings; "
            f"start again with the recorded settings, or submit a new job (sbatch) for a new run"
        )
    return run_id
