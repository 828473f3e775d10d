"""Compressors by name (the one registration pattern: :class:`dlcomm.registry.Registry`).

Every module of :mod:`dlcomm.compress` that defines a compressor decorates its class with
:func:`register`; installed packages add compressors through the ``dlcomm.compressors`` entry
points (:mod:`dlcomm.plugins`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dlcomm.registry import Registry, registry_of

if TYPE_CHECKING:
    from dlcomm.compress.base import Compressor


COMPRESSORS: Registry[type["Compressor"]] = registry_of("compress")
register = COMPRESSORS.register
