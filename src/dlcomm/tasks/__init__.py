"""What is trained and how its loss is formed: ``task=classification`` or ``task=gan`` (or a
plugin's); the interface is :class:`dlcomm.tasks.base.Task`. Importing this package loads no torch."""

from __future__ import annotations

from dlcomm.config.schema import RunConfig
from dlcomm.tasks.base import Task
from dlcomm.tasks.registry import TASKS


def build_task(cfg: RunConfig) -> Task:
    """The task of the run config ``cfg``."""
    return TASKS.get(cfg.task.name)(cfg)


def check_task(cfg: RunConfig) -> None:
    """One-line errors for a task that cannot train this run (before anything starts; run by
    :func:`dlcomm.compose.check_algorithm` on the composed run)."""
    TASKS.get(cfg.task.name).check(cfg)
