"""Launchers by name.

``launcher=<name>`` composes ``configs/launcher/<name>.yaml``; its class lives in
``dlcomm/launch/<name>.py``, decorated with :func:`register`. :func:`get_launcher` imports that
module the first time the name is asked for, so a new launcher needs nothing but its own file
and its config, and asking for one launcher never imports the others' machinery.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from dlcomm.launch.base import Launcher

_REGISTRY: dict[str, type["Launcher"]] = {}


def register(cls: type["Launcher"]) -> type["Launcher"]:
    if cls.name in _REGISTRY and _REGISTRY[cls.name] is not cls:
        raise ValueError(f"two launchers are registered as {cls.name!r}")
    _REGISTRY[cls.name] = cls
    return cls


def launcher_names() -> list[str]:
    """Every launcher that has a config: the stems of ``configs/launcher/*.yaml``."""
    from importlib.resources import files

    folder = files("dlcomm.configs") / "launcher"
    return sorted(entry.name[: -len(".yaml")] for entry in folder.iterdir() if entry.name.endswith(".yaml"))


def get_launcher(name: str) -> type["Launcher"]:
    """The launcher registered as ``name`` (a :class:`KeyError` naming the known ones if none)."""
    if name not in _REGISTRY and name in launcher_names():
        importlib.import_module(f"{__package__}.{name}")
    if name not in _REGISTRY:
        raise KeyError(f"unknown launcher {name!r}; known: {', '.join(launcher_names())}")
    return _REGISTRY[name]


def find_launcher(name: str) -> type["Launcher"] | None:
    """Like :func:`get_launcher`, but None for a name no launcher has (e.g. an old run's tag)."""
    try:
        return get_launcher(name)
    except KeyError:
        return None


def all_launchers() -> dict[str, type["Launcher"]]:
    return {name: get_launcher(name) for name in launcher_names()}
