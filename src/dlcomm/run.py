"""One run from overrides to a finished MLflow run: compose, validate, open, launch, close."""

from __future__ import annotations

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

    check_dataset(cfg.dataset)
    shape, classes = dataset_shape(cfg.dataset)
    try:
        check_model_fits(cfg.model, shape, classes)
    except UserError as error:
        raise UserError(f"{error} (dataset={cfg.dataset.name})") from None
    if cfg.launcher.name == "slurm":
        from dlcomm.launch.slurm import check_partition_fits, check_slurm_available

        check_slurm_available()
        check_partition_fits(cfg.nodes, cfg.launcher.partition)
    elif cfg.train.device == "cuda":  # on SLURM the GPUs are on the compute nodes, not here
        import torch

        if not torch.cuda.is_available():
            raise UserError("train.device=cuda is invalid: no CUDA device is visible; use train.device=cpu or auto")
        world, gpus = cfg.nodes * cfg.workers_per_node, torch.cuda.device_count()
        if cfg.launcher.name == "local" and world > gpus:
            raise UserError(
                f"nodes*workers_per_node={world} is invalid with train.device=cuda: the local launcher gives each "
                f"rank its own GPU and {gpus} are visible; use at most {gpus} ranks or train.device=cpu"
            )


def prepare_run(overrides: list[str]) -> RunSpec:
    from dlcomm.tracking.mlflow_run import resolve_tracking_uri

    cfg = compose(overrides)
    check_runnable(cfg)
    return RunSpec.from_config(cfg, resolve_tracking_uri(cfg.tracking.uri))


def _terminate_as_interrupt(signum: int, frame: object) -> None:
    """SIGTERM (``kill``, a scheduler's cancel) ends the run like Ctrl-C: ranks torn down, KILLED."""
    raise KeyboardInterrupt


def run_slurm(spec: RunSpec) -> int:
    """Open the MLflow run and submit its SLURM job; return at once (or wait, ``launcher.wait``).
    The ranks close the run (FINISHED or FAILED)."""
    from dlcomm.launch.slurm import submit
    from dlcomm.tracking.mlflow_run import close_run, open_run

    run_id = open_run(spec)
    spec = spec.with_run(run_id, results_dir() / "runs" / run_id)
    Path(spec.run_dir).mkdir(parents=True, exist_ok=True)
    try:
        job = submit(spec)
    except Exception as error:  # noqa: BLE001 - sbatch refused: nothing runs, the run is FAILED
        close_run(spec.tracking_uri, run_id, "FAILED")
        first_line = (str(error).strip().splitlines() or [type(error).__name__])[-1]
        raise UserError(f"sbatch refused the job ({first_line}); check launcher.partition, launcher.account and launcher.time_min") from None
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

    run_id = open_run(spec)
    spec = spec.with_run(run_id, results_dir() / "runs" / run_id)
    Path(spec.run_dir).mkdir(parents=True, exist_ok=True)
    result = None
    previous_handler = signal.signal(signal.SIGTERM, _terminate_as_interrupt)
    try:
        result = launch_local(spec)
    finally:
        signal.signal(signal.SIGTERM, previous_handler)
        status = "KILLED" if result is None or result.interrupted else ("FAILED" if result.failure else "FINISHED")
        close_run(spec.tracking_uri, run_id, status)
    if result.interrupted:
        print(f"dlcomm: interrupted; mlflow run {run_id} marked KILLED", file=sys.stderr)
    elif result.failure is not None:
        failure = result.failure
        if failure.details and not failure.user_error:
            print(failure.details, file=sys.stderr, end="")
        print(f"dlcomm: error: {failure.describe()}; mlflow run {run_id} marked FAILED", file=sys.stderr)
    return result.exit_code
