"""Data sets by name.

Every module of :mod:`dlcomm.data.sources` decorates its :class:`~dlcomm.data.source.DataSource`
subclasses with :func:`register`; :func:`all_sources` imports that package's modules once, then
adds the installed plugins' (entry points ``dlcomm.datasets``), so a new data set needs nothing but
its source's file (and ``configs/dataset/<name>.yaml`` only where it sets values, such as its
root; the one pattern: :mod:`dlcomm.registry`). Those modules load without torch:
composing a configuration imports them (:func:`source_schemas`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from dlcomm.registry import Registry

if TYPE_CHECKING:
    from dlcomm.data.source import DataSource


def _plugins(classes: dict) -> None:
    from dlcomm.plugins import register_plugins

    register_plugins("dataset", classes)  # installed packages' data sets (entry points dlcomm.datasets)


SOURCES: Registry[type["DataSource"]] = Registry("data set", "dataset.name", "dlcomm.data.sources", _plugins)
register = SOURCES.register


def all_sources() -> dict[str, type["DataSource"]]:
    return SOURCES.all()


def get_source(name: str) -> type["DataSource"]:
    """The source of ``dataset.name=name``; a one-line :class:`UserError` listing the names otherwise."""
    return SOURCES.get(name)


def source_schemas() -> list[tuple[Optional[str], str, type]]:
    """``("dataset", "<name>_schema", Config)`` of every data set, dlcomm's and the plugins', for
    Hydra's ConfigStore (:func:`dlcomm.plugins.extra_schemas`; ``configs/dataset/cifar10.yaml``
    names ``cifar10_schema``)."""
    from dlcomm.plugins import extra_schemas

    return extra_schemas("dataset", all_sources(), "data set")
