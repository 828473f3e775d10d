"""What is trained and how its loss is formed: ``task=classification`` or ``task=gan`` (or a
plugin's); the interface is :class:`dlcomm.tasks.base.Task`. Importing this package loads no torch."""

from __future__ import annotations

from typing import TYPE_CHECKING

from dlcomm.config.schema import RunConfig
from dlcomm.tasks.base import Task
from dlcomm.tasks.registry import TASKS

if TYPE_CHECKING:
    from omegaconf import DictConfig


def build_task(cfg: RunConfig) -> Task:
    """The task of the run config ``cfg``."""
    return TASKS.get(cfg.task.name)(cfg)


def check_task(cfg: RunConfig | DictConfig) -> None:
    """One-line errors for a task that cannot train this run (before anything starts): on the
    composed DictConfig (:func:`dlcomm.compose.check_algorithm`) or the typed run."""
    TASKS.get(cfg.task.name).check(cfg)
