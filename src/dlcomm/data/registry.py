"""Data sets by name.

Each family module of :mod:`dlcomm.data` (``cifar``, ``mnist``, ``synthetic``, ``imagefolder``: a
choice's ``Config`` beside its source and the code that checks and loads its files) decorates its
:class:`~dlcomm.data.source.DataSource` subclasses with :func:`register`; :meth:`SOURCES.all
<dlcomm.registry.Registry.all>` imports those modules once (the others, such as the loaders, are not), then
adds the installed plugins' (entry points ``dlcomm.datasets``), so a new data set needs nothing but
its source's file (and ``configs/dataset/<name>.yaml`` only where it sets values, such as its
root; the one pattern: :mod:`dlcomm.registry`). Those modules load without torch:
composing a configuration imports the chosen data set's (:func:`dlcomm.compose.register_schemas`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dlcomm.registry import Registry, registry_of

if TYPE_CHECKING:
    from dlcomm.data.source import DataSource


SOURCES: Registry[type["DataSource"]] = registry_of("dataset")
register = SOURCES.register
