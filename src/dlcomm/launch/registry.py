"""Launchers by name (the one registration pattern: :class:`dlcomm.registry.Registry`).

``launcher=<name>`` composes the launcher's ``Config`` (stored as ``launcher/<name>``); its class
lives in ``dlcomm/launch/<name>.py``, decorated with :func:`register`. The package also holds the
launchers' machinery (the driver, the rank's program), which finding the choices does not import:
only the modules that register one are (:meth:`dlcomm.registry.Registry.choice_modules`).
:meth:`LAUNCHERS.get <dlcomm.registry.Registry.get>` imports the named module alone the first time the name is asked for, so
asking for one launcher never imports the others' machinery. Installed packages add launchers through the ``dlcomm.launchers`` entry points
(:mod:`dlcomm.plugins`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dlcomm.registry import Registry, registry_of

if TYPE_CHECKING:
    from dlcomm.launch.base import Launcher


LAUNCHERS: Registry[type["Launcher"]] = registry_of("launcher")
register = LAUNCHERS.register
