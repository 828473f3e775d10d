"""Tasks by name (the one registration pattern: :class:`dlcomm.registry.Registry`).

Every module of :mod:`dlcomm.tasks` that defines a task decorates its class with
:func:`register`; installed packages add tasks through the ``dlcomm.tasks`` entry points.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dlcomm.registry import Registry, registry_of

if TYPE_CHECKING:
    from dlcomm.tasks.base import Task


TASKS: Registry[type["Task"]] = registry_of("task")
register = TASKS.register
