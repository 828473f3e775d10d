"""Compressors by name (the one registration pattern: :class:`dlcomm.registry.Registry`).

Every module of :mod:`dlcomm.compress` that defines a compressor decorates its class with
:func:`register`; installed packages add compressors through the ``dlcomm.compressors`` entry
points (:mod:`dlcomm.plugins`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dlcomm.groups import GROUPS
from dlcomm.registry import Registry

if TYPE_CHECKING:
    from dlcomm.compress.base import Compressor


def _plugins(classes: dict) -> None:
    from dlcomm.plugins import register_plugins

    register_plugins("compress", classes)  # installed packages' compressors (entry points dlcomm.compressors)


COMPRESSORS: Registry[type["Compressor"]] = Registry(GROUPS["compress"], _plugins)
register = COMPRESSORS.register
