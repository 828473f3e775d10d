"""One run from overrides to a finished MLflow run: compose, validate, open, launch, close."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

from omegaconf import DictConfig

from dlcomm.config.compose import compose
from dlcomm.config.validate import validate_run
from dlcomm.errors import UserError
from dlcomm.paths import results_dir
from dlcomm.spec import RunSpec


def check_runnable(cfg: DictConfig) -> None:
    """Everything that can be known wrong before any process starts or any run is recorded."""
    validate_run(cfg)
    from dlcomm.data import check_dataset, dataset_shape
    from dlcomm.models import check_model_fits

    from dlcomm.tasks import check_task

    check_task(cfg)
    check_dataset(cfg.dataset)
    shape, classes = dataset_shape(cfg.dataset)
    try:
        check_model_fits(cfg.model, shape, classes)
    except UserError as error:
        raise UserError(f"{error} (dataset={cfg.dataset.name})") from None
    from dlcomm.algorithms.registry import get_algorithm

    roles = get_algorithm(cfg.algo.name).roles(cfg.algo)
    if roles and _scales_loss_here(cfg.train):
        raise UserError(
            f"train.amp with fp16 loss scaling is invalid for algo={cfg.algo.name}: its {', '.join(roles)} would apply the "
            "workers' scaled gradients; pass train.amp_dtype=bf16 (no scaling)"
        )
    if roles and cfg.launcher.name != "local":
        raise UserError(
            f"launcher={cfg.launcher.name} is invalid for algo={cfg.algo.name}: it needs the service process(es) "
            f"{', '.join(roles)}, which only launcher=local starts so far; pass launcher=local"
        )
    if cfg.launcher.name == "slurm":
        from dlcomm.launch.slurm import check_partition_fits, check_slurm_available

        check_slurm_available()
        check_partition_fits(cfg.nodes, cfg.launcher.partition)
    elif cfg.train.device == "cuda" and cfg.launcher.name == "local":  # on SLURM the GPUs are on the compute nodes, not here
        import torch

        if not torch.cuda.is_available():
            raise UserError("train.device=cuda is invalid: no CUDA device is visible; use train.device=cpu or auto")
        world, gpus = cfg.nodes * cfg.workers_per_node, torch.cuda.device_count()
        if cfg.launcher.name == "local" and world > gpus:
            raise UserError(
                f"nodes*workers_per_node={world} is invalid with train.device=cuda: the local launcher gives each "
                f"rank its own GPU and {gpus} are visible; use at most {gpus} ranks or train.device=cpu"
            )


def _scales_loss_here(train) -> bool:
    """Whether ``train.amp`` uses fp16 loss scaling on the device the local launcher will pick
    (services, the only reason to ask, run under launcher=local only)."""
    import torch

    from dlcomm.train.precision import scales_loss

    cuda = train.device == "cuda" or (train.device == "auto" and torch.cuda.is_available())
    return scales_loss(train.amp, train.amp_dtype, torch.device("cuda" if cuda else "cpu"))


def prepare_run(overrides: list[str]) -> RunSpec:
    from dlcomm.tracking.mlflow_run import resolve_tracking_uri

    cfg = compose(overrides)
    check_runnable(cfg)
    return RunSpec.from_config(cfg, resolve_tracking_uri(cfg.tracking.uri), tuple(overrides))


def _terminate_as_interrupt(signum: int, frame: object) -> None:
    """SIGTERM (``kill``, a scheduler's cancel) ends the run like Ctrl-C: ranks torn down, KILLED."""
    raise KeyboardInterrupt


def prepare_sweep(overrides: list[str]) -> list[RunSpec]:
    """Every element of the sweep, composed and checked before anything is recorded."""
    from dlcomm.sweep import expand

    specs = []
    for element in expand(overrides):
        try:
            specs.append(prepare_run(element))
        except UserError as error:
            raise UserError(f"sweep element [{' '.join(element)}]: {error}") from None
    where = {(spec.tracking_uri, spec.config["tracking"]["experiment"], spec.config["launcher"]["name"]) for spec in specs}
    if len(where) > 1:
        raise UserError(
            "a sweep may not vary tracking.uri, tracking.experiment or launcher: its runs share one parent run; "
            "run one sweep per value instead"
        )
    return specs


def run_sweep(overrides: list[str]) -> int:
    """A parent MLflow run and one child run per element: one SLURM job array
    (``launcher=slurm``, returns at once), or here, one run after another."""
    from dlcomm.tracking.mlflow_run import open_parent_run

    specs = prepare_sweep(overrides)
    first = specs[0]
    launcher = first.config["launcher"]["name"]
    parent = open_parent_run(first.tracking_uri, first.config["tracking"]["experiment"], overrides, len(specs), launcher)
    print(f"sweep of {len(specs)} runs: parent mlflow run {parent}", flush=True)
    specs = [spec.in_sweep(parent) for spec in specs]
    return _sweep_slurm(specs, parent) if launcher == "slurm" else _sweep_local(specs, parent)


def _sweep_local(specs: list[RunSpec], parent: str) -> int:
    """One run after another; a failed element does not stop the others; Ctrl-C stops all."""
    from dlcomm.tracking.mlflow_run import close_parent_if_done, close_run

    codes: list[int] = []
    for index, spec in enumerate(specs):
        print(f"--- sweep element {index + 1}/{len(specs)}: {element_label(spec)}", flush=True)
        code = run_local(spec)
        codes.append(code)
        if code == 130:
            close_run(spec.tracking_uri, parent, "KILLED")
            return 130
    close_parent_if_done(specs[0].tracking_uri, parent)
    failed = sum(code != 0 for code in codes)
    print(f"sweep done: {len(codes) - failed} of {len(codes)} runs finished; parent mlflow run {parent}", flush=True)
    return 0 if failed == 0 else 1


def _sweep_slurm(specs: list[RunSpec], parent: str) -> int:
    """Open every child run, then submit one job array per SLURM shape (one for a sweep that
    does not vary nodes, workers_per_node or launcher.*); the elements close their runs and the
    last one the parent."""
    from dlcomm.launch.slurm import group_by_shape, submit_array
    from dlcomm.tracking.mlflow_run import close_run, open_run, set_tags

    opened = []
    for spec in specs:
        run_id = open_run(spec, {"mlflow.parentRunId": parent, "sweep_element": element_label(spec)})
        opened.append(spec.with_run(run_id, results_dir() / "runs" / run_id))
        Path(opened[-1].run_dir).mkdir(parents=True, exist_ok=True)
    folder = results_dir() / "sweeps" / parent / "slurm"
    array_ids = []
    for group in group_by_shape(opened):
        try:
            jobs = submit_array(group, folder, f"dlcomm-sweep-{parent[:8]}")
        except Exception as error:  # noqa: BLE001 - sbatch refused: those elements never run
            for spec in group:
                close_run(spec.tracking_uri, spec.run_id, "FAILED", "sbatch refused the array")
            close_run(specs[0].tracking_uri, parent, "FAILED")
            first_line = (str(error).strip().splitlines() or [type(error).__name__])[-1]
            raise UserError(f"sbatch refused the job array ({first_line}); check launcher.partition, launcher.account and launcher.time_min") from None
        array_id = jobs[0].job_id.split("_")[0]
        array_ids.append(array_id)
        for spec, job in zip(group, jobs):
            set_tags(spec.tracking_uri, spec.run_id, {"slurm_job_id": job.job_id})
        print(f"submitted SLURM job array {array_id} ({len(jobs)} elements, "
              f"at most {group[0].config['launcher']['array_parallelism']} at once)", flush=True)
    set_tags(specs[0].tracking_uri, parent, {"slurm_array_job_ids": ",".join(array_ids)})
    print(f"  logs: {folder}/<array id>_<element>_<task>_log.out and .err", flush=True)
    return 0


def element_label(spec: RunSpec) -> str:
    return " ".join(spec.overrides)


def run_slurm(spec: RunSpec) -> int:
    """Open the MLflow run and submit its SLURM job; return at once (or wait, ``launcher.wait``).
    The ranks close the run (FINISHED or FAILED)."""
    from dlcomm.launch.slurm import submit
    from dlcomm.tracking.mlflow_run import close_run, open_run, set_tags

    run_id = open_run(spec)
    spec = spec.with_run(run_id, results_dir() / "runs" / run_id)
    Path(spec.run_dir).mkdir(parents=True, exist_ok=True)
    try:
        job = submit(spec)
    except Exception as error:  # noqa: BLE001 - sbatch refused: nothing runs, the run is FAILED
        close_run(spec.tracking_uri, run_id, "FAILED")
        first_line = (str(error).strip().splitlines() or [type(error).__name__])[-1]
        raise UserError(f"sbatch refused the job ({first_line}); check launcher.partition, launcher.account and launcher.time_min") from None
    set_tags(spec.tracking_uri, run_id, {"slurm_job_id": job.job_id})  # `dlcomm runs reap` asks squeue for it
    print(f"submitted SLURM job {job.job_id} for mlflow run {run_id}", flush=True)
    print(f"  logs: {job.paths.stdout} and {job.paths.stderr}", flush=True)
    if not spec.config["launcher"]["wait"]:
        return 0
    return _wait_for(job)


def _wait_for(job) -> int:
    """Show the job's queue state until it ends; 0 when every task returned, 1 otherwise.
    (The queue is read with squeue: clusters without accounting have no sacct.)"""
    import logging
    import subprocess
    import time

    from tqdm import tqdm

    logging.getLogger("submitit").setLevel(logging.ERROR)  # its sacct fallback warns at every poll
    with tqdm(desc=f"SLURM job {job.job_id}", bar_format="{desc}: {postfix} [{elapsed}]") as bar:
        while not job.done():
            queue = subprocess.run(["squeue", "-h", "-j", str(job.job_id), "-o", "%T %R"], capture_output=True, text=True)
            bar.set_postfix_str(queue.stdout.strip() or "ENDING")
            time.sleep(2)
        bar.set_postfix_str("ended")
    error = job.exception()
    if error is None:
        return 0
    print(f"dlcomm: error: SLURM job {job.job_id} failed; see {job.paths.stderr}", file=sys.stderr)
    return 1


def run_local(spec: RunSpec) -> int:
    """Open the MLflow run, launch the ranks here, close the run with the truthful status."""
    from dlcomm.launch.local import launch_local
    from dlcomm.tracking.mlflow_run import close_run, open_run

    tags = {"driver_pid": str(os.getpid())}  # this process closes the run: `dlcomm runs reap` checks it lives
    if spec.parent_run_id:
        tags.update({"mlflow.parentRunId": spec.parent_run_id, "sweep_element": element_label(spec)})
    run_id = open_run(spec, tags)
    spec = spec.with_run(run_id, results_dir() / "runs" / run_id)
    Path(spec.run_dir).mkdir(parents=True, exist_ok=True)
    result = None
    previous_handler = signal.signal(signal.SIGTERM, _terminate_as_interrupt)
    try:
        result = launch_local(spec)
    finally:
        signal.signal(signal.SIGTERM, previous_handler)
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
    return result.exit_code
