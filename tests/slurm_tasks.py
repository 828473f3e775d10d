"""One task of a SLURM job run the way SLURM runs it, without SLURM: the task pickled as
``launcher=slurm`` submits it (submitit's ``DelayedSubmission``) and started as the job script
starts it (``python -m submitit.core._submit <folder>``), with SLURM's variables of a one-task job
set by hand. Its stdout, stderr and exit code are what the task's logs and SLURM would get.

Importable by that process (the tests folder is put on its ``PYTHONPATH``): the tasks below are
pickled by reference."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from dlcomm.launch.slurm import RankTask

TESTS = Path(__file__).resolve().parent


@dataclass
class PreemptedTask(RankTask):
    """:class:`RankTask` whose ranks stop as after SLURM's warning signal (``Preempted`` after
    step 3, the checkpoint saved): what follows is the task's own requeue."""

    def __call__(self, store=None):
        import dlcomm.launch.rank
        from dlcomm.train.checkpoint import Preempted

        def preempted(*args, **kwargs):
            raise Preempted(3)

        dlcomm.launch.rank.run_rank = preempted  # RankTask imports it when called
        return super().__call__(store)


def run_task(task: RankTask, folder: Path, job_id: str, path: str, timeout: float = 180) -> subprocess.CompletedProcess:
    """Run ``task`` as task 0 of the one-task SLURM job ``job_id`` (its files in ``folder``), with
    ``PATH`` set to ``path`` alone (a fake ``scontrol``, or none)."""
    from submitit.core.utils import DelayedSubmission

    folder.mkdir(parents=True, exist_ok=True)
    DelayedSubmission(task).dump(folder / f"{job_id}_submitted.pkl")
    env = {
        **os.environ,
        "PATH": path,
        "PYTHONPATH": os.pathsep.join([str(TESTS), *filter(None, [os.environ.get("PYTHONPATH")])]),
        "PYTHONWARNINGS": "ignore",
        "SUBMITIT_EXECUTOR": "slurm",
        "SLURM_JOB_ID": job_id,
        "SLURM_NTASKS": "1",
        "SLURM_JOB_NUM_NODES": "1",
        "SLURM_NODEID": "0",
        "SLURM_JOB_NODELIST": "localhost",
        "SLURM_PROCID": "0",
        "SLURM_LOCALID": "0",
    }
    for name in ("SLURM_RESTART_COUNT", "SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID"):
        env.pop(name, None)
    return subprocess.run(
        [sys.executable, "-m", "submitit.core._submit", str(folder)],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
