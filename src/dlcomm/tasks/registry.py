"""Tasks by name (the one registration pattern: :class:`dlcomm.registry.Registry`).

Every module of :mod:`dlcomm.tasks` that defines a task decorates its class with
:func:`register`; installed packages add tasks through the ``dlcomm.tasks`` entry points.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dlcomm.groups import GROUPS
from dlcomm.registry import Registry

if TYPE_CHECKING:
    from dlcomm.tasks.base import Task


def _plugins(classes: dict) -> None:
    from dlcomm.plugins import register_plugins

    register_plugins("task", classes)  # installed packages' tasks (entry points dlcomm.tasks)


TASKS: Registry[type["Task"]] = Registry(GROUPS["task"], _plugins)
register = TASKS.register
